/* Guest virtio-bad: a virtio 1.2 driver for modern virtio-net that sends one good TX chain, then a looping one, and expects NEEDS_RESET and a working reset. */
	.code32

/*
 * Everything runs at CPL0 with paging and interrupts off, addresses are physical.
 * The rings live in guest RAM above the image (which ends well below 2 MiB). Only
 * polling is used: the avail ring asks for no interrupts and MSI-X stays disabled.
 * %ebp holds the common config base from step 2 on.
 */

#define VQ_DESC    0x200000
#define VQ_AVAIL   0x201000
#define VQ_USED    0x202000
#define BUF_HDR    0x203000 /* 12-byte virtio_net_hdr_v1, zero */
#define BUF_FRAME  0x203100 /* 60-byte broadcast ARP request */
#define RING_END   0x204000
#define QSIZE      8
#define TXQ        1

/* struct virtio_pci_common_cfg */
#define CC_DFSEL   0x00
#define CC_DF      0x04
#define CC_GFSEL   0x08
#define CC_GF      0x0c
#define CC_NUMQ    0x12
#define CC_STATUS  0x14
#define CC_QSEL    0x16
#define CC_QSIZE   0x18
#define CC_QMSIX   0x1a
#define CC_QENABLE 0x1c
#define CC_QNOTOFF 0x1e
#define CC_QDESC   0x20
#define CC_QDRIVER 0x28
#define CC_QDEVICE 0x30

#define S_ACK         0x01
#define S_DRIVER      0x02
#define S_DRIVER_OK   0x04
#define S_FEATURES_OK 0x08
#define S_NEEDS_RESET 0x40
#define S_FAILED      0x80

#define F_NEXT 1
#define POLL_MS 5000 /* bound of every wait for the device, in 1 ms steps */

	.text
	.globl main
main:
	mov $m_start, %esi
	call puts

	/* 1. Find the device and its virtio structures. */
	mov $0x10411af4, %eax
	call pci_find
	cmp $0xffffffff, %eax
	jne 1f
	mov $f_nodev, %esi
	jmp fail
1:	mov %eax, pci_addr
	call read_bars
	call walk_caps
	mov pci_addr, %ebx
	lea 0x04(%ebx), %eax /* command: memory decode + bus master */
	call pci_read
	and $0xffff, %eax
	or $0x0006, %eax
	mov %eax, %edx
	lea 0x04(%ebx), %eax
	call pci_write
	call print_found

	/* 2. Driver init. */
	mov cap_addr, %ebp
	call dev_reset
	call negotiate
	mov $m_numq, %esi
	call puts
	movzwl CC_NUMQ(%ebp), %eax
	call putdec
	cmp $TXQ + 1, %eax
	jae 1f
	call newline
	mov $f_numq, %esi
	jmp fail
1:	mov $m_mac, %esi
	call puts
	mov cap_addr + 12, %edi
	xor %ebx, %ebx
2:	movzbl (%edi,%ebx), %eax
	call putbyte
	inc %ebx
	cmp $6, %ebx
	je 3f
	mov $':', %al
	call putc
	jmp 2b
3:	call newline

	/* 3. The positive case: one header + frame chain on the TX queue. */
	call setup_txq
	call driver_ok
	call post_valid
	mov $m_valid, %esi
	call puts

	/* 4. The hostile case: desc 1 -> desc 2 -> desc 1, both with NEXT. */
	movl $BUF_HDR, VQ_DESC + 16 + 0
	movl $0, VQ_DESC + 16 + 4
	movl $12, VQ_DESC + 16 + 8
	movw $F_NEXT, VQ_DESC + 16 + 12
	movw $2, VQ_DESC + 16 + 14
	movl $BUF_FRAME, VQ_DESC + 32 + 0
	movl $0, VQ_DESC + 32 + 4
	movl $60, VQ_DESC + 32 + 8
	movw $F_NEXT, VQ_DESC + 32 + 12
	movw $1, VQ_DESC + 32 + 14
	movw $1, VQ_AVAIL + 4 + 2 * 1
	movw $2, VQ_AVAIL + 2
	call notify_txq
	mov $POLL_MS, %ecx
