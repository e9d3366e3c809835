/* C guest SMP: counting CPUs in the MP table and starting the APs with INIT/SIPI into the runtime's long mode (entry.S's trampoline). */
#include "guest.h"

#define MP_FLOAT_SIG 0x5f504d5f /* "_MP_" */
#define MP_TABLE_SIG 0x504d4350 /* "PCMP" */
#define MP_ENTRY_CPU 0
#define MP_CPU_ENABLED 0x1
#define BIOS_ROM 0xf0000
#define BIOS_ROM_END 0x100000
#define AP_TRAMPOLINE 0x30000ull /* SIPI vector 0x30: below 1 MiB, clear of lkvm's boot data */
#define AP_STACK_SIZE 16384
#define ICR_INIT 0x000c4500    /* all excluding self, level assert, INIT */
#define ICR_STARTUP 0x000c4600 /* all excluding self, STARTUP; the vector is the page */
#define ICR_BUSY (1u << 12)

extern const u8 lib_ap_tramp[], lib_ap_tramp_end[];
extern u64 lib_ap_stack_next, lib_ap_stack_size, lib_ap_stack_end;
void lib_ap_main(void);

static void (*ap_fn)(u32 apic_id);

/* A floating pointer structure, not just its signature: 16 bytes that sum to 0. */
static const u8 *mp_float(void)
{
	for (u64 p = BIOS_ROM; p < BIOS_ROM_END; p += 16) {
		const u8 *f = (const u8 *)(uintptr_t)p;
		u8 sum = 0;

		if (*(const u32 *)f != MP_FLOAT_SIG)
			continue;
		for (int i = 0; i < 16; i++)
			sum = (u8)(sum + f[i]);
		if (!sum)
			return f;
	}
	return NULL;
}

int mp_count_cpus(void)
{
	const u8 *f = mp_float(), *t, *e;
	int n = 0;

	if (!f || !*(const u32 *)(f + 4))
		return 0;
	t = (const u8 *)(uintptr_t) * (const u32 *)(f + 4);
	if (*(const u32 *)t != MP_TABLE_SIG)
		return 0;
	e = t + 0x2c;
	for (u16 i = *(const u16 *)(t + 0x22); i; i--) {
		if (e[0] == MP_ENTRY_CPU) {
			n += e[3] & MP_CPU_ENABLED;
			e += 20;
		} else {
			e += 8;
		}
	}
	return n;
}

/* Sends an IPI, then waits (bounded) for the ICR's delivery status to clear. */
static void icr_send(u32 lo)
{
	lapic_write(LAPIC_ICR_HI, 0);
	lapic_write(LAPIC_ICR_LO, lo);
	for (int i = 0; i < 100000 && (lapic_read(LAPIC_ICR_LO) & ICR_BUSY); i++)
		cpu_relax();
}

void lib_ap_main(void)
{
	READ_ONCE(ap_fn)(lapic_id());
}

void smp_start_aps(void (*fn)(u32 apic_id), unsigned max_aps)
{
	size_t len = (size_t)(lib_ap_tramp_end - lib_ap_tramp);
	u8 *stacks = galloc((size_t)max_aps * AP_STACK_SIZE, 16);

	ap_fn = fn;
	lib_ap_stack_size = AP_STACK_SIZE;
	lib_ap_stack_next = (u64)(uintptr_t)stacks;
	lib_ap_stack_end = (u64)(uintptr_t)stacks + (u64)max_aps * AP_STACK_SIZE;
	memcpy((void *)(uintptr_t)AP_TRAMPOLINE, lib_ap_tramp, len);
	lapic_write(LAPIC_SVR, 0x1ff); /* software-enabled, spurious vector 0xff */
	mb(); /* the code and stacks before the IPIs that start CPUs on them */
	/* INIT, then STARTUP twice (MP spec B.4). */
	icr_send(ICR_INIT);
	udelay(10000);
	for (int i = 0; i < 2; i++) {
		icr_send(ICR_STARTUP | (u32)(AP_TRAMPOLINE >> 12));
		udelay(200);
	}
}
