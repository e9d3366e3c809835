/* Guest virtio-hostile: a malicious virtio-net driver (bad chains, also between two good frames, addresses, indirect tables, ring indices, queue set-up, config, MSI-X and BAR accesses), each case followed by a reset and a good frame; and a virtio-console driver whose output would never end. */
#include "guest.h"

/*
 * Command line: case=NAME runs one case, none runs them all; repeat=N runs that N times (a
 * guest looping "break the queue, reset", to bound lkvm's log). For every case the guest
 * brings the device up (VERSION_1, INDIRECT_DESC, EVENT_IDX, MAC; queues of QSIZE), does
 * the hostile thing, checks what the device did (NEEDS_RESET where the ring is broken, the
 * write ignored where a register is read-only), then resets it and proves it works again with
 * one good TX frame. Prints "GUEST hostile: NAME ok (...)" per case, then checks that the
 * other devices still answer (pvpanic's PCI BAR, the console) and "GUEST hostile: ALL OK".
 * Runs at CPL3 after PCI set-up (MMIO directly; port I/O through the #GP path).
 * The console case needs lkvm --console virtio.
 */

#define QSIZE 16
#define RXQ 0
#define TXQ 1
#define HDR 12
#define FRAME 60
#define S_NEEDS_RESET 0x40
#define S_DRIVER_OK 4
#define F_INDIRECT 4 /* VIRTQ_DESC_F_INDIRECT */
#define WAIT_NS 2000000000ull

/* Common config offsets (virtio 1.2 4.1.4.3). */
#define CC_DF 0x04
#define CC_NUMQ 0x12
#define CC_STATUS 0x14
#define CC_Q_SELECT 0x16
#define CC_Q_SIZE 0x18
#define CC_Q_ENABLE 0x1c
#define CC_Q_NOTIFY_OFF 0x1e
#define CC_Q_DESC 0x20

static struct virtio_pci vp;
static struct virtq rxq, txq;
static bool queues_made;
static u8 *buf;	   /* header + frame of the good chain, and scratch */
static u8 *itable; /* indirect tables */
static struct pci_dev pvpanic;
static u64 pvpanic_bar;

/* virtio-console (lkvm --console virtio), when there is one. */
#define CON_TX 1
#define CON_ALIASES 1024     /* descriptors in the huge chain: VQ_MAX_SG */
#define CON_TEXT (16u << 20) /* bytes each of them covers */
#define CON_LINE 64	     /* a newline every CON_LINE bytes of that text */
static struct virtio_pci cvp;
static struct virtq crx, ctx;
static bool con_found, con_queues_made;
static u8 *con_text; /* CON_TEXT bytes of printable lines */
static struct virtq_desc *con_table;

static u64 now_ns(void)
{
	return tsc_to_ns(rdtsc());
}

static void up(void)
{
	virtio_reset(&vp);
	GUEST_ASSERT(virtio_negotiate(&vp, 1ull << VIRTIO_NET_F_MAC |
						   1ull << VIRTIO_F_INDIRECT_DESC |
						   1ull << VIRTIO_F_RING_EVENT_IDX));
	if (!queues_made) {
		GUEST_ASSERT(virtq_setup(&vp, &rxq, RXQ, QSIZE));
		GUEST_ASSERT(virtq_setup(&vp, &txq, TXQ, QSIZE));
		queues_made = true;
	} else {
		virtq_resetup(&rxq);
		virtq_resetup(&txq);
	}
	virtio_driver_ok(&vp);
}

static bool needs_reset(void)
{
	return virtio_status(&vp) & S_NEEDS_RESET;
}

static bool wait_needs_reset(void)
{
	u64 end = now_ns() + WAIT_NS;

	while (!needs_reset())
		if (now_ns() > end)
			return false;
	return true;
}

static void notify(struct virtq *q)
{
	mmio_write16(q->notify_addr, q->index);
}

