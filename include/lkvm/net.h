/* Host network backends behind one small interface (tap, passt, a fake for tests), and the -n option. */
#ifndef LKVM_NET_H
#define LKVM_NET_H

#include <errno.h>
#include <sys/uio.h>

#include "lkvm/opt.h"
#include "lkvm/util.h"
#include "lkvm/virtio-trans.h"

#define NET_MAX_QUEUE_PAIRS 8
/* sizeof(struct virtio_net_hdr_v1): the only header layout the device and backends use. */
#define NET_VNET_HDR_LEN 12
/* batch=on: TX chains per send_batch call (one io_uring_enter), and RX buffers offered per
 * recv_batch call; `lkvm bench net`'s tap floors batch the same way. */
#define NET_TX_BATCH 64
#define NET_RX_BATCH 32

/* -n mode=user,fwd=...: at most this many forwards per NIC. */
#define NET_MAX_FWDS 16
/* One forward as passt takes it: -t or -u with "ADDR/HOSTPORT:GUESTPORT" (ADDR IPv4). */
struct net_fwd {
	bool udp;
	char spec[32]; /* "255.255.255.255/65535:65535" at most */
};

enum net_mode { NET_MODE_NONE, NET_MODE_TAP, NET_MODE_USER, NET_MODE_FAKE };

/* How a TX thread learns about new chains (see net_tx_thread in virtio/net-tx.c). */
enum net_tx_mode {
	NET_TX_KICK,  /* drain on every notify (EVENT_IDX keeps notifies rare) */
	NET_TX_TIMER, /* on a notify keep notifications off for tx_timer_us, then drain */
	NET_TX_POLL,  /* after draining keep polling the ring for up to poll_us, then re-enable */
	NET_TX_NR,
};
#define NET_TX_TIMER_US_DEFAULT 150 /* QEMU's tx=timer default */
#define NET_POLL_US_DEFAULT 50
#define NET_TX_US_MAX 10000 /* tx_timer_us and poll_us: 1..10 ms */

/* -n vhost=: the data rings in lkvm's threads (off), in /dev/vhost-net (on: an error where it
 * cannot be had), or in vhost-net where it can be had and in lkvm otherwise (auto). */
enum net_vhost_mode { NET_VHOST_OFF, NET_VHOST_ON, NET_VHOST_AUTO, NET_VHOST_NR };

/* What `-n mode=tap|user|none,tapif=NAME,guest_mac=MAC,host_ip=IP/PREFIX,script=PATH|none,socket=PATH,
 * ioeventfd=on|off,queues=N,tx=kick|timer|poll,tx_timer_us=N,poll_us=N,batch=on|off,trans=pci|mmio,
 * vhost=on|off|auto,trace=on|off,fwd=SPEC...` says (kvmtool's names, plus the TX strategy, batching,
 * passt's socket and forwards, and vhost). Unset strings are
 * empty. */
struct net_opts {
	enum net_mode mode;
	char tapif[16]; /* IFNAMSIZ; empty: let the kernel pick (tap%d) */
	u8 guest_mac[6];
	bool mac_set;
	char host_ip[48]; /* "10.0.0.1/24" or empty: leave the tap unconfigured */
	char script[256]; /* "none" or empty: no script; else run "script IFNAME" after creation */
	char socket[108]; /* mode=user: passt's socket (sun_path); empty: lkvm starts passt */
	bool ioeventfd;	  /* default true; false: notifies trap to the vCPU thread */
	enum virtio_trans trans;   /* trans=pci|mmio; default (zero) VIRTIO_TRANS_PCI */
	bool trans_set;		   /* trans= given (else --virtio-transport decides) */
	int queue_pairs;	   /* default 1, up to NET_MAX_QUEUE_PAIRS */
	bool queues_set;	   /* queues= given (a restore keeps the snapshot's) */
	enum net_tx_mode tx_mode;  /* default NET_TX_KICK */
	u32 tx_timer_us;	   /* tx=timer: hold time (0 in a zeroed struct: the default) */
	u32 poll_us;		   /* tx=poll: the longest poll window (0: the default) */
	bool batch;		   /* batch=on (net_parse_opts's default): many frames per system
				   * call where the backend can (tap: io_uring) */
	bool batch_set;		   /* batch= given (an unavailable batch=on is then a warning) */
	enum net_vhost_mode vhost; /* default NET_VHOST_OFF; mode=tap only */
	bool trace; /* trace=on: time the stages of bench rr round trips (virtio/net-trace.c) */
	/* fwd=tcp|udp:[ADDR:]HOSTPORT:GUESTPORT, repeatable (mode=user, lkvm's own passt). */
	int nr_fwds;
	struct net_fwd fwd[NET_MAX_FWDS];
};