1:	movzbl CC_STATUS(%ebp), %eax
	test $S_NEEDS_RESET, %eax
	jnz 2f
	mov $1000, %eax
	call lapic_delay_us
	dec %ecx
	jnz 1b
	movzbl CC_STATUS(%ebp), %eax
	mov $m_status, %esi
	call puts
	mov $2, %ecx
	call puthex
	call newline
	mov $f_nr, %esi
	jmp fail
2:	mov $m_nr, %esi
	call puts
	mov $2, %ecx
	call puthex
	call newline
	/* Give a misbehaving device a moment to (wrongly) complete the chain anyway. */
	mov $100000, %eax
	call lapic_delay_us
	movzwl VQ_USED + 2, %eax
	mov $m_used_after, %esi
	call puts
	call putdec
	call newline
	cmp $1, %eax
	je 1f
	mov $f_used_moved, %esi
	jmp fail

	/* 5. Recovery: reset works, and the device serves a fresh queue afterwards. */
1:	call dev_reset
	mov $m_reset, %esi
	call puts
	call negotiate
	call setup_txq
	call driver_ok
	call post_valid
	mov $m_again, %esi
	call puts
	call dev_reset
	mov $m_done, %esi
	call puts
	jmp reset

/* Two hex digits of al, without 0x. */
putbyte:
	push %eax
	push %ebx
	movzbl %al, %ebx
	shr $4, %eax
	and $0xf, %eax
	movb hex(%eax), %al
	call putc
	mov %ebx, %eax
	and $0xf, %eax
	movb hex(%eax), %al
	call putc
	pop %ebx
	pop %eax
	ret

/* Prints "GUEST virtio-bad: FAIL " and the rest of the line at esi, then pvpanic. */
fail:
	push %esi
	mov $m_fail, %esi
	call puts
	pop %esi
	call puts
	jmp panic

/* BARs 0-5 into bar_addr[] (0 for I/O or unassigned BARs; 64-bit BARs must sit below 4 GiB). */
read_bars:
	pusha
	xor %ebx, %ebx
1:	mov pci_addr, %eax
	lea 0x10(%eax,%ebx,4), %eax
	call pci_read
	movl $0, bar_addr(,%ebx,4)
	test $1, %eax
	jnz 3f
	mov %eax, %edx
	and $0xfffffff0, %edx
	mov %edx, bar_addr(,%ebx,4)
	and $6, %eax
	cmp $4, %eax /* 64-bit: the next BAR is the high half */
	jne 3f
	inc %ebx
	cmp $6, %ebx
	jae 4f
	mov pci_addr, %eax
	lea 0x10(%eax,%ebx,4), %eax
	call pci_read
	movl $0, bar_addr(,%ebx,4)
	test %eax, %eax
	jz 3f
	mov $f_bar64, %esi
	jmp fail
3:	inc %ebx
	cmp $6, %ebx
	jb 1b
4:	popa
	ret

/*
 * The capability list: the first vendor capability (0x09) of each cfg_type 1-4 whose
 * BAR is a usable memory BAR gives cap_addr[type - 1] = BAR + offset (and cap_bar,
 * cap_off for printing); the notify capability also gives notify_mult.
 */
walk_caps:
	pusha
	mov pci_addr, %eax
	lea 0x04(%eax), %eax
	call pci_read
	test $(1 << 20), %eax /* status: capability list */
	jnz 1f
	mov $f_nocaps, %esi
	jmp fail
1:	mov pci_addr, %eax
	lea 0x34(%eax), %eax
	call pci_read
	and $0xfc, %eax
	mov %eax, %ebx /* current capability */
	mov $48, %edi  /* at most 48 entries fit in config space: a loop guard */
