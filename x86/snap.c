/* The x86 machine's part of a snapshot: each vCPU's state, the in-kernel irqchip, PIT and kvm-clock, and the CPU features' digest. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/kvm.h>

#include "lkvm/kvm-cpu.h"
#include "lkvm/kvm.h"
#include "lkvm/snap.h"
#include "lkvm/x86.h"

/*
 * Records of a vCPU section (SNAP_SEC_VCPU, instance = vCPU index) and of the VM section.
 * Each is KVM's own struct for that ioctl, whose layout is KVM's ABI (fixed for x86-64);
 * XSAVE's size is the host's (KVM_CAP_XSAVE2) and the MSRs are a list, so those two are
 * checked by length rather than by snap_rec_get's exact size.
 */
enum {
	VCPU_REC_REGS = 1,
	VCPU_REC_SREGS = 2,  /* struct kvm_sregs, where KVM lacks SREGS2 */
	VCPU_REC_SREGS2 = 3, /* struct kvm_sregs2 (with a PAE guest's PDPTRs) */
	VCPU_REC_FPU = 4,
	VCPU_REC_XSAVE = 5, /* 4096 bytes up to the host's KVM_CAP_XSAVE2 size */
	VCPU_REC_XCRS = 6,
	VCPU_REC_MSRS = 7, /* struct kvm_msr_entry[], every MSR KVM lists */
	VCPU_REC_LAPIC = 8,
	VCPU_REC_EVENTS = 9,
	VCPU_REC_MP_STATE = 10,
	VCPU_REC_DEBUGREGS = 11,
};
enum {
	VM_REC_CLOCK = 1, /* struct kvm_clock_data: kvm-clock as the pause froze it */
	VM_REC_PIC0 = 2,  /* struct kvm_irqchip, chip_id 0, 1, 2 */
	VM_REC_PIC1 = 3,
	VM_REC_IOAPIC = 4,
	VM_REC_PIT2 = 5,
};

/* Room for any one of the fixed-size records, read or written one at a time. */
union vcpu_state {
	struct kvm_regs regs;
	struct kvm_sregs sregs;
	struct kvm_sregs2 sregs2;
	struct kvm_fpu fpu;
	struct kvm_xcrs xcrs;
	struct kvm_lapic_state lapic;
	struct kvm_vcpu_events events;
	struct kvm_mp_state mp;
	struct kvm_debugregs dregs;
};

#define MSR_IA32_TSC 0x10
#define MAX_MSRS 1024
#define XSAVE_MIN 4096 /* struct kvm_xsave: the legacy area and header, without XSAVE2 */

static int xsave_size(struct kvm *kvm)
{
	int n = ioctl(kvm->sys_fd, KVM_CHECK_EXTENSION, KVM_CAP_XSAVE2);

	return n > XSAVE_MIN ? n : XSAVE_MIN;
}

/* The MSR list as KVM gives it; *n entries, or -errno. */
static int msr_index_list(struct kvm *kvm, u32 **idx, u32 *n)
{
	struct kvm_msr_list *l = calloc(1, sizeof(*l) + MAX_MSRS * sizeof(u32));

	if (!l)
		return -ENOMEM;
	l->nmsrs = MAX_MSRS;
	if (ioctl(kvm->sys_fd, KVM_GET_MSR_INDEX_LIST, l) < 0) {
		int e = -errno;

		free(l);
		return e;
	}
	*n = l->nmsrs;
	*idx = malloc(*n * sizeof(u32) + 1);
	if (*idx)
		memcpy(*idx, l->indices, *n * sizeof(u32));
	free(l);
	return *idx ? 0 : -ENOMEM;
}

/* Every listed MSR KVM_GET_MSRS reads (KVM lists some that a given CPU lacks: those are left
 * out, as a restore could not set them either). IA32_TSC is the guest's at the pause. */
