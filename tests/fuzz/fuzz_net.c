/* Fuzz target: virtio-net TX chains (header + frame), control-queue commands and RX buffers, served through the fake backend. */
#include <stdlib.h>
#include <string.h>
#include <linux/virtio_net.h>

#include "fuzz.h"
#include "lkvm/kvm.h"
#include "lkvm/virtio-net.h"

/* Input: an 8-byte header, then the first bytes of guest RAM (the rest is zero).
 *   u8 mode: bit 0 serve the control queue, else bit 3 RX, else TX; bit 1 two queue pairs
 *            with MQ, bit 2 the data queue of pair 1 (with bit 1), bits 4-5 rounds - 1,
 *            bit 6 -n trace=on (bench frames' stamps read from TX chains and RX frames);
 *   u8 queue size log2 (mod 7: 1..64); u8 feature bits (0 EVENT_IDX, 1 INDIRECT_DESC,
 *   2 MRG_RXBUF, 3 CTRL_RX, 4 CSUM + HOST_TSO4/6); u8 RX frames the host sends before each
 *   round (bits 0-2: how many, bits 3-7: where in a list of sizes to start); u8 avail->idx
 *   bump per round[4].
 * The served queue's rings sit at the bottom of RAM (desc 0x0, avail 0x400, used 0x600),
 * where the input writes; buffers may point anywhere. The other queues are set up high. */
#define NF_RAM KiB(32)
#define NF_HDR 8
#define NF_DESC 0x0
#define NF_AVAIL 0x400
#define NF_USED 0x600
#define NF_OTHER(i) (0x4000 + 0x800 * (u64)(i)) /* desc; avail +0x400; used +0x600 */
#define F(b) (1ULL << (b))

static u8 ram[NF_RAM] __attribute__((aligned(4096)));
static u8 frame[NET_VNET_HDR_LEN + 70000];

static u64 features_from(u8 bits, bool mq)
{
	u64 f = F(VIRTIO_F_VERSION_1) | F(VIRTIO_NET_F_CTRL_VQ) | F(VIRTIO_NET_F_MAC);

	if (bits & 1)
		f |= F(VIRTIO_RING_F_EVENT_IDX);
	if (bits & 2)
		f |= F(VIRTIO_RING_F_INDIRECT_DESC);
	if (bits & 4)
		f |= F(VIRTIO_NET_F_MRG_RXBUF);
	if (bits & 8)
		f |= F(VIRTIO_NET_F_CTRL_RX);
	if (bits & 16)
		f |= F(VIRTIO_NET_F_CSUM) | F(VIRTIO_NET_F_HOST_TSO4) | F(VIRTIO_NET_F_HOST_TSO6);
	if (mq)
		f |= F(VIRTIO_NET_F_MQ);
	return f;
}

int fuzz_net(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	u8 mode = (u8)fuzz_take(&in, 1), qlog = (u8)fuzz_take(&in, 1),
	   fbits = (u8)fuzz_take(&in, 1);
	u8 bump[4];
	bool mq = mode & 2;
	int pairs = mq ? 2 : 1, nq = 2 * pairs + 1, ctl = 2 * pairs;
	bool rx = !(mode & 1) && (mode & 8);
	int qi = (mode & 1) ? ctl : ((mq && (mode & 4)) ? 2 : 0) + !rx;
	int rounds = ((mode >> 4) & 3) + 1;
	u16 qsize = (u16)(1u << (qlog % 7));
	u64 f = features_from(fbits, mq);
	struct net_opts o = { .mode = NET_MODE_FAKE, .queue_pairs = pairs, .trace = mode & 0x40 };
	struct net_backend *be[NET_MAX_QUEUE_PAIRS] = { 0 }, *mine[NET_MAX_QUEUE_PAIRS];
	struct virtio_device *vdev;
	struct virtio_net *n;
	struct kvm *kvm;
	u8 rxf = (u8)fuzz_take(&in, 1);

	for (int i = 0; i < 4; i++)
		bump[i] = (u8)fuzz_take(&in, 1);
	memset(ram, 0, sizeof(ram));
	memcpy(ram, in.p, MIN(in.left, sizeof(ram)));

	kvm = calloc(1, sizeof(*kvm));
	FUZZ_ASSERT(kvm && gmem_init(&kvm->mem, ram, NF_RAM) == 0);
	for (int i = 0; i < pairs; i++)
		FUZZ_ASSERT((be[i] = mine[i] = net_fake_create()) != NULL);
	FUZZ_ASSERT(virtio_net_create_bare(kvm, &o, be, &n) == 0);
	vdev = virtio_net_vdev(n);
	FUZZ_ASSERT(vdev->ops->features_ok(vdev, f));
	vdev->features = f;
	for (int i = 0; i < nq; i++) {
		struct virtio_queue *q = &vdev->q[i];
		u64 d = i == qi ? NF_DESC : NF_OTHER(i);
		u16 s = i == qi ? qsize : 8;

		FUZZ_ASSERT(vq_init(&q->vq, &kvm->mem, s, d, d + NF_AVAIL, d + NF_USED,
				    f & F(VIRTIO_RING_F_EVENT_IDX)) == 0);
		q->size = s;
		q->enabled = true;
	}
	atomic_store(&vdev->status, VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER |
					    VIRTIO_CONFIG_S_FEATURES_OK |
					    VIRTIO_CONFIG_S_DRIVER_OK);

	for (int r = 0; r < rounds; r++) {
		struct vring_avail *avail = (struct vring_avail *)(ram + NF_AVAIL);
		ssize_t len;

		for (int i = 0; rx && i < (rxf & 7); i++) {
			static const u32 sizes[] = { 60, 1514, 1, 65550, 9000, 13, 4096 };
			u32 flen = sizes[((rxf >> 3) + i) % ARRAY_SIZE(sizes)];

			memset(frame, 0x40 + i, flen);
			(void)!net_fake_inject(mine[qi / 2], frame, flen);
		}
		FUZZ_ASSERT(virtio_net_serve_once(n, qi) == 0);
		/* What reached the host: a header and at most the largest frame, nothing else. */
		for (int p = 0; p < pairs; p++)
			while ((len = net_fake_take(mine[p], frame, sizeof(frame))) > 0)
				FUZZ_ASSERT(len >= NET_VNET_HDR_LEN &&
					    len <= NET_VNET_HDR_LEN + 65550);
		FUZZ_ASSERT(len == 0);
		avail->idx = (u16)(avail->idx + bump[r]);
	}
	virtio_net_destroy(n);
	free(kvm);
	return 0;
}
