/* Unit tests of the guest's CPUID table (x86/cpuid.c) against a fake KVM behind a wrapped ioctl: every bit lkvm decides itself, whatever KVM offers. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "check_main.h"
#include "lkvm/kvm-cpu.h"
#include "lkvm/kvm.h"
#include "lkvm/x86.h"

#define FAKE_SYS_FD 1000 /* /dev/kvm; never opened: the wrapper answers for it */
#define FAKE_VCPU_FD 1001
#define TSC_DEADLINE (1U << 24) /* CPUID.1:ECX */
#define HYPERVISOR (1U << 31)	/* CPUID.1:ECX */
#define HTT (1U << 28)		/* CPUID.1:EDX */
#define INVARIANT_TSC (1U << 8) /* CPUID.80000007:EDX */
#define PV_SEND_IPI (1U << KVM_FEATURE_PV_SEND_IPI_BIT)
#define PV_OTHERS 0x010072fbU /* KVM's other PV features (clock, async PF, ...) */
#define MAX_ENT 512

/* The fake KVM: what it offers, and what KVM_SET_CPUID2 was given. */
static struct {
	struct kvm_cpuid_entry2 offer[MAX_ENT];
	u32 noffer;
	int deadline_cap; /* KVM_CHECK_EXTENSION(KVM_CAP_TSC_DEADLINE_TIMER) */
	bool tsc_offset;  /* KVM_HAS_DEVICE_ATTR(KVM_VCPU_TSC_OFFSET) */
	int get_errno;	  /* KVM_GET_SUPPORTED_CPUID fails with this (0: works) */
	int set_errno;	  /* KVM_SET_CPUID2 fails with this */
	u32 get_calls;
	struct kvm_cpuid_entry2 got[MAX_ENT];
	u32 ngot;
	bool set_called;
} k;

static int fake_get_supported(struct kvm_cpuid2 *c)
{
	k.get_calls++;
	if (k.get_errno) {
		errno = k.get_errno;
		return -1;
	}
	if (c->nent < k.noffer) { /* as KVM: too small a table */
		errno = E2BIG;
		return -1;
	}
	memcpy(c->entries, k.offer, k.noffer * sizeof(k.offer[0]));
	c->nent = k.noffer;
	return 0;
}

static int fake_set_cpuid(const struct kvm_cpuid2 *c)
{
	k.set_called = true;
	if (k.set_errno) {
		errno = k.set_errno;
		return -1;
	}
	ck_assert_uint_le(c->nent, MAX_ENT);
	memcpy(k.got, c->entries, c->nent * sizeof(k.got[0]));
	k.ngot = c->nent;
	return 0;
}

/* The test binary is linked with --wrap=ioctl (Makefile): lkvm's ioctls come here. Those on
 * the fake fds are answered by the fake KVM (an unexpected one fails the test); the rest go
 * to the real ioctl. */
int __real_ioctl(int fd, unsigned long req, ...);
int __wrap_ioctl(int fd, unsigned long req, ...);

int __wrap_ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (fd == FAKE_SYS_FD && req == KVM_GET_SUPPORTED_CPUID)
		return fake_get_supported(arg);
	if (fd == FAKE_SYS_FD && req == KVM_CHECK_EXTENSION)
		return (uintptr_t)arg == KVM_CAP_TSC_DEADLINE_TIMER ? k.deadline_cap : 0;
	if (fd == FAKE_VCPU_FD && req == KVM_HAS_DEVICE_ATTR) {
		const struct kvm_device_attr *a = arg;

		if (k.tsc_offset && a->group == KVM_VCPU_TSC_CTRL && a->attr == KVM_VCPU_TSC_OFFSET)
			return 0;
		errno = ENXIO;
		return -1;
	}
	if (fd == FAKE_VCPU_FD && req == KVM_SET_CPUID2)
		return fake_set_cpuid(arg);
	ck_assert_msg(fd != FAKE_SYS_FD && fd != FAKE_VCPU_FD,
		      "an ioctl the fake KVM does not know: fd %d request %#lx", fd, req);
	return __real_ioctl(fd, req, arg);
}

static void offer(u32 function, u32 index, u32 eax, u32 ebx, u32 ecx, u32 edx)
{
	ck_assert_uint_lt(k.noffer, MAX_ENT);
	k.offer[k.noffer++] = (struct kvm_cpuid_entry2){
		.function = function,
		.index = index,
		.flags = index ? KVM_CPUID_FLAG_SIGNIFCANT_INDEX : 0,
		.eax = eax,
		.ebx = ebx,
		.ecx = ecx,
		.edx = edx,
	};
}

