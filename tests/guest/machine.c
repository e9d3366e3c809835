/* Guest machine: checks from inside the machine lkvm builds: CPUID, RAM above the PCI hole, the device tree (as a bzImage), the devices, kvm-clock over a pause, a triple fault. */
#include "guest.h"

/*
 * The command line word check=NAME[,NAME...] picks the checks, run in that order; words
 * want.KEY=VALUE say what the host expects (absent: 0). Each check asserts what it finds
 * against them (GUEST FAIL, exit 4, on a mismatch), prints one line "GUEST machine NAME: ..."
 * and returns; after the last one the run ends with GUEST DONE (exit 0 through the exit port).
 *   cpuid    leaf 1 (hypervisor, TSC-deadline, APIC id, logical count, HTT), the invariant TSC
 *            bit, the KVM leaves 0x40000000/1 (signature, PV send-IPI); a TSC-deadline timer
 *            that fires when the bit is set.
 *            want.cpus, want.tsc_deadline, want.invariant_tsc, want.pv_send_ipi
 *   highmem  the memory map around the PCI hole, and patterns written below the hole and
 *            above 4 GiB that hold (and none past the end of RAM). want.ram_mib
 *   dtb      bzImage only: setup_data SETUP_DTB holds a valid FDT whose /chosen bootargs is
 *            the command line, whose cpus, memory and virtio_mmio nodes match the machine
 *            (as many of them as the command line's words, want.virtio_mmio).
 *            want.cpus, want.ram_mib, want.virtio_mmio
 *   devices  virtio devices by kind on PCI (1af4:104x) and on virtio-mmio (from the
 *            command line's virtio_mmio.device= words, each window's magic and version).
 *            want.pci.KIND, want.mmio.KIND with KIND net, blk, console, rng
 *   pause    prints "ready", then spins on kvm-clock with a port exit every round until KVM
 *            sets PVCLOCK_GUEST_STOPPED (the host paused and resumed it): kvm-clock never went
 *            back, and the largest step between two reads is printed for the host to judge.
 *   triple   loads an empty IDT and executes ud2: a triple fault (never returns).
 */

#define GiB (1ull << 30)
#define MiB (1ull << 20)
#define PCI_HOLE_START (3 * GiB)
#define PCI_HOLE_END (4 * GiB)
#define COM1_LSR 0x3fd

static u64 want(const char *key)
{
	char k[48];

	gsnprintf(k, sizeof(k), "want.%s", key);
	return cmdline_u64(k, 0);
}

/* ---- cpuid ---- */

#define CPUID_1_ECX_TSC_DEADLINE (1u << 24)
#define CPUID_1_ECX_HYPERVISOR (1u << 31)
#define CPUID_1_EDX_HTT (1u << 28)
#define CPUID_80000007_EDX_INVARIANT_TSC (1u << 8)
#define KVM_CPUID_SIGNATURE 0x40000000
#define KVM_CPUID_FEATURES 0x40000001
#define KVM_FEATURE_PV_SEND_IPI 11
#define LAPIC_IRR 0x200
#define LVT_TIMER_TSC_DEADLINE (2u << 17)
#define MSR_TSC_DEADLINE 0x6e0
#define TIMER_VECTOR 0xef

/* The bit is not just shown: the timer it announces is armed through the MSR and raises its
 * vector (seen in the IRR with interrupts off) within 10 s of guest time. */
static void tsc_deadline_fires(void)
{
	u64 irr = LAPIC_BASE + LAPIC_IRR + 0x10 * (TIMER_VECTOR / 32), deadline, give_up;
	u32 bit = 1u << (TIMER_VECTOR % 32);

	clock_init();
	mmio_write32(LAPIC_BASE + LAPIC_SVR, 0x1ff); /* APIC software-enabled, spurious 0xff */
	mmio_write32(LAPIC_BASE + LAPIC_LVT_TIMER, TIMER_VECTOR | LVT_TIMER_TSC_DEADLINE);
	GUEST_ASSERT_EQ(mmio_read32(LAPIC_BASE + LAPIC_LVT_TIMER) & (3u << 17),
			LVT_TIMER_TSC_DEADLINE);
	GUEST_ASSERT(!(mmio_read32(irr) & bit));
	deadline = rdtsc() + ns_to_tsc(1000000);
	give_up = deadline + ns_to_tsc(10000000000ull);
	wrmsr(MSR_TSC_DEADLINE, deadline);
	while (!(mmio_read32(irr) & bit)) {
		if (rdtsc() > give_up)
			GUEST_FAIL(
				"the TSC-deadline timer never fired (deadline 1 ms, waited 10 s)");
		cpu_relax();
	}
}

