/* Device threads: start named and confined, park for a pause, stop by eventfd and join (see worker.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "lkvm/kvm.h"
#include "lkvm/worker.h"

int worker_init(struct worker *w, struct kvm *kvm)
{
	memset(w, 0, sizeof(*w));
	/* Made here, with the device (before the sandbox): a vCPU that starts the thread at
	 * DRIVER_OK may not create file descriptors. */
	w->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->stop_fd < 0)
		return -errno;
	w->kvm = kvm;
	atomic_init(&w->req, WORKER_RUN);
	pthread_mutex_init(&w->ctl, NULL);
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	w->initialised = true;
	return 0;
}

void worker_destroy(struct worker *w)
{
	if (!w->initialised)
		return;
	worker_stop(w);
	close(w->stop_fd);
	w->stop_fd = -1;
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
	pthread_mutex_destroy(&w->ctl);
	w->initialised = false;
}

/* Set a flag under the lock and tell whoever waits on the condition. */
static void announce(struct worker *w, bool *flag)
{
	pthread_mutex_lock(&w->lock);
	*flag = true;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	bool ok;

	/* Named by itself: naming another thread opens /proc, which the caller's filter may
	 * not allow. Then its filter, before anything of the guest's is looked at. */
	pthread_setname_np(pthread_self(), w->name);
	ok = sandbox_enter(w->kvm, w->kind) == 0;
	if (!ok && w->kvm)
		kvm_request_exit(w->kvm, EXIT_LKVM_ERROR, "%s: cannot enter the sandbox", w->name);
	announce(w, &w->entered);
	if (ok)
		w->fn(w->arg);
	announce(w, &w->done);
	return NULL;
}

int worker_start(struct worker *w, const char *name, enum sandbox_kind kind, worker_fn fn,
		 void *arg)
{
	int ret = 0;

	pthread_mutex_lock(&w->ctl);
	if (w->running) {
		ret = -EBUSY;
		goto out;
	}
	snprintf(w->name, sizeof(w->name), "%s", name);
	w->kind = kind;
	w->fn = fn;
	w->arg = arg;
	w->entered = w->parked = w->done = false;
	atomic_store(&w->req, WORKER_RUN);
	ret = -pthread_create(&w->tid, NULL, worker_main, w);
	if (ret)
		goto out;
	w->running = true;
	pthread_mutex_lock(&w->lock);
	while (!w->entered)
		pthread_cond_wait(&w->cond, &w->lock);
	pthread_mutex_unlock(&w->lock);
out:
	pthread_mutex_unlock(&w->ctl);
	return ret;
}

/* Ask for req: the flag the thread's loops look at, then the eventfd its poll sees, then the
 * condition a parked thread waits on. ctl held. */
static void ask(struct worker *w, enum worker_req req)
{
	pthread_mutex_lock(&w->lock);
	atomic_store(&w->req, req);
	if (eventfd_write(w->stop_fd, 1) < 0)
		pr_err("%s: cannot signal the thread", w->name); /* cannot happen below 2^64-1 */
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

void worker_stop(struct worker *w)
{
	if (!w->initialised)
		return;
	pthread_mutex_lock(&w->ctl);
	if (w->running) {
		ask(w, WORKER_STOP);
		pthread_join(w->tid, NULL);
		w->running = false;
		eventfd_drain(w->stop_fd); /* ready for the next start */
		atomic_store(&w->req, WORKER_RUN);
	}
	pthread_mutex_unlock(&w->ctl);
}

void worker_quiesce(struct worker *w)
{
	pthread_mutex_lock(&w->ctl);
	if (w->running) {
		ask(w, WORKER_PARK);
		pthread_mutex_lock(&w->lock);
		while (!w->parked && !w->done)
			pthread_cond_wait(&w->cond, &w->lock);
		pthread_mutex_unlock(&w->lock);
	}
	pthread_mutex_unlock(&w->ctl);
}

void worker_resume(struct worker *w)
{
	pthread_mutex_lock(&w->ctl);
	if (w->running) {
		pthread_mutex_lock(&w->lock);
		/* Emptied first, so the resumed thread's next poll waits for real work. */
		eventfd_drain(w->stop_fd);
		atomic_store(&w->req, WORKER_RUN);
		pthread_cond_broadcast(&w->cond);
		pthread_mutex_unlock(&w->lock);
	}
	pthread_mutex_unlock(&w->ctl);
}

bool worker_park(struct worker *w)
{
	bool stop;

	pthread_mutex_lock(&w->lock);
	while (atomic_load(&w->req) == WORKER_PARK) {
		if (!w->parked) {
			w->parked = true; /* the acknowledgement worker_quiesce waits for */
			pthread_cond_broadcast(&w->cond);
		}
		pthread_cond_wait(&w->cond, &w->lock);
	}
	w->parked = false;
	stop = atomic_load(&w->req) == WORKER_STOP;
	pthread_mutex_unlock(&w->lock);
	return stop;
}
