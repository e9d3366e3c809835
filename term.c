/* Console plumbing between the host terminal and the guest UART, with raw mode always restored. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "lkvm/kvm.h"
#include "lkvm/sandbox.h"
#include "lkvm/term.h"

/* Restoring the terminal must work from atexit and from fatal-signal paths, which have
 * no VM at hand: this is the one piece of process-wide state, and it only mirrors the
 * terminal (a process has one). */
static struct termios saved_termios;
static volatile sig_atomic_t termios_saved;

/* The same settings as the kernel keeps them (struct termios of <asm/termbits.h>, which cannot
 * be included beside <termios.h>), for the SIGSYS handler: it runs in a filtered thread, which
 * may make the TCSETS ioctl but not TCGETS, and glibc's tcsetattr reads the settings first. */
struct kernel_termios {
	unsigned int c_iflag, c_oflag, c_cflag, c_lflag;
	unsigned char c_line;
	unsigned char c_cc[19];
};
static struct kernel_termios saved_ktermios;
static volatile sig_atomic_t ktermios_saved;

static void restore_termios(void)
{
	if (termios_saved) {
		tcsetattr(STDIN_FILENO, TCSANOW, &saved_termios);
		termios_saved = 0;
	}
}

/* Put the terminal back as term_init found it, from the SIGSYS handler (sandbox.c calls it
 * through its restore hook): async-signal-safe, a no-op when it was never changed. */
static void restore_on_signal(void)
{
	if (termios_saved && ktermios_saved)
		ioctl(STDIN_FILENO, TCSETS, &saved_ktermios);
}

int term_init(struct kvm *kvm, struct term *t)
{
	memset(t, 0, sizeof(*t));
	t->kvm = kvm;
	/* -- CMD's framed stdin is read by its own forwarder (hw/cmd-stdin.c): none here, and a
	 * terminal there stays as it is (^C, ^D, line editing: the host's, as for any command). */
	t->in_fd = kvm->cfg.host_root.stdin_framed ? -1 : STDIN_FILENO;
	t->out_fd = STDOUT_FILENO;
	pthread_mutex_init(&t->out_lock, NULL);
	t->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (t->wake_fd < 0) {
		int e = errno;

		pthread_mutex_destroy(&t->out_lock);
		return -e;
	}
	t->halt_watch = kvm->cfg.host_root.on;
	for (int i = 0; i < kvm->cfg.nr_fail_on; i++) {
		int ret = failon_add(&t->fail, kvm->cfg.fail_on[i]);

		if (ret < 0) { /* checked by the option's parser: only a caller's own config */
			close(t->wake_fd);
			pthread_mutex_destroy(&t->out_lock);
			return ret;
		}
	}
	if (kvm->cfg.exit_on && *kvm->cfg.exit_on) {
		t->match = strdup(kvm->cfg.exit_on);
		t->match_len = strlen(kvm->cfg.exit_on);
		t->tail = malloc(t->match_len);
		if (!t->match || !t->tail) {
			/* The caller runs term_exit only after a success: undo it all here. */
			free(t->match);
			free(t->tail);
			t->match = t->tail = NULL;
			close(t->wake_fd);
			t->wake_fd = -1;
			pthread_mutex_destroy(&t->out_lock);
			return -ENOMEM;
		}
	}
	if (t->in_fd >= 0 && isatty(t->in_fd) && tcgetattr(t->in_fd, &t->saved) == 0) {
		struct termios raw = t->saved;

		saved_termios = t->saved;
		ktermios_saved = ioctl(t->in_fd, TCGETS, &saved_ktermios) == 0;
		termios_saved = 1;
		atexit(restore_termios);
		sandbox_set_restore_hook(restore_on_signal);
		cfmakeraw(&raw);
		/* Keep output post-processing so host log lines stay readable. */
		raw.c_oflag |= OPOST | ONLCR;
		if (tcsetattr(t->in_fd, TCSANOW, &raw) == 0)
			t->raw = true;
	}
	kvm->term = t;
	return 0;
}

/*
 * Copies the n bytes read to out with the Ctrl-a escapes applied: Ctrl-a x quits, Ctrl-a a (or
 * Ctrl-a Ctrl-a) types one Ctrl-a, Ctrl-a and any other key pass both on. A Ctrl-a may end one
 * read and its key begin the next, so out needs room for n + 1 bytes. Returns out's length.
 */
