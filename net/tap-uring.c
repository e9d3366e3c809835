/* The tap's batch path (-n batch=on): io_uring rings, one for TX writev and one for RX readv, each restricted to the tap before any guest data reaches it. */
#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/net.h"

/* Frames per call: the largest batch virtio-net submits (TX 64 chains, virtio/net-tx.c; RX 32,
 * virtio/net-rx-batch.c). The rings have twice that, for the cancels that may follow them. */
#define URING_DEPTH 64

enum { R_TX, R_RX, R_NR };

struct tap_uring {
	struct net_backend_ops ops;	   /* the tap's own, plus the batch ops */
	const struct net_backend_ops *tap; /* the tap's own ops (its close frees be) */
	void *tap_priv;
	/* Each ring is used by one thread only (the queue pair's TX or RX thread), so no lock. */
	struct io_uring ring[R_NR];
	bool dead[R_NR]; /* a submission failed: never enter this ring again (see uring_batch) */
};

static void tap_uring_close(struct net_backend *be);

static struct tap_uring *to_tu(struct net_backend *be)
{
	return be->priv;
}

/* user_data of a cancel SQE: its target's index plus this (frames use 0..n-1). */
#define CANCEL_TAG (1ull << 32)

/* Take every CQE that is there: a frame's result into io (-ECANCELED: nothing was moved, as
 * -EAGAIN says), a cancel's only counted. Returns how many frames got their result. */
static int uring_harvest(struct tap_uring *tu, int which, struct net_io *io, int n, bool *done,
			 int *cancels)
{
	struct io_uring *r = &tu->ring[which];
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;
	int got = 0;

	io_uring_for_each_cqe(r, head, cqe)
	{
		u64 i = io_uring_cqe_get_data64(cqe);

		seen++;
		if (i >= CANCEL_TAG) {
			(*cancels)--;
			continue;
		}
		if (i >= (u64)n || done[i])
			continue;
		done[i] = true;
		got++;
		io[i].res = cqe->res == -ECANCELED ? -EAGAIN : cqe->res;
		/* A file without non-blocking I/O refuses RWF_NOWAIT: no batches on it. */
		if (cqe->res == -EOPNOTSUPP)
			tu->dead[which] = true;
	}
	io_uring_cq_advance(r, seen);
	return got;
}

/* uring_prep: one SQE per frame of io[0..n), not yet submitted. -EIO (the ring dead) when the
 * SQ ring has no room. */
static int uring_prep(struct tap_uring *tu, int which, struct net_io *io, int n)
{
	struct io_uring *r = &tu->ring[which];

	for (int i = 0; i < n; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(r);

		if (!sqe) { /* cannot happen: every call reaps all it submits */
			tu->dead[which] = true;
			return -EIO;
		}
		if (which == R_TX)
			io_uring_prep_writev(sqe, 0, io[i].iov, (unsigned)io[i].iovcnt, 0);
		else
			io_uring_prep_readv(sqe, 0, io[i].iov, (unsigned)io[i].iovcnt, 0);
		/* RWF_NOWAIT: a tap that is empty (or full) answers -EAGAIN at once. Without it
		 * io_uring waits for readiness itself (it does so for O_NONBLOCK files that
		 * support non-blocking I/O), out of reach of the thread's stop eventfd. */
		sqe->rw_flags = RWF_NOWAIT;
		sqe->flags |= IOSQE_FIXED_FILE;
		io_uring_sqe_set_data64(sqe, (u64)i);
		io[i].res = -EIO;
	}
	return 0;
}

/* uring_cancel_parked: submits a cancel for each of the n frames not done (counted in *cancels).
 * NET_BATCH_IN_DOUBT (the ring dead) when one could not be submitted. */
