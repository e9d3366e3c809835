/* lkvm-exit: the guest init writes CMD's status (or why it could not run it), a test guest its result; the run ends. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/dev.h"
#include "lkvm/exitport.h"
#include "lkvm/initcfg.h"
#include "lkvm/io.h"
#include "lkvm/kvm.h"
#include "lkvm/snap.h"

struct exitport {
	struct kvm *kvm;
	pthread_mutex_t lock; /* the latch: vCPUs may write at once */
	u8 latch[LKVM_EXIT_PORT_LEN];
	struct ratelimit rl;
	atomic_uint kind; /* of the first valid end report (exitport_report_kind); 0: none yet */
	void (*ready)(void *arg); /* exitport_on_stdin_ready */
	void *ready_arg;
	/* A failed GUEST_ASSERT_EQ's two values, from its LKVM_EXIT_ASSERT_VALUE pieces (a bit per
	 * piece in pieces); only the vCPU that fails writes them, under lock. Not in a snapshot: one
	 * taken between the pieces and the assertion costs the values, not the failure. */
	u64 vals[2];
	u8 pieces;
};

/* One LKVM_EXIT_ASSERT_VALUE piece: value idx (0-7) holds bits (idx % 4) * 16 of vals[idx / 4]. */
static void exitport_piece(struct exitport *e, unsigned idx, unsigned piece)
{
	unsigned shift = (idx % 4) * 16;

	e->vals[idx / 4] = (e->vals[idx / 4] & ~(0xffffull << shift)) | ((u64)piece << shift);
	e->pieces |= 1u << idx;
}

/* The failed assertion's end: its line, and its values when every piece came. */
static void exitport_assert(struct exitport *e, unsigned line)
{
	char vals[64] = "";

	if (e->pieces == (1u << LKVM_EXIT_ASSERT_PIECES) - 1)
		snprintf(vals, sizeof(vals), "a=0x%llx b=0x%llx; ", (unsigned long long)e->vals[0],
			 (unsigned long long)e->vals[1]);
	/* Only numbers: the guest's own words stay on its console. */
	kvm_request_exit(e->kvm, EXIT_GUEST_ASSERT,
			 "guest assertion failed at line %u (%sits console's GUEST FAIL line says "
			 "where and why)",
			 line, vals);
}

static void exitport_report(struct exitport *e, u32 word)
{
	unsigned value = word & 0xff, kind = (word >> 8) & 0xff, detail = word >> 16;
	const char *stage = initcfg_stage_name(value);

	if (kind == LKVM_EXIT_STDIN_READY && !value && !detail) {
		if (e->ready)
			e->ready(e->ready_arg);
		return; /* not an end */
	} else if (kind == LKVM_EXIT_EXITED && !detail) {
		kvm_request_end(e->kvm, KVM_END_COMMAND, (int)value,
				"%s exited with %u (lkvm-exit)",
				e->kvm->cfg.host_root.on ? "command" : "guest", value);
	} else if (kind == LKVM_EXIT_SIGNALED && !detail && value && value < 128) {
		const char *name = sigabbrev_np((int)value); /* strsignal is not thread-safe */

		kvm_request_end(e->kvm, KVM_END_COMMAND, 128 + (int)value,
				"command killed by signal %u (SIG%s)", value, name ? name : "?");
	} else if (kind == LKVM_EXIT_INIT_FAILED && stage) {
		const char *hint = initcfg_stage_hint(value, (int)detail);

		kvm_request_end(e->kvm, KVM_END_INIT, EXIT_GUEST_NO_STATUS,
				"guest init failed %s: %s%s%s%s", stage,
				detail ? strerror((int)detail) : "no error code", *hint ? " (" : "",
				hint, *hint ? ")" : "");
	} else if (kind == LKVM_EXIT_ASSERT_VALUE && value < LKVM_EXIT_ASSERT_PIECES) {
		exitport_piece(e, value, detail);
		return; /* not an end */
	} else if (kind == LKVM_EXIT_GUEST_ASSERT && !value) {
		exitport_assert(e, detail);
	} else {
		pr_warn_rl(&e->rl, "lkvm-exit: invalid report 0x%08x ignored", word);
		return;
	}
	atomic_compare_exchange_strong(&e->kind, &(unsigned){ 0 }, kind);
}

/* The word is assembled from whatever access widths the guest used (one outl, or /dev/port's
 * four outb); the access that writes the last byte commits it. */
static void exitport_io(struct kvm_cpu *vcpu, u64 port, u8 *data, u32 len, bool is_write,
			void *opaque)
{
	struct exitport *e = opaque;
	u64 off = port - LKVM_EXIT_PORT; /* the bus keeps the access inside the range */
	u32 word = 0;
	bool commit;

	if (!is_write) {
		memset(data, 0, len);
		return;
	}
	pthread_mutex_lock(&e->lock);
	memcpy(e->latch + off, data, len);
	commit = off + len == LKVM_EXIT_PORT_LEN;
	if (commit) {
		for (int i = LKVM_EXIT_PORT_LEN - 1; i >= 0; i--)
			word = word << 8 | e->latch[i];
		memset(e->latch, 0, sizeof(e->latch));
	}
	pthread_mutex_unlock(&e->lock);
	if (commit)
		exitport_report(e, word);
}

static int exitport_dev_init(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen)
{
	struct exitport *e = calloc(1, sizeof(*e));
	int ret;

	if (!e)
		return -ENOMEM;
	e->kvm = kvm;
	pthread_mutex_init(&e->lock, NULL);
	ret = io_bus_register(&kvm->pio, LKVM_EXIT_PORT, LKVM_EXIT_PORT_LEN, exitport_io, e,
			      "lkvm-exit");
	if (ret) {
		pthread_mutex_destroy(&e->lock);
		free(e);
		return ret;
	}
	d->priv = e;
	return 0;
}

static void exitport_dev_exit(struct kvm *kvm, struct kvm_dev *d)
{
	struct exitport *e = d->priv;

	io_bus_unregister(&kvm->pio, LKVM_EXIT_PORT);
	pthread_mutex_destroy(&e->lock);
	free(e);
}

/*
 * Snapshot (issue 31): the latch, the bytes of a word the guest has begun to write (one
 * outb of /dev/port's four, say), as one record. A VM whose guest has already reported its
 * end (kind set) is ending: it is not saved, as a restore would run a guest past its end
 * with nobody to take its status. The stdin-ready callback is the new process's (its
 * cmd-stdin registers it at init).
 */
#define EXITPORT_SNAP_TAG DEV_SNAP_TAG_MIN

struct exitport_snap {
	u8 latch[LKVM_EXIT_PORT_LEN];
	u8 reserved[8 - LKVM_EXIT_PORT_LEN];
};
_Static_assert(sizeof(struct exitport_snap) == 8, "exitport_snap has no holes");

static int exitport_dev_save(struct kvm_dev *d, struct snap_rec_buf *b, char *err, size_t errlen)
{
	struct exitport *e = d->priv;
	struct exitport_snap v = { 0 };

	if (atomic_load(&e->kind)) {
		errfmt(err, errlen, "the guest has already reported its end");
		return -EBUSY;
	}
	pthread_mutex_lock(&e->lock);
	memcpy(v.latch, e->latch, sizeof(v.latch));
	pthread_mutex_unlock(&e->lock);
	snap_rec_put(b, EXITPORT_SNAP_TAG, &v, sizeof(v));
	return 0;
}

static int exitport_dev_load(struct kvm_dev *d, const void *sec, size_t len, char *err,
			     size_t errlen)
{
	static const u8 zero[sizeof(((struct exitport_snap *)0)->reserved)];
	struct exitport *e = d->priv;
	struct exitport_snap v;

	if (snap_rec_get(sec, len, EXITPORT_SNAP_TAG, &v, sizeof(v)) < 0 ||
	    memcmp(v.reserved, zero, sizeof(zero))) {
		errfmt(err, errlen, "the latch record is missing or malformed");
		return -EINVAL;
	}
	pthread_mutex_lock(&e->lock);
	memcpy(e->latch, v.latch, sizeof(e->latch));
	pthread_mutex_unlock(&e->lock);
	return 0;
}

static const struct kvm_dev_ops exitport_dev_ops = {
	.name = "lkvm-exit",
	.prio = DEV_PRIO_LEGACY,
	.init = exitport_dev_init,
	.save = exitport_dev_save,
	.load = exitport_dev_load,
	.exit = exitport_dev_exit,
};

unsigned exitport_report_kind(struct kvm *kvm)
{
	struct kvm_dev *d = kvm_dev_find(kvm, exitport_dev_ops.name, 0);

	return d ? atomic_load(&((struct exitport *)d->priv)->kind) : 0;
}

int exitport_on_stdin_ready(struct kvm *kvm, void (*fn)(void *arg), void *arg)
{
	struct kvm_dev *d = kvm_dev_find(kvm, exitport_dev_ops.name, 0);
	struct exitport *e;

	if (!d)
		return -ENODEV;
	e = d->priv;
	e->ready = fn;
	e->ready_arg = arg;
	return 0;
}

int exitport_add(struct kvm *kvm)
{
	/* The machine adds it to every VM; run -- CMD's devices ask for it as well (before
	 * either is up, so the list is searched, not kvm_dev_find). */
	for (struct kvm_dev *d = kvm->devs; d; d = d->next)
		if (d->ops == &exitport_dev_ops)
			return 0;
	return kvm_dev_add(kvm, &exitport_dev_ops, NULL, 0);
}
