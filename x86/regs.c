/* x86 register state: the boot vCPU's registers as the boot protocol wants them, and the register dumps of lkvm debug and of fatal exits. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/kvm.h>

#include "lkvm/boot.h"
#include "lkvm/kvm-cpu.h"
#include "lkvm/layout.h"
#include "lkvm/util.h"

static struct kvm_segment flat_segment(u16 sel, u8 type, bool code64, bool db)
{
	return (struct kvm_segment){
		.base = 0,
		.limit = 0xffffffff,
		.selector = sel,
		.type = type,
		.present = 1,
		.dpl = 0,
		.db = db,
		.s = 1,
		.l = code64,
		.g = 1,
	};
}

int kvm_cpu_setup_boot(struct kvm_cpu *vcpu, const struct boot_entry *e, char *err, size_t errlen)
{
	struct kvm_sregs sregs;
	struct kvm_regs regs = {
		.rflags = 0x2, .rip = e->rip, .rsp = e->rsp, .rsi = e->rsi, .rbx = e->rbx
	};
	struct kvm_fpu fpu = { .fcw = 0x37f, .mxcsr = 0x1f80 };
	struct kvm_segment data = flat_segment(GDT_SEL_DATA, 3, false, true);

	if (ioctl(vcpu->fd, KVM_GET_SREGS, &sregs) < 0)
		goto fail;
	sregs.ds = sregs.es = sregs.fs = sregs.gs = sregs.ss = data;
	sregs.gdt.base = BOOT_GDT_ADDR;
	sregs.gdt.limit = GDT_ENTRIES * 8 - 1;
	sregs.idt.base = 0;
	sregs.idt.limit = 0;
	/* A busy 32/64-bit TSS and an LDT descriptor: entry checks want both usable. */
	sregs.tr = (struct kvm_segment){ .limit = 0x67, .type = 11, .present = 1 };
	sregs.ldt = (struct kvm_segment){ .limit = 0xffff, .type = 2, .present = 1 };
	if (e->kind == BOOT_KIND_BZIMAGE) {
		/* Linux 64-bit boot protocol: long mode, paging on with an identity map,
		 * __BOOT_CS/__BOOT_DS loaded, interrupts off, RSI = boot_params. */
		sregs.cs = flat_segment(GDT_SEL_CODE64, 11, true, false);
		sregs.cr0 = 0x80000033; /* PG | NE | ET | MP | PE */
		sregs.cr3 = e->cr3;
		sregs.cr4 = 0x20;   /* PAE */
		sregs.efer = 0x500; /* LMA | LME */
	} else {
		/* PVH: 32-bit protected mode, paging off, EBX = start info. */
		sregs.cs = flat_segment(GDT_SEL_CODE32, 11, false, true);
		sregs.cr0 = 0x33; /* NE | ET | MP | PE */
		sregs.cr3 = 0;
		sregs.cr4 = 0;
		sregs.efer = 0;
	}
	if (ioctl(vcpu->fd, KVM_SET_SREGS, &sregs) < 0)
		goto fail;
	if (ioctl(vcpu->fd, KVM_SET_REGS, &regs) < 0)
		goto fail;
	if (ioctl(vcpu->fd, KVM_SET_FPU, &fpu) < 0)
		goto fail;
	return 0;
fail:
	errfmt(err, errlen, "setting boot registers of vCPU %d: %s", vcpu->id, strerror(errno));
	return -errno;
}