/* Put head in the avail ring as the driver would, and notify. */
static void publish(struct virtq *q, u16 head)
{
	q->avail->ring[q->avail_idx & (q->size - 1)] = head;
	barrier();
	WRITE_ONCE(q->avail->idx, ++q->avail_idx);
	notify(q);
}

/* One good frame through the TX queue, used within 2 s. */
static bool good_tx(void)
{
	struct vq_buf b = { (u64)(uintptr_t)buf, HDR + FRAME };
	u64 end = now_ns() + WAIT_NS;

	memset(buf, 0, HDR + FRAME);
	memset(buf + HDR, 0xff, 6);
	buf[HDR + 12] = 0x88;
	buf[HDR + 13] = 0xb5;
	if (!virtq_add(&txq, &b, 1, 0, buf))
		return false;
	notify(&txq);
	while (!virtq_get(&txq, NULL))
		if (now_ns() > end)
			return false;
	return true;
}

/* After a case: a reset brings the device back. */
static void recover(const char *name)
{
	up();
	if (!good_tx())
		GUEST_FAIL("%s: no good frame through after the reset", name);
}

/* A TX chain that must put the device in NEEDS_RESET and never be used. */
static void expect_broken(const char *name)
{
	u16 used = READ_ONCE(txq.used->idx);

	if (!wait_needs_reset())
		GUEST_FAIL("%s: no NEEDS_RESET within 2 s", name);
	GUEST_ASSERT_EQ(READ_ONCE(txq.used->idx), used);
	recover(name);
	gprintf("GUEST hostile: %s ok (NEEDS_RESET, recovered)\n", name);
}

static void set_desc(struct virtq *q, u16 i, u64 addr, u32 len, u16 flags, u16 next)
{
	q->desc[i] = (struct virtq_desc){ .addr = addr, .len = len, .flags = flags, .next = next };
}

/* ---- descriptor chains ---- */

static void c_desc_loop(void)
{
	up();
	set_desc(&txq, 0, (u64)(uintptr_t)buf, HDR, VIRTQ_DESC_F_NEXT, 1);
	set_desc(&txq, 1, (u64)(uintptr_t)buf + HDR, FRAME, VIRTQ_DESC_F_NEXT, 0);
	publish(&txq, 0);
	expect_broken("desc-loop");
}

static void bad_addr(const char *name, u64 addr, u32 len)
{
	up();
	set_desc(&txq, 0, addr, len, 0, 0);
	publish(&txq, 0);
	expect_broken(name);
}

static void c_outside_ram(void)
{
	bad_addr("addr-outside-ram", guest_ram_top() + 0x100000, 64);
}
static void c_pci_hole(void)
{
	bad_addr("addr-in-pci-hole", 0xd0000000ull, 64);
}
static void c_across_ram_end(void)
{
	bad_addr("addr-across-ram-end", guest_ram_top() - 32, 64);
}
static void c_len_4g(void)
{
	bad_addr("len-near-4g", (u64)(uintptr_t)buf, 0xfffffff0u);
}
static void c_addr_wrap(void)
{
	bad_addr("addr-wraps-2^64", 0xffffffffffffffc0ull, 0x80);
}

static void c_head_out_of_range(void)
{
	up();
	publish(&txq, 1000);
	expect_broken("head-out-of-range");
}

static void c_next_out_of_range(void)
{
	up();
	set_desc(&txq, 0, (u64)(uintptr_t)buf, HDR, VIRTQ_DESC_F_NEXT, 0x7fff);
	publish(&txq, 0);
	expect_broken("next-out-of-range");
}

static void c_avail_jump(void)
{
	up();
	set_desc(&txq, 0, (u64)(uintptr_t)buf, HDR + FRAME, 0, 0);
	txq.avail->ring[0] = 0;
	barrier();
	WRITE_ONCE(txq.avail->idx, (u16)(QSIZE + 5));
	notify(&txq);
	expect_broken("avail-idx-jump");
}

/* The device up and one good frame used: what breaks next comes between two frames, with the
 * ring positions off zero, and the used index must stay where the first frame left it. */
