/* Shared runtime of the test guests: PVH entry, GDT/TSS/IDT, serial output, PCI lookup and the three ways out. */

/*
 * Register conventions (all helpers preserve every register unless noted):
 *   putc(al)  puts(esi = NUL-terminated string)  puthex(eax, ecx = digits)  putdec(eax)
 *   set_gate(eax = vector, edx = handler, ecx = attributes, e.g. 0x8E00)
 *   pci_find(eax = device<<16 | vendor) -> eax = config address of function 0 or ~0
 *   pci_read(eax = config address | reg) -> eax     pci_write(eax = address | reg, edx = value)
 *   pvpanic_bar() -> eax = BAR0 memory address of the pvpanic PCI device (memory decode on), or 0
 *   lapic_delay_us(eax = microseconds, < 68 s): polls the LAPIC timer's current count (LVT masked)
 * The guest provides main(), called at CPL0 with interrupts off; returning from it resets.
 */

#define COM1 0x3f8
#define COM1_LSR 0x3fd
#define LAPIC 0xfee00000

	.code32

	/* PVH entry note: name "Xen", type XEN_ELFNOTE_PHYS32_ENTRY (18), 32-bit entry point. */
	.section .note.Xen, "a"
	.balign 4
	.long 4, 4, 18
	.asciz "Xen"
	.long _start

	.section .text.entry, "ax"
	.globl _start
_start:
	cli
	cld
	lgdt gdt_desc
	ljmp $0x08, $1f
1:	mov $0x10, %ax
	mov %ax, %ds
	mov %ax, %es
	mov %ax, %ss
	mov %ax, %fs
	mov %ax, %gs
	mov %ebx, pvh_start_info /* .data: survives the .bss clear */
	/* The loader zeroes memsz beyond filesz; clear .bss anyway so nothing depends on it. */
	mov $__bss_start, %edi
	mov $__bss_end, %ecx
	sub %edi, %ecx
	shr $2, %ecx
	xor %eax, %eax
	rep stosl
	mov $boot_stack_top, %esp
	call idt_init
	call main
	jmp reset

	.text

/* Serial console (8250 THR at 0x3f8; waits for LSR.THRE like a driver would). */
	.globl putc
putc:
	push %edx
	push %eax
	mov $COM1_LSR, %dx
1:	inb %dx, %al
	testb $0x20, %al
	jz 1b
	pop %eax
	mov $COM1, %dx
	outb %al, %dx
	pop %edx
	ret

	.globl puts
puts:
	push %esi
	push %eax
1:	movb (%esi), %al
	testb %al, %al
	jz 2f
	call putc
	inc %esi
	jmp 1b
2:	pop %eax
	pop %esi
	ret

	.globl puthex
puthex:
	pusha
	mov %eax, %edx
	mov $'0', %al
	call putc
	mov $'x', %al
	call putc
1:	dec %ecx
	mov %edx, %eax
	mov %ecx, %ebx
	shl $2, %ecx
	shr %cl, %eax
	mov %ebx, %ecx
	and $0xf, %eax
	movb hexdigits(%eax), %al
	call putc
	test %ecx, %ecx
	jnz 1b
	popa
	ret

	.globl putdec
putdec:
	pusha
	mov $10, %ebx
	xor %ecx, %ecx
1:	xor %edx, %edx
	div %ebx
	push %edx
	inc %ecx
	test %eax, %eax
	jnz 1b
2:	pop %eax
	add $'0', %al
	call putc
	dec %ecx
	jnz 2b
	popa
	ret

	.globl newline
newline:
	push %eax
	mov $'\n', %al
	call putc
	pop %eax
	ret

/* Serialises whole lines between CPUs. */
	.globl console_lock
console_lock:
	push %eax
1:	mov $1, %eax
	xchg %eax, con_lock
	test %eax, %eax
	jz 2f
	pause
	jmp 1b
2:	pop %eax
	ret

	.globl console_unlock
console_unlock:
	movl $0, con_lock
	ret

