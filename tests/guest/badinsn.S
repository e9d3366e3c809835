/* Guest badinsn: executes at CPL0 an instruction this host's emulator cannot run and lkvm does not complete. */
	.code32
	.text
	.globl main
main:
	mov $m_try, %esi
	call puts
	mov $0x12345678, %eax
	mov $0x9abcdef0, %ecx
bad:
	crc32l %ecx, %eax /* f2 0f 38 f1 c1 (SSE4.2) */
	mov $m_survived, %esi
	call puts
	call newline
	jmp reset

	.section .rodata
m_try:	.asciz "GUEST badinsn: executing crc32l (f2 0f 38 f1 c1)\n"
m_survived: .asciz "GUEST badinsn: survived (instruction was emulated or completed)\n"
