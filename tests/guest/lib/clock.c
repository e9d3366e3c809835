/* C guest time: the TSC rate from kvm-clock (pvclock), CPUID 0x15/0x16, or the LAPIC timer, so CPL3 code can time with RDTSC; and kvm-clock itself. */
#include "guest.h"

#define KVM_CPUID_SIGNATURE 0x40000000
#define KVM_CPUID_FEATURES 0x40000001
#define KVM_FEATURE_CLOCKSOURCE 0
#define KVM_FEATURE_CLOCKSOURCE2 3
#define MSR_KVM_SYSTEM_TIME 0x12
#define MSR_KVM_SYSTEM_TIME_NEW 0x4b564d01
#define LAPIC_BUS_HZ 1000000000ull /* KVM's APIC bus: 1 ns per tick */

struct pvclock {
	u32 version, pad0;
	u64 tsc_timestamp, system_time;
	u32 tsc_to_system_mul;
	s8 tsc_shift;
	u8 flags, pad[2];
};

u64 tsc_hz;
static const char *source = "none";
static struct pvclock pvclock __attribute__((aligned(64)));

const char *clock_source(void)
{
	return source;
}

static bool is_kvm(void)
{
	u32 a, b, c, d;

	cpuid(KVM_CPUID_SIGNATURE, 0, &a, &b, &c, &d);
	return b == 0x4b4d564b && c == 0x564b4d56 && d == 0x4d && a >= KVM_CPUID_FEATURES;
}

/*
 * kvm-clock: KVM publishes ns = system_time + (((tsc - tsc_timestamp) << shift) * mul >> 32),
 * shift negative meaning a right shift, so the TSC runs at 10^9 * 2^32 / (mul * 2^shift) Hz.
 * This is the rate KVM itself uses for the guest's TSC.
 */
/* The MSR that registers a pvclock page, 0 when KVM offers no kvm-clock. */
static u32 kvmclock_msr(void)
{
	u32 a, b, c, d;

	if (!is_kvm())
		return 0;
	cpuid(KVM_CPUID_FEATURES, 0, &a, &b, &c, &d);
	if (a & (1u << KVM_FEATURE_CLOCKSOURCE2))
		return MSR_KVM_SYSTEM_TIME_NEW;
	if (a & (1u << KVM_FEATURE_CLOCKSOURCE))
		return MSR_KVM_SYSTEM_TIME;
	return 0;
}

static u64 from_kvmclock(void)
{
	u32 msr = kvmclock_msr();
	u64 hz;

	if (!msr)
		return 0;
	wrmsr(msr, (u64)(uintptr_t)&pvclock | 1);
	for (int i = 0; i < 1000 && !READ_ONCE(pvclock.tsc_to_system_mul); i++)
		cpu_relax();
	u32 mul = READ_ONCE(pvclock.tsc_to_system_mul);
	s8 shift = READ_ONCE(pvclock.tsc_shift);
	wrmsr(msr, 0); /* read once; no need for KVM to keep updating it */
	if (!mul)
		return 0;
	hz = (1000000000ull << 32) / mul;
	return shift >= 0 ? hz >> shift : hz << -shift;
}

static u64 from_cpuid(const char **name)
{
	u32 a, b, c, d, max;

	cpuid(0, 0, &max, &b, &c, &d);
	if (max >= 0x15) {
		cpuid(0x15, 0, &a, &b, &c, &d);
		if (a && b && c) {
			*name = "cpuid15";
			return (u64)c * b / a;
		}
	}
	if (max >= 0x16) {
		cpuid(0x16, 0, &a, &b, &c, &d);
		if (a & 0xffff) {
			*name = "cpuid16";
			return (u64)(a & 0xffff) * 1000000;
		}
	}
	return 0;
}

/* Counts TSC ticks over 10 ms of the LAPIC timer (one-shot, divide by 1, masked). */
static u64 from_lapic(void)
{
	const u32 ticks = 10000000;
	u64 t0, t1;

	mmio_write32(LAPIC_BASE + LAPIC_TIMER_DIV, 0xb);
	mmio_write32(LAPIC_BASE + LAPIC_LVT_TIMER, 1u << 16);
	mmio_write32(LAPIC_BASE + LAPIC_TIMER_INIT, ticks);
	t0 = rdtsc();
	while (mmio_read32(LAPIC_BASE + LAPIC_TIMER_CUR))
		cpu_relax();
	t1 = rdtsc();
	return (t1 - t0) * (LAPIC_BUS_HZ / ticks);
}

const char *clock_init(void)
{
	const char *name = "kvmclock";
	u64 hz = from_kvmclock();

	if (!hz)
		hz = from_cpuid(&name);
	if (!hz) {
		name = "lapic";
		hz = from_lapic();
	}
	if (!hz)
		GUEST_FAIL("no way to find the TSC rate");
	tsc_hz = hz;
	source = name;
	return name;
}

void udelay(u64 us)
{
	u64 end;

	GUEST_ASSERT(tsc_hz);
	end = rdtsc() + ns_to_tsc(us * 1000);
	while ((s64)(rdtsc() - end) < 0)
		cpu_relax();
}

bool kvmclock_start(void)
{
	u32 msr = kvmclock_msr();

	if (!msr)
		return false;
	wrmsr(msr, (u64)(uintptr_t)&pvclock | 1);
	for (int i = 0; i < 1000 && !READ_ONCE(pvclock.tsc_to_system_mul); i++)
		cpu_relax();
	return READ_ONCE(pvclock.tsc_to_system_mul) != 0;
}

/*
 * KVM's side of the version protocol (odd while it rewrites the page) pairs with the two
 * reads of `version` around the fields; x86 keeps loads in order, so compiler barriers
 * suffice between them, and LFENCE keeps RDTSC from running ahead of the loads.
 */
u64 kvmclock_read(u64 *tsc_out)
{
	u32 v, mul;
	u64 tsc, ts, sys, delta;
	s8 shift;

	do {
		v = READ_ONCE(pvclock.version);
		barrier();
		ts = READ_ONCE(pvclock.tsc_timestamp);
		sys = READ_ONCE(pvclock.system_time);
		mul = READ_ONCE(pvclock.tsc_to_system_mul);
		shift = READ_ONCE(pvclock.tsc_shift);
		__asm__ __volatile__("lfence" ::: "memory");
		tsc = rdtsc();
		barrier();
	} while ((v & 1) || v != READ_ONCE(pvclock.version));
	delta = tsc - ts;
	delta = shift >= 0 ? delta << shift : delta >> -shift;
	if (tsc_out)
		*tsc_out = tsc;
	/* A 64x64->128 multiply is one instruction (no libgcc call, unlike a 128-bit division). */
	return sys + (u64)(((unsigned __int128)delta * mul) >> 32);
}

/* The pvclock flags KVM publishes with the clock (after kvmclock_start()). */
u8 kvmclock_flags(void)
{
	return READ_ONCE(pvclock.flags);
}

/* What a guest does once it has acted on a flag (Linux: kvm_check_and_clear_guest_paused). */
void kvmclock_clear_flags(u8 bits)
{
	__atomic_fetch_and(&pvclock.flags, (u8)~bits, __ATOMIC_SEQ_CST);
}
