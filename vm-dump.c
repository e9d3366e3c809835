/* lkvm dump's server side: the paused VM's RAM and vCPU registers written as an ELF core (elfcore.c), then the VM resumed. */
#include <errno.h>
#include <string.h>
#include <sys/ioctl.h>

#include "lkvm/elfcore.h"
#include "lkvm/kvm-cpu.h"
#include "lkvm/kvm.h"
#include "lkvm/vm-dump.h"
#include "lkvm/vm-snap.h"

/* A parked vCPU's registers in the core's order. */
static int cpu_regs(struct kvm_cpu *v, struct elfcore_regs *o)
{
	struct kvm_regs r;
	struct kvm_sregs s;

	if (ioctl(v->fd, KVM_GET_REGS, &r) < 0 || ioctl(v->fd, KVM_GET_SREGS, &s) < 0)
		return -errno;
	*o = (struct elfcore_regs){
		.r15 = r.r15,
		.r14 = r.r14,
		.r13 = r.r13,
		.r12 = r.r12,
		.rbp = r.rbp,
		.rbx = r.rbx,
		.r11 = r.r11,
		.r10 = r.r10,
		.r9 = r.r9,
		.r8 = r.r8,
		.rax = r.rax,
		.rcx = r.rcx,
		.rdx = r.rdx,
		.rsi = r.rsi,
		.rdi = r.rdi,
		.orig_rax = ~0ULL,
		.rip = r.rip,
		.cs = s.cs.selector,
		.eflags = r.rflags,
		.rsp = r.rsp,
		.ss = s.ss.selector,
		.fs_base = s.fs.base,
		.gs_base = s.gs.base,
		.ds = s.ds.selector,
		.es = s.es.selector,
		.fs = s.fs.selector,
		.gs = s.gs.selector,
	};
	return 0;
}

static int write_core(struct kvm *kvm, int fd, struct kvm_dump_result *res, char *err,
		      size_t errlen)
{
	struct elfcore_regs regs[ELFCORE_MAX_CPUS];
	struct elfcore_ram ram[ELFCORE_MAX_RAM];
	long long n;
	int ret;

	_Static_assert(LKVM_MAX_CPUS <= ELFCORE_MAX_CPUS, "a note per vCPU");
	_Static_assert(GMEM_MAX_REGIONS <= ELFCORE_MAX_RAM, "a PT_LOAD per region");
	for (int i = 0; i < kvm->nr_cpus; i++) {
		ret = cpu_regs(kvm->cpus[i], &regs[i]);
		if (ret < 0) {
			errfmt(err, errlen, "vCPU %d's registers: %s", i, strerror(-ret));
			return ret;
		}
	}
	for (int i = 0; i < kvm->mem.nr; i++)
		ram[i] = (struct elfcore_ram){ kvm->mem.r[i].gpa, kvm->mem.r[i].size,
					       kvm->mem.r[i].hva };
	n = elfcore_write(fd, ram, kvm->mem.nr, regs, kvm->nr_cpus);
	if (n < 0) {
		errfmt(err, errlen, "writing the core: %s", strerror((int)-n));
		return (int)n;
	}
	res->bytes = (u64)n;
	return 0;
}

int kvm_dump(struct kvm *kvm, int fd, struct kvm_dump_result *res, char *err, size_t errlen)
{
	u64 t0 = now_ns();
	bool was_paused;
	int ret;

	memset(res, 0, sizeof(*res));
	ret = kvm_pause_by(kvm, PAUSE_CTL, SNAP_PAUSE_TIMEOUT_MS, err, errlen);
	was_paused = ret == -EALREADY; /* lkvm pause's: dumped as it is, left paused */
	if (ret < 0 && !was_paused)
		return ret;
	res->pause_ns = now_ns() - t0;
	ret = write_core(kvm, fd, res, err, errlen);
	res->write_ns = now_ns() - t0 - res->pause_ns;
	if (!was_paused) {
		char why[256];

		if (kvm_resume_by(kvm, PAUSE_CTL, why, sizeof(why)) < 0 && ret == 0) {
			errfmt(err, errlen, "dumped, but the VM did not resume: %s", why);
			ret = -EIO;
		}
	}
	return ret;
}