static void up_after_frame(const char *name)
{
	up();
	if (!good_tx())
		GUEST_FAIL("%s: the first frame was not used", name);
}

/* Two descriptors no chain in flight uses, each NEXT to the other. */
static void c_loop_between_frames(void)
{
	up_after_frame("loop-between-frames");
	set_desc(&txq, 2, (u64)(uintptr_t)buf, HDR, VIRTQ_DESC_F_NEXT, 3);
	set_desc(&txq, 3, (u64)(uintptr_t)buf + HDR, FRAME, VIRTQ_DESC_F_NEXT, 2);
	publish(&txq, 2);
	expect_broken("loop-between-frames");
}

static void c_avail_jump_between_frames(void)
{
	up_after_frame("avail-jump-between-frames");
	set_desc(&txq, 0, (u64)(uintptr_t)buf, HDR + FRAME, 0, 0);
	txq.avail->ring[txq.avail_idx & (QSIZE - 1)] = 0;
	barrier();
	WRITE_ONCE(txq.avail->idx, (u16)(txq.avail_idx + QSIZE + 5));
	notify(&txq);
	expect_broken("avail-jump-between-frames");
}

static void c_write_before_read(void)
{
	up();
	set_desc(&txq, 0, (u64)(uintptr_t)buf, HDR, VIRTQ_DESC_F_NEXT | VIRTQ_DESC_F_WRITE, 1);
	set_desc(&txq, 1, (u64)(uintptr_t)buf + HDR, FRAME, 0, 0);
	publish(&txq, 0);
	expect_broken("readable-after-writable");
}

/* ---- indirect tables ---- */

static void c_indirect_nested(void)
{
	struct virtq_desc *t = (struct virtq_desc *)itable;

	up();
	t[0] = (struct virtq_desc){ (u64)(uintptr_t)(itable + 4096), 32, F_INDIRECT, 0 };
	set_desc(&txq, 0, (u64)(uintptr_t)t, 16, F_INDIRECT, 0);
	publish(&txq, 0);
	expect_broken("indirect-nested");
}

static void c_indirect_oversized(void)
{
	up();
	/* 4096 entries: more than any chain may have (and not all of it is a table). */
	set_desc(&txq, 0, (u64)(uintptr_t)itable, 16u * 4096, F_INDIRECT, 0);
	publish(&txq, 0);
	expect_broken("indirect-oversized");
}

static void c_indirect_odd_len(void)
{
	up();
	set_desc(&txq, 0, (u64)(uintptr_t)itable, 24, F_INDIRECT, 0);
	publish(&txq, 0);
	expect_broken("indirect-len-not-16n");
}

static void c_indirect_loop(void)
{
	struct virtq_desc *t = (struct virtq_desc *)itable;

	up();
	t[0] = (struct virtq_desc){ (u64)(uintptr_t)buf, HDR, VIRTQ_DESC_F_NEXT, 1 };
	t[1] = (struct virtq_desc){ (u64)(uintptr_t)buf + HDR, FRAME, VIRTQ_DESC_F_NEXT, 0 };
	set_desc(&txq, 0, (u64)(uintptr_t)t, 32, F_INDIRECT, 0);
	publish(&txq, 0);
	expect_broken("indirect-loop");
}

static void c_indirect_and_next(void)
{
	up();
	set_desc(&txq, 0, (u64)(uintptr_t)itable, 16, F_INDIRECT | VIRTQ_DESC_F_NEXT, 1);
	set_desc(&txq, 1, (u64)(uintptr_t)buf, HDR + FRAME, 0, 0);
	publish(&txq, 0);
	expect_broken("indirect-with-next");
}

static void c_indirect_outside_ram(void)
{
	up();
	set_desc(&txq, 0, guest_ram_top() + 0x10000, 16 * 4, F_INDIRECT, 0);
	publish(&txq, 0);
	expect_broken("indirect-outside-ram");
}

/* ---- queue set-up ---- */

