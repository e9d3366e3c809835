/* Device threads: started named and inside their seccomp kind, parked at a safe point for a pause, stopped through an eventfd and a join. */
#ifndef LKVM_WORKER_H
#define LKVM_WORKER_H

#include <pthread.h>
#include <stdatomic.h>

#include "lkvm/sandbox.h"
#include "lkvm/util.h"

struct kvm;

/*
 * Every thread a device owns runs through one of these. The thread's function polls
 * worker_fd() beside its own file descriptors and looks at worker_leaving() between
 * bounded pieces of work; when either says so it gets to a safe point (nothing half done
 * that would write guest memory or raise an interrupt later) and calls worker_park(),
 * which returns true when the thread must end (stop) and false once a pause is over
 * (resume). Never pthread_cancel, never a sleep loop: a stop or a pause is an eventfd
 * the thread is already polling, and the caller waits on a condition for its answer.
 *
 * Callers (a reset on a vCPU, the pause on the control thread, teardown) are serialised
 * by the worker; a worker is stopped before it is started again.
 */
enum worker_req { WORKER_RUN, WORKER_PARK, WORKER_STOP };

typedef void (*worker_fn)(void *arg);

struct worker {
	struct kvm *kvm;
	int stop_fd;	/* eventfd: readable = leave (park or stop) */
	atomic_int req; /* enum worker_req: what the thread is asked to do */
	/* Internal. ctl serialises the callers; lock and cond are the handshake with the
	 * thread (entered, parked, done). */
	pthread_mutex_t ctl, lock;
	pthread_cond_t cond;
	pthread_t tid;
	char name[16];
	enum sandbox_kind kind;
	worker_fn fn;
	void *arg;
	bool initialised, running, entered, parked, done;
};

/* Ready a worker (its eventfd, no thread yet), with the device, before the sandbox. 0 or
 * -errno (nothing to destroy then). */
int worker_init(struct worker *w, struct kvm *kvm) __must_check;
/* Stop it if it runs and release what worker_init made; no-op when never initialised. */
void worker_destroy(struct worker *w);
/* Start a thread named `name` (at most 15 characters kept) that enters sandbox kind `kind`
 * and then runs fn(arg). Returns once the thread is named and confined (nothing of the
 * guest's reaches it before), 0 or -errno; -EBUSY when it already runs. A thread that
 * cannot enter its sandbox asks the VM to end and never runs fn. */
int worker_start(struct worker *w, const char *name, enum sandbox_kind kind, worker_fn fn,
		 void *arg) __must_check;
/* Ask the thread to end and join it (a parked thread too); no-op when not running. */
void worker_stop(struct worker *w);
/* Ask the thread to park and wait until it did (or ended). No-op when not running. */
void worker_quiesce(struct worker *w);
/* Let a parked thread go on. No-op when not running. */
void worker_resume(struct worker *w);

/* ---- In the thread ---- */

/* The eventfd to poll: readable when asked to park or stop. */
static inline int worker_fd(const struct worker *w)
{
	return w->stop_fd;
}

/* A park or stop is pending: leave the current work at the next safe point. Cheap (a
 * relaxed load), for the inside of drain loops. */
static inline bool worker_leaving(struct worker *w)
{
	return atomic_load_explicit(&w->req, memory_order_relaxed) != WORKER_RUN;
}

/* The safe point: park while a pause lasts. True: end the thread now (stop); false: go on
 * (resumed, or nothing was asked). */
bool worker_park(struct worker *w);

#endif