static int save_msrs(struct kvm_cpu *v, struct snap_rec_buf *b, char *err, size_t errlen)
{
	struct kvm_msrs *m;
	u32 *idx = NULL, n = 0, got = 0;
	int ret = msr_index_list(v->kvm, &idx, &n);

	if (ret < 0) {
		errfmt(err, errlen, "KVM_GET_MSR_INDEX_LIST: %s", strerror(-ret));
		return ret;
	}
	m = calloc(1, sizeof(*m) + n * sizeof(m->entries[0]) + 1);
	if (!m) {
		free(idx);
		return -ENOMEM;
	}
	/* One at a time, so that one KVM lists but cannot read is left out, not the rest. */
	for (u32 i = 0; i < n; i++) {
		union {
			struct kvm_msrs h;
			u8 room[sizeof(struct kvm_msrs) + sizeof(struct kvm_msr_entry)];
		} one;
		struct kvm_msr_entry *e = one.h.entries;

		memset(&one, 0, sizeof(one));
		one.h.nmsrs = 1;
		e->index = idx[i];
		if (ioctl(v->fd, KVM_GET_MSRS, &one) != 1)
			continue;
		if (e->index == MSR_IA32_TSC && v->tsc_offset_saved)
			e->data = v->kvm->host_tsc_at_pause + v->tsc_offset;
		m->entries[got++] = *e;
	}
	snap_rec_put(b, VCPU_REC_MSRS, m->entries, got * sizeof(m->entries[0]));
	free(m);
	free(idx);
	return 0;
}

/* One ioctl's struct as a record. */
static int get_rec(struct kvm_cpu *v, struct snap_rec_buf *b, u16 tag, unsigned long req,
		   const char *what, void *buf, size_t len, char *err, size_t errlen)
{
	if (ioctl(v->fd, req, buf) < 0) {
		errfmt(err, errlen, "vCPU %d: %s: %s", v->id, what, strerror(errno));
		return -errno;
	}
	snap_rec_put(b, tag, buf, len);
	return 0;
}

#define GET_REC(tag, req, s) get_rec(v, b, tag, req, #req, &(s), sizeof(s), err, errlen)

int x86_snap_save_vcpu(struct kvm_cpu *v, struct snap_rec_buf *b, char *err, size_t errlen)
{
	union vcpu_state u;
	int xs = xsave_size(v->kvm), ret;
	void *xsave;

	memset(&u, 0, sizeof(u));
	ret = GET_REC(VCPU_REC_REGS, KVM_GET_REGS, u.regs);
	if (!ret && ioctl(v->kvm->sys_fd, KVM_CHECK_EXTENSION, KVM_CAP_SREGS2) > 0)
		ret = GET_REC(VCPU_REC_SREGS2, KVM_GET_SREGS2, u.sregs2);
	else if (!ret)
		ret = GET_REC(VCPU_REC_SREGS, KVM_GET_SREGS, u.sregs);
	if (!ret)
		ret = GET_REC(VCPU_REC_FPU, KVM_GET_FPU, u.fpu);
	xsave = calloc(1, (size_t)xs);
	if (!ret && !xsave)
		ret = -ENOMEM;
	if (!ret)
		ret = get_rec(v, b, VCPU_REC_XSAVE, xs > XSAVE_MIN ? KVM_GET_XSAVE2 : KVM_GET_XSAVE,
			      "KVM_GET_XSAVE", xsave, (size_t)xs, err, errlen);
	free(xsave);
	if (!ret)
		ret = GET_REC(VCPU_REC_XCRS, KVM_GET_XCRS, u.xcrs);
	if (!ret)
		ret = save_msrs(v, b, err, errlen);
	if (!ret)
		ret = GET_REC(VCPU_REC_LAPIC, KVM_GET_LAPIC, u.lapic);
	if (!ret)
		ret = GET_REC(VCPU_REC_EVENTS, KVM_GET_VCPU_EVENTS, u.events);
	if (!ret)
		ret = GET_REC(VCPU_REC_MP_STATE, KVM_GET_MP_STATE, u.mp);
	if (!ret)
		ret = GET_REC(VCPU_REC_DEBUGREGS, KVM_GET_DEBUGREGS, u.dregs);
	return ret;
}

