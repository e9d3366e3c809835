/* Guest cpl3: GDT with ring-3 segments, TSS and IDT at CPL0, then SYSEXIT to CPL3 (IOPL=3) for PIO, MMIO and reset. */
	.code32

/*
 * 1: identity-map 0-4 GiB with 4 MiB user pages before dropping to CPL3; 0: paging off.
 * Off by default: this host's KVM raises #GP on CR0.PG with 32-bit (non-PAE) paging.
 */
#ifndef CPL3_PAGING
#define CPL3_PAGING 0
#endif
/*
 * How to reach CPL3. Protected-mode IRET is beyond this host's instruction emulator (it stops
 * with an emulation failure, and lkvm does not complete IRET), so SYSEXIT is the default;
 * -DCPL3_VIA_IRET=1 selects the classic iret for hosts with hardware-virtualised CPL0.
 */
#ifndef CPL3_VIA_IRET
#define CPL3_VIA_IRET 0
#endif

	.text
	.globl main
main:
	call pvpanic_bar
	mov %eax, bar
	test %eax, %eax
	jnz 1f
	mov $m_nobar, %esi
	call puts
	jmp panic
1:	mov $m_bar, %esi
	call puts
	mov $8, %ecx
	call puthex
	call newline

	mov $kstack_top, %eax
	call tss_init

#if CPL3_PAGING
	mov $pgdir, %edi
	xor %ecx, %ecx
1:	mov %ecx, %eax
	shl $22, %eax
	or $0x87, %eax /* present, writable, user, 4 MiB */
	mov %eax, (%edi,%ecx,4)
	inc %ecx
	cmp $1024, %ecx
	jb 1b
	mov %cr4, %eax
	or $0x10, %eax /* PSE */
	mov %eax, %cr4
	mov $pgdir, %eax
	mov %eax, %cr3
	mov %cr0, %eax
	or $0x80010000, %eax /* PG, WP */
	mov %eax, %cr0
	jmp 2f
2:	mov $m_paging, %esi
	call puts
#endif

	mov $m_enter, %esi
	call puts
	mov $0x23, %ax
	mov %ax, %ds
	mov %ax, %es
	mov %ax, %fs
	mov %ax, %gs
#if CPL3_VIA_IRET
	pushl $0x23 /* ss */
	pushl $ustack_top /* esp */
	pushl $0x3002 /* eflags: IOPL=3, IF=0 */
	pushl $0x1b /* cs */
	pushl $user
	iret
#else
	/* SYSEXIT: CS = SYSENTER_CS + 16 (0x18 | 3), SS = SYSENTER_CS + 24 (0x20 | 3), EIP = EDX, ESP = ECX. */
	mov $0x174, %ecx /* IA32_SYSENTER_CS */
	mov $0x08, %eax
	xor %edx, %edx
	wrmsr
	mov $0x175, %ecx /* IA32_SYSENTER_ESP */
	mov $kstack_top, %eax
	wrmsr
	mov $0x176, %ecx /* IA32_SYSENTER_EIP: nothing enters through it */
	mov $panic, %eax
	wrmsr
	pushl $0x3002 /* eflags: IOPL=3, IF=0 (SYSEXIT leaves EFLAGS alone) */
	popfl
	mov $ustack_top, %ecx
	mov $user, %edx
	sysexit
#endif

user:
	mov $m_pio, %esi
	call puts
	mov $m_cpl, %esi
	call puts
	mov %cs, %eax
	and $3, %eax
	call putdec
	mov $m_iopl, %esi
	call puts
	pushf
	pop %eax
	shr $12, %eax
	and $3, %eax
	call putdec
	call newline

	mov bar, %ebx
	movzbl (%ebx), %eax
	mov $m_mmio, %esi
	call puts
	mov $2, %ecx
	call puthex
	call newline

	mov $m_reset, %esi
	call puts
	jmp reset

	.section .rodata
m_nobar: .asciz "GUEST cpl3: FAIL pvpanic PCI device/BAR not found\n"
m_bar:	.asciz "GUEST cpl3 pvpanic-bar0="
m_paging: .asciz "GUEST cpl3: paging on (4 MiB user pages)\n"
m_enter: .asciz "GUEST cpl3: entering CPL3\n"
m_pio:	.asciz "GUEST cpl3-pio: OK\n"
m_cpl:	.asciz "GUEST cpl3 cpl="
m_iopl:	.asciz " iopl="
m_mmio:	.asciz "GUEST cpl3 pvpanic-mmio="
m_reset: .asciz "GUEST cpl3: resetting from CPL3\n"

	.data
bar:	.long 0

	.bss
	.balign 4096
pgdir:	.space 4096
	.balign 16
	.space 8192
kstack_top:
	.space 8192
ustack_top:
