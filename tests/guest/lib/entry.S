/* C guest runtime entry: 32-bit PVH entry into identity-mapped long mode, GDT/TSS/IDT, exception stubs, the drop to CPL3, the APs' way in. */

/*
 * Selectors (the layout SYSRET expects, should a guest want it: STAR[63:48] = 0x1b):
 *   0x08 CPL0 code (64-bit)  0x10 CPL0 data  0x18 CPL3 code (32-bit, unused)
 *   0x20 CPL3 data (use 0x23)  0x28 CPL3 code (64-bit, use 0x2b)  0x30 TSS (16 bytes)
 *   0x40 CPL0 code (32-bit, AP start-up only)
 * Paging: PML4 -> one PDPT -> four page directories of 2 MiB pages over 0-4 GiB, all
 * present, writable and user-accessible (CPL3 touches code, data, rings and MMIO alike);
 * the top GiB (PCI hole, LAPIC, IOAPIC) is uncached. Built at assembly time, so the slow
 * (emulated) CPL0 code has nothing to compute.
 */
#define SEL_KCODE 0x08
#define SEL_KDATA 0x10
#define SEL_UDATA 0x23
#define SEL_UCODE 0x2b
#define SEL_TSS 0x30
#define SEL_KCODE32 0x40

#define MSR_EFER 0xc0000080
#define EFER_LME 0x100
#define CR0_PE 0x1
#define CR0_WP 0x10000
#define CR0_PG 0x80000000
#define CR4_PAE 0x20

#define PDE_2M_USER 0x87 /* present, writable, user, 2 MiB */
#define PDE_UNCACHED 0x18 /* PWT | PCD */

	/* PVH entry note: name "Xen", type XEN_ELFNOTE_PHYS32_ENTRY (18), 32-bit entry point. */
	.section .note.Xen, "a"
	.balign 4
	.long 4, 4, 18
	.asciz "Xen"
	.long _start

	.section .text.entry, "ax"
	.code32
	.globl _start
_start:
	cli
	cld
	mov %ebx, pvh_start_info /* PVH start info (ebx), read from C */
	lgdt gdt_desc
	xor %esi, %esi /* the boot CPU */
/* From 32-bit protected mode on our GDT into long mode; esi: 0 on the boot CPU, 1 on an AP. */
long_mode:
	mov $SEL_KDATA, %eax
	mov %eax, %ds
	mov %eax, %es
	mov %eax, %ss
	mov %cr4, %eax
	or $CR4_PAE, %eax
	mov %eax, %cr4
	mov $pml4, %eax
	mov %eax, %cr3
	mov $MSR_EFER, %ecx
	rdmsr
	or $EFER_LME, %eax
	wrmsr
	mov %cr0, %eax
	or $(CR0_PG | CR0_WP | CR0_PE), %eax
	mov %eax, %cr0
	ljmp $SEL_KCODE, $start64

	.code64
start64:
	mov $SEL_KDATA, %eax
	mov %eax, %ds
	mov %eax, %es
	mov %eax, %ss
	xor %eax, %eax
	mov %eax, %fs
	mov %eax, %gs
	test %esi, %esi
	jnz ap_start64
	lea kstack_top(%rip), %rsp
	call idt_init
	call tss_init
	call lib_start /* C, never returns */
1:	hlt
	jmp 1b

/*
 * The same image booted as a bzImage (build/guests/NAME.bzImage, lib/bzimage.S): the loader
 * copies the file's bytes to 1 MiB and enters here, at +0x200, in 64-bit mode on its own GDT
 * and identity page tables, with RSI pointing at the zero page. Take over with ours and join
 * the PVH path. The loader copies only the file: .bss is cleared here.
 */
	.section .text.bzentry, "ax"
	.code64
	.globl _start_bzimage
_start_bzimage:
	cli
	cld
	mov %rsi, lib_boot_params(%rip) /* in .data: survives the clearing of .bss */
	lea __bss_start(%rip), %rdi
	lea __bss_end(%rip), %rcx
	sub %rdi, %rcx
	xor %eax, %eax
	rep stosb
	lgdt gdt_desc(%rip) /* in 64-bit mode lgdt reads the limit and a 64-bit base */
	lea pml4(%rip), %rax
	mov %rax, %cr3
	mov %cr0, %rax
	or $CR0_WP, %eax
	mov %rax, %cr0
	xor %esi, %esi /* the boot CPU (see long_mode) */
	pushq $SEL_KCODE
	lea start64(%rip), %rax
	pushq %rax
	lretq

	.text