/* Queue sizes 0 and 100: refused when written (the register keeps a power of two), or the
 * device refuses DRIVER_OK with NEEDS_RESET; either way it comes back. */
static void bad_qsize(const char *name, u16 size)
{
	u16 got;
	u8 st;

	virtio_reset(&vp);
	GUEST_ASSERT(virtio_negotiate(&vp, 1ull << VIRTIO_NET_F_MAC));
	virtq_resetup(&rxq);
	virtq_resetup(&txq);
	mmio_write16(vp.common + CC_Q_SELECT, TXQ);
	mmio_write16(vp.common + CC_Q_SIZE, size);
	got = mmio_read16(vp.common + CC_Q_SIZE);
	mmio_write8(vp.common + CC_STATUS, 1 | 2 | 8 | S_DRIVER_OK);
	st = virtio_status(&vp);
	if (got == size && !(st & S_NEEDS_RESET))
		GUEST_FAIL("%s: queue size %u taken and the device runs (status 0x%x)", name, size,
			   st);
	recover(name);
	gprintf("GUEST hostile: %s ok (size reads %u, status 0x%x, recovered)\n", name, got, st);
}

static void c_qsize_zero(void)
{
	bad_qsize("queue-size-0", 0);
}
static void c_qsize_odd(void)
{
	bad_qsize("queue-size-100", 100);
}

/* While DRIVER_OK, the queue's registers are frozen: moving its rings or disabling it does
 * nothing, the queue keeps working. */
static void c_qchange_running(void)
{
	up();
	mmio_write16(vp.common + CC_Q_SELECT, TXQ);
	mmio_write64(vp.common + CC_Q_DESC, 0xd0000000ull);
	mmio_write16(vp.common + CC_Q_SIZE, 2);
	mmio_write16(vp.common + CC_Q_ENABLE, 0);
	mmio_write16(vp.common + CC_Q_ENABLE, 1);
	GUEST_ASSERT_EQ(mmio_read32(vp.common + CC_Q_DESC), (u32)(uintptr_t)txq.desc);
	GUEST_ASSERT_EQ(mmio_read16(vp.common + CC_Q_SIZE), QSIZE);
	GUEST_ASSERT(!needs_reset());
	if (!good_tx())
		GUEST_FAIL("queue-change-while-running: the queue stopped working");
	/* Enabling a queue that was never set up, while running. */
	mmio_write16(vp.common + CC_Q_SELECT, 2);
	mmio_write16(vp.common + CC_Q_ENABLE, 1);
	if (!good_tx())
		GUEST_FAIL("queue-enable-while-running: the queue stopped working");
	recover("queue-change-while-running");
	gprintf("GUEST hostile: queue-change-while-running ok (ignored, queue still works)\n");
}

/* ---- read-only registers ---- */

static void c_readonly_writes(void)
{
	u8 mac[6], mac2[6];
	u32 df;
	u16 nq, noff;

	up();
	for (int i = 0; i < 6; i++)
		mac[i] = virtio_cfg_read8(&vp, (u32)i);
	for (u32 off = 0; off < 12; off++)
		mmio_write8(vp.device + off, 0xa5);
	mmio_write32(vp.device, 0xffffffffu);
	mmio_write32(vp.device + 0x100, 0x12345678); /* past the config's end */
	for (int i = 0; i < 6; i++)
		mac2[i] = virtio_cfg_read8(&vp, (u32)i);
	GUEST_ASSERT(!memcmp(mac, mac2, 6));
	df = mmio_read32(vp.common + CC_DF);
	nq = mmio_read16(vp.common + CC_NUMQ);
	mmio_write16(vp.common + CC_Q_SELECT, TXQ);
	noff = mmio_read16(vp.common + CC_Q_NOTIFY_OFF);
	mmio_write32(vp.common + CC_DF, ~df);
	mmio_write16(vp.common + CC_NUMQ, 0x7fff);
	mmio_write16(vp.common + CC_Q_NOTIFY_OFF, 0x1234);
	mmio_write8(vp.isr, 0xff);
	GUEST_ASSERT_EQ(mmio_read32(vp.common + CC_DF), df);
	GUEST_ASSERT_EQ(mmio_read16(vp.common + CC_NUMQ), nq);
	GUEST_ASSERT_EQ(mmio_read16(vp.common + CC_Q_NOTIFY_OFF), noff);
	if (!good_tx())
		GUEST_FAIL("readonly-writes: the queue stopped working");
	recover("readonly-writes");
	gprintf("GUEST hostile: readonly-writes ok (MAC, device_feature, num_queues, notify_off unchanged)\n");
}

