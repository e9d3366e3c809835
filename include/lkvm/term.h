/* The host terminal: raw mode for the serial console, input thread, Ctrl-a escapes, output matching. */
#ifndef LKVM_TERM_H
#define LKVM_TERM_H

#include <pthread.h>
#include <termios.h>

#include "lkvm/failon.h"
#include "lkvm/util.h"

struct kvm;

#define TERM_ESCAPE 0x01 /* Ctrl-a, then x quits, a sends a literal Ctrl-a */
/* What Linux's kernel_halt() prints last (KERN_EMERG, so even under `quiet`). */
#define TERM_HALT_TEXT "reboot: System halted"

struct term {
	struct kvm *kvm;
	int in_fd, out_fd;
	bool raw; /* termios changed, must be restored */
	struct termios saved;
	pthread_t input_thread;
	bool input_started;
	int wake_fd; /* eventfd that stops the input thread */
	bool escape_pending;
	u8 last_out; /* last byte written to out_fd, 0 before any */
	pthread_mutex_t out_lock;
	/* --exit-on matching across writes: the tail of what was printed so far. */
	char *match;
	size_t match_len;
	char *tail;
	size_t tail_len;
	/* --fail-on: the kernel-bug lines (failon.c), fed under out_lock. */
	struct failon fail;
	/* -- CMD: the kernel's "System halted", the end of a power-off without ACPI (term.c). */
	bool halt_watch;
	char halt_tail[32];
	size_t halt_tail_len;
};

/* Set up the console on stdin/stdout. Raw mode only when stdin is a terminal (then it is put
 * back at exit, and from the SIGSYS handler through sandbox_set_restore_hook).
 * Returns 0 or -errno. */
int term_init(struct kvm *kvm, struct term *t) __must_check;
/* Start forwarding input to the UART. */
int term_start(struct term *t) __must_check;
/* Stop the input thread and restore the terminal (safe to call twice). */
void term_exit(struct term *t);

/* The console device that takes terminal input: fn(dev, buf, n) queues what it can and
 * returns how much (the terminal retries the rest). The last one set wins; clearing only
 * undoes dev's own. Called at device init and exit, while the terminal's thread is not
 * running. */
void term_set_input(struct kvm *kvm, size_t (*fn)(void *dev, const u8 *buf, size_t n), void *dev);
void term_clear_input(struct kvm *kvm, void *dev);

/* Console output from the guest (the UART's transmitter). Writes to stdout and checks
 * for --exit-on text, and with -- CMD for the kernel's halt (TERM_HALT_TEXT). Thread-safe. */
void term_output(struct kvm *kvm, const u8 *buf, size_t len);

/* --fail-on at the run's end: a line matched whose run was let go on (--fail-on-finish, or
 * the panic line pvpanic did not report) and ended in a way a bug report tells better (the
 * guest's own end, CMD's status, --exit-on, --timeout): the run's end becomes fail-on, its
 * reason says both, and EXIT_FAIL_ON is returned; otherwise status. After the vCPUs stopped. */
int term_fail_on_settle(struct kvm *kvm, int status);

/* Pure matcher used by term_output (exposed for tests): feeds buf into the rolling
 * tail and returns true when the match text has appeared. */
bool term_match_feed(struct term *t, const u8 *buf, size_t len);
/* The same for TERM_HALT_TEXT, when t->halt_watch (exposed for tests). */
bool term_halt_feed(struct term *t, const u8 *buf, size_t len);

#endif
