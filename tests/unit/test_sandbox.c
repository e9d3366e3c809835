/* Unit tests of the seccomp allow-lists (sandbox.c): sizes, stacking, argument checks, and a forbidden call stopping a child process. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_main.h"
#include "lkvm/kvm.h"
#include "lkvm/sandbox.h"

/* Every kind has a list; the vCPU's covers the net threads it creates. */
START_TEST(list_sizes)
{
	int calls[SB_NR], ioctls[SB_NR];

	for (int k = 0; k < SB_NR; k++) {
		sandbox_list_size(k, &calls[k], &ioctls[k]);
		fprintf(stderr, "sandbox %-8s %2d system calls, %2d ioctl requests\n",
			sandbox_kind_name(k), calls[k], ioctls[k]);
		ck_assert_int_gt(calls[k], 20);
		ck_assert_int_lt(calls[k], 60);
		ck_assert_int_ge(ioctls[k], 3);
	}
	ck_assert_int_gt(calls[SB_VCPU], calls[SB_NET_TX]);
	ck_assert_int_gt(ioctls[SB_VCPU], ioctls[SB_MAIN]);
	ck_assert_str_eq(sandbox_kind_name(SB_NET_TX), "net-tx");
}
END_TEST

/* What the child does inside its filter (besides writing "still here" to stderr). */
enum what {
	DO_NOTHING,
	DO_SOCKET,	 /* forbidden to every kind */
	DO_OPEN,	 /* forbidden outside main */
	DO_SIGNAL_OTHER, /* tgkill of another process (victim): forbidden */
	DO_SIGNAL_SELF,	 /* tgkill of its own thread (signal 0): allowed */
	DO_WRITE_FILE,	 /* write to a file opened before the filter: forbidden */
	DO_READ_FILE,	 /* read of the same: forbidden */
	DO_EVENTFD,	 /* write and read of an eventfd opened before: allowed */
	DO_EVENTFD_FD0,	 /* the same with stdin closed, so that the eventfd is fd 0 */
	DO_FILE_ALLOWED, /* read and write of the file after sandbox_allow_fd: allowed */
	DO_SOCKET_HOOK,	 /* DO_SOCKET with a restore hook set (sandbox_set_restore_hook) */
};

/* The restore hook of DO_SOCKET_HOOK: says it ran (term.c's puts the terminal back). */
static void hook_says(void)
{
	if (write(STDERR_FILENO, "restore hook ran\n", 17) != 17) {
		/* the parent sees the line missing */
	}
}

static pid_t victim;

/* The child of child(): open a file and an eventfd, drop privileges, enter `kind`'s filter,
 * then do `what`, with stderr on out_fd. Its exit status says what went wrong. */
static __attribute__((noreturn)) void in_child(enum sandbox_kind kind, enum what what, int out_fd)
{
	struct kvm *kvm = calloc(1, sizeof(*kvm));
	char err[256], b[8] = { 1 };
	int file, efd;

	if (what == DO_EVENTFD_FD0)
		close(STDIN_FILENO);
	efd = eventfd(0, 0);
	file = open("/proc/self/stat", O_RDONLY);
	if (what == DO_EVENTFD_FD0 && efd != 0)
		_exit(110);

	dup2(out_fd, STDERR_FILENO);
	if (!kvm || file < 0 || efd < 0 || sandbox_drop_privileges(NULL, err, sizeof(err)) < 0)
		_exit(100);
	if (what == DO_FILE_ALLOWED && sandbox_allow_fd(file) < 0)
		_exit(111);
	if (what == DO_SOCKET_HOOK)
		sandbox_set_restore_hook(hook_says);
	kvm->sandbox = true;
	if (sandbox_enter(kvm, kind) < 0)
		_exit(101);
	/* Each forbidden call below is not reached past with the filter. */
	if ((what == DO_SOCKET || what == DO_SOCKET_HOOK) && socket(AF_INET, SOCK_STREAM, 0) >= 0)
		_exit(102);
	if (what == DO_OPEN && open("/etc/hostname", O_RDONLY) >= 0)
		_exit(103);
	if (what == DO_SIGNAL_OTHER && syscall(SYS_tgkill, victim, victim, SIGKILL) == 0)
		_exit(105);
	if (what == DO_SIGNAL_SELF && syscall(SYS_tgkill, getpid(), gettid(), 0) != 0)
		_exit(106);
	if (what == DO_WRITE_FILE && write(file, b, 1) != 2)
		_exit(107); /* EBADF (read-only file) without the filter */
	if (what == DO_READ_FILE && read(file, b, 1) == 1)
		_exit(108);
	/* (write fails with EBADF: the file is read-only; the filter let it through) */
	if (what == DO_FILE_ALLOWED && (read(file, b, 1) != 1 || write(file, b, 1) != -1))
		_exit(112);
	if ((what == DO_EVENTFD || what == DO_EVENTFD_FD0) &&
	    (write(efd, b, 8) != 8 || read(efd, b, 8) != 8))
		_exit(109);
	/* Allowed everywhere: write, and leaving. */
	if (write(STDERR_FILENO, "still here\n", 11) != 11)
		_exit(104);
	_exit(0);
}

/* In a child: in_child(kind, what). Returns the child's wait status; its stderr goes to
 * errbuf. */
static int child(enum sandbox_kind kind, enum what what, char *errbuf, size_t len)
{
	int p[2], status;
	pid_t pid;
	ssize_t n;

	ck_assert_int_eq(pipe(p), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		in_child(kind, what, p[1]);
	close(p[1]);
	/* Until the child is gone: the SIGSYS report and the restore hook's line are two writes. */
	for (size_t at = 0;; at += (size_t)n) {
		n = read(p[0], errbuf + at, len - 1 - at);
		if (n <= 0) {
			errbuf[at] = '\0';
			break;
		}
	}
	close(p[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	return status;
}

START_TEST(forbidden_call_stops)
{
	char out[512];
	int st;

	st = child(SB_NET_TX, DO_SOCKET, out, sizeof(out));
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGSYS, "status %#x, output: %s",
		      st, out);
	ck_assert_msg(
		strstr(out,
		       "sandbox: the net-tx thread made system call 41, which its allow-list forbids"),
		"output: %s", out);
	ck_assert_ptr_null(strstr(out, "still here"));

	st = child(SB_CONSOLE, DO_OPEN, out, sizeof(out));
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGSYS, "status %#x, output: %s",
		      st, out);
	/* glibc opens with openat (257) */
	ck_assert_msg(strstr(out, "the console thread made system call 257,"), "output: %s", out);
#ifndef __SANITIZE_ADDRESS__ /* sanitizer builds leave main unfiltered (sandbox_enter) */
	/* Nor does main open a file, even read-only (--debug's statm fd is opened before). */
	st = child(SB_MAIN, DO_OPEN, out, sizeof(out));
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGSYS, "status %#x, output: %s",
		      st, out);
	ck_assert_msg(strstr(out, "the main thread made system call 257,"), "output: %s", out);
#endif
}
END_TEST

/* The SIGSYS handler runs the restore hook (the terminal's, in a run) before lkvm ends, after
 * its report. */
START_TEST(forbidden_call_restores)
{
	const char *hook;
	char out[512];
	int st;

	st = child(SB_VCPU, DO_SOCKET_HOOK, out, sizeof(out));
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGSYS, "status %#x, output: %s",
		      st, out);
	ck_assert_msg(strstr(out, "the vcpu thread made system call 41,"), "output: %s", out);
	hook = strstr(out, "restore hook ran\n");
	ck_assert_msg(hook && hook > strstr(out, "stopping lkvm"), "output: %s", out);
	ck_assert_ptr_null(strstr(out, "still here"));
}
END_TEST

/* A thread may signal its own process's threads only: a foreign process survives, and the
 * SIGSYS report names tgkill (234). */
START_TEST(signal_other_process_stops)
{
	char out[512];
	int st;

	victim = fork();
	ck_assert_int_ge(victim, 0);
	if (victim == 0) {
		pause();
		_exit(0);
	}
	for (int k = 0; k < SB_NR; k++) {
#ifdef __SANITIZE_ADDRESS__
		if (k == SB_MAIN)
			continue; /* sanitizer builds leave main unfiltered (sandbox_enter) */
#endif
		st = child(k, DO_SIGNAL_OTHER, out, sizeof(out));
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGSYS,
			      "%s: status %#x, output: %s", sandbox_kind_name(k), st, out);
		ck_assert_msg(strstr(out, "made system call 234,"), "%s: output: %s",
			      sandbox_kind_name(k), out);
		ck_assert_int_eq(waitpid(victim, &st, WNOHANG), 0);
	}
	kill(victim, SIGKILL);
	ck_assert_int_eq(waitpid(victim, &st, 0), victim);
	ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}
END_TEST

/* read and write only on the fds the filter knows (eventfds, 0-2): a file lkvm holds is
 * neither read into memory the guest sees nor written. */
START_TEST(file_io_stops)
{
	char out[512];
	int st;

	st = child(SB_VCONSOLE, DO_WRITE_FILE, out, sizeof(out));
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGSYS, "status %#x, output: %s",
		      st, out);
	ck_assert_msg(strstr(out, "the virtio-console thread made system call 1,"), "output: %s",
		      out);
	st = child(SB_RNG, DO_READ_FILE, out, sizeof(out));
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGSYS, "status %#x, output: %s",
		      st, out);
	ck_assert_msg(strstr(out, "the rng thread made system call 0,"), "output: %s", out);
}
END_TEST

START_TEST(allowed_calls_pass)
{
	static const enum what allowed[] = { DO_NOTHING, DO_SIGNAL_SELF, DO_EVENTFD, DO_EVENTFD_FD0,
					     DO_FILE_ALLOWED };
	char out[512];

	for (int k = 0; k < SB_NR; k++)
		for (size_t w = 0; w < ARRAY_SIZE(allowed); w++) {
			int st = child(k, allowed[w], out, sizeof(out));

			ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
				      "%s, case %d: status %#x, output: %s", sandbox_kind_name(k),
				      allowed[w], st, out);
			ck_assert_ptr_nonnull(strstr(out, "still here"));
		}
}
END_TEST

static Suite *sandbox_suite(void)
{
	Suite *s = suite_create("sandbox");
	TCase *tc = tcase_create("seccomp");

	tcase_add_test(tc, list_sizes);
	tcase_add_test(tc, forbidden_call_stops);
	tcase_add_test(tc, forbidden_call_restores);
	tcase_add_test(tc, signal_other_process_stops);
	tcase_add_test(tc, file_io_stops);
	tcase_add_test(tc, allowed_calls_pass);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(sandbox_suite)
