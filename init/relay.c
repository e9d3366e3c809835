/* lkvm-init's output relays: a pipe for CMD's stdout or stderr, emptied into lkvm's virtio-serial port by a child of init. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>
#include <sys/wait.h>

#include "relay.h"

#define RELAY_BUF (64 * 1024) /* a pipe's default capacity: one read takes what it holds */

static volatile sig_atomic_t draining;

static void on_drain(int sig)
{
	(void)sig;
	draining = 1;
}

static int write_all(int fd, const char *buf, size_t n)
{
	while (n) {
		ssize_t w = write(fd, buf, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		buf += w;
		n -= (size_t)w;
	}
	return 0;
}

/* The relay: pipe to port until the pipe's end of file, or, once init says CMD ended
 * (SIGUSR1), until the pipe is empty. SIGUSR1 stays blocked (relay_start) but inside ppoll,
 * which unblocks it atomically with the wait: a signal that comes while a block is read or
 * written is seen at the next wait, never lost between a check and the wait. */
static void __attribute__((noreturn)) relay(int in, int out)
{
	static char buf[RELAY_BUF];
	struct sigaction sa = { .sa_handler = on_drain };
	struct pollfd pfd = { .fd = in, .events = POLLIN };
	sigset_t waiting;

	sigaction(SIGUSR1, &sa, NULL);
	signal(SIGPIPE, SIG_DFL);
	sigemptyset(&waiting);
	fcntl(in, F_SETFL, O_NONBLOCK);
	for (;;) {
		ssize_t n = read(in, buf, sizeof(buf));

		if (n > 0) {
			if (write_all(out, buf, (size_t)n))
				_exit(0);
			continue;
		}
		if (n == 0 || (errno != EAGAIN && errno != EINTR))
			_exit(0); /* every writer gone, or an error */
		if (errno == EAGAIN && draining)
			_exit(0); /* CMD ended and the pipe is empty */
		ppoll(&pfd, 1, NULL, &waiting);
	}
}

int relay_start(int port, int other, pid_t *pid)
{
	sigset_t set, old;
	int p[2], e;

	if (pipe2(p, O_CLOEXEC))
		return -errno;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, &old);
	*pid = fork();
	e = errno;
	if (*pid == 0) {
		close(p[1]);
		if (other >= 0)
			close(other);
		relay(p[0], port);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(p[0]);
	if (*pid < 0) {
		close(p[1]);
		return -e;
	}
	return p[1];
}

void relay_finish(pid_t pid)
{
	if (pid <= 0)
		return;
	kill(pid, SIGUSR1);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}