/* ---- MSI-X table and PBA ---- */

static void c_msix_abuse(void)
{
	u8 cap = pci_find_cap(&vp.pci, 0x11, 0);
	u32 tbl, pba;
	u64 base_t, base_p;
	u16 ctrl, n;

	GUEST_ASSERT(cap);
	up();
	ctrl = pci_read16(&vp.pci, cap + 2);
	n = (u16)((ctrl & 0x7ff) + 1);
	tbl = pci_read32(&vp.pci, cap + 4);
	pba = pci_read32(&vp.pci, cap + 8);
	base_t = pci_bar(&vp.pci, tbl & 7, NULL) + (tbl & ~7u);
	base_p = pci_bar(&vp.pci, pba & 7, NULL) + (pba & ~7u);
	/* Garbage messages (no LAPIC there, reserved data), unmasked, MSI-X on and off, vectors
	 * past the table, every byte of the PBA written, queues pointed at bogus vectors. */
	for (u16 v = 0; v < n + 4; v++) {
		u64 e = base_t + 16ull * v;

		mmio_write32(e, 0x12345678);
		mmio_write32(e + 4, 0xffffffffu);
		mmio_write32(e + 8, 0xffffffffu);
		mmio_write32(e + 12, 0);
	}
	pci_write16(&vp.pci, cap + 2, 0x8000);
	for (u32 off = 0; off < 64; off++)
		mmio_write8(base_p + off, 0xff);
	mmio_write16(vp.common + 0x10, 0x7ff0); /* msix_config */
	mmio_write16(vp.common + CC_Q_SELECT, TXQ);
	mmio_write16(vp.common + 0x1a, (u16)(n + 3)); /* queue_msix_vector */
	if (!good_tx())
		GUEST_FAIL("msix-abuse: the queue stopped working");
	pci_write16(&vp.pci, cap + 2, 0xc000); /* enable + function mask */
	(void)mmio_read32(base_p);
	pci_write16(&vp.pci, cap + 2, 0);
	for (u16 v = 0; v < n; v++)
		mmio_write32(base_t + 16ull * v + 12, 1);
	recover("msix-abuse");
	gprintf("GUEST hostile: msix-abuse ok (%u vectors)\n", n);
}

/* ---- odd accesses to every BAR ---- */

static u64 rd(u64 a, int w)
{
	switch (w) {
	case 1:
		return mmio_read8(a);
	case 2:
		return mmio_read16(a);
	case 4:
		return mmio_read32(a);
	default:
		return *(volatile u64 *)a;
	}
}

static void wr(u64 a, int w, u64 v)
{
	switch (w) {
	case 1:
		mmio_write8(a, (u8)v);
		break;
	case 2:
		mmio_write16(a, (u16)v);
		break;
	case 4:
		mmio_write32(a, (u32)v);
		break;
	default:
		*(volatile u64 *)a = v;
		break;
	}
}