/* IDT: vector n -> exc_stubs + 16 * n, interrupt gates, DPL0 (INT n from CPL3 faults). */
idt_init:
	lea idt(%rip), %rdi
	lea exc_stubs(%rip), %rdx
	mov $256, %ecx
1:	mov %rdx, %rax
	and $0xffff, %eax
	or $(SEL_KCODE << 16), %eax
	mov %eax, (%rdi)
	mov %rdx, %rax
	and $0xffff0000, %eax
	or $0x8e00, %eax /* present, DPL0, 64-bit interrupt gate, IST 0 */
	mov %eax, 4(%rdi)
	mov %rdx, %rax
	shr $32, %rax
	mov %eax, 8(%rdi)
	movl $0, 12(%rdi)
	add $16, %rdi
	add $16, %rdx
	dec %ecx
	jnz 1b
	lidt idt_desc(%rip)
	ret

/* 64-bit TSS: RSP0 = kstack_top for exceptions taken at CPL3; no I/O bitmap (IOPL decides). */
tss_init:
	lea kstack_top(%rip), %rax
	mov %rax, tss + 4(%rip)
	movw $104, tss + 102(%rip)
	lea tss(%rip), %rax
	lea gdt + SEL_TSS(%rip), %rdi
	mov %eax, %edx
	shl $16, %edx
	or $103, %edx /* limit 15:0, base 15:0 */
	mov %edx, (%rdi)
	mov %eax, %edx
	shr $16, %edx
	and $0xff, %edx /* base 23:16 */
	mov %eax, %ecx
	and $0xff000000, %ecx /* base 31:24 */
	or %ecx, %edx
	or $0x8900, %edx /* present, DPL0, available 64-bit TSS */
	mov %edx, 4(%rdi)
	shr $32, %rax
	mov %eax, 8(%rdi)
	movl $0, 12(%rdi)
	mov $SEL_TSS, %eax
	ltr %ax
	ret

/*
 * lib_enter_user(rip = rdi, rsp = rsi, arg = rdx): IRETQ to CPL3 with IOPL=3, IF=0, the data
 * segments set to the CPL3 selector, rdi = arg. RSP should be 8 below a 16-byte boundary (as
 * after a call) and its slot holds the return address the user function would use.
 */
	.globl lib_enter_user
lib_enter_user:
	mov $SEL_UDATA, %eax
	mov %eax, %ds
	mov %eax, %es
	pushq $SEL_UDATA
	pushq %rsi
	pushq $0x3002 /* IOPL=3, reserved bit 1; IF=0 */
	pushq $SEL_UCODE
	pushq %rdi
	mov %rdx, %rdi
	xor %eax, %eax
	xor %ecx, %ecx
	xor %edx, %edx
	xor %esi, %esi
	xor %ebp, %ebp
	iretq

/*
 * AP start-up (lib/smp.c copies lib_ap_tramp..lib_ap_tramp_end to a page below 1 MiB and
 * points SIPI at it). Real mode at CS:0 with CS = the page >> 4: this CPU's GDT, protected
 * mode on the 32-bit CPL0 code segment, then the boot CPU's way into long mode. Each AP
 * takes the next stack of lib_ap_stack_size bytes at lib_ap_stack_next (lib_ap_stack_end
 * bounds them; an AP past it halts) and calls lib_ap_main (C); returning from it halts.
 */
	.code16
	.globl lib_ap_tramp, lib_ap_tramp_end
lib_ap_tramp:
	cli
	cld
	mov %cs, %ax
	mov %ax, %ds
	lgdtl ap_gdtr - lib_ap_tramp
	mov %cr0, %eax
	or $CR0_PE, %eax
	mov %eax, %cr0
	ljmpl $SEL_KCODE32, $ap_start32
	.balign 4
	.word 0
ap_gdtr:
	.word gdt_end - gdt - 1
	.long gdt
lib_ap_tramp_end:

	.code32
ap_start32:
	mov $1, %esi
	jmp long_mode

	.code64