2:	test %ebx, %ebx
	jz 9f
	dec %edi
	jnz 3f
	mov $f_caploop, %esi
	jmp fail
3:	mov pci_addr, %eax
	add %ebx, %eax
	call pci_read
	mov %eax, %esi /* vndr | next << 8 | len << 16 | cfg_type << 24 */
	cmp $0x09, %al
	jne 8f
	mov %esi, %ecx
	shr $24, %ecx
	cmp $1, %ecx
	jb 8f
	cmp $4, %ecx
	ja 8f
	dec %ecx       /* index 0-3 */
	cmpl $0, cap_found(,%ecx,4)
	jne 8f
	mov pci_addr, %eax
	lea 4(%ebx,%eax), %eax
	call pci_read
	movzbl %al, %eax /* bar */
	cmp $6, %eax
	jae 8f
	mov bar_addr(,%eax,4), %edx
	test %edx, %edx
	jz 8f
	mov %eax, cap_bar(,%ecx,4)
	mov pci_addr, %eax
	lea 8(%ebx,%eax), %eax
	call pci_read
	mov %eax, cap_off(,%ecx,4)
	add %eax, %edx
	mov %edx, cap_addr(,%ecx,4)
	movl $1, cap_found(,%ecx,4)
	cmp $1, %ecx /* notify */
	jne 8f
	mov pci_addr, %eax
	lea 16(%ebx,%eax), %eax
	call pci_read
	mov %eax, notify_mult
8:	mov %esi, %ebx
	shr $8, %ebx
	and $0xfc, %ebx
	jmp 2b
9:	xor %ecx, %ecx
1:	cmpl $0, cap_found(,%ecx,4)
	jne 2f
	mov cap_missing(,%ecx,4), %esi
	jmp fail
2:	inc %ecx
	cmp $4, %ecx
	jb 1b
	popa
	ret

print_found:
	pusha
	mov $m_found, %esi
	call puts
	xor %ebx, %ebx
1:	mov cap_names(,%ebx,4), %esi
	call puts
	mov $m_bar, %esi
	call puts
	mov cap_bar(,%ebx,4), %eax
	call putdec
	mov $'+', %al
	call putc
	mov cap_off(,%ebx,4), %eax
	mov $4, %ecx
	cmp $0xffff, %eax
	jbe 2f
	mov $8, %ecx
2:	call puthex
	inc %ebx
	cmp $4, %ebx
	jb 1b
	mov $m_mult, %esi
	call puts
	mov notify_mult, %eax
	call putdec
	mov $m_at, %esi
	call puts
	mov cap_addr, %eax
	mov $8, %ecx
	call puthex
	call newline
	popa
	ret

/* Writes status 0 and waits (bounded) until it reads back 0. */
dev_reset:
	pusha
	movb $0, CC_STATUS(%ebp)
	mov $POLL_MS, %ecx
1:	movzbl CC_STATUS(%ebp), %eax
	test %eax, %eax
	jz 2f
	mov $1000, %eax
	call lapic_delay_us
	dec %ecx
	jnz 1b
	mov $f_reset, %esi
	jmp fail
2:	popa
	ret

/* ACKNOWLEDGE, DRIVER, VERSION_1 only, FEATURES_OK (checked). */
negotiate:
	pusha
	movb $S_ACK, CC_STATUS(%ebp)
	movb $(S_ACK | S_DRIVER), CC_STATUS(%ebp)
	movl $1, CC_DFSEL(%ebp)
	mov CC_DF(%ebp), %eax
	test $1, %eax /* bit 32: VERSION_1 */
	jnz 1f
	mov $f_v1, %esi
	jmp fail