/* "kick", "timer", "poll" (for messages and stats); the same as -n tx='s choices. */
const char *net_tx_mode_name(enum net_tx_mode m);
extern const struct opt_choice net_tx_choices[NET_TX_NR + 1];
/* -n's keys: what net_parse_opts reads, and their help. */
extern const struct opt_set net_opt_set;

/* Parse one -n value. Returns 0 or -EINVAL with a one-line reason in err. */
int net_parse_opts(const char *arg, struct net_opts *o, char *err, size_t errlen) __must_check;

/* "aa:bb:cc:dd:ee:ff" (exactly six hex pairs) into mac. Syntax only: multicast and
 * all-zero addresses are accepted here (net_parse_opts rejects them). 0 or -EINVAL. */
int net_parse_mac(const char *s, u8 mac[6]) __must_check;
/* "A.B.C.D/N" (N 0..32) or "A.B.C.D" (meaning /24); addr in network byte order.
 * 0 or -EINVAL. */
int net_parse_host_ip(const char *s, u32 *addr_be, int *prefix) __must_check;

/* Offloads the guest negotiated, to apply to the backend (TUNSETOFFLOAD). */
struct net_offloads {
	bool csum, tso4, tso6, ecn, ufo;
};

/* Which offloads the backend may use towards the guest, from the negotiated
 * VIRTIO_NET_F_GUEST_* feature bits (virtio 1.2 5.1.3.1: TSO/UFO need GUEST_CSUM,
 * ECN needs TSO4 or TSO6). Pass the result to ops->set_offloads. */
void net_offloads_from_features(u64 guest_features, struct net_offloads *off);

struct net_backend;

/* One frame of a batch: its iovecs (guest memory, zero-copy) and, after the call, what the
 * single-frame op would have returned for it. */
struct net_io {
	const struct iovec *iov;
	int iovcnt;
	ssize_t res;
};

/* A batch call's result: requests were made and may still be in flight (the kernel failed in
 * the middle of a call), so no res is meaningful and the kernel may yet read or write through
 * every io's iovecs, and the iovec arrays themselves, at any later time: the caller must never
 * reuse or free that memory (guest buffers included) again. The backend takes no more batches
 * (later calls return another -errno, attempting nothing). */
#define NET_BATCH_IN_DOUBT (-EINPROGRESS)

struct net_backend_ops {
	const char *name; /* "tap", "passt": what the messages call it */
	/* Send one frame: iov starts with a struct virtio_net_hdr_v1 (12 bytes), then the
	 * frame, possibly split anywhere. Returns bytes sent, -EAGAIN when the backend is
	 * full (caller waits for writability), or another -errno (frame dropped). */
	ssize_t (*send)(struct net_backend *be, const struct iovec *iov, int iovcnt);
	/* Receive one frame into iov (12-byte virtio_net_hdr_v1 first, filled by the
	 * backend); returns the bytes written including the header, -EAGAIN when nothing
	 * is pending, or another -errno. A frame longer than iov is consumed and cut
	 * silently, as tun's read does (the result is then the iov's total): a caller that
	 * must not deliver cut frames offers more room than the largest frame, or knows
	 * the size from peek_len first. */
	ssize_t (*recv)(struct net_backend *be, const struct iovec *iov, int iovcnt);
	/* Optional: many frames in one call, in order. send_batch sends io[0..n) as send
	 * would each (res: bytes, -EAGAIN: not sent, the backend was full, or -errno:
	 * dropped); recv_batch fills io[0..n) as recv would each, in order (res: bytes,
	 * -EAGAIN: nothing was pending for it). A later io may hold a frame after an earlier
	 * one saw -EAGAIN (a frame arrived in between). Both return 0, or -errno when no io
	 * was attempted (then no res is meaningful), or NET_BATCH_IN_DOUBT. */
	int (*send_batch)(struct net_backend *be, struct net_io *io, int n);
	int (*recv_batch)(struct net_backend *be, struct net_io *io, int n);
	/* Bytes of the next pending frame including the header, 0 when none (optional). */
	ssize_t (*peek_len)(struct net_backend *be);
	int (*set_offloads)(struct net_backend *be, const struct net_offloads *off);
	/* Attach (on) or detach this queue from the host's steering: a detached queue is
	 * given no frames (what it held is dropped), sending through it still works.
	 * 0 or -errno. Needed by every backend of a device with more than one pair. */
	int (*set_enabled)(struct net_backend *be, bool on);
	void (*close)(struct net_backend *be);
};

