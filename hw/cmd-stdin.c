/* The stdin device of `run -- CMD` (framed mode): lkvm's stdin, framed, into CMD's console by a thread of its own. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "lkvm/dev.h"
#include "lkvm/exitport.h"
#include "lkvm/host-root.h"
#include "lkvm/initcfg.h"
#include "lkvm/kvm.h"
#include "lkvm/sandbox.h"
#include "lkvm/snap.h"
#include "lkvm/virtio-console.h"
#include "lkvm/worker.h"

/*
 * stdin's forwarder (framed mode): lkvm's stdin, framed (initcfg_stdin_encode), into hvc0's
 * input, then the end-of-input mark at EOF (or a read error). The console takes what fits
 * its buffer; the rest waits for the guest to read (a full console holds lkvm's stdin back,
 * as a full pipe would).
 */
#define STDIN_CHUNK 2048
#define STDIN_RETRY_MS 5 /* a full console has no "room again" event: look again this often */

struct cmd_stdin {
	struct kvm *kvm;
	struct virtio_console *con;
	struct worker worker;
	int ready_fd; /* eventfd: init reported LKVM_EXIT_STDIN_READY (nothing is read before) */
	/* The thread's (a snapshot's while it is parked, a restore's before it starts): */
	bool ready;		 /* init's report seen: stdin is read */
	bool done;		 /* the end-of-input mark is (being) sent: stdin is read no more */
	u8 enc[2 * STDIN_CHUNK]; /* framed bytes for the console... */
	size_t enc_off, enc_len; /* ...of which [enc_off, enc_len) are not in it yet */
};

/* Everything of s->enc into the console. False: stop asked for (what is left stays). */
static bool stdin_push(struct cmd_stdin *s)
{
	while (s->enc_off < s->enc_len) {
		struct pollfd p = { .fd = worker_fd(&s->worker), .events = POLLIN };

		s->enc_off += virtio_console_receive(s->con, s->enc + s->enc_off,
						     s->enc_len - s->enc_off);
		if (s->enc_off == s->enc_len)
			break;
		if (poll(&p, 1, STDIN_RETRY_MS) > 0 && worker_park(&s->worker))
			return false;
	}
	s->enc_off = s->enc_len = 0;
	return true;
}

static void stdin_thread(void *arg)
{
	static const u8 eof[] = { INITCFG_STDIN_ESC, INITCFG_STDIN_EOF };
	struct cmd_stdin *s = arg;
	u8 buf[STDIN_CHUNK];

	/* A restored device's bytes the old process had not handed over yet, first. */
	if (!stdin_push(s))
		return;
	for (;;) {
		struct pollfd p[3] = {
			{ .fd = worker_fd(&s->worker), .events = POLLIN },
			{ .fd = s->ready ? -1 : s->ready_fd, .events = POLLIN },
			{ .fd = !s->ready || s->done ? -1 : STDIN_FILENO, .events = POLLIN },
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
			s->ready = true;
		if (!p[2].revents)
			continue;
		n = read(STDIN_FILENO, buf, sizeof(buf));
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n > 0)
			s->enc_len = initcfg_stdin_encode(buf, (size_t)n, s->enc);
		if (n <= 0) {
			s->done = true; /* then only a stop or a pause wakes the thread */
			memcpy(s->enc, eof, sizeof(eof));
			s->enc_len = sizeof(eof);
		}
		if (!stdin_push(s))
			break;
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

/* ---- snapshot ---- */

/*
 * What the guest sees of stdin is the console's (saved by virtio-console); this device adds
 * where the stream is: init's ready report seen, the end-of-input mark sent, and the framed
 * bytes read from stdin that the console had no room for yet (given to the guest first by
 * the restored device, so that no frame is cut). A restored `run -- CMD` then goes on with
 * the new process's stdin: what the old process's stdin held and lkvm had not read (a pipe's
 * or terminal's buffer) went with the old process. After the end mark, the new stdin is not
 * read: CMD saw its stdin end once.
 */
#define STDIN_TAG_STATE DEV_SNAP_TAG_MIN
#define STDIN_TAG_PENDING (DEV_SNAP_TAG_MIN + 1)

struct stdin_snap {
	u8 ready, done;
	u8 reserved[2];
	u32 pending; /* bytes of STDIN_TAG_PENDING */
};
_Static_assert(sizeof(struct stdin_snap) == 8, "stdin_snap has a hole");

/* The thread is parked (quiesce) or was never started. */
static int stdin_dev_save(struct kvm_dev *d, struct snap_rec_buf *b, char *err, size_t errlen)
{
	struct cmd_stdin *s = d->priv;
	struct stdin_snap ss = { 0 };
	u64 v;

	/* A report the thread had not taken before it parked: taken now (it is the thread's
	 * from here on, as if it had). */
	if (!s->ready && read(s->ready_fd, &v, sizeof(v)) == sizeof(v))
		s->ready = true;
	ss.ready = s->ready;
	ss.done = s->done;
	ss.pending = (u32)(s->enc_len - s->enc_off);
	snap_rec_put(b, STDIN_TAG_STATE, &ss, sizeof(ss));
	snap_rec_put(b, STDIN_TAG_PENDING, s->enc + s->enc_off, ss.pending);
	return 0;
}

/* Before the thread starts. */
static int stdin_dev_load(struct kvm_dev *d, const void *sec, size_t len, char *err, size_t errlen)
{
	struct cmd_stdin *s = d->priv;
	struct stdin_snap ss;

	if (snap_rec_get(sec, len, STDIN_TAG_STATE, &ss, sizeof(ss)) < 0 || ss.ready > 1 ||
	    ss.done > 1 || ss.reserved[0] || ss.reserved[1] || ss.pending > sizeof(s->enc) ||
	    (ss.pending && !ss.ready)) {
		errfmt(err, errlen, "no stdin state record, or a bad one");
		return -EINVAL;
	}
	if (snap_rec_get(sec, len, STDIN_TAG_PENDING, s->enc, ss.pending) < 0) {
		errfmt(err, errlen, "no record of the %u stdin bytes not given to the guest",
		       ss.pending);
		return -EINVAL;
	}
	s->ready = ss.ready;
	s->done = ss.done;
	s->enc_off = 0;
	s->enc_len = ss.pending;
	return 0;
}

static const struct kvm_dev_ops stdin_dev_ops = {
	.name = "cmd-stdin",
	.prio = DEV_PRIO_VIRTIO, /* after the consoles it feeds */
	.init = stdin_dev_init,
	.start = stdin_dev_start,
	.quiesce = stdin_dev_quiesce,
	.resume = stdin_dev_resume,
	.exit = stdin_dev_exit,
	.save = stdin_dev_save,
	.load = stdin_dev_load,
};

int cmd_stdin_add(struct kvm *kvm)
{
	return kvm_dev_add(kvm, &stdin_dev_ops, NULL, 0);
}
