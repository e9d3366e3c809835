/* `lkvm run --status-file FILE`: who ended the run and the command's own status, written once at the end. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "lkvm/exitport.h"
#include "lkvm/initcfg.h"
#include "lkvm/run-status.h"
#include "lkvm/sandbox.h"

static const char *const kind_names[] = {
	[KVM_END_OTHER] = "other",	 [KVM_END_COMMAND] = "command",
	[KVM_END_INIT] = "init",	 [KVM_END_ASSERT] = "assert",
	[KVM_END_PANIC] = "panic",	 [KVM_END_TIMEOUT] = "timeout",
	[KVM_END_ERROR] = "error",	 [KVM_END_STOP] = "stop",
	[KVM_END_SIGNAL] = "signal",	 [KVM_END_REBOOT] = "reboot",
	[KVM_END_POWEROFF] = "poweroff", [KVM_END_EXIT_ON] = "exit-on",
	[KVM_END_QUIT] = "quit",	 [KVM_END_CLOSED] = "closed",
	[KVM_END_SANDBOX] = "sandbox",	 [KVM_END_FAIL_ON] = "fail-on",
};
_Static_assert(sizeof(kind_names) / sizeof(kind_names[0]) == KVM_END_NR, "a name per kind");

/* The open file: process-wide, as the SIGSYS handler that writes it takes no argument. */
static int status_fd = -1;
/* What the SIGSYS end writes, formatted when the file is opened (a handler formats nothing). */
static char sigsys_text[160];
static size_t sigsys_len;

const char *run_status_kind_name(enum kvm_end by)
{
	return (unsigned)by < KVM_END_NR && kind_names[by] ? kind_names[by] : "other";
}

/* One key=value line; the value's newlines (a reason's) become spaces. */
static size_t put_line(char *buf, size_t at, size_t len, const char *key, const char *val)
{
	int n = snprintf(buf + at, at < len ? len - at : 0, "%s=%s\n", key, val);

	for (size_t i = at + strlen(key) + 1; n > 0 && i + 1 < at + (size_t)n && i < len; i++)
		if (buf[i] == '\n' || buf[i] == '\r')
			buf[i] = ' ';
	return at + (n > 0 ? (size_t)n : 0);
}

static size_t put_int(char *buf, size_t at, size_t len, const char *key, int v)
{
	char num[16];

	snprintf(num, sizeof(num), "%d", v);
	return put_line(buf, at, len, key, num);
}

int run_status_format(const struct run_status *s, char *buf, size_t len)
{
	size_t at = put_line(buf, 0, len, "ended", run_status_kind_name(s->by));

	if (s->command_status >= 0)
		at = put_int(buf, at, len, "command_status", s->command_status);
	if (s->command_signal > 0)
		at = put_int(buf, at, len, "command_signal", s->command_signal);
	if (s->signal > 0)
		at = put_int(buf, at, len, "signal", s->signal);
	at = put_int(buf, at, len, "status", s->status);
	if (s->reason[0])
		at = put_line(buf, at, len, "reason", s->reason);
	if (s->fail_on[0])
		at = put_line(buf, at, len, "fail_on", s->fail_on);
	if (len)
		buf[MIN(at, len - 1)] = '\0';
	return at < len ? (int)at : -ENOSPC;
}

void run_status_collect(struct run_status *s, struct kvm *kvm, int status)
{
	bool ended = atomic_load(&kvm->stopping);
	int exit_status = atomic_load(&kvm->exit_status);

	*s = (struct run_status){ .by = ended ? (enum kvm_end)kvm->exit_by : KVM_END_ERROR,
				  .status = status,
				  .command_status = -1 };
	if (!ended)
		return; /* never ran: the error line said why */
	snprintf(s->reason, sizeof(s->reason), "%s", kvm->exit_reason);
	snprintf(s->fail_on, sizeof(s->fail_on), "%s", kvm->fail_on_line);
	/* A --fail-on-finish run's CMD reported its status: still the command's. */
	if (s->by == KVM_END_FAIL_ON && exitport_report_kind(kvm) == LKVM_EXIT_EXITED)
		s->command_status = exit_status;
	if (s->by == KVM_END_COMMAND)
		s->command_status = exit_status;
	if (s->by == KVM_END_COMMAND && exitport_report_kind(kvm) == LKVM_EXIT_SIGNALED)
		s->command_signal = exit_status - 128;
	if (s->by == KVM_END_SIGNAL)
		s->signal = exit_status - 128;
}

/* The sandbox's SIGSYS end (sandbox_set_exit_hook): async-signal-safe, write(2) only. */
static void write_sigsys(void)
{
	if (status_fd >= 0 && write(status_fd, sigsys_text, sigsys_len) < 0) {
		/* lkvm is ending: nowhere left to report it */
	}
}

int run_status_open(const char *path, char *err, size_t errlen)
{
	struct run_status sys = { .by = KVM_END_SANDBOX,
				  .status = 128 + SIGSYS,
				  .command_status = -1,
				  .signal = SIGSYS,
				  .reason = "the sandbox stopped a forbidden system call" };
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), ret;

	if (fd < 0) {
		ret = -errno;
		errfmt(err, errlen, "--status-file '%s': %s", path, strerror(-ret));
		return ret;
	}
	/* The main thread writes it at the end, any thread from the SIGSYS handler. */
	ret = sandbox_allow_fd(fd);
	if (ret < 0) {
		errfmt(err, errlen, "--status-file '%s': the sandbox cannot allow it: %s", path,
		       strerror(-ret));
		close(fd);
		return ret;
	}
	status_fd = fd;
	ret = run_status_format(&sys, sigsys_text, sizeof(sigsys_text));
	sigsys_len = ret > 0 ? (size_t)ret : 0;
	sandbox_set_exit_hook(write_sigsys);
	return 0;
}

void run_status_close(const struct run_status *s)
{
	char buf[512 + FAILON_TEXT_MAX];
	int n;

	if (status_fd < 0)
		return;
	sandbox_set_exit_hook(NULL);
	n = run_status_format(s, buf, sizeof(buf));
	if (n < 0)
		n = (int)strlen(buf); /* a reason cut short: the lines before it are whole */
	if (write_full(status_fd, buf, (size_t)n) < (size_t)n)
		pr_warn("--status-file: %s", strerror(errno));
	close(status_fd);
	status_fd = -1;
}