static int uring_cancel_parked(struct tap_uring *tu, int which, int n, const bool *done,
			       int *cancels)
{
	struct io_uring *r = &tu->ring[which];
	int queued = 0, ret;

	/* What is not done now was parked: cancel it, once (each cancel ends with
	 * its target's CQE, or finds it done or running: -ENOENT, -EALREADY). */
	for (int i = 0; i < n; i++) {
		struct io_uring_sqe *sqe;

		if (done[i])
			continue;
		sqe = io_uring_get_sqe(r);
		if (!sqe) { /* cannot happen: 2 * URING_DEPTH entries */
			tu->dead[which] = true;
			return NET_BATCH_IN_DOUBT;
		}
		io_uring_prep_cancel64(sqe, (u64)i, 0);
		sqe->flags |= IOSQE_FIXED_FILE; /* the restrictions require it */
		io_uring_sqe_set_data64(sqe, CANCEL_TAG + (u64)i);
		(*cancels)++;
		queued++;
	}
	/* A cancel not taken would leave uring_batch's wait without end. */
	ret = io_uring_submit(r);
	if (ret != queued) {
		tu->dead[which] = true;
		return NET_BATCH_IN_DOUBT;
	}
	return 0;
}

/*
 * One io_uring_enter for n frames: every SQE is a READV or WRITEV on fixed file 0 (the tap),
 * straight from or into the iovecs given (guest memory: no copy), with RWF_NOWAIT, so the
 * kernel normally completes each SQE inline, in order, with its result or -EAGAIN. It may
 * still park one to finish when the tap is ready (seen on a multiqueue tap's empty queue):
 * those are cancelled at once (ASYNC_CANCEL; a cancelled frame moved nothing and reports
 * -EAGAIN) and their results awaited, so no call waits for the network and no SQE is left in
 * flight with iovecs the caller will reuse. A failure of the submission or of a wait leaves
 * that in doubt: the ring is then never entered again (dead: a partial submit leaves SQEs in the
 * SQ ring that a later submit would send stale) and the result is NET_BATCH_IN_DOUBT whenever an
 * SQE may have reached the kernel (the caller then never reuses or frees what the SQEs point at:
 * virtio/net-queue.c's batch_in_doubt); -errno only when none did. Waiting for the requests
 * instead would rest on the very calls that failed.
 */
static int uring_batch(struct tap_uring *tu, int which, struct net_io *io, int n)
{
	struct io_uring *r = &tu->ring[which];
	bool done[URING_DEPTH] = { false }, cancelled = false;
	int got = 0, cancels = 0, ret;

	if (tu->dead[which])
		return -EIO;
	if (n <= 0 || n > URING_DEPTH)
		return -EINVAL;
	ret = uring_prep(tu, which, io, n);
	if (ret)
		return ret;
	ret = io_uring_submit(r);
	if (ret != n) {
		tu->dead[which] = true;
		/* io_uring_enter fails only when it took no SQE; some taken: in flight. */
		return ret > 0 ? NET_BATCH_IN_DOUBT : ret < 0 ? ret : -EIO;
	}
	for (;;) {
		struct io_uring_cqe *cqe;

		got += uring_harvest(tu, which, io, n, done, &cancels);
		if (got == n && !cancels)
			break;
		if (got < n && !cancelled) {
			cancelled = true;
			ret = uring_cancel_parked(tu, which, n, done, &cancels);
			if (ret)
				return ret;
			continue;
		}
		ret = io_uring_wait_cqe(r, &cqe);
		if (ret < 0 && ret != -EINTR) {
			tu->dead[which] = true;
			return NET_BATCH_IN_DOUBT;
		}
	}
	return tu->dead[which] ? -EOPNOTSUPP : 0;
}

static int tap_send_batch(struct net_backend *be, struct net_io *io, int n)
{
	return uring_batch(to_tu(be), R_TX, io, n);
}

static int tap_recv_batch(struct net_backend *be, struct net_io *io, int n)
{
	return uring_batch(to_tu(be), R_RX, io, n);
}

void net_tap_uring_detach(struct net_backend *be)
{
	struct tap_uring *tu;

	if (!be || be->ops->close != tap_uring_close)
		return;
	tu = to_tu(be);
	for (int i = 0; i < R_NR; i++) {
		io_uring_unregister_files(&tu->ring[i]);
		io_uring_queue_exit(&tu->ring[i]);
	}
	be->ops = tu->tap;
	be->priv = tu->tap_priv;
	free(tu);
}

static void tap_uring_close(struct net_backend *be)
{
	if (!be)
		return;
	net_tap_uring_detach(be);
	if (be->ops->close)
		be->ops->close(be);
}