1:	movl $0, CC_GFSEL(%ebp)
	movl $0, CC_GF(%ebp)
	movl $1, CC_GFSEL(%ebp)
	movl $1, CC_GF(%ebp)
	movb $(S_ACK | S_DRIVER | S_FEATURES_OK), CC_STATUS(%ebp)
	movzbl CC_STATUS(%ebp), %eax
	test $S_FEATURES_OK, %eax
	jnz 2f
	mov $f_fok, %esi
	jmp fail
2:	popa
	ret

/* Queue TXQ: size QSIZE, rings zeroed at VQ_DESC/VQ_AVAIL/VQ_USED, no interrupts, enabled. */
setup_txq:
	pusha
	movw $TXQ, CC_QSEL(%ebp)
	movzwl CC_QSIZE(%ebp), %eax
	cmp $QSIZE, %eax
	jae 1f
	mov $f_qsize, %esi
	jmp fail
1:	movw $QSIZE, CC_QSIZE(%ebp)
	movw $0xffff, CC_QMSIX(%ebp)
	mov $VQ_DESC, %edi
	mov $(RING_END - VQ_DESC) / 4, %ecx
	xor %eax, %eax
	rep stosl
	movl $VQ_DESC, CC_QDESC(%ebp)
	movl $0, CC_QDESC + 4(%ebp)
	movl $VQ_AVAIL, CC_QDRIVER(%ebp)
	movl $0, CC_QDRIVER + 4(%ebp)
	movl $VQ_USED, CC_QDEVICE(%ebp)
	movl $0, CC_QDEVICE + 4(%ebp)
	movw $1, VQ_AVAIL /* VIRTQ_AVAIL_F_NO_INTERRUPT */
	mov $arp_frame, %esi
	mov $BUF_FRAME, %edi
	mov $60, %ecx
	rep movsb
	movzwl CC_QNOTOFF(%ebp), %eax
	imul notify_mult, %eax
	add cap_addr + 4, %eax
	mov %eax, notify_addr
	movw $1, CC_QENABLE(%ebp)
	movzwl CC_QENABLE(%ebp), %eax
	cmp $1, %eax
	je 2f
	mov $f_qenable, %esi
	jmp fail
2:	popa
	ret

driver_ok:
	pusha
	movb $(S_ACK | S_DRIVER | S_FEATURES_OK | S_DRIVER_OK), CC_STATUS(%ebp)
	movzbl CC_STATUS(%ebp), %eax
	test $(S_NEEDS_RESET | S_FAILED), %eax
	jz 1f
	mov $f_dok, %esi
	jmp fail
1:	popa
	ret

notify_txq:
	push %eax
	mov notify_addr, %eax
	movw $TXQ, (%eax)
	pop %eax
	ret

/* Posts desc 0 (header, NEXT) -> desc 1 (frame) as avail entry 0, notifies and waits for used idx 1. */
post_valid:
	pusha
	movl $BUF_HDR, VQ_DESC + 0
	movl $0, VQ_DESC + 4
	movl $12, VQ_DESC + 8
	movw $F_NEXT, VQ_DESC + 12
	movw $1, VQ_DESC + 14
	movl $BUF_FRAME, VQ_DESC + 16 + 0
	movl $0, VQ_DESC + 16 + 4
	movl $60, VQ_DESC + 16 + 8
	movw $0, VQ_DESC + 16 + 12
	movw $0, VQ_DESC + 16 + 14
	movw $0, VQ_AVAIL + 4
	movw $1, VQ_AVAIL + 2 /* x86 keeps stores in order: the entry is visible first */
	call notify_txq
	mov $POLL_MS, %ecx
1:	movzwl VQ_USED + 2, %eax
	test %eax, %eax
	jnz 2f
	mov $1000, %eax
	call lapic_delay_us
	dec %ecx
	jnz 1b
	movzbl CC_STATUS(%ebp), %eax
	mov $m_status, %esi
	call puts
	mov $2, %ecx
	call puthex
	call newline
	mov $f_notused, %esi
	jmp fail
2:	cmp $1, %eax
	je 3f
	mov $f_usedbad, %esi
	jmp fail
