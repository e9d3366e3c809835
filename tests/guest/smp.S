/* Guest smp: BSP counts CPUs in the MP table, wakes the APs with INIT/SIPI/SIPI and waits for each to check in. */
	.code32

#define LAPIC 0xfee00000
#define TRAMPOLINE 0x30000 /* SIPI vector 0x30; below 1 MiB, clear of lkvm's boot data */
#define MAX_CPUS 64
#define AP_STACK 1024
#define WAIT_COUNTS 312500000 /* ~5 s at 62.5 MHz (1 GHz bus / 16) */

	.text
	.globl main
main:
	call mp_count_cpus
	mov %eax, ncpus
	test %eax, %eax
	jnz 1f
	mov $m_nomp, %esi
	call puts
	jmp panic
1:	mov $m_count, %esi
	call puts
	call putdec
	call newline
	cmp $MAX_CPUS, %eax
	jbe 1f
	mov $m_toomany, %esi
	call puts
	jmp panic

1:	call lapic_enable
	cmpl $1, ncpus
	je all_up

	mov $tramp_start, %esi
	mov $TRAMPOLINE, %edi
	mov $(tramp_end - tramp_start), %ecx
	rep movsb

	/* INIT, then SIPI twice (MP spec B.4), to all CPUs but this one. */
	movl $0, LAPIC + 0x310
	movl $0x000c4500, LAPIC + 0x300 /* all-excluding-self, assert, INIT */
	call icr_wait
	mov $10000, %eax
	call lapic_delay_us
	mov $2, %ebx
1:	movl $0, LAPIC + 0x310
	movl $(0x000c4600 | (TRAMPOLINE >> 12)), LAPIC + 0x300 /* all-excluding-self, STARTUP */
	call icr_wait
	mov $200, %eax
	call lapic_delay_us
	dec %ebx
	jnz 1b

	/* Bounded wait: the masked one-shot LAPIC timer is the clock. */
	movl $0x3, LAPIC + 0x3e0
	movl $0x10000, LAPIC + 0x320
	movl $WAIT_COUNTS, LAPIC + 0x380
	mov ncpus, %ebx
	dec %ebx
wait:
	cmp %ebx, ap_count
	jae all_up
	pause
	cmpl $0, LAPIC + 0x390
	jne wait
	cmp %ebx, ap_count
	jae all_up

	call console_lock
	mov $m_fail, %esi
	call puts
	mov ncpus, %eax
	call putdec
	mov $m_aps, %esi
	call puts
	mov ap_count, %eax
	call putdec
	call newline
	call console_unlock
	jmp panic

all_up:
	call console_lock
	mov $m_ok, %esi
	call puts
	mov ncpus, %eax
	call putdec
	call newline
	call console_unlock
	jmp reset

/* Waits (bounded) for the ICR's delivery-status bit to clear. */
icr_wait:
	push %ecx
	mov $100000, %ecx
1:	testl $0x1000, LAPIC + 0x300
	jz 2f
	pause
	dec %ecx
	jnz 1b
2:	pop %ecx
	ret

/* Finds "_MP_" in 0xf0000-0xfffff and counts enabled processor entries of its config table; eax = count or 0. */
mp_count_cpus:
	push %ecx
	push %edx
	push %esi
	push %edi
	xor %eax, %eax
	mov $0xf0000, %esi
1:	cmpl $0x5f504d5f, (%esi) /* "_MP_" */
	jne 7f
	/* A floating pointer structure, not just the string: 16 bytes summing to 0. */
	xor %edx, %edx
	xor %ecx, %ecx
8:	add (%esi,%ecx), %dl
	inc %ecx
	cmp $16, %ecx
	jb 8b
	test %dl, %dl
	jz 2f
7:	add $16, %esi
	cmp $0x100000, %esi
	jb 1b
	jmp 9f
2:	mov 4(%esi), %esi /* physical address of the config table */
	test %esi, %esi
	jz 9f
	cmpl $0x504d4350, (%esi) /* "PCMP" */
	jne 9f
	movzwl 0x22(%esi), %ecx /* entry count */
	lea 0x2c(%esi), %edi
	test %ecx, %ecx
	jz 9f
3:	cmpb $0, (%edi)
	jne 4f
	testb $1, 3(%edi) /* processor entry: enabled? */
	jz 5f
	inc %eax
5:	add $20, %edi
	jmp 6f
4:	add $8, %edi
6:	dec %ecx
	jnz 3b
9:	pop %edi
	pop %esi
	pop %edx
	pop %ecx
	ret

/* AP start: real mode at TRAMPOLINE:0, copied there by the BSP; position-independent. */
	.code16
tramp_start:
	cli
	cld
	mov %cs, %ax
	mov %ax, %ds
	lgdtl tramp_gdtr - tramp_start
	mov %cr0, %eax
	or $1, %eax
	mov %eax, %cr0
	ljmpl $0x08, $ap_entry32
	.balign 4
	.word 0
tramp_gdtr:
	.word 6 * 8 - 1
	.long gdt
tramp_end:
	.code32

ap_entry32:
	mov $0x10, %ax
	mov %ax, %ds
	mov %ax, %es
	mov %ax, %ss
	mov %ax, %fs
	mov %ax, %gs
	mov LAPIC + 0x20, %ebx
	shr $24, %ebx
	mov %ebx, %eax
	and $(MAX_CPUS - 1), %eax
	inc %eax
	shl $10, %eax /* AP_STACK */
	add $ap_stacks, %eax
	mov %eax, %esp
	call console_lock
	mov $m_ap, %esi
	call puts
	mov %ebx, %eax
	call putdec
	mov $m_up, %esi
	call puts
	call console_unlock
	mov $1, %eax
	lock xadd %eax, ap_count
1:	cli
	hlt
	jmp 1b

	.section .rodata
m_nomp:	.asciz "GUEST smp: SMP FAIL no MP table\n"
m_count: .asciz "GUEST smp: MP table cpus="
m_toomany: .asciz "GUEST smp: SMP FAIL too many CPUs\n"
m_fail:	.asciz "GUEST smp: SMP FAIL cpus="
m_aps:	.asciz " aps_up="
m_ok:	.asciz "GUEST smp: SMP OK cpus="
m_ap:	.asciz "GUEST smp: AP "
m_up:	.asciz " up\n"

	.bss
	.balign 4
ncpus:	.long 0
ap_count: .long 0
	.balign 16
ap_stacks:
	.space MAX_CPUS * AP_STACK