/*
 * A ring that can do one thing: `opcode` on the tap. Created disabled (R_DISABLED) so nothing
 * can be submitted until it is locked down: the tap registered as its only file, then the
 * restrictions (this opcode, and cancelling the ring's own requests, only; every SQE must
 * name a fixed file, so no other fd of lkvm's can be reached through it; of the register
 * operations only unregistering the files, so no other file can be added and the
 * restrictions cannot change), then enabled. io_uring's operations are not seen by seccomp:
 * these restrictions are what bounds a ring's use by a compromised thread.
 */
static int ring_setup(struct io_uring *r, int fd, u8 opcode, const char **step)
{
	struct io_uring_restriction res[] = {
		{ .opcode = IORING_RESTRICTION_SQE_OP, .sqe_op = opcode },
		/* To take back what the kernel parked (uring_batch): only this ring's own. */
		{ .opcode = IORING_RESTRICTION_SQE_OP, .sqe_op = IORING_OP_ASYNC_CANCEL },
		{ .opcode = IORING_RESTRICTION_SQE_FLAGS_ALLOWED, .sqe_flags = IOSQE_FIXED_FILE },
		{ .opcode = IORING_RESTRICTION_SQE_FLAGS_REQUIRED, .sqe_flags = IOSQE_FIXED_FILE },
		/* Only to let go of the tap at close (tap_uring_detach): a ring's files are
		 * otherwise released later, by a kernel worker, so the tap would outlive close. */
		{ .opcode = IORING_RESTRICTION_REGISTER_OP,
		  .register_op = IORING_UNREGISTER_FILES },
	};
	struct io_uring_params p;
	int ret;

	/* No IORING_SETUP_COOP_TASKRUN: requests complete inline (RWF_NOWAIT) or are
	 * cancelled, so it would save little, and in one A/B (net-bench rr, 64 B, PVM host,
	 * lightly loaded) the median RTT was 67 us with it and 37 us without (batch=off:
	 * 37 us). */
	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_R_DISABLED;
	*step = "io_uring_setup";
	ret = io_uring_queue_init_params(2 * URING_DEPTH, r, &p);
	if (ret < 0)
		return ret;
	*step = "registering the tap";
	ret = io_uring_register_files(r, &fd, 1);
	/* Through io_uring_register itself: Debian's liburing 2.3 declares
	 * io_uring_register_restrictions and io_uring_enable_rings but does not export them. */
	if (!ret) {
		*step = "registering restrictions";
		ret = io_uring_register((unsigned)r->ring_fd, IORING_REGISTER_RESTRICTIONS, res,
					ARRAY_SIZE(res));
	}
	if (!ret) {
		*step = "enabling the ring";
		ret = io_uring_register((unsigned)r->ring_fd, IORING_REGISTER_ENABLE_RINGS, NULL,
					0);
	}
	if (ret < 0)
		io_uring_queue_exit(r);
	return ret;
}

int net_tap_uring_attach(struct net_backend *be, char *why, size_t whylen)
{
	static const u8 opcode[R_NR] = { [R_TX] = IORING_OP_WRITEV, [R_RX] = IORING_OP_READV };
	struct tap_uring *tu = calloc(1, sizeof(*tu));
	const char *step = "";
	int ret = 0, made = 0;

	if (!tu) {
		errfmt(why, whylen, "out of memory");
		return -ENOMEM;
	}
	for (; made < R_NR; made++) {
		ret = ring_setup(&tu->ring[made], be->rx_fd, opcode[made], &step);
		if (ret < 0)
			break;
	}
	if (ret < 0) {
		for (int i = 0; i < made; i++)
			io_uring_queue_exit(&tu->ring[i]);
		free(tu);
		errfmt(why, whylen, "%s: %s", step, strerror(-ret));
		return ret;
	}
	tu->tap = be->ops;
	tu->tap_priv = be->priv;
	tu->ops = *be->ops;
	tu->ops.send_batch = tap_send_batch;
	tu->ops.recv_batch = tap_recv_batch;
	tu->ops.close = tap_uring_close;
	be->ops = &tu->ops;
	be->priv = tu;
	return 0;
}
