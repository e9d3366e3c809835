/* C guest: hvc0 (virtio-console's one port over virtio-pci) as polled input, as lkvm --console virtio delivers the terminal's bytes. */
#include "guest.h"

#define VIRTIO_CONSOLE_DEV 0x1043 /* modern virtio-pci: 0x1040 + device type 3 */
#define RXQ 0
#define TXQ 1
#define NBUF 16
#define BUF 64 /* small, so a long line spans many chains */

static struct {
	struct virtio_pci vp;
	struct virtq rxq, txq;
	u8 *buf;
	/* Bytes received but not yet handed out, in receive buffer `held` (-1: none). */
	const u8 *pending;
	u32 pending_len;
	int held;
} H = { .held = -1 };

static void post_rx(int i)
{
	struct vq_buf b = { (u64)(uintptr_t)(H.buf + (u64)i * BUF), BUF };

	GUEST_ASSERT(virtq_add(&H.rxq, &b, 0, 1, (void *)(uintptr_t)(i + 1)));
}

bool hvc_init(void)
{
	struct pci_dev d;

	if (!pci_find(0x1af4, VIRTIO_CONSOLE_DEV, &d))
		return false;
	GUEST_ASSERT(virtio_pci_init(&H.vp, &d));
	virtio_reset(&H.vp);
	GUEST_ASSERT(virtio_negotiate(&H.vp, 0));
	GUEST_ASSERT(virtq_setup(&H.vp, &H.rxq, RXQ, NBUF));
	GUEST_ASSERT(virtq_setup(&H.vp, &H.txq, TXQ, NBUF));
	H.buf = galloc((u64)NBUF * BUF, 64);
	for (int i = 0; i < NBUF; i++)
		post_rx(i);
	virtio_driver_ok(&H.vp);
	virtq_kick(&H.rxq);
	return true;
}

int hvc_poll(void)
{
	if (!H.pending_len) {
		void *tok;
		u32 len;

		if (H.held >= 0) { /* the last chain is used up: give it back */
			post_rx(H.held);
			virtq_kick(&H.rxq);
			H.held = -1;
		}
		tok = virtq_get(&H.rxq, &len);
		if (!tok)
			return -1;
		H.held = (int)(uintptr_t)tok - 1;
		if (H.held < 0 || H.held >= NBUF || len > BUF)
			GUEST_FAIL("hvc0: used buffer %d with length %u", H.held, len);
		H.pending = H.buf + (u64)H.held * BUF;
		H.pending_len = len;
		if (!len)
			return -1;
	}
	H.pending_len--;
	return *H.pending++;
}
