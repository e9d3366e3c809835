/* Unit tests of the seccomp allow-lists (sandbox.c): sizes, stacking, and a forbidden call stopping a child process. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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
		fprintf(stderr, "sandbox %-8s %2d system calls, %2d ioctl requests\n", sandbox_kind_name(k),
			calls[k], ioctls[k]);
		ck_assert_int_gt(calls[k], 20);
		ck_assert_int_lt(calls[k], 60);
		ck_assert_int_ge(ioctls[k], 3);
	}
	ck_assert_int_gt(calls[SB_VCPU], calls[SB_NET_TX]);
	ck_assert_int_gt(ioctls[SB_VCPU], ioctls[SB_MAIN]);
	ck_assert_str_eq(sandbox_kind_name(SB_NET_TX), "net-tx");
}
END_TEST

/* In a child: drop privileges, enter `kind`'s filter, then do `what`. Returns the child's
 * wait status; its stderr goes to errbuf. */
static int child(enum sandbox_kind kind, int what, char *errbuf, size_t len)
{
	int p[2], status;
	pid_t pid;
	ssize_t n;

	ck_assert_int_eq(pipe(p), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct kvm *kvm = calloc(1, sizeof(*kvm));
		char err[256];

		dup2(p[1], STDERR_FILENO);
		if (!kvm || sandbox_drop_privileges(NULL, err, sizeof(err)) < 0)
			_exit(100);
		kvm->sandbox = true;
		if (sandbox_enter(kvm, kind) < 0)
			_exit(101);
		if (what == 1 && socket(AF_INET, SOCK_STREAM, 0) >= 0)
			_exit(102); /* not reached with the filter */
		if (what == 2 && open("/etc/hostname", O_RDONLY) >= 0)
			_exit(103);
		/* Allowed everywhere: write, and leaving. */
		if (write(STDERR_FILENO, "still here\n", 11) != 11)
			_exit(104);
		_exit(0);
	}
	close(p[1]);
	n = read(p[0], errbuf, len - 1);
	errbuf[n > 0 ? n : 0] = '\0';
	close(p[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	return status;
}

START_TEST(forbidden_call_stops)
{
	char out[512];
	int st;

	st = child(SB_NET_TX, 1, out, sizeof(out));
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGSYS, "status %#x, output: %s", st, out);
	ck_assert_msg(strstr(out, "sandbox: the net-tx thread made system call 41, which its allow-list forbids"),
		      "output: %s", out);
	ck_assert_ptr_null(strstr(out, "still here"));

	st = child(SB_CONSOLE, 2, out, sizeof(out));
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGSYS, "status %#x, output: %s", st, out);
	/* glibc opens with openat (257) */
	ck_assert_msg(strstr(out, "the console thread made system call 257,"), "output: %s", out);
}
END_TEST

START_TEST(allowed_calls_pass)
{
	char out[512];

	for (int k = 0; k < SB_NR; k++) {
		int st = child(k, 0, out, sizeof(out));

		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %#x, output: %s",
			      sandbox_kind_name(k), st, out);
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
	tcase_add_test(tc, allowed_calls_pass);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(sandbox_suite)
