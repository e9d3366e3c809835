/* Guest console-echo: reads lines of terminal input from the UART or hvc0 (virtio-console) and reports each in hex, so the host sees exactly what arrived. */
#include "guest.h"

/*
 * Input comes from the virtio-console when lkvm has one (--console virtio sends terminal input
 * there and nowhere else), else from the UART. Once it reads, the guest prints
 *     GUEST console-echo: ready (hvc0|uart)
 * and then, for every line (the bytes before a '\n'):
 *     GUEST console-echo: line N len=L hex=HH...
 * with every byte as two hex digits, control bytes included (Ctrl-a arrives as 01). The line
 * "done" ends the run (exit 0), "panic" fails it through pvpanic (exit 2); any other line is
 * only reported. Everything runs at CPL0 with interrupts off: both devices are polled.
 */

#define VIRTIO_VENDOR 0x1af4
#define VIRTIO_CONSOLE_DEV 0x1043 /* modern virtio-pci: 0x1040 + device type 3 */
#define RXQ 0
#define TXQ 1
#define NBUF 16
#define BUF 64 /* small, so a long line spans many chains */
#define LINE_MAX 2048

static struct virtio_pci vp;
static struct virtq rxq, txq;
static u8 *rxbuf;
static bool hvc;

/* Bytes received but not yet handed out. */
static const u8 *pending;
static u32 pending_len;
static int pending_buf = -1;

static void post_rx(int i)
{
	struct vq_buf b = { (u64)(uintptr_t)(rxbuf + (u64)i * BUF), BUF };

	GUEST_ASSERT(virtq_add(&rxq, &b, 0, 1, (void *)(uintptr_t)(i + 1)));
}

static void hvc_init(const struct pci_dev *d)
{
	GUEST_ASSERT(virtio_pci_init(&vp, d));
	virtio_reset(&vp);
	GUEST_ASSERT(virtio_negotiate(&vp, 0));
	GUEST_ASSERT(virtq_setup(&vp, &rxq, RXQ, NBUF));
	GUEST_ASSERT(virtq_setup(&vp, &txq, TXQ, NBUF));
	rxbuf = galloc((u64)NBUF * BUF, 64);
	for (int i = 0; i < NBUF; i++)
		post_rx(i);
	virtio_driver_ok(&vp);
	virtq_kick(&rxq);
}

static u8 hvc_getc(void)
{
	u8 c;

	while (!pending_len) {
		void *tok;
		u32 len;

		if (pending_buf >= 0) { /* the last chain is used up: give it back */
			post_rx(pending_buf);
			virtq_kick(&rxq);
			pending_buf = -1;
		}
		tok = virtq_get(&rxq, &len);
		if (!tok) {
			cpu_relax();
			continue;
		}
		pending_buf = (int)(uintptr_t)tok - 1;
		if (pending_buf < 0 || pending_buf >= NBUF || len > BUF)
			GUEST_FAIL("hvc0: used buffer %d with length %u", pending_buf, len);
		pending = rxbuf + (u64)pending_buf * BUF;
		pending_len = len;
	}
	c = *pending++;
	pending_len--;
	return c;
}

static u8 getc(void)
{
	return hvc ? hvc_getc() : serial_getc();
}

static void report(u64 n, const u8 *line, size_t len)
{
	static const char digits[] = "0123456789abcdef";
	char hex[2 * 64 + 1];

	gprintf("GUEST console-echo: line %llu len=%llu hex=", n, (u64)len);
	for (size_t at = 0; at < len; at += 64) {
		size_t k = 0;

		for (size_t i = at; i < len && i < at + 64; i++) {
			hex[k++] = digits[line[i] >> 4];
			hex[k++] = digits[line[i] & 15];
		}
		hex[k] = '\0';
		serial_puts(hex);
	}
	serial_puts("\n");
}

void guest_main(void)
{
	static u8 line[LINE_MAX];
	struct pci_dev d;
	size_t len = 0;
	u64 n = 0;

	hvc = pci_find(VIRTIO_VENDOR, VIRTIO_CONSOLE_DEV, &d);
	if (hvc)
		hvc_init(&d);
	gprintf("GUEST console-echo: ready (%s)\n", hvc ? "hvc0" : "uart");
	for (;;) {
		u8 c = getc();

		if (c != '\n') {
			if (len == LINE_MAX)
				GUEST_FAIL("a line longer than %d bytes", LINE_MAX);
			line[len++] = c;
			continue;
		}
		report(++n, line, len);
		if (len == 4 && !memcmp(line, "done", 4))
			return;
		if (len == 5 && !memcmp(line, "panic", 5))
			GUEST_FAIL("panic requested from the console");
		len = 0;
	}
}