int kvm_cpu_describe(struct kvm_cpu *vcpu, char *buf, size_t len)
{
	const char *ename = kvm_exit_name(vcpu->last_exit);
	struct kvm_regs r;
	struct kvm_sregs s;
	size_t n = 0;

#define OUT(...)                                                  \
	do {                                                      \
		int w_ = snprintf(buf + n, len - n, __VA_ARGS__); \
		if (w_ < 0 || (size_t)w_ >= len - n)              \
			return -ENOSPC;                           \
		n += (size_t)w_;                                  \
	} while (0)
	OUT("vCPU %d:\n", vcpu->id);
	if (ioctl(vcpu->fd, KVM_GET_REGS, &r) < 0 || ioctl(vcpu->fd, KVM_GET_SREGS, &s) < 0) {
		OUT(" cannot read registers: %s\n", strerror(errno));
		return (int)n;
	}
	OUT(" rip %016llx rsp %016llx rflags %016llx\n", r.rip, r.rsp, r.rflags);
	OUT(" rax %016llx rbx %016llx rcx %016llx rdx %016llx\n", r.rax, r.rbx, r.rcx, r.rdx);
	OUT(" rsi %016llx rdi %016llx rbp %016llx\n", r.rsi, r.rdi, r.rbp);
	OUT(" r8  %016llx r9  %016llx r10 %016llx r11 %016llx\n", r.r8, r.r9, r.r10, r.r11);
	OUT(" r12 %016llx r13 %016llx r14 %016llx r15 %016llx\n", r.r12, r.r13, r.r14, r.r15);
	OUT(" cr0 %016llx cr2 %016llx cr3 %016llx cr4 %016llx efer %llx\n", s.cr0, s.cr2, s.cr3,
	    s.cr4, s.efer);
	OUT(" cs %04x (base %llx, l %u, db %u, dpl %u) ss %04x ds %04x es %04x fs %04x gs %04x\n",
	    s.cs.selector, s.cs.base, s.cs.l, s.cs.db, s.cs.dpl, s.ss.selector, s.ds.selector,
	    s.es.selector, s.fs.selector, s.gs.selector);
	OUT(" gdt %llx/%x idt %llx/%x apic_base %llx\n", s.gdt.base, s.gdt.limit, s.idt.base,
	    s.idt.limit, s.apic_base);
	if (!vcpu->last_exit_ns)
		OUT(" last exit: none yet\n");
	else if (vcpu->last_exit == KVM_EXIT_IO || vcpu->last_exit == KVM_EXIT_MMIO)
		OUT(" last exit: %s %s 0x%llx len %u, %.3f s ago\n", ename,
		    vcpu->last_exit_write ? "write" : "read",
		    (unsigned long long)vcpu->last_exit_addr, vcpu->last_exit_len,
		    (double)(now_ns() - vcpu->last_exit_ns) / 1e9);
	else
		OUT(" last exit: %s (%u), %.3f s ago\n", ename ? ename : "?", vcpu->last_exit,
		    (double)(now_ns() - vcpu->last_exit_ns) / 1e9);
#undef OUT
	return (int)n;
}

void kvm_cpu_dump(struct kvm_cpu *vcpu)
{
	struct kvm_regs r;
	struct kvm_sregs s;

	if (ioctl(vcpu->fd, KVM_GET_REGS, &r) < 0 || ioctl(vcpu->fd, KVM_GET_SREGS, &s) < 0) {
		pr_err("vCPU %d: cannot read registers: %s", vcpu->id, strerror(errno));
		return;
	}
	pr_err("vCPU %d registers:", vcpu->id);
	pr_err(" rip %016llx rsp %016llx rflags %016llx", r.rip, r.rsp, r.rflags);
	pr_err(" rax %016llx rbx %016llx rcx %016llx rdx %016llx", r.rax, r.rbx, r.rcx, r.rdx);
	pr_err(" rsi %016llx rdi %016llx rbp %016llx", r.rsi, r.rdi, r.rbp);
	pr_err(" r8  %016llx r9  %016llx r10 %016llx r11 %016llx", r.r8, r.r9, r.r10, r.r11);
	pr_err(" r12 %016llx r13 %016llx r14 %016llx r15 %016llx", r.r12, r.r13, r.r14, r.r15);
	pr_err(" cr0 %016llx cr2 %016llx cr3 %016llx cr4 %016llx efer %llx", s.cr0, s.cr2, s.cr3,
	       s.cr4, s.efer);
	pr_err(" cs %04x (base %llx, l %u, db %u, dpl %u) ss %04x", s.cs.selector, s.cs.base,
	       s.cs.l, s.cs.db, s.cs.dpl, s.ss.selector);
}
