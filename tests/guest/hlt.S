/* Guest hlt: LAPIC timer (one-shot) wakes the CPU from HLT a few times; each wake is counted and printed. */
	.code32

#define LAPIC 0xfee00000
#define TIMER_VECTOR 0x40
#define WAKES 5

	.text
	.globl main
main:
	/* Keep the 8259 quiet (KVM points the BSP's LINT0 at it as ExtINT). */
	mov $0xff, %al
	outb %al, $0x21
	outb %al, $0xa1
	mov $TIMER_VECTOR, %eax
	mov $timer_isr, %edx
	mov $0x8e00, %ecx
	call set_gate
	mov $0xff, %eax
	mov $spurious_isr, %edx
	call set_gate

	call lapic_enable
	movl $0x10000, LAPIC + 0x350 /* LVT LINT0 masked */
	movl $0x3, LAPIC + 0x3e0 /* divide by 16 */

	mov $1, %edi /* wake we wait for */
	xor %ebx, %ebx /* wakes without a tick */
arm:
	movl $TIMER_VECTOR, LAPIC + 0x320 /* one-shot, unmasked */
	movl $1000000, LAPIC + 0x380 /* ~16 ms */
sleep:
	sti
	hlt
	cli
	mov ticks, %eax
	cmp %edi, %eax
	jae woke
	inc %ebx
	mov $m_other, %esi
	call puts
	cmp $20, %ebx
	jb sleep
	mov $m_fail, %esi
	call puts
	jmp panic
woke:
	mov $m_woke, %esi
	call puts
	call putdec
	call newline
	inc %edi
	cmp $WAKES, %edi
	jbe arm

	mov $m_done, %esi
	call puts
	mov ticks, %eax
	call putdec
	call newline
	jmp reset

timer_isr:
	incl ticks
	movl $0, LAPIC + 0xb0 /* EOI */
	jmp intr_return /* not iret: see common.S */

spurious_isr:
	jmp intr_return /* not iret: see common.S */

	.section .rodata
m_woke:	.asciz "GUEST hlt: woke from HLT count="
m_other: .asciz "GUEST hlt: woke without a timer tick\n"
m_fail:	.asciz "GUEST hlt: FAIL too many wakes without a timer tick\n"
m_done:	.asciz "GUEST hlt: done, timer wakes="

	.bss
	.balign 4
ticks:	.long 0