static void c_bar_accesses(void)
{
	static const u32 offs[] = { 0,	    1,	    2,	    3,	    5,	    7,	    0x13,
				    0x15,   0x17,   0x1b,   0x21,   0x2f,   0x33,   0x37,
				    0x3f,   0x7ff,  0xffd,  0xfff,  0x1000, 0x1001, 0x1ffe,
				    0x2005, 0x2fff, 0x3000, 0x3001, 0x3003, 0x3ffd, 0x3fff };
	u64 accesses = 0, x = 0;

	up();
	for (int b = 0; b < 6; b++) {
		bool io;
		u64 base = pci_bar(&vp.pci, b, &io);
		u32 size;

		if (!base || io)
			continue;
		/* The BAR's size by the sizing protocol (decode off meanwhile). */
		{
			u16 cmd = pci_read16(&vp.pci, PCI_COMMAND);
			u32 old = pci_read32(&vp.pci, (u16)(PCI_BAR0 + 4 * b));

			pci_write16(&vp.pci, PCI_COMMAND, (u16)(cmd & ~PCI_CMD_MEM));
			pci_write32(&vp.pci, (u16)(PCI_BAR0 + 4 * b), 0xffffffffu);
			size = ~(pci_read32(&vp.pci, (u16)(PCI_BAR0 + 4 * b)) & ~0xfu) + 1;
			pci_write32(&vp.pci, (u16)(PCI_BAR0 + 4 * b), old);
			pci_write16(&vp.pci, PCI_COMMAND, cmd);
		}
		for (size_t i = 0; i < ARRAY_SIZE(offs); i++) {
			if (offs[i] >= size)
				continue;
			for (int w = 1; w <= 8; w *= 2) {
				/* Reads anywhere; writes avoid the status byte (a reset is its own case). */
				x ^= rd(base + offs[i], w);
				if (b != 0 || offs[i] > 0x14 || offs[i] + (u32)w <= 0x14)
					wr(base + offs[i], w, 0x5a5a5a5a5a5a5a5aull);
				accesses += 2;
			}
		}
	}
	recover("bar-odd-accesses");
	gprintf("GUEST hostile: bar-odd-accesses ok (%llu accesses, xor 0x%llx)\n", accesses, x);
}

/* ---- virtio-console ---- */

/* Reset, negotiate, lay out the queues; DRIVER_OK is the caller's. */
static void con_setup(void)
{
	virtio_reset(&cvp);
	GUEST_ASSERT(virtio_negotiate(&cvp, 1ull << VIRTIO_F_INDIRECT_DESC));
	if (!con_queues_made) {
		GUEST_ASSERT(virtq_setup(&cvp, &crx, 0, QSIZE));
		GUEST_ASSERT(virtq_setup(&cvp, &ctx, CON_TX, QSIZE));
		con_queues_made = true;
	} else {
		virtq_resetup(&crx);
		virtq_resetup(&ctx);
	}
}

/*
 * One console TX chain of 1024 descriptors that all cover the same 16 MiB of text: 16 GiB of
 * output, made available before DRIVER_OK, so the device's thread takes it as it starts. A
 * reset right after DRIVER_OK must come back at once (the vCPU writing the status waits for
 * the device to stop), not after the device wrote 16 GiB to the terminal; after it the
 * console prints a short chain. (The text's lines, CON_LINE bytes each, divide the device's
 * pieces of output, so what came out before the reset ends at a line end.)
 */
static void c_console_huge_chain(void)
{
	static struct vq_buf b[CON_ALIASES];
	static const char line[] = "GUEST hostile: console prints after the reset\n";
	struct vq_buf one = { (u64)(uintptr_t)line, sizeof(line) - 1 };
	u64 end;

	if (!con_found)
		GUEST_FAIL("console-huge-chain: no virtio-console (lkvm --console virtio)");
	if (!con_text) { /* here at CPL3: 16 MiB zeroed and filled in emulated kernel mode would crawl */
		con_text = galloc(CON_TEXT, 4096);
		con_table = galloc(sizeof(struct virtq_desc) * CON_ALIASES, 4096);
		for (u32 i = 0; i < CON_TEXT; i++)
			con_text[i] = i % CON_LINE == CON_LINE - 1 ? '\n' : 'x';
	}
	con_setup();
	for (int i = 0; i < CON_ALIASES; i++)
		b[i] = (struct vq_buf){ (u64)(uintptr_t)con_text, CON_TEXT };
	GUEST_ASSERT(virtq_add_indirect(&ctx, con_table, b, CON_ALIASES, 0, con_text));
	virtio_driver_ok(&cvp);
	virtio_reset(&cvp);
	con_setup();
	virtio_driver_ok(&cvp);
	GUEST_ASSERT(virtq_add(&ctx, &one, 1, 0, &one));
	notify(&ctx);
	end = now_ns() + WAIT_NS;
	while (!virtq_get(&ctx, NULL))
		if (now_ns() > end)
			GUEST_FAIL(
				"console-huge-chain: the console took no output after the reset");
	gprintf("GUEST hostile: console-huge-chain ok (reset returned, the console works after it)\n");
}

