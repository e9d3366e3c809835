/* Guest panic: announces itself and writes 1 (panicked) to the pvpanic port 0x505. */
	.code32
	.text
	.globl main
main:
	mov $m_panic, %esi
	call puts
	jmp panic

	.section .rodata
m_panic: .asciz "GUEST panic: writing pvpanic\n"
