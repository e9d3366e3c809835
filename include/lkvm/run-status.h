/* `lkvm run --status-file FILE`: how the run ended, as key=value lines a script reads instead of lkvm's messages. */
#ifndef LKVM_RUN_STATUS_H
#define LKVM_RUN_STATUS_H

#include <stddef.h>

#include "lkvm/kvm.h"

/*
 * The record (docs/run.md): one line each, in this order, the optional ones only when they
 * apply:
 *   ended=KIND            who ended the run (run_status_kind_name: command, panic, ...)
 *   command_status=N      CMD's own status as it reported it (ended=command only)
 *   command_signal=N      the signal that killed CMD (then command_status is 128+N)
 *   signal=N              the signal that stopped lkvm (ended=signal, and sandbox: SIGSYS)
 *   status=N              lkvm's exit status, as without the option
 *   reason=TEXT           lkvm's closing line's reason, on one line
 *   fail_on=LINE          the first console line --fail-on matched, \xNN-escaped (also when
 *                         the run did not end by it: a panic, a stop, ...)
 * An empty file: lkvm was killed (SIGKILL) before it could write it.
 */
struct run_status {
	enum kvm_end by;
	int status;
	int command_status; /* -1: CMD reported none */
	int command_signal; /* 0: none */
	int signal;	    /* 0: none */
	char reason[256];   /* "": none */
	/* The first --fail-on line, escaped; "": none. */
	char fail_on[FAILON_TEXT_MAX];
};

/* The record of a run that ended (kvm->stopping: kvm->exit_by, the exit port's report, the
 * reason), or of one that never ran (ended=error); status is lkvm's exit status. Before the
 * VM is torn down (the exit port is asked). */
void run_status_collect(struct run_status *s, struct kvm *kvm, int status);
/* ended='s word for a kind ("other" for one out of range). */
const char *run_status_kind_name(enum kvm_end by);
/* The record into buf (always terminated); its length, or -ENOSPC when it did not fit. */
int run_status_format(const struct run_status *s, char *buf, size_t len);

/*
 * --status-file FILE: created or truncated now (as lkvm's user at start, mode 0644,
 * O_CLOEXEC), before the sandbox, which then allows every thread to write it; the sandbox's
 * SIGSYS end writes "ended=sandbox" there itself. Process-wide: one per `lkvm run`. 0 or -errno
 * with err.
 */
int run_status_open(const char *path, char *err, size_t errlen) __must_check;
/* The record written (one write) and the file closed; no-op when none is open. A failure is
 * one warning: the run's status is still lkvm's exit status. */
void run_status_close(const struct run_status *s);

#endif