/* The ways out: i8042 reset (lkvm exit 0) and pvpanic (lkvm exit 2). Both work from CPL3 with IOPL=3. */
	.globl reset
reset:
	mov $0xfe, %al
	outb %al, $0x64
1:	pause
	jmp 1b

	.globl panic
panic:
	mov $1, %al
	mov $0x505, %dx
	outb %al, %dx
1:	pause
	jmp 1b

/* IDT: every vector starts as a stub that reports it and panics; guests override with set_gate. */
idt_init:
	pusha
	xor %eax, %eax
	mov $exc_stubs, %edx
	mov $0x8e00, %ecx
1:	call set_gate
	add $16, %edx
	inc %eax
	cmp $256, %eax
	jb 1b
	lidt idt_desc
	popa
	ret

/*
 * Returns from an interrupt or exception taken at CPL0 without IRET, which this host's
 * instruction emulator cannot run in protected mode (lkvm does not complete it): jump here
 * with the stack as the CPU left it ([eip][cs][eflags], no error code); rotates it to
 * [eflags][eip][cs], then POPF and a same-privilege far RET. An interrupt that slips in
 * between the two nests on this stack harmlessly.
 */
	.globl intr_return
intr_return:
	push %eax
	mov 12(%esp), %eax
	xchg %eax, 4(%esp)
	xchg %eax, 8(%esp)
	mov %eax, 12(%esp)
	pop %eax
	popfl
	lret

	.globl set_gate
set_gate:
	push %ebx
	push %edi
	lea idt(,%eax,8), %edi
	mov %edx, %ebx
	and $0xffff, %ebx
	or $(0x08 << 16), %ebx
	mov %ebx, (%edi)
	mov %edx, %ebx
	and $0xffff0000, %ebx
	or %ecx, %ebx
	mov %ebx, 4(%edi)
	pop %edi
	pop %ebx
	ret

/* TSS for CPL3 -> CPL0 transitions: ss0 = 0x10, esp0 = eax; descriptor at selector 0x28; ltr. */
	.globl tss_init
tss_init:
	pusha
	mov %eax, tss + 4
	movl $0x10, tss + 8
	movw $104, tss + 102 /* I/O bitmap base beyond the limit: no bitmap, IOPL decides */
	mov $tss, %eax
	mov %eax, %ebx
	shl $16, %ebx
	or $103, %ebx /* limit 15:0 */
	mov %ebx, gdt + 0x28
	mov %eax, %ebx
	shr $16, %ebx
	and $0xff, %ebx /* base 23:16 */
	mov %eax, %ecx
	and $0xff000000, %ecx /* base 31:24 */
	or %ecx, %ebx
	or $0x00008900, %ebx /* present, DPL0, available 32-bit TSS */
	mov %ebx, gdt + 0x2c
	mov $0x28, %ax
	ltr %ax
	popa
	ret

	.balign 16
exc_stubs:
	.set vec, 0
	.rept 256
	.if (vec == 8) || ((vec >= 10) && (vec <= 14)) || (vec == 17) || (vec == 21) || (vec == 29) || (vec == 30)
	.else
	pushl $0
	.endif
	pushl $vec
	jmp exc_common
	.balign 16
	.set vec, vec + 1
	.endr

/* Unexpected exception or interrupt: report vector, error code, eip, cs and panic. */
exc_common:
	pusha
	mov $0x10, %ax
	mov %ax, %ds
	mov %ax, %es
	mov $msg_exc, %esi
	call puts
	mov $2, %ecx
	mov 32(%esp), %eax
	call puthex
	mov $msg_err, %esi
	call puts
	mov $8, %ecx
	mov 36(%esp), %eax
	call puthex
	mov $msg_eip, %esi
	call puts
	mov 40(%esp), %eax
	call puthex
	mov $msg_cs, %esi
	call puts
	mov $4, %ecx
	mov 44(%esp), %eax
	call puthex
	call newline
	jmp panic

/* PCI configuration mechanism #1. */
	.globl pci_read