/* One backend instance = one queue pair's host side (a multiqueue tap has one fd per
 * queue). rx_fd becomes readable when a frame is pending, tx_fd writable when there
 * is room (the same fd for tap). */
struct net_backend {
	const struct net_backend_ops *ops;
	int rx_fd, tx_fd;
	char ifname[16];   /* the tap's name; for passt "pid N" or "socket" */
	bool plain_frames; /* carries plain Ethernet frames: the device offers no offloads */
	void *priv;
};

/* Open (or create) the tap named in o (IFF_TAP|IFF_NO_PI|IFF_VNET_HDR, IFF_MULTI_QUEUE
 * when queue_pairs > 1), set TUNSETVNETHDRSZ 12, non-blocking; bring it up, assign
 * host_ip, run the script. be[i] for each queue pair. Returns 0 or -errno with a reason
 * naming the cause (no /dev/net/tun, EPERM without CAP_NET_ADMIN, busy name, ...). */
int net_tap_open(const struct net_opts *o, struct net_backend **be, int n, char *err,
		 size_t errlen) __must_check;
/* batch=on: give the tap backend be (net_tap_open's) send_batch/recv_batch through io_uring
 * (net/tap-uring.c): two rings (TX, RX), each restricted to READV/WRITEV (and cancelling its own
 * requests) on the tap as its only (fixed) file before it is enabled. Call before the sandbox
 * (io_uring_setup and io_uring_register are allowed to no thread after it). 0, or -errno with a
 * reason in why (ENOSYS: an old kernel; EPERM: io_uring disabled by sysctl or seccomp); be is then
 * unchanged. */
int net_tap_uring_attach(struct net_backend *be, char *why, size_t whylen) __must_check;
/* Its rings closed and the tap's own ops back (be stays open); no-op without rings. */
void net_tap_uring_detach(struct net_backend *be);

/* mode=user: passt (net/passt.c), one queue pair. With o->socket, connect to a passt already
 * listening there (`passt --socket PATH`); else start `passt --foreground --quiet --fd 3` on
 * one end of a socket pair (as root, with --runas nobody). Frames travel in QEMU's stream
 * protocol (net/stream.c); a stream that ends (passt gone, garbage) reads as the backend
 * gone. close stops the passt lkvm started and reaps it. Returns 0 or -errno with a reason. */
int net_passt_open(const struct net_opts *o, struct net_backend **be, int n, char *err,
		   size_t errlen) __must_check;
/* The same backend over fd, a connected stream socket (owned from here, closed on failure
 * too), with no passt to stop: for tests. 0 or -errno. */
int net_stream_backend(int fd, struct net_backend **out) __must_check;

/* In-memory backend for tests: frames sent by the device are queued for the test to
 * read with net_fake_take; frames the test injects with net_fake_inject are delivered
 * to the device. rx_fd is an eventfd that is readable while frames are pending. */
struct net_backend *net_fake_create(void);
int net_fake_inject(struct net_backend *be, const void *frame, size_t len) __must_check;
/* Injected frames the device has not received yet. */
int net_fake_pending(struct net_backend *be);
/* Copies the oldest sent frame (with its 12-byte header) into buf; returns its length,
 * 0 when none, -EMSGSIZE (frame kept) when len is too small. */
ssize_t net_fake_take(struct net_backend *be, void *buf, size_t len);
/* Counters of the fake's batch ops (send_batch, recv_batch calls so far). */
void net_fake_batch_calls(struct net_backend *be, int *sends, int *recvs);
/* Make the fake behave like a tap, whose frame sizes are unknown until read:
 * peek_len returns -ENOTSUP. Set it before the device starts. */
void net_fake_set_no_peek(struct net_backend *be, bool no_peek);
/* Make the fake behave like a tap whose interface was deleted: send and recv fail with
 * -EBADFD from now on, rx_fd stays readable. */
void net_fake_set_gone(struct net_backend *be);
/* Whether set_enabled last attached the fake (true initially). A detached fake drops what
 * was pending and refuses net_fake_inject (-ENOLINK), as a detached tap queue gets nothing. */
bool net_fake_enabled(struct net_backend *be);
/* The offloads last given to the fake's set_offloads (all false initially). */
void net_fake_offloads(struct net_backend *be, struct net_offloads *out);

#endif