/* The first record of tag, whatever its length; -EBADMSG when absent or the section is bad. */
static int find_rec(const void *sec, size_t len, u16 tag, const void **data, u32 *rlen)
{
	struct snap_rec_iter it = { sec, len };
	u16 t;
	int r;

	while ((r = snap_rec_next(&it, &t, data, rlen)) == 1)
		if (t == tag)
			return 0;
	return -EBADMSG;
}

/* Record tag (exactly sizeof its struct) set with req. */
static int set_rec(struct kvm_cpu *v, const void *sec, size_t len, u16 tag, unsigned long req,
		   const char *what, void *buf, size_t size, char *err, size_t errlen)
{
	int r = snap_rec_get(sec, len, tag, buf, size);

	if (r < 0) {
		errfmt(err, errlen, "vCPU %d: %s: %s in the snapshot", v->id, what,
		       r == -ENOENT ? "missing" : "malformed");
		return -EINVAL;
	}
	if (ioctl(v->fd, req, buf) < 0) {
		errfmt(err, errlen, "vCPU %d: %s: %s", v->id, what, strerror(errno));
		return -errno;
	}
	return 0;
}

#define SET_REC(tag, req, s) set_rec(v, sec, len, tag, req, #req, &(s), sizeof(s), err, errlen)

static int load_xsave(struct kvm_cpu *v, const void *sec, size_t len, char *err, size_t errlen)
{
	int xs = xsave_size(v->kvm), ret = 0;
	const void *data;
	void *buf;
	u32 rlen;

	if (find_rec(sec, len, VCPU_REC_XSAVE, &data, &rlen) < 0 || rlen < XSAVE_MIN ||
	    rlen > (u32)xs) {
		errfmt(err, errlen, "vCPU %d: XSAVE state missing or of a size this host lacks",
		       v->id);
		return -EINVAL;
	}
	buf = calloc(1, (size_t)xs);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, data, rlen);
	if (ioctl(v->fd, KVM_SET_XSAVE, buf) < 0) {
		ret = -errno;
		errfmt(err, errlen, "vCPU %d: KVM_SET_XSAVE: %s", v->id, strerror(errno));
	}
	free(buf);
	return ret;
}

/* All MSRs at once; where KVM takes fewer, the first it refused is named. */
static int load_msrs(struct kvm_cpu *v, const void *sec, size_t len, char *err, size_t errlen)
{
	const size_t esz = sizeof(struct kvm_msr_entry);
	const void *e;
	struct kvm_msrs *m;
	u32 rlen, n;
	int r;

	if (find_rec(sec, len, VCPU_REC_MSRS, &e, &rlen) < 0 || rlen % esz ||
	    rlen / esz > MAX_MSRS) {
		errfmt(err, errlen, "vCPU %d: MSRs missing or malformed in the snapshot", v->id);
		return -EINVAL;
	}
	n = (u32)(rlen / esz);
	m = calloc(1, sizeof(*m) + rlen + 1);
	if (!m)
		return -ENOMEM;
	m->nmsrs = n;
	memcpy(m->entries, e, rlen);
	for (u32 i = 0; i < n; i++)
		m->entries[i].reserved = 0;
	r = ioctl(v->fd, KVM_SET_MSRS, m);
	if (r != (int)n) {
		errfmt(err, errlen, "vCPU %d: this host's KVM refused MSR %#x of the snapshot",
		       v->id, r >= 0 && (u32)r < n ? m->entries[r].index : 0);
		free(m);
		return -EINVAL;
	}
	free(m);
	return 0;
}