/*
 * A KVM that offers none of the bits lkvm sets itself (no TSC-deadline, no hypervisor bit, no
 * HTT) and every one it may clear (invariant TSC, PV send-IPI), with stray bits in the fields
 * lkvm rewrites: a bit set below then can only be lkvm's.
 */
static void setup(void)
{
	memset(&k, 0, sizeof(k));
	k.deadline_cap = 1; /* KVM emulates the timer, but leaves its bit to the VMM */
	k.tsc_offset = true;
	offer(0, 0, 0x1f, 0x756e6547, 0x6c65746e, 0x49656e69);
	/* 1: EBX's low half (brand index, CLFLUSH size) is KVM's; its APIC id and count not. */
	offer(1, 0, 0x000906ea, 0xabcd0800, 0x7ffa3203 & ~(TSC_DEADLINE | HYPERVISOR),
	      0x0f8bfbff & ~HTT);
	offer(0xb, 0, 1, 1, 0x100, 0xdead);
	offer(0xb, 1, 4, 4, 0x201, 0xbeef);
	offer(0x1f, 0, 1, 1, 0x100, 0xdead);
	offer(0x80000007, 0, 0, 0, 0, INVARIANT_TSC | 0x1);
	offer(0x40000000, 0, 0x40000001, 0x4b4d564b, 0x564b4d56, 0x4d);
	offer(0x40000001, 0, PV_OTHERS | PV_SEND_IPI, 0, 0, 0);
}

static const struct kvm_cpuid_entry2 *find(const struct kvm_cpuid_entry2 *t, u32 n, u32 function,
					   u32 index)
{
	for (u32 i = 0; i < n; i++)
		if (t[i].function == function && t[i].index == index)
			return &t[i];
	ck_abort_msg("leaf %#x.%u missing", function, index);
	return NULL;
}

/* x86_setup_cpuid for vCPU id of a VM of ncpu vCPUs; 0 or -errno, err in *err. */
static int setup_cpuid(int id, int ncpu, bool pvm, char *err, size_t errlen)
{
	struct kvm kvm;
	struct kvm_cpu vcpu;

	memset(&kvm, 0, sizeof(kvm));
	memset(&vcpu, 0, sizeof(vcpu));
	kvm.sys_fd = FAKE_SYS_FD;
	kvm.vm_fd = -1;
	kvm.cfg.nr_cpus = ncpu;
	kvm.pvm_quirks = pvm;
	vcpu.kvm = &kvm;
	vcpu.id = id;
	vcpu.fd = FAKE_VCPU_FD;
	err[0] = 0;
	return x86_setup_cpuid(&vcpu, err, errlen);
}

/* What lkvm did not decide is passed on as KVM offered it: every other leaf and field. */
static void assert_rest_as_offered(void)
{
	ck_assert_uint_eq(k.ngot, k.noffer);
	for (u32 i = 0; i < k.noffer; i++) {
		const struct kvm_cpuid_entry2 *o = &k.offer[i];
		const struct kvm_cpuid_entry2 *g = find(k.got, k.ngot, o->function, o->index);

		ck_assert_uint_eq(g->flags, o->flags);
		ck_assert_uint_eq(g->eax, o->function == 0x40000001 ? g->eax : o->eax);
		ck_assert_uint_eq(g->ebx, o->function == 1 ? g->ebx : o->ebx);
		ck_assert_uint_eq(g->ecx, o->function == 1 ? g->ecx : o->ecx);
		if (o->function != 1 && o->function != 0xb && o->function != 0x1f &&
		    o->function != 0x80000007)
			ck_assert_uint_eq(g->edx, o->edx);
	}
}

/* vCPU 2 of 4 on a plain KVM host: lkvm's own bits are all there though KVM offered none. */
START_TEST(own_bits_set)
{
	const struct kvm_cpuid_entry2 *e, *o = find(k.offer, k.noffer, 1, 0);
	char err[256];

	ck_assert_msg(setup_cpuid(2, 4, false, err, sizeof(err)) == 0, "%s", err);
	e = find(k.got, k.ngot, 1, 0);
	ck_assert_msg(e->ecx & TSC_DEADLINE, "no TSC-deadline bit: ecx %#x", e->ecx);
	ck_assert_msg(e->ecx & HYPERVISOR, "no hypervisor bit: ecx %#x", e->ecx);
	ck_assert_uint_eq(e->ecx & ~(TSC_DEADLINE | HYPERVISOR), o->ecx);
	ck_assert_msg(e->edx & HTT, "4 vCPUs without HTT: edx %#x", e->edx);
	ck_assert_uint_eq(e->edx & ~HTT, o->edx);
	/* Initial APIC id 2, 4 logical processors, KVM's low half kept. */
	ck_assert_uint_eq(e->ebx, 0x02040800);
	ck_assert_uint_eq(find(k.got, k.ngot, 0xb, 0)->edx, 2);
	ck_assert_uint_eq(find(k.got, k.ngot, 0xb, 1)->edx, 2);
	ck_assert_uint_eq(find(k.got, k.ngot, 0x1f, 0)->edx, 2);
	/* KVM can move the TSC offset over a pause: the TSC may be called invariant. */
	ck_assert_uint_eq(find(k.got, k.ngot, 0x80000007, 0)->edx, INVARIANT_TSC | 0x1);
	/* Not a PVM host: the PV send-IPI stays offered. */
	ck_assert_uint_eq(find(k.got, k.ngot, 0x40000001, 0)->eax, PV_OTHERS | PV_SEND_IPI);
	assert_rest_as_offered();
}
END_TEST