ap_start64:
	lidt idt_desc(%rip)
	mov lib_ap_stack_size(%rip), %rax
	lock xadd %rax, lib_ap_stack_next(%rip)
	add lib_ap_stack_size(%rip), %rax /* the top of the stack taken */
	cmp lib_ap_stack_end(%rip), %rax
	ja 2f
	mov %rax, %rsp
	call lib_ap_main
2:	cli
	hlt
	jmp 2b

/* Exception and interrupt stubs, 16 bytes each: push a zero error code where the CPU pushes none, then the vector. */
	.balign 16
exc_stubs:
	.set vec, 0
	.rept 256
	.if (vec == 8) || ((vec >= 10) && (vec <= 14)) || (vec == 17) || (vec == 21) || (vec == 29) || (vec == 30)
	.else
	pushq $0
	.endif
	pushq $vec
	jmp exc_common
	.balign 16
	.set vec, vec + 1
	.endr

/*
 * Frame for lib_exception (struct exc_frame in guest.h): 15 GPRs, vector, error code, then
 * the CPU's RIP, CS, RFLAGS, RSP, SS. lib_exception returns only for an event it completed
 * (a port access from CPL3, see runtime.c); then the registers it may have changed are
 * reloaded and IRETQ resumes the interrupted code. DS/ES stay as they were: in 64-bit mode
 * their DPL is only checked when loading them.
 */
exc_common:
	push %rax
	push %rbx
	push %rcx
	push %rdx
	push %rsi
	push %rdi
	push %rbp
	push %r8
	push %r9
	push %r10
	push %r11
	push %r12
	push %r13
	push %r14
	push %r15
	mov %rsp, %rdi
	mov %rsp, %rbx
	and $-16, %rsp
	call lib_exception
	mov %rbx, %rsp
	pop %r15
	pop %r14
	pop %r13
	pop %r12
	pop %r11
	pop %r10
	pop %r9
	pop %r8
	pop %rbp
	pop %rdi
	pop %rsi
	pop %rdx
	pop %rcx
	pop %rbx
	pop %rax
	add $16, %rsp /* vector, error code */
	iretq

	.data
	.balign 16
gdt:
	.quad 0
	.quad 0x00af9b000000ffff /* 0x08 CPL0 code, 64-bit */
	.quad 0x00cf93000000ffff /* 0x10 CPL0 data */
	.quad 0x00cffb000000ffff /* 0x18 CPL3 code, 32-bit */
	.quad 0x00cff3000000ffff /* 0x20 CPL3 data */
	.quad 0x00affb000000ffff /* 0x28 CPL3 code, 64-bit */
	.quad 0, 0               /* 0x30 TSS, filled by tss_init */
	.quad 0x00cf9b000000ffff /* 0x40 CPL0 code, 32-bit: the APs' way from real to long mode */
gdt_end:
	.balign 4
	.word 0
gdt_desc: /* lgdt in 32-bit mode reads limit and a 32-bit base; the rest is 0 */
	.word gdt_end - gdt - 1
	.quad gdt
	.balign 4
	.word 0
idt_desc:
	.word 256 * 16 - 1
	.quad idt
	.globl pvh_start_info
	.balign 4
pvh_start_info:
	.long 0
	.globl lib_ap_stack_next, lib_ap_stack_size, lib_ap_stack_end
	.balign 8
lib_ap_stack_next: /* set by smp_start_aps before the SIPIs */
	.quad 0
lib_ap_stack_size:
	.quad 0
lib_ap_stack_end:
	.quad 0
	.globl lib_boot_params
	.balign 8
lib_boot_params: /* the zero page when booted as a bzImage, else 0 */
	.quad 0

	.section .data.pagetables, "aw"
	.balign 4096
pml4:
	.quad pdpt + 0x7
	.fill 511, 8, 0
pdpt:
	.quad pd + 0x7, pd + 0x1007, pd + 0x2007, pd + 0x3007
	.fill 508, 8, 0
pd:
	.set i, 0
	.rept 2048
	.if i >= 1536
	.quad (i << 21) | PDE_2M_USER | PDE_UNCACHED
	.else
	.quad (i << 21) | PDE_2M_USER
	.endif
	.set i, i + 1
	.endr

	.bss
	.balign 4096
idt:
	.space 256 * 16
	.balign 16
tss:
	.space 104
	.balign 16
	.space 32768
	.globl kstack_top
kstack_top:
