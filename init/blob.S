/* lkvm-init, the static guest program, carried inside lkvm (lkvm_init_start..lkvm_init_end; include/lkvm/initrd.h). */
	.section .rodata.lkvm_init, "a"
	.balign 16
	.globl lkvm_init_start
lkvm_init_start:
	.incbin LKVM_INIT_BIN
	.globl lkvm_init_end
lkvm_init_end:
	.section .note.GNU-stack, "", @progbits