/* One vCPU: no HTT; APIC id 0, one logical processor. */
START_TEST(single_vcpu)
{
	const struct kvm_cpuid_entry2 *e;
	char err[256];

	ck_assert_msg(setup_cpuid(0, 1, false, err, sizeof(err)) == 0, "%s", err);
	e = find(k.got, k.ngot, 1, 0);
	ck_assert_uint_eq(e->edx & HTT, 0);
	ck_assert_uint_eq(e->ebx, 0x00010800);
	ck_assert_uint_eq(find(k.got, k.ngot, 0xb, 1)->edx, 0);
	assert_rest_as_offered();
}
END_TEST

/* A PVM host: PV send-IPI hidden (its hypercall never returns on the target), and the TSC not
 * invariant (the guest reads the host's TSC, which runs on over a pause), even where KVM has
 * the TSC offset attribute. The other PV features stay. */
START_TEST(pvm_host)
{
	char err[256];

	ck_assert_msg(setup_cpuid(1, 2, true, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(find(k.got, k.ngot, 0x40000001, 0)->eax, PV_OTHERS);
	ck_assert_uint_eq(find(k.got, k.ngot, 0x80000007, 0)->edx, 0x1);
	ck_assert(find(k.got, k.ngot, 1, 0)->ecx & TSC_DEADLINE);
	ck_assert(find(k.got, k.ngot, 1, 0)->ecx & HYPERVISOR);
	assert_rest_as_offered();
}
END_TEST

/* No TSC offset attribute: the TSC runs on over a pause, so it is not called invariant. */
START_TEST(no_tsc_offset_not_invariant)
{
	char err[256];

	k.tsc_offset = false;
	ck_assert_msg(setup_cpuid(0, 1, false, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(find(k.got, k.ngot, 0x80000007, 0)->edx, 0x1);
	assert_rest_as_offered();
}
END_TEST

/* A KVM without the TSC-deadline timer: the bit is not claimed. */
START_TEST(no_deadline_timer_no_bit)
{
	char err[256];

	k.deadline_cap = 0;
	ck_assert_msg(setup_cpuid(0, 1, false, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(find(k.got, k.ngot, 1, 0)->ecx & TSC_DEADLINE, 0);
	ck_assert(find(k.got, k.ngot, 1, 0)->ecx & HYPERVISOR);
	assert_rest_as_offered();
}
END_TEST

/* A table larger than the first guess (128 entries): asked again with room, all passed on. */
START_TEST(large_table_asked_again)
{
	char err[256];

	for (u32 i = 0; k.noffer < 300; i++)
		offer(0xd, i + 1, i, i, i, i);
	ck_assert_msg(setup_cpuid(0, 1, false, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(k.get_calls, 3); /* 128, 256, 512 */
	assert_rest_as_offered();
}
END_TEST

START_TEST(ioctl_errors)
{
	char err[256];

	k.get_errno = ENOMEM;
	ck_assert_int_eq(setup_cpuid(0, 1, false, err, sizeof(err)), -ENOMEM);
	ck_assert_str_eq(err, "KVM_GET_SUPPORTED_CPUID: Cannot allocate memory");
	ck_assert(!k.set_called);
	k.get_errno = 0;
	k.set_errno = EINVAL;
	ck_assert_int_eq(setup_cpuid(0, 1, false, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "KVM_SET_CPUID2: Invalid argument");
}
END_TEST

static Suite *cpuid_suite(void)
{
	Suite *s = suite_create("cpuid");
	TCase *tc = tcase_create("cpuid");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, own_bits_set);
	tcase_add_test(tc, single_vcpu);
	tcase_add_test(tc, pvm_host);
	tcase_add_test(tc, no_tsc_offset_not_invariant);
	tcase_add_test(tc, no_deadline_timer_no_bit);
	tcase_add_test(tc, large_table_asked_again);
	tcase_add_test(tc, ioctl_errors);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(cpuid_suite)