3:	mov VQ_USED + 4, %eax /* used elem 0: id must be the head, 0 */
	test %eax, %eax
	jz 4f
	mov $f_usedid, %esi
	jmp fail
4:	popa
	ret

	.section .rodata
hex:		.ascii "0123456789abcdef"
m_start:	.asciz "GUEST virtio-bad: start\n"
m_found:	.asciz "GUEST virtio-bad: found 1af4:1041"
m_bar:		.asciz "=bar"
m_mult:		.asciz " notify_mult="
m_at:		.asciz " common@"
n_common:	.asciz " common"
n_notify:	.asciz " notify"
n_isr:		.asciz " isr"
n_device:	.asciz " device"
m_numq:		.asciz "GUEST virtio-bad: num_queues="
m_mac:		.asciz " mac="
m_valid:	.asciz "GUEST virtio-bad: valid tx chain used=1\n"
m_status:	.asciz "GUEST virtio-bad: device_status="
m_nr:		.asciz "GUEST virtio-bad: NEEDS_RESET status="
m_used_after:	.asciz "GUEST virtio-bad: after looping chain used="
m_reset:	.asciz "GUEST virtio-bad: reset ok\n"
m_again:	.asciz "GUEST virtio-bad: after reset valid tx chain used=1\n"
m_done:		.asciz "GUEST virtio-bad: done, resetting\n"
m_fail:		.asciz "GUEST virtio-bad: FAIL "
f_nodev:	.asciz "no virtio device 1af4:1041 found\n"
f_bar64:	.asciz "64-bit BAR above 4 GiB\n"
f_nocaps:	.asciz "no capability list\n"
f_caploop:	.asciz "capability list does not end\n"
f_nocommon:	.asciz "no COMMON_CFG capability\n"
f_nonotify:	.asciz "no NOTIFY_CFG capability\n"
f_noisr:	.asciz "no ISR_CFG capability\n"
f_nodevice:	.asciz "no DEVICE_CFG capability\n"
f_numq:		.asciz "fewer than 2 queues\n"
f_reset:	.asciz "device status did not read back 0 after reset\n"
f_v1:		.asciz "VERSION_1 not offered\n"
f_fok:		.asciz "FEATURES_OK did not stick\n"
f_qsize:	.asciz "tx queue max size below 8\n"
f_qenable:	.asciz "queue_enable did not read back 1\n"
f_dok:		.asciz "NEEDS_RESET or FAILED right after DRIVER_OK\n"
f_notused:	.asciz "valid tx chain not used within 5 s\n"
f_usedbad:	.asciz "used idx is not 1 after one chain\n"
f_usedid:	.asciz "used element id is not the chain head 0\n"
f_nr:		.asciz "no NEEDS_RESET within 5 s after a looping chain\n"
f_used_moved:	.asciz "used idx moved past 1 after the looping chain\n"

/* Broadcast ARP request "who has 10.0.0.1? tell 10.0.0.2" from 52:54:00:00:00:99, padded to 60 bytes. */
arp_frame:
	.byte 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0x00, 0x00, 0x00, 0x99, 0x08, 0x06
	.byte 0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01
	.byte 0x52, 0x54, 0x00, 0x00, 0x00, 0x99, 10, 0, 0, 2
	.byte 0, 0, 0, 0, 0, 0, 10, 0, 0, 1
	.space 60 - 42

	.balign 4
cap_names:	.long n_common, n_notify, n_isr, n_device
cap_missing:	.long f_nocommon, f_nonotify, f_noisr, f_nodevice

	.bss
	.balign 4
pci_addr:	.long 0
bar_addr:	.space 6 * 4
cap_found:	.space 4 * 4
cap_bar:	.space 4 * 4
cap_off:	.space 4 * 4
cap_addr:	.space 4 * 4 /* common, notify, isr, device */
notify_mult:	.long 0
notify_addr:	.long 0