/*
 * The guest's TSC goes on from its value at the pause: every vCPU's offset from one host TSC
 * reading (host_tsc), so the vCPUs stay in step. Writing IA32_TSC alone is not enough: KVM
 * takes a host write within a second of the last one (the vCPU's creation wrote 0) as meant to
 * match it and keeps the old offset, so a guest saved in its first second would restart its
 * TSC from 0 under its kvm-clock page (which then stands still). Where KVM lacks the offset
 * attribute the MSR's value stands. A PVM host's guest reads the host's TSC whatever is set.
 */
static void set_tsc(struct kvm_cpu *v, const void *sec, size_t len, u64 host_tsc)
{
	const u8 *p;
	u32 rlen;

	if (find_rec(sec, len, VCPU_REC_MSRS, (const void **)&p, &rlen) < 0)
		return;
	/* Records are packed: each entry copied out, not read in place (alignment). */
	for (u32 i = 0; i < rlen / sizeof(struct kvm_msr_entry); i++) {
		struct kvm_msr_entry e;
		u64 off;

		memcpy(&e, p + i * sizeof(e), sizeof(e));
		off = e.data - host_tsc;
		if (e.index == MSR_IA32_TSC && kvm_cpu_tsc_offset(v, KVM_SET_DEVICE_ATTR, &off) < 0)
			pr_debug("restore: vCPU %d's TSC offset: %s (the MSR's value stands)",
				 v->id, strerror(errno));
	}
}

/* In the order KVM needs: special registers (with the APIC base) before the LAPIC; the MSRs
 * after XSAVE and after the LAPIC (KVM takes IA32_TSC_DEADLINE only from a LAPIC whose timer
 * is in TSC-deadline mode, and KVM_SET_LAPIC cancels the timer: the other way round a vCPU
 * asleep on its deadline timer never wakes); the events and MP state last. */
int x86_snap_load_vcpu(struct kvm_cpu *v, const void *sec, size_t len, u64 host_tsc, char *err,
		       size_t errlen)
{
	union vcpu_state u;
	int ret;

	memset(&u, 0, sizeof(u));
	if (snap_rec_get(sec, len, VCPU_REC_SREGS2, &u.sregs2, sizeof(u.sregs2)) != -ENOENT)
		ret = SET_REC(VCPU_REC_SREGS2, KVM_SET_SREGS2, u.sregs2);
	else
		ret = SET_REC(VCPU_REC_SREGS, KVM_SET_SREGS, u.sregs);
	if (!ret)
		ret = SET_REC(VCPU_REC_REGS, KVM_SET_REGS, u.regs);
	if (!ret)
		ret = SET_REC(VCPU_REC_FPU, KVM_SET_FPU, u.fpu);
	if (!ret)
		ret = load_xsave(v, sec, len, err, errlen);
	if (!ret)
		ret = SET_REC(VCPU_REC_XCRS, KVM_SET_XCRS, u.xcrs);
	if (!ret)
		ret = SET_REC(VCPU_REC_LAPIC, KVM_SET_LAPIC, u.lapic);
	if (!ret)
		ret = load_msrs(v, sec, len, err, errlen);
	if (!ret)
		set_tsc(v, sec, len, host_tsc);
	if (!ret)
		ret = SET_REC(VCPU_REC_EVENTS, KVM_SET_VCPU_EVENTS, u.events);
	if (!ret)
		ret = SET_REC(VCPU_REC_MP_STATE, KVM_SET_MP_STATE, u.mp);
	if (!ret)
		ret = SET_REC(VCPU_REC_DEBUGREGS, KVM_SET_DEBUGREGS, u.dregs);
	return ret;
}

static const struct {
	u16 tag;
	u32 chip;
} chips[] = { { VM_REC_PIC0, KVM_IRQCHIP_PIC_MASTER },
	      { VM_REC_PIC1, KVM_IRQCHIP_PIC_SLAVE },
	      { VM_REC_IOAPIC, KVM_IRQCHIP_IOAPIC } };

