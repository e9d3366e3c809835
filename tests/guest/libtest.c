/* Guest libtest: exercises the C guest library (printf, command line, PCI, clock, CPL3 with port and MMIO I/O) and its failure paths. */
#include "guest.h"

/*
 * The command line word test=NAME picks what to do:
 *   all (default)  every check below, ends with guest_done() from CPL3 (lkvm exit 0); the
 *                  command line must hold libtest.echo=hello libtest.n=0x10 (read back here)
 *   assert         a GUEST_ASSERT that fails at CPL3 (exit 4, "GUEST FAIL file:line: cond")
 *   assert0        the same at CPL0
 *   assert-eq      a GUEST_ASSERT_EQ that fails (exit 4; lkvm's line shows both values)
 *   fault          a page fault at CPL3 (exit 2, "GUEST EXCEPTION vector=14")
 *   ud             ud2 at CPL3 (exit 2, "GUEST EXCEPTION vector=6")
 */

#define PVPANIC_PORT 0x505
#define PVPANIC_FEATURES 0x03 /* PANICKED | CRASH_LOADED, what lkvm's device offers */

static char test[32];
static u64 pvpanic_mmio;

static void check_fmt(const char *want, const char *fmt, ...) __printf(2, 3);
static void check_fmt(const char *want, const char *fmt, ...)
{
	char got[128];
	va_list ap;

	va_start(ap, fmt);
	gvsnprintf(got, sizeof(got), fmt, ap);
	va_end(ap);
	if (strcmp(got, want))
		GUEST_FAIL("format \"%s\" gave \"%s\", expected \"%s\"", fmt, got, want);
}

static void test_printf(void)
{
	char small[6];

	check_fmt("-42 42 2a", "%d %u %x", -42, 42u, 0x2a);
	check_fmt("ffffffffffffffff", "%lx", ~0ul);
	check_fmt("18446744073709551615", "%llu", ~0ull);
	check_fmt("-9223372036854775808", "%lld", (s64)(1ull << 63));
	check_fmt("[str] [Z] [100%]", "[%s] [%c] [100%%]", "str", 'Z');
	check_fmt("[0042] [  42] [42  ] [-042]", "[%04d] [%4d] [%-4d] [%04d]", 42, 42, 42, -42);
	check_fmt("0x00001000 0X1F", "0x%08x 0X%X", 0x1000, 0x1f);
	check_fmt("0x100000", "%p", (void *)0x100000);
	GUEST_ASSERT_EQ(gsnprintf(small, sizeof(small), "%s", "truncated"), 9);
	GUEST_ASSERT(!strcmp(small, "trunc"));
	gprintf("GUEST libtest printf: d=%d u=%u x=%x lx=%lx s=%s c=%c llu=%llu OK\n", -42, 42u,
		0xbeefu, 0x123456789abcdeful, "str", 'Z', 18446744073709551615ull);
}

/* Prints each function; arg counts the host bridges (8086:1237, class 060000) at 00:00.0. */
static bool list_dev(const struct pci_dev *d, void *arg)
{
	u32 class = pci_read32(d, PCI_CLASS_REV) >> 8;

	gprintf("GUEST libtest pci %02x:%02x.%u %04x:%04x class=%06x\n", d->bus, d->dev, d->fn,
		d->vendor, d->device, class);
	*(int *)arg += !d->bus && !d->dev && !d->fn && d->vendor == 0x8086 && d->device == 0x1237 &&
		       class == 0x060000;
	return false;
}

static void test_pci(void)
{
	struct pci_dev pv;
	bool io;
	int bridges = 0, n = pci_scan(list_dev, &bridges);

	GUEST_ASSERT(n >= 2); /* host bridge and pvpanic at least */
	GUEST_ASSERT_EQ(bridges, 1);
	GUEST_ASSERT(pci_find(0x1b36, 0x0011, &pv));
	GUEST_ASSERT(!pci_find(0x1234, 0x5678, &(struct pci_dev){ 0 }));
	pvpanic_mmio = pci_bar(&pv, 0, &io);
	GUEST_ASSERT(!io && pvpanic_mmio);
	pci_enable(&pv, PCI_CMD_MEM);
	GUEST_ASSERT(pci_read16(&pv, PCI_COMMAND) & PCI_CMD_MEM);
	GUEST_ASSERT_EQ(mmio_read8(pvpanic_mmio), PVPANIC_FEATURES);
	gprintf("GUEST libtest pci: %d functions, pvpanic 1b36:0011 at %02x:%02x.%u bar0=0x%llx mmio=0x%02x OK\n",
		n, pv.bus, pv.dev, pv.fn, pvpanic_mmio, mmio_read8(pvpanic_mmio));
}

static void user_main(void *arg)
{
	u64 t0, t1, iters = 100000000, ns;
	volatile u64 sink = 0;

	GUEST_ASSERT_EQ((u64)(uintptr_t)arg, 0x1234);
	gprintf("GUEST libtest cpl3: cpl=%u iopl=%u\n", cpl(), iopl());
	GUEST_ASSERT_EQ(cpl(), 3);
	GUEST_ASSERT(iopl() == 0 || iopl() == 3); /* 0: a PVM host (guest.h) */
	if (!strcmp(test, "assert"))
		GUEST_ASSERT(cpl() == 0);
	if (!strcmp(test, "assert-eq"))
		GUEST_ASSERT_EQ(cpl() + 0x1234567890ull, 0xfedcba9876543210ull);
	if (!strcmp(test, "fault"))
		WRITE_ONCE(*(volatile u32 *)0x100000000ull, 1); /* above the 4 GiB identity map */
	if (!strcmp(test, "ud"))
		__asm__ __volatile__("ud2");
	GUEST_ASSERT_EQ(inb(PVPANIC_PORT), PVPANIC_FEATURES);
	GUEST_ASSERT_EQ(mmio_read8(pvpanic_mmio), PVPANIC_FEATURES);
	gprintf("GUEST libtest cpl3: port 0x505=0x%02x mmio=0x%02x OK (port accesses completed by the #GP handler so far: %llu)\n",
		inb(PVPANIC_PORT), mmio_read8(pvpanic_mmio), lib_io_emulated);
	/* A long loop at CPL3 runs to its end with the right result (its time is only reported:
	 * on a PVM host CPL3 runs natively, ~300x faster than CPL0, but no speed is asserted). */
	t0 = rdtsc();
	for (u64 i = 0; i < iters; i++)
		sink += i;
	t1 = rdtsc();
	ns = tsc_to_ns(t1 - t0);
	GUEST_ASSERT_EQ(sink, iters * (iters - 1) / 2);
	gprintf("GUEST libtest cpl3 loop: %llu iterations, sum=%llu OK (%llu us)\n", iters, sink,
		ns / 1000);
	t0 = rdtsc();
	for (int i = 0; i < 1000; i++)
		(void)rdtsc();
	t1 = rdtsc();
	gprintf("GUEST libtest cpl3 rdtsc: %llu ns each\n", tsc_to_ns(t1 - t0) / 1000);
	/* What a device access costs from here (port I/O includes the #GP round trip on PVM). */
	t0 = rdtsc();
	for (int i = 0; i < 100; i++)
		(void)inb(PVPANIC_PORT);
	t1 = rdtsc();
	gprintf("GUEST libtest cpl3 port read: %llu ns each\n", tsc_to_ns(t1 - t0) / 100);
	t0 = rdtsc();
	for (int i = 0; i < 100; i++)
		(void)mmio_read8(pvpanic_mmio);
	t1 = rdtsc();
	gprintf("GUEST libtest cpl3 mmio read: %llu ns each\n", tsc_to_ns(t1 - t0) / 100);
	gprintf("GUEST libtest: ALL OK\n");
}

void guest_main(void)
{
	char arg[32];

	if (!cmdline_get("test", test, sizeof(test)))
		memcpy(test, "all", 4);
	gprintf("GUEST libtest: start test=%s cpl=%u ram_top=0x%llx\n", test, cpl(),
		guest_ram_top());
	GUEST_ASSERT_EQ(cpl(), 0);
	if (!strcmp(test, "assert0"))
		GUEST_ASSERT(cpl() == 3);
	test_printf();
	/* What test-c-guests.sh passes: a word, a hex number, and a default for a key absent. */
	if (!strcmp(test, "all")) {
		GUEST_ASSERT(cmdline_get("libtest.echo", arg, sizeof(arg)));
		GUEST_ASSERT(!strcmp(arg, "hello"));
		GUEST_ASSERT_EQ(cmdline_u64("libtest.n", 7), 16);
		GUEST_ASSERT_EQ(cmdline_u64("libtest.absent", 7), 7);
	}
	test_pci();
	const char *src = clock_init();
	gprintf("GUEST libtest clock: source=%s tsc_hz=%llu\n", src, tsc_hz);
	GUEST_ASSERT(tsc_hz >= 100000000ull); /* a TSC rate was found (not 0, not a guess of kHz) */
	gprintf("GUEST libtest: entering CPL3\n");
	guest_run_user(user_main, (void *)0x1234);
}