pci_read:
	push %edx
	and $0xfffffffc, %eax
	mov $0xcf8, %dx
	outl %eax, %dx
	mov $0xcfc, %dx
	inl %dx, %eax
	pop %edx
	ret

	.globl pci_write
pci_write:
	push %edx
	push %eax
	and $0xfffffffc, %eax
	mov $0xcf8, %dx
	outl %eax, %dx
	mov 4(%esp), %eax /* the value, from the saved edx */
	mov $0xcfc, %dx
	outl %eax, %dx
	pop %eax
	pop %edx
	ret

/* Scans bus 0, devices 0-31, function 0 for the id in eax. */
	.globl pci_find
pci_find:
	push %ebx
	push %ecx
	mov %eax, %ebx
	mov $0x80000000, %ecx
1:	mov %ecx, %eax
	call pci_read
	cmp %ebx, %eax
	je 2f
	add $0x800, %ecx
	cmp $0x80010000, %ecx
	jb 1b
	mov $0xffffffff, %ecx
2:	mov %ecx, %eax
	pop %ecx
	pop %ebx
	ret

	.globl pvpanic_bar
pvpanic_bar:
	push %ebx
	push %edx
	mov $0x00111b36, %eax
	call pci_find
	cmp $0xffffffff, %eax
	je 1f
	mov %eax, %ebx
	lea 0x04(%ebx), %eax /* command: enable memory decode */
	call pci_read
	and $0xffff, %eax
	or $0x0002, %eax
	mov %eax, %edx
	lea 0x04(%ebx), %eax
	call pci_write
	lea 0x10(%ebx), %eax
	call pci_read
	and $0xfffffff0, %eax
	jmp 2f
1:	xor %eax, %eax
2:	pop %edx
	pop %ebx
	ret

/* Local APIC helpers (xAPIC MMIO at 0xfee00000; KVM's timer counts 1 GHz bus cycles). */
	.globl lapic_enable
lapic_enable:
	movl $0x1ff, LAPIC + 0xf0 /* SVR: enabled, spurious vector 0xff */
	ret

	.globl lapic_delay_us
lapic_delay_us:
	push %eax
	push %edx
	movl $0x3, LAPIC + 0x3e0 /* divide by 16 */
	movl $0x10000, LAPIC + 0x320 /* LVT timer masked, one-shot */
	mov $62, %edx
	mul %edx /* ~62.5 counts per us */
	test %eax, %eax
	jnz 1f
	inc %eax
1:	mov %eax, LAPIC + 0x380
2:	pause
	mov LAPIC + 0x390, %eax
	test %eax, %eax
	jnz 2b
	pop %edx
	pop %eax
	ret

	.section .rodata
hexdigits:
	.ascii "0123456789abcdef"
msg_exc:
	.asciz "GUEST unexpected exception/interrupt vector="
msg_err:
	.asciz " err="
msg_eip:
	.asciz " eip="
msg_cs:
	.asciz " cs="

	.data
	.balign 8
	.globl gdt
gdt:
	.quad 0
	.quad 0x00cf9b000000ffff /* 0x08 ring-0 code, flat 32-bit */
	.quad 0x00cf93000000ffff /* 0x10 ring-0 data */
	.quad 0x00cffb000000ffff /* 0x18 ring-3 code (use 0x1b) */
	.quad 0x00cff3000000ffff /* 0x20 ring-3 data (use 0x23) */
	.quad 0                  /* 0x28 TSS, filled by tss_init */
gdt_end:
	.balign 4
	.word 0
	.globl gdt_desc
gdt_desc:
	.word gdt_end - gdt - 1
	.long gdt
	.word 0
idt_desc:
	.word 256 * 8 - 1
	.long idt
	.globl pvh_start_info
pvh_start_info:
	.long 0

	.bss
	.balign 4096
idt:
	.space 256 * 8
	.balign 16
tss:
	.space 104
	.balign 4
con_lock:
	.long 0
	.balign 16
	.space 16384
	.globl boot_stack_top
boot_stack_top:
