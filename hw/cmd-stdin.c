/* The stdin device of `run -- CMD` (framed mode): lkvm's stdin, framed, into CMD's console by a thread of its own. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "lkvm/dev.h"
#include "lkvm/exitport.h"
#include "lkvm/host-root.h"
#include "lkvm/initcfg.h"
#include "lkvm/kvm.h"
#include "lkvm/sandbox.h"
#include "lkvm/virtio-console.h"
#include "lkvm/worker.h"

/*
 * stdin's forwarder (framed mode): lkvm's stdin, framed (initcfg_stdin_encode), into hvc0's
 * input, then the end-of-input mark at EOF (or a read error). The console takes what fits
 * its buffer; the rest waits for the guest to read (a full console holds lkvm's stdin back,
 * as a full pipe would).
 */
struct cmd_stdin {
	struct kvm *kvm;
	struct virtio_console *con;
	struct worker worker;
	int ready_fd; /* eventfd: init reported LKVM_EXIT_STDIN_READY (nothing is read before) */
};

#define STDIN_CHUNK 2048
#define STDIN_RETRY_MS 5 /* a full console has no "room again" event: look again this often */

/* Everything of buf into the console. False: stop asked for. */
static bool stdin_push(struct cmd_stdin *s, const u8 *buf, size_t len)
{
	size_t off = 0;

	while (off < len) {
		struct pollfd p = { .fd = worker_fd(&s->worker), .events = POLLIN };

		off += virtio_console_receive(s->con, buf + off, len - off);
		if (off == len)
			break;
		if (poll(&p, 1, STDIN_RETRY_MS) > 0 && worker_park(&s->worker))
			return false;
	}
	return true;
}

static void stdin_thread(void *arg)
{
	static const u8 eof[] = { INITCFG_STDIN_ESC, INITCFG_STDIN_EOF };
	struct cmd_stdin *s = arg;
	u8 buf[STDIN_CHUNK], enc[2 * STDIN_CHUNK];
	bool ready = false, done = false;

	for (;;) {
		struct pollfd p[3] = {
			{ .fd = worker_fd(&s->worker), .events = POLLIN },
			{ .fd = ready ? -1 : s->ready_fd, .events = POLLIN },
			{ .fd = !ready || done ? -1 : STDIN_FILENO, .events = POLLIN },
		};
		ssize_t n;

		if (poll(p, 3, -1) < 0 && errno != EINTR)
			break;
		if (p[0].revents) {
			if (worker_park(&s->worker))
				break;
			continue;
		}
		if (p[1].revents)
			ready = true;
		if (!p[2].revents)
			continue;
		n = read(STDIN_FILENO, buf, sizeof(buf));
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n > 0 && !stdin_push(s, enc, initcfg_stdin_encode(buf, (size_t)n, enc)))
			break;
		if (n <= 0) {
			done = true; /* then only a stop or a pause wakes the thread */
			if (!stdin_push(s, eof, sizeof(eof)))
				break;
		}
	}
}

static void stdin_free(struct cmd_stdin *s)
{
	worker_destroy(&s->worker); /* stops the thread if it runs; nothing if never made */
	if (s->ready_fd >= 0)
		close(s->ready_fd);
	free(s);
}

/* Init's report, on a vCPU thread: the stdio console is raw now. */
static void stdin_ready(void *arg)
{
	struct cmd_stdin *s = arg;
	u64 one = 1;

	if (write(s->ready_fd, &one, sizeof(one)) < 0)
		pr_debug("cmd-stdin: ready eventfd write failed");
}

static int stdin_dev_init(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen)
{
	struct kvm_dev *con = kvm_dev_find(kvm, "virtio-console", 0);
	struct cmd_stdin *s;
	int ret;

	if (!con) {
		errfmt(err, errlen, "no virtio-console for the command's stdin");
		return -ENODEV;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->kvm = kvm;
	s->con = con->priv;
	s->ready_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ret = s->ready_fd < 0 ? -errno : worker_init(&s->worker, kvm);
	if (!ret)
		ret = exitport_on_stdin_ready(kvm, stdin_ready, s);
	if (ret) {
		stdin_free(s);
		return ret;
	}
	d->priv = s;
	return 0;
}

static void stdin_dev_exit(struct kvm *kvm, struct kvm_dev *d)
{
	stdin_free(d->priv);
}

/* From the main thread (kvm_devs_start), before its sandbox. */
static int stdin_dev_start(struct kvm_dev *d)
{
	struct cmd_stdin *s = d->priv;

	return worker_start(&s->worker, "lkvm-cmd-stdin", SB_CONSOLE, stdin_thread, s);
}

static void stdin_dev_quiesce(struct kvm_dev *d)
{
	worker_quiesce(&((struct cmd_stdin *)d->priv)->worker);
}

static void stdin_dev_resume(struct kvm_dev *d)
{
	worker_resume(&((struct cmd_stdin *)d->priv)->worker);
}

/* No save op (issue 31): a snapshot of a VM with it is refused. What it holds is the old
 * process's stdin: bytes read from it and not yet in the console (the thread's buffer),
 * whether its end was sent, and init's ready report; a restored command would read another
 * process's stdin from an unknown point, so nothing of it can be restored exactly. */
static const struct kvm_dev_ops stdin_dev_ops = {
	.name = "cmd-stdin",
	.prio = DEV_PRIO_VIRTIO, /* after the consoles it feeds */
	.init = stdin_dev_init,
	.start = stdin_dev_start,
	.quiesce = stdin_dev_quiesce,
	.resume = stdin_dev_resume,
	.exit = stdin_dev_exit,
};

int cmd_stdin_add(struct kvm *kvm)
{
	return kvm_dev_add(kvm, &stdin_dev_ops, NULL, 0);
}