int x86_snap_save_vm(struct kvm *kvm, struct snap_rec_buf *b, char *err, size_t errlen)
{
	struct kvm_clock_data clock = { .clock = kvm->clock_at_pause };
	struct kvm_pit_state2 pit;

	if (!kvm->clock_saved) {
		errfmt(err, errlen, "kvm-clock could not be read at the pause (KVM_GET_CLOCK)");
		return -EOPNOTSUPP;
	}
	snap_rec_put(b, VM_REC_CLOCK, &clock, sizeof(clock));
	for (size_t i = 0; i < ARRAY_SIZE(chips); i++) {
		struct kvm_irqchip c;

		memset(&c, 0, sizeof(c));
		c.chip_id = chips[i].chip;
		if (ioctl(kvm->vm_fd, KVM_GET_IRQCHIP, &c) < 0) {
			errfmt(err, errlen, "KVM_GET_IRQCHIP %u: %s", c.chip_id, strerror(errno));
			return -errno;
		}
		snap_rec_put(b, chips[i].tag, &c, sizeof(c));
	}
	memset(&pit, 0, sizeof(pit));
	if (ioctl(kvm->vm_fd, KVM_GET_PIT2, &pit) < 0) {
		errfmt(err, errlen, "KVM_GET_PIT2: %s", strerror(errno));
		return -errno;
	}
	snap_rec_put(b, VM_REC_PIT2, &pit, sizeof(pit));
	return 0;
}

static int load_vm_rec(struct kvm *kvm, const void *sec, size_t len, u16 tag, unsigned long req,
		       const char *what, void *buf, size_t size, char *err, size_t errlen)
{
	if (snap_rec_get(sec, len, tag, buf, size) < 0) {
		errfmt(err, errlen, "%s state missing or malformed in the snapshot", what);
		return -EINVAL;
	}
	if (ioctl(kvm->vm_fd, req, buf) < 0) {
		errfmt(err, errlen, "%s: %s", what, strerror(errno));
		return -errno;
	}
	return 0;
}

/* The irqchip and PIT after the vCPUs (their LAPICs), kvm-clock last: from here the guest's
 * time runs again from where the pause froze it. */
int x86_snap_load_vm(struct kvm *kvm, const void *sec, size_t len, char *err, size_t errlen)
{
	struct kvm_clock_data clock;
	struct kvm_pit_state2 pit;
	struct kvm_irqchip c;
	int ret = 0;

	for (size_t i = 0; !ret && i < ARRAY_SIZE(chips); i++) {
		ret = load_vm_rec(kvm, sec, len, chips[i].tag, KVM_SET_IRQCHIP, "KVM_SET_IRQCHIP",
				  &c, sizeof(c), err, errlen);
		if (!ret && c.chip_id != chips[i].chip) {
			errfmt(err, errlen, "irqchip %u saved as chip %u", chips[i].chip,
			       c.chip_id);
			ret = -EINVAL;
		}
	}
	if (!ret)
		ret = load_vm_rec(kvm, sec, len, VM_REC_PIT2, KVM_SET_PIT2, "KVM_SET_PIT2", &pit,
				  sizeof(pit), err, errlen);
	if (ret)
		return ret;
	if (snap_rec_get(sec, len, VM_REC_CLOCK, &clock, sizeof(clock)) < 0) {
		errfmt(err, errlen, "kvm-clock missing or malformed in the snapshot");
		return -EINVAL;
	}
	/* KVM_SET_CLOCK takes only KVM_CLOCK_REALTIME of the flags a get returns. */
	clock = (struct kvm_clock_data){ .clock = clock.clock };
	if (ioctl(kvm->vm_fd, KVM_SET_CLOCK, &clock) < 0) {
		errfmt(err, errlen, "KVM_SET_CLOCK: %s", strerror(errno));
		return -errno;
	}
	return 0;
}