struct hcase {
	const char *name;
	void (*fn)(void);
};

static const struct hcase cases[] = {
	{ "desc-loop", c_desc_loop },
	{ "addr-outside-ram", c_outside_ram },
	{ "addr-in-pci-hole", c_pci_hole },
	{ "addr-across-ram-end", c_across_ram_end },
	{ "len-near-4g", c_len_4g },
	{ "addr-wraps", c_addr_wrap },
	{ "head-out-of-range", c_head_out_of_range },
	{ "next-out-of-range", c_next_out_of_range },
	{ "avail-idx-jump", c_avail_jump },
	{ "loop-between-frames", c_loop_between_frames },
	{ "avail-jump-between-frames", c_avail_jump_between_frames },
	{ "readable-after-writable", c_write_before_read },
	{ "indirect-nested", c_indirect_nested },
	{ "indirect-oversized", c_indirect_oversized },
	{ "indirect-odd-len", c_indirect_odd_len },
	{ "indirect-loop", c_indirect_loop },
	{ "indirect-with-next", c_indirect_and_next },
	{ "indirect-outside-ram", c_indirect_outside_ram },
	{ "queue-size-0", c_qsize_zero },
	{ "queue-size-100", c_qsize_odd },
	{ "queue-change-while-running", c_qchange_running },
	{ "readonly-writes", c_readonly_writes },
	{ "msix-abuse", c_msix_abuse },
	{ "bar-odd-accesses", c_bar_accesses },
	{ "console-huge-chain", c_console_huge_chain },
};

static void user_main(void *arg)
{
	char want[40] = "";
	u64 repeat = cmdline_u64("repeat", 1);
	int ran = 0;

	cmdline_get("case", want, sizeof(want));
	for (u64 r = 0; r < repeat; r++) {
		for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
			if (want[0] && strcmp(want, cases[i].name))
				continue;
			cases[i].fn();
			ran++;
		}
	}
	if (!ran)
		GUEST_FAIL("no case named '%s'", want);
	/* Every case (or the one named) ran its repeats: each checked its own recovery. */
	GUEST_ASSERT_EQ(ran, (want[0] ? 1 : ARRAY_SIZE(cases)) * repeat);
	/* The rest of the machine: pvpanic's BAR answers, the console prints. */
	GUEST_ASSERT_EQ(mmio_read8(pvpanic_bar), 3);
	gprintf("GUEST hostile: ALL OK (%d cases)\n", ran);
}

void guest_main(void)
{
	struct pci_dev d;
	const char *why;

	clock_init();
	if ((why = virtio_pci_find(&vp, 0x1041, "virtio-net")))
		GUEST_FAIL("%s", why);
	GUEST_ASSERT(pci_find(0x1b36, 0x0011, &pvpanic));
	pvpanic_bar = pci_bar(&pvpanic, 0, NULL);
	pci_enable(&pvpanic, PCI_CMD_MEM);
	buf = galloc(4096, 4096);
	itable = galloc(16 * 4096 + 8192, 4096);
	if (pci_find(0x1af4, 0x1043, &d)) {
		GUEST_ASSERT(virtio_pci_init(&cvp, &d));
		con_found = true;
	}
	gprintf("GUEST hostile: start, RAM top 0x%llx\n", guest_ram_top());
	guest_run_user(user_main, NULL);
}
