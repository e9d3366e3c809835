/* Guest insn: int3 (#BP handler runs once and execution continues), stac/clac when SMAP exists, fwait. */
	.code32
	.text
	.globl main
main:
	mov $3, %eax
	mov $bp_handler, %edx
	mov $0x8e00, %ecx
	call set_gate

	/* int3: trap-like, the handler must see the address after it. */
	int3
after_int3:
	mov $m_int3, %esi
	call puts
	mov bp_count, %eax
	call putdec
	mov $m_eip, %esi
	call puts
	mov bp_eip, %eax
	mov $8, %ecx
	call puthex
	cmpl $1, bp_count
	jne 1f
	cmpl $after_int3, bp_eip
	jne 1f
	mov $m_ok, %esi
	call puts
	jmp 2f
1:	incl fails
	mov $m_fail, %esi
	call puts
2:
	/* stac/clac only exist with SMAP (CPUID.7.0:EBX[20]). */
	xor %eax, %eax
	cpuid
	cmp $7, %eax
	jb no_smap
	mov $7, %eax
	xor %ecx, %ecx
	cpuid
	bt $20, %ebx
	jnc no_smap

	stac
	pushf
	pop %eax
	shr $18, %eax
	and $1, %eax
	mov $m_stac, %esi
	call puts
	call putdec
	cmp $1, %eax
	call report
	clac
	pushf
	pop %eax
	shr $18, %eax
	and $1, %eax
	mov $m_clac, %esi
	call puts
	call putdec
	cmp $0, %eax
	call report
	jmp fpu
no_smap:
	mov $m_nosmap, %esi
	call puts

fpu:
	mov %cr0, %eax
	and $~0xc, %eax /* EM=0, TS=0 */
	or $0x22, %eax /* MP=1, NE=1 */
	mov %eax, %cr0
	fninit
	fwait
	mov $m_fwait, %esi
	call puts

	cmpl $0, fails
	jne failed
	mov $m_allok, %esi
	call puts
	jmp reset
failed:
	mov $m_anyfail, %esi
	call puts
	jmp panic

/* Prints " OK" or " FAIL" (counting it) from the flags of the caller's cmp (ZF). */
report:
	jne 1f
	mov $m_ok, %esi
	call puts
	ret
1:	incl fails
	mov $m_fail, %esi
	call puts
	ret

bp_handler:
	incl bp_count
	push %eax
	mov 4(%esp), %eax
	mov %eax, bp_eip
	pop %eax
	jmp intr_return /* not iret: see common.S */

	.section .rodata
m_int3:	.asciz "GUEST insn int3: count="
m_eip:	.asciz " eip="
m_ok:	.asciz " OK\n"
m_fail:	.asciz " FAIL\n"
m_stac:	.asciz "GUEST insn stac: ac="
m_clac:	.asciz "GUEST insn clac: ac="
m_nosmap: .asciz "GUEST insn smap absent, skipped\n"
m_fwait: .asciz "GUEST insn fwait: OK\n"
m_allok: .asciz "GUEST insn: ALL OK\n"
m_anyfail: .asciz "GUEST insn: FAIL\n"

	.bss
	.balign 4
bp_count: .long 0
bp_eip:	.long 0
fails:	.long 0