static size_t filter_escapes(struct term *t, const u8 *in, size_t n, u8 *out)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		u8 c = in[i];

		if (t->escape_pending) {
			t->escape_pending = false;
			if (c == 'x') {
				kvm_request_end(t->kvm, KVM_END_QUIT, EXIT_GUEST_OK,
						"stopped from the console (Ctrl-a x)");
				return o;
			}
			out[o++] = TERM_ESCAPE;
			if (c != 'a' && c != TERM_ESCAPE)
				out[o++] = c;
			continue;
		}
		if (c == TERM_ESCAPE && t->raw) {
			t->escape_pending = true;
			continue;
		}
		out[o++] = c;
	}
	return o;
}

static void *input_thread(void *arg)
{
	struct term *t = arg;
	u8 buf[64], out[sizeof(buf) + 1];

	pthread_setname_np(pthread_self(), "lkvm-console");
	if (sandbox_enter(t->kvm, SB_CONSOLE) < 0) {
		kvm_request_exit(t->kvm, EXIT_LKVM_ERROR, "console: cannot enter the sandbox");
		return NULL;
	}
	for (;;) {
		struct pollfd p[2] = {
			{ .fd = t->in_fd, .events = POLLIN },
			{ .fd = t->wake_fd, .events = POLLIN },
		};
		ssize_t r;
		size_t n, off = 0;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			break;
		if (!(p[0].revents & (POLLIN | POLLHUP)))
			continue;
		r = read(t->in_fd, buf, sizeof(buf));
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r <= 0)
			break; /* EOF: no more input, the guest keeps running */
		n = filter_escapes(t, buf, (size_t)r, out);
		/* The UART's FIFO (or the virtio console's buffer) is small: wait for room
		 * rather than dropping keystrokes. */
		while (off < n && !atomic_load(&t->kvm->stopping)) {
			const struct console_input *in = &t->kvm->console_in;
			size_t took = in->fn ? in->fn(in->dev, out + off, n - off) : n - off;

			off += took;
			if (off < n) {
				struct pollfd w = { .fd = t->wake_fd, .events = POLLIN };

				if (poll(&w, 1, 5) > 0)
					return NULL;
			}
		}
	}
	return NULL;
}

void term_set_input(struct kvm *kvm, size_t (*fn)(void *dev, const u8 *buf, size_t n), void *dev)
{
	kvm->console_in = (struct console_input){ fn, dev };
}

void term_clear_input(struct kvm *kvm, void *dev)
{
	if (kvm->console_in.dev == dev)
		kvm->console_in = (struct console_input){ NULL, NULL };
}

int term_start(struct term *t)
{
	int ret;

	if (t->in_fd < 0)
		return 0;
	ret = pthread_create(&t->input_thread, NULL, input_thread, t);
	if (ret)
		return -ret;
	t->input_started = true;
	return 0;
}

void term_exit(struct term *t)
{
	if (t->input_started) {
		u64 one = 1;

		if (write(t->wake_fd, &one, sizeof(one)) < 0) {
			/* cannot fail for an eventfd below its limit */
		}
		pthread_join(t->input_thread, NULL);
		t->input_started = false;
	}
	/* lkvm's closing line must not run on from the guest's last, unfinished one. */
	if (t->last_out != '\n' && t->last_out != 0 && write(t->out_fd, "\r\n", 2) < 0) {
		/* stdout is gone; nothing to tidy */
	}
	if (t->raw) {
		tcsetattr(t->in_fd, TCSANOW, &t->saved);
		t->raw = false;
		termios_saved = 0;
	}
	if (t->wake_fd >= 0)
		close(t->wake_fd);
	t->wake_fd = -1;
	free(t->match);
	free(t->tail);
	t->match = t->tail = NULL;
	if (t->kvm && t->kvm->term == t)
		t->kvm->term = NULL;
}

bool term_match_feed(struct term *t, const u8 *buf, size_t len)
{
	size_t keep = t->match_len ? t->match_len - 1 : 0;
	bool hit = false;
	char *win;
	size_t wlen;

	if (!t->match_len)
		return false;
	/* Search tail + buf, so a match split across two writes is still found. */
	wlen = t->tail_len + len;
	win = malloc(wlen ? wlen : 1);
	if (!win)
		return false;
	memcpy(win, t->tail, t->tail_len);
	memcpy(win + t->tail_len, buf, len);
	hit = memmem(win, wlen, t->match, t->match_len) != NULL;
	t->tail_len = MIN(keep, wlen);
	memcpy(t->tail, win + wlen - t->tail_len, t->tail_len);
	free(win);
	return hit;
}

