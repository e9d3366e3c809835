/* Guest cpl0: PIO, pvpanic port read, PCI scan, pvpanic BAR MMIO read and an unclaimed MMIO read, all at CPL0. */
	.code32
	.text
	.globl main
main:
	mov $m_pio, %esi
	call puts

	/* pvpanic ISA port reads its capabilities: 3 (panicked | crash loaded). */
	mov $0x505, %dx
	inb %dx, %al
	movzbl %al, %eax
	mov $m_port, %esi
	call puts
	mov $2, %ecx
	call puthex
	call newline

	mov $0x00111b36, %eax
	call pci_find
	cmp $0xffffffff, %eax
	je no_dev
	mov %eax, %ebx
	mov $m_dev, %esi
	call puts
	mov $8, %ecx
	call puthex
	call newline

	call pvpanic_bar
	mov %eax, %ebx
	mov $m_bar, %esi
	call puts
	mov $8, %ecx
	call puthex
	call newline
	test %ebx, %ebx
	jz no_bar

	movzbl (%ebx), %eax
	mov $m_mmio, %esi
	call puts
	mov $2, %ecx
	call puthex
	call newline

	/* An address in the PCI hole, away from the BAR's 256 MiB region. */
	mov $0xe0000000, %edi
	mov %ebx, %eax
	and $0xf0000000, %eax
	cmp %edi, %eax
	jne 1f
	mov $0xd0000000, %edi
1:	mov (%edi), %eax
	mov $m_unclaimed, %esi
	call puts
	xchg %eax, %edi
	mov $8, %ecx
	call puthex
	mov $m_eq, %esi
	call puts
	mov %edi, %eax
	call puthex
	call newline

	mov $m_done, %esi
	call puts
	jmp reset

no_dev:
	mov $m_nodev, %esi
	call puts
	jmp panic
no_bar:
	mov $m_nobar, %esi
	call puts
	jmp panic

	.section .rodata
m_pio:	.asciz "GUEST cpl0-pio: OK\n"
m_port:	.asciz "GUEST cpl0 pvpanic-port="
m_dev:	.asciz "GUEST cpl0 pvpanic-pci-dev="
m_bar:	.asciz "GUEST cpl0 pvpanic-bar0="
m_mmio:	.asciz "GUEST cpl0 pvpanic-mmio="
m_unclaimed: .asciz "GUEST cpl0 unclaimed-mmio "
m_eq:	.asciz "="
m_done:	.asciz "GUEST cpl0: done, resetting\n"
m_nodev: .asciz "GUEST cpl0: FAIL pvpanic PCI device not found\n"
m_nobar: .asciz "GUEST cpl0: FAIL pvpanic BAR0 is 0\n"