static void check_cpuid(void)
{
	u32 a, b, c, d, max, sig[4] = { 0 };
	u32 apic_id, logical, cpus = (u32)want("cpus");
	bool hv, dl, htt, pv_ipi, invtsc;

	cpuid(1, 0, &a, &b, &c, &d);
	hv = c & CPUID_1_ECX_HYPERVISOR;
	dl = c & CPUID_1_ECX_TSC_DEADLINE;
	htt = d & CPUID_1_EDX_HTT;
	apic_id = b >> 24;
	logical = (b >> 16) & 0xff;
	cpuid(KVM_CPUID_SIGNATURE, 0, &max, &sig[0], &sig[1], &sig[2]);
	cpuid(0x80000007, 0, &a, &b, &c, &d);
	invtsc = d & CPUID_80000007_EDX_INVARIANT_TSC;
	cpuid(KVM_CPUID_FEATURES, 0, &a, &b, &c, &d);
	pv_ipi = a & (1u << KVM_FEATURE_PV_SEND_IPI);
	gprintf("GUEST machine cpuid: hypervisor=%u tsc_deadline=%u apic_id=%u logical=%u htt=%u invariant_tsc=%u signature=%s max_leaf=0x%x features=0x%x pv_send_ipi=%u\n",
		hv, dl, apic_id, logical, htt, invtsc, (const char *)sig, max, a, pv_ipi);
	GUEST_ASSERT(hv);
	GUEST_ASSERT(!strcmp((const char *)sig, "KVMKVMKVM"));
	GUEST_ASSERT(max >= KVM_CPUID_FEATURES);
	GUEST_ASSERT_EQ(apic_id, 0);
	GUEST_ASSERT_EQ(logical, cpus);
	if (cpus > 1)
		GUEST_ASSERT(htt); /* with one CPU the host's own bit may show */
	GUEST_ASSERT_EQ(dl, want("tsc_deadline"));
	GUEST_ASSERT_EQ(pv_ipi, want("pv_send_ipi"));
	GUEST_ASSERT_EQ(invtsc, want("invariant_tsc"));
	if (dl) {
		tsc_deadline_fires();
		gprintf("GUEST machine cpuid: the TSC-deadline timer fired\n");
	}
}

/* ---- highmem ---- */

#define PDE_2M_USER 0x87 /* present, writable, user, 2 MiB (as entry.S) */
#define PAGE_2M (2 * MiB)
/* Every place touched costs the host a (transparent huge) page: probe sparsely, on one grid
 * below and above the hole, so RAM above 4 GiB that aliased RAM below it would collide. The
 * first place is clear of the image, its heap and lkvm's boot data. */
#define PROBE_STEP (128 * MiB)
#define PROBE_LOW_FROM PROBE_STEP

/* entry.S maps 0-4 GiB: map [4 GiB, end) too, 2 MiB pages in new page directories. */
static void map_above_4g(u64 end)
{
	u64 cr3, *pdpt;

	__asm__ __volatile__("mov %%cr3, %0" : "=r"(cr3));
	pdpt = (u64 *)(uintptr_t)(((u64 *)(uintptr_t)(cr3 & ~0xfffull))[0] & ~0xfffull);
	for (u64 gib = 4; gib * GiB < end; gib++) {
		u64 *pd = galloc(4096, 4096);

		GUEST_ASSERT(gib < 512);
		for (u64 i = 0; i < 512; i++)
			pd[i] = (gib * GiB + i * PAGE_2M) | PDE_2M_USER;
		pdpt[gib] = (u64)(uintptr_t)pd | 0x7;
	}
	__asm__ __volatile__("mov %0, %%cr3" ::"r"(cr3) : "memory");
}

static u64 pattern(u64 addr)
{
	return addr ^ 0x5a17c0de00000000ull;
}

/* Writes a distinct value every PROBE_STEP in [from, to) and at its last 8 bytes; with
 * verify, checks them instead. Returns how many places it visited. */
static u64 probe(u64 from, u64 to, bool verify)
{
	u64 n = 0;

	for (u64 a = from;; a += PROBE_STEP) {
		if (a >= to)
			a = to - 8;
		volatile u64 *p = (volatile u64 *)(uintptr_t)a;

		if (!verify)
			*p = pattern(a);
		else if (*p != pattern(a))
			GUEST_FAIL("RAM at 0x%llx holds 0x%llx, not the 0x%llx written there", a,
				   *p, pattern(a));
		n++;
		if (a == to - 8)
			return n;
	}
}

static void check_highmem(void)
{
	struct mem_range m[16];
	int n = guest_memmap(m, 16);
	u64 ram = want("ram_mib") * MiB, low_end = 0, high = 0, high_size = 0, places;

	GUEST_ASSERT(ram > PCI_HOLE_START);
	for (int i = 0; i < n; i++) {
		u64 end = m[i].addr + m[i].size;

		if (m[i].type != E820_RAM)
			continue;
		if (m[i].addr < PCI_HOLE_END && end > PCI_HOLE_START)
			GUEST_FAIL("RAM in the PCI hole: 0x%llx-0x%llx", m[i].addr, end);
		if (m[i].addr >= PCI_HOLE_END) {
			GUEST_ASSERT_EQ(high, 0); /* one range above the hole */
			high = m[i].addr;
			high_size = m[i].size;
		} else if (end > low_end) {
			low_end = end;
		}
	}
	GUEST_ASSERT_EQ(low_end, PCI_HOLE_START);
	GUEST_ASSERT_EQ(high, PCI_HOLE_END);
	GUEST_ASSERT_EQ(high_size, ram - PCI_HOLE_START);
	map_above_4g(high + high_size + PAGE_2M);
	/* All written first, then all read: RAM above the hole that aliased RAM below it (or
	 * itself) would show as a value another place overwrote. */
	places = probe(PROBE_LOW_FROM, low_end, false) + probe(high, high + high_size, false);
	probe(PROBE_LOW_FROM, low_end, true);
	probe(high, high + high_size, true);
	/* Past the end of RAM is nothing: a write there does not hold. */
	volatile u64 *past = (volatile u64 *)(uintptr_t)(high + high_size);
	*past = pattern(high + high_size);
	GUEST_ASSERT(*past != pattern(high + high_size));
	gprintf("GUEST machine highmem: RAM 0-0x%llx and 0x%llx-0x%llx, %llu places written and read back, none past the end\n",
		low_end, high, high + high_size, places);
}

/* ---- virtio-mmio devices on the command line ---- */

struct mmio_dev {
	u64 size, addr;
	u32 irq;
};

#define MAX_MMIO 16

/* Every virtio_mmio.device=SIZE@ADDR:IRQ word of the command line, in order. */
static int cmdline_mmio(struct mmio_dev *out, int max)
{
	static const char key[] = "virtio_mmio.device=";
	const char *s = guest_cmdline();
	int n = 0;

	for (; *s; s++) {
		if ((s != guest_cmdline() && s[-1] != ' ') || strncmp(s, key, sizeof(key) - 1))
			continue;
		s += sizeof(key) - 1;
		GUEST_ASSERT(n < max);
		out[n].size = parse_u64(&s);
		GUEST_ASSERT(*s == '@');
		s++;
		out[n].addr = parse_u64(&s);
		GUEST_ASSERT(*s == ':');
		s++;
		out[n].irq = (u32)parse_u64(&s);
		GUEST_ASSERT(*s == ' ' || !*s);
		n++;
		if (!*s)
			break;
	}
	return n;
}

/* ---- dtb ---- */

#define SETUP_DTB 2
#define FDT_MAGIC 0xd00dfeed
#define FDT_BEGIN_NODE 1
#define FDT_END_NODE 2
#define FDT_PROP 3
#define FDT_NOP 4
#define FDT_END 9
#define FDT_MAX_DEPTH 8

static u32 be32(const u8 *p)
{
	return (u32)p[0] << 24 | (u32)p[1] << 16 | (u32)p[2] << 8 | p[3];
}

static u64 be64(const u8 *p)
{
	return (u64)be32(p) << 32 | be32(p + 4);
}

static bool starts(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

/* What the tree says about the machine. */
struct dt_info {
	const char *bootargs;
	u32 cpus;
	u64 mem[4][2]; /* memory@ reg: (addr, size) pairs */
	int nr_mem;
	struct mmio_dev mmio[MAX_MMIO];
	int nr_mmio;
};

/* Walks the structure block (every offset checked against the blob's size) and fills dt. */
static void fdt_walk(const u8 *fdt, u32 total, struct dt_info *dt)
{
	u32 off = be32(fdt + 8), end = off + be32(fdt + 36), strs = be32(fdt + 12);
	u32 strs_size = be32(fdt + 32);
	const char *path[FDT_MAX_DEPTH];
	int depth = 0;

	GUEST_ASSERT(off <= end && end <= total && strs <= total && strs_size <= total - strs);
	for (;;) {
		GUEST_ASSERT(off + 4 <= end);
		u32 tok = be32(fdt + off);

		off += 4;
		if (tok == FDT_END)
			break;
		if (tok == FDT_NOP)
			continue;
		if (tok == FDT_END_NODE) {
			GUEST_ASSERT(depth > 0);
			depth--;
			continue;
		}
		if (tok == FDT_BEGIN_NODE) {
			const char *name = (const char *)fdt + off;
			u32 len = 0;

			while (off + len < end && name[len])
				len++;
			GUEST_ASSERT(off + len < end && depth < FDT_MAX_DEPTH);
			path[depth++] = name;
			off = ALIGN_UP(off + len + 1, 4u);
			if (depth == 3 && !strcmp(path[1], "cpus") && starts(name, "cpu@"))
				dt->cpus++;
			if (depth == 2 && starts(name, "virtio_mmio@")) {
				GUEST_ASSERT(dt->nr_mmio < MAX_MMIO);
				dt->nr_mmio++;
			}
			continue;
		}
		GUEST_ASSERT_EQ(tok, FDT_PROP);
		GUEST_ASSERT(off + 8 <= end);
		u32 len = be32(fdt + off), nameoff = be32(fdt + off + 4);
		const u8 *val = fdt + off + 8;

		GUEST_ASSERT(len <= end - off - 8 && nameoff < strs_size);
		off = ALIGN_UP(off + 8 + len, 4u);
		const char *prop = (const char *)fdt + strs + nameoff;

		if (depth != 2)
			continue;
		if (!strcmp(path[1], "chosen") && !strcmp(prop, "bootargs")) {
			GUEST_ASSERT(len > 0 && val[len - 1] == '\0');
			dt->bootargs = (const char *)val;
		} else if (starts(path[1], "memory@") && !strcmp(prop, "reg")) {
			GUEST_ASSERT(len % 16 == 0 && len / 16 <= 4);
			for (u32 i = 0; i < len / 16; i++) {
				dt->mem[i][0] = be64(val + 16 * i);
				dt->mem[i][1] = be64(val + 16 * i + 8);
			}
			dt->nr_mem = (int)(len / 16);
		} else if (starts(path[1], "virtio_mmio@")) {
			struct mmio_dev *d = &dt->mmio[dt->nr_mmio - 1];

			if (!strcmp(prop, "reg")) {
				GUEST_ASSERT_EQ(len, 16);
				d->addr = be64(val);
				d->size = be64(val + 8);
			} else if (!strcmp(prop, "interrupts")) {
				GUEST_ASSERT(len >= 4);
				d->irq = be32(val);
			} else if (!strcmp(prop, "compatible")) {
				GUEST_ASSERT(len == sizeof("virtio,mmio") &&
					     !strcmp((const char *)val, "virtio,mmio"));
			}
		}
	}
	GUEST_ASSERT_EQ(depth, 0);
}

static void check_dtb(void)
{
	const u8 *bp = guest_boot_params(), *fdt = NULL;
	struct mmio_dev cmd[MAX_MMIO];
	struct dt_info dt = { 0 };
	u64 sd, top = guest_ram_top(), ram = want("ram_mib") * MiB, mem = 0;
	u32 len = 0, total;
	int n;

	if (!bp)
		GUEST_FAIL("dtb: not booted as a bzImage (no zero page, so no setup_data)");
	GUEST_ASSERT(*(const u16 *)(bp + BP_VERSION) >= 0x0209);
	sd = *(const u64 *)(bp + BP_SETUP_DATA);
	/* struct setup_data: u64 next, u32 type, u32 len, then len bytes. */
	for (int i = 0; sd && i < 16; i++) {
		GUEST_ASSERT(sd + 16 <= top);
		u32 type = *(const u32 *)(uintptr_t)(sd + 8);

		len = *(const u32 *)(uintptr_t)(sd + 12);
		GUEST_ASSERT(len <= top - sd - 16);
		if (type == SETUP_DTB) {
			fdt = (const u8 *)(uintptr_t)(sd + 16);
			break;
		}
		sd = *(const u64 *)(uintptr_t)sd;
	}
	if (!fdt)
		GUEST_FAIL("dtb: no SETUP_DTB entry in the setup_data list (head 0x%llx)",
			   *(const u64 *)(bp + BP_SETUP_DATA));
	GUEST_ASSERT(len >= 40);
	GUEST_ASSERT_EQ(be32(fdt), FDT_MAGIC);
	total = be32(fdt + 4);
	GUEST_ASSERT_EQ(total, len);
	GUEST_ASSERT(be32(fdt + 20) >= 16 && be32(fdt + 24) <= 16); /* version, last compatible */
	fdt_walk(fdt, total, &dt);

	if (!dt.bootargs || strcmp(dt.bootargs, guest_cmdline()))
		GUEST_FAIL("dtb: /chosen bootargs \"%s\" is not the command line \"%s\"",
			   dt.bootargs ? dt.bootargs : "(none)", guest_cmdline());
	GUEST_ASSERT_EQ(dt.cpus, want("cpus"));
	for (int i = 0; i < dt.nr_mem; i++)
		mem += dt.mem[i][1];
	GUEST_ASSERT_EQ(mem, ram);
	GUEST_ASSERT_EQ(dt.mem[0][0], 0);
	if (ram > PCI_HOLE_START) {
		GUEST_ASSERT_EQ(dt.nr_mem, 2);
		GUEST_ASSERT_EQ(dt.mem[0][1], PCI_HOLE_START);
		GUEST_ASSERT_EQ(dt.mem[1][0], PCI_HOLE_END);
	}
	n = cmdline_mmio(cmd, MAX_MMIO);
	GUEST_ASSERT_EQ(n, want("virtio_mmio"));
	GUEST_ASSERT_EQ(dt.nr_mmio, n);
	for (int i = 0; i < n; i++) {
		GUEST_ASSERT_EQ(dt.mmio[i].addr, cmd[i].addr);
		GUEST_ASSERT_EQ(dt.mmio[i].size, cmd[i].size);
		GUEST_ASSERT_EQ(dt.mmio[i].irq, cmd[i].irq);
	}
	gprintf("GUEST machine dtb: SETUP_DTB of %u bytes, version %u, bootargs = command line, cpus=%u, memory=%llu MiB in %d ranges, virtio_mmio=%d as on the command line\n",
		total, be32(fdt + 20), dt.cpus, mem / MiB, dt.nr_mem, dt.nr_mmio);
}

/* ---- devices ---- */

#define VIRTIO_VENDOR 0x1af4
#define VIRTIO_PCI_MODERN 0x1040 /* + the virtio device id */
#define MMIO_MAGIC 0x000
#define MMIO_VERSION 0x004
#define MMIO_DEVICE_ID 0x008
#define MMIO_MAGIC_VALUE 0x74726976 /* "virt" */

static const char *const kinds[] = { "", "net", "blk", "console", "rng" }; /* by virtio id */

struct counts {
	u32 n[ARRAY_SIZE(kinds)];
	u32 other;
};

static bool count_pci(const struct pci_dev *d, void *arg)
{
	struct counts *c = arg;
	u32 id = d->device - VIRTIO_PCI_MODERN;

	if (d->vendor != VIRTIO_VENDOR)
		return false;
	if (d->device > VIRTIO_PCI_MODERN && id < ARRAY_SIZE(kinds))
		c->n[id]++;
	else
		c->other++;
	return false;
}

static void check_counts(const char *bus, const struct counts *c)
{
	char key[32];

	GUEST_ASSERT_EQ(c->other, 0);
	for (u32 i = 1; i < ARRAY_SIZE(kinds); i++) {
		gsnprintf(key, sizeof(key), "%s.%s", bus, kinds[i]);
		if (c->n[i] != want(key))
			GUEST_FAIL("devices: %u %s %s devices, expected %llu", c->n[i], bus,
				   kinds[i], want(key));
	}
}

static void check_devices(void)
{
	struct counts pci = { 0 }, mmio = { 0 };
	struct mmio_dev m[MAX_MMIO];
	int n = cmdline_mmio(m, MAX_MMIO);

	pci_scan(count_pci, &pci);
	for (int i = 0; i < n; i++) {
		for (int j = 0; j < i; j++)
			GUEST_ASSERT(m[j].addr != m[i].addr && m[j].irq != m[i].irq);
		if (mmio_read32(m[i].addr + MMIO_MAGIC) != MMIO_MAGIC_VALUE)
			GUEST_FAIL("devices: no virtio-mmio device at 0x%llx (magic 0x%x)",
				   m[i].addr, mmio_read32(m[i].addr + MMIO_MAGIC));
		GUEST_ASSERT_EQ(mmio_read32(m[i].addr + MMIO_VERSION), 2);
		u32 id = mmio_read32(m[i].addr + MMIO_DEVICE_ID);

		if (id && id < ARRAY_SIZE(kinds))
			mmio.n[id]++;
		else
			mmio.other++;
	}
	gprintf("GUEST machine devices: pci net=%u blk=%u console=%u rng=%u other=%u; mmio net=%u blk=%u console=%u rng=%u other=%u\n",
		pci.n[1], pci.n[2], pci.n[3], pci.n[4], pci.other, mmio.n[1], mmio.n[2], mmio.n[3],
		mmio.n[4], mmio.other);
	check_counts("pci", &pci);
	check_counts("mmio", &mmio);
}

/* ---- pause ---- */

static void check_pause(void)
{
	u64 prev, now, step, max_step = 0, rounds = 0;

	if (!kvmclock_start())
		GUEST_FAIL("pause: KVM offers no kvm-clock");
	kvmclock_clear_flags(PVCLOCK_GUEST_STOPPED);
	prev = kvmclock_read(NULL);
	gprintf("GUEST machine pause: ready\n");
	/* The host pauses (KVM_KVMCLOCK_CTRL) and resumes somewhere in here; KVM sets the flag
	 * at the first entry after. The read after the loop covers a pause that fell after the
	 * last read of a round. */
	for (;;) {
		bool stopped = kvmclock_flags() & PVCLOCK_GUEST_STOPPED;

		(void)inb(
			COM1_LSR); /* one exit a round: a vCPU not parked moves the exit counters */
		now = kvmclock_read(NULL);
		if (now < prev)
			GUEST_FAIL("pause: kvm-clock went back from %llu to %llu ns", prev, now);
		step = now - prev;
		if (step > max_step)
			max_step = step;
		prev = now;
		rounds++;
		if (stopped)
			break;
	}
	kvmclock_clear_flags(PVCLOCK_GUEST_STOPPED);
	gprintf("GUEST machine pause: PVCLOCK_GUEST_STOPPED seen after %llu rounds, max_step_us=%llu\n",
		rounds, max_step / 1000);
}

/* ---- triple fault ---- */

static void check_triple(void)
{
	static const struct {
		u16 limit;
		u64 base;
	} __attribute__((packed)) empty_idt = { 0, 0 };

	gprintf("GUEST machine triple: empty IDT, then ud2\n");
	/* #UD finds no gate, nor does the #GP that follows, nor the #DF: a triple fault. */
	__asm__ __volatile__("lidt %0; ud2" ::"m"(empty_idt));
	GUEST_FAIL("triple: still running after a triple fault");
}

static const struct {
	const char *name;
	void (*fn)(void);
} checks[] = {
	{ "cpuid", check_cpuid },     { "highmem", check_highmem }, { "dtb", check_dtb },
	{ "devices", check_devices }, { "pause", check_pause },	    { "triple", check_triple },
};

void guest_main(void)
{
	char list[128], *p = list;

	if (!cmdline_get("check", list, sizeof(list)) || !*list)
		GUEST_FAIL("no check=NAME on the command line");
	while (*p) {
		char *name = p;
		size_t i;

		while (*p && *p != ',')
			p++;
		if (*p)
			*p++ = '\0';
		for (i = 0; i < ARRAY_SIZE(checks) && strcmp(checks[i].name, name); i++)
			;
		if (i == ARRAY_SIZE(checks))
			GUEST_FAIL("unknown check '%s'", name);
		checks[i].fn();
	}
}