/*
 * A kernel without ACPI (as the project's guest kernel) cannot power off: its power-off
 * (`poweroff -f`, reboot(2)) halts instead, every vCPU in HLT with interrupts off, which KVM
 * keeps to itself (no exit). With -- CMD such a guest can never report CMD's status, so the
 * halt the kernel announces on its console ends the run as the power-off it was asked to be.
 * Only the kernel (or root in the guest, who can power off anyway) writes that console: CMD's
 * own output goes to virtio ports. The text is searched across writes, in a window on the
 * stack (the UART writes a byte at a time).
 */
bool term_halt_feed(struct term *t, const u8 *buf, size_t len)
{
	static const char text[] = TERM_HALT_TEXT;
	const size_t keep = sizeof(text) - 2; /* a match's first part, kept between writes */
	char win[sizeof(t->halt_tail) + 64];

	_Static_assert(sizeof(text) - 2 <= sizeof(t->halt_tail), "the tail holds a match's start");
	if (!t->halt_watch)
		return false;
	while (len) {
		size_t n = MIN(len, sizeof(win) - t->halt_tail_len), wlen = t->halt_tail_len + n;

		memcpy(win, t->halt_tail, t->halt_tail_len);
		memcpy(win + t->halt_tail_len, buf, n);
		if (memmem(win, wlen, text, sizeof(text) - 1))
			return true;
		t->halt_tail_len = MIN(keep, wlen);
		memcpy(t->halt_tail, win + wlen - t->halt_tail_len, t->halt_tail_len);
		buf += n;
		len -= n;
	}
	return false;
}

void term_output(struct kvm *kvm, const u8 *buf, size_t len)
{
	struct term *t = kvm->term;
	int fd = t ? t->out_fd : STDOUT_FILENO;
	bool hit = false, halted = false, failed = false;

	if (t)
		pthread_mutex_lock(&t->out_lock);
	write_full(fd, buf, len); /* stdout gone: the guest keeps running, output is dropped */
	if (t && len) {
		hit = term_match_feed(t, buf, len);
		halted = term_halt_feed(t, buf, len);
		failed = failon_feed(&t->fail, buf, len);
		if (failed)
			snprintf(kvm->fail_on_line, sizeof(kvm->fail_on_line), "%s", t->fail.text);
		t->last_out = buf[len - 1];
	}
	if (t)
		pthread_mutex_unlock(&t->out_lock);
	if (hit)
		kvm_request_end(kvm, KVM_END_EXIT_ON, EXIT_GUEST_OK, "console printed \"%s\"",
				kvm->cfg.exit_on);
	if (failed && !t->fail.hit_deferred && !kvm->cfg.fail_on_finish)
		kvm_request_end(kvm, KVM_END_FAIL_ON, EXIT_FAIL_ON,
				"console printed a kernel bug: %s", kvm->fail_on_line);
	if (halted)
		kvm_request_end(kvm, KVM_END_POWEROFF, EXIT_GUEST_OK,
				"guest halted (its kernel has no ACPI to power off with)");
}

/* The ends a --fail-on line that came before them turns into fail-on: the guest's own, and
 * the waits for it. A panic (pvpanic), an assertion, a stop, a signal, Ctrl-a x, lkvm's own
 * error and a closed stdout say something of their own. */
static const bool fail_on_overrides[KVM_END_NR] = {
	[KVM_END_OTHER] = true,	  [KVM_END_COMMAND] = true, [KVM_END_INIT] = true,
	[KVM_END_TIMEOUT] = true, [KVM_END_REBOOT] = true,  [KVM_END_POWEROFF] = true,
	[KVM_END_EXIT_ON] = true,
};

int term_fail_on_settle(struct kvm *kvm, int status)
{
	char was[96];

	if (!kvm->fail_on_line[0] || (unsigned)kvm->exit_by >= KVM_END_NR ||
	    !fail_on_overrides[kvm->exit_by])
		return status;
	/* Both cut to fit the reason's 256 bytes; the status file has the whole line. */
	snprintf(was, sizeof(was), "%.80s", kvm->exit_reason);
	snprintf(kvm->exit_reason, sizeof(kvm->exit_reason),
		 "console printed a kernel bug: %.120s (then: %.80s)", kvm->fail_on_line, was);
	kvm->exit_by = KVM_END_FAIL_ON;
	return EXIT_FAIL_ON;
}
