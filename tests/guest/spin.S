/* Guest spin: announces itself and spins forever at CPL0 (for --timeout). */
	.code32
	.text
	.globl main
main:
	mov $m_spin, %esi
	call puts
1:	pause
	jmp 1b

	.section .rodata
m_spin: .asciz "GUEST spin: spinning\n"
