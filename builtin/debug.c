/* `lkvm debug NAME`: every vCPU's registers and its last exit, read while the vCPUs are parked for a moment; with --gdb ADDR, a gdb session with the running VM relayed through its control socket. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lkvm/builtin.h"
#include "lkvm/ctl.h"
#include "lkvm/gdb.h"

void debug_usage(FILE *out)
{
	fprintf(out,
		"usage: lkvm debug NAME\n"
		"       lkvm debug NAME --gdb ADDR\n"
		"\n"
		"Print each vCPU's general, control and segment registers and its last exit to lkvm\n"
		"(reason; port or address, size and direction for I/O and MMIO; how long ago). The\n"
		"vCPUs are parked for the moment it takes to read them (registers can only be read\n"
		"outside the guest) and then continue; a paused VM stays paused.\n"
		"\n"
		"With --gdb ADDR: serve gdb's remote protocol for the running VM, as lkvm run --gdb\n"
		"does, on ADDR: unix:PATH (recommended: created 0600, only you may connect; removed\n"
		"at the end), PORT (on 127.0.0.1, where every local user can connect and read and\n"
		"write the guest's memory and registers) or HOST:PORT (anyone who reaches it can).\n"
		"This command listens there, takes one gdb (target remote ADDR), and\n"
		"relays it to the VM's gdb server over the VM's control socket. The VM runs until\n"
		"gdb connects (which stops it, as a pause does: its clocks stand still), and runs on,\n"
		"every breakpoint removed, when gdb detaches or its connection drops; then this\n"
		"command ends. A VM that ends meanwhile tells gdb its exit status. One gdb at a time:\n"
		"a VM attached to already, or started with lkvm run --gdb, refuses another.\n"
		"\n"
		"      --gdb ADDR   attach gdb to the running VM through ADDR\n"
		"  -h, --help       this text\n"
		"\n"
		"Exit status: 0 (with --gdb: gdb detached or left, or the VM ended), or 1 no such VM,\n"
		"its vCPUs did not stop in 5 s, a bad or busy ADDR, a gdb already attached or served,\n"
		"the host's KVM cannot debug guests, or the VM ended before gdb came.\n");
}

/* Whole buffer to a socket; false when the other side is gone. */
static bool send_all(int fd, const char *p, size_t len)
{
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

/* SIGINT, SIGTERM, SIGHUP as a descriptor: the loops below end on them and clean up (a unix
 * socket's path). */
static int signal_fd(void)
{
	sigset_t sigs;

	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	return signalfd(-1, &sigs, SFD_CLOEXEC);
}

/* gdb's connection on lfd, while the VM's (vm) may end first and a signal may come. The gdb
 * client's fd, or -1 with the reason said. */
static int wait_gdb(int lfd, int vm, int sig, const char *name)
{
	for (;;) {
		struct pollfd p[3] = { { .fd = lfd, .events = POLLIN },
				       { .fd = vm, .events = POLLIN },
				       { .fd = sig, .events = POLLIN } };
		int fd;

		if (poll(p, sig >= 0 ? 3 : 2, -1) < 0 && errno != EINTR)
			return -1;
		if (p[2].revents) {
			pr_info("debug: stopped by a signal before gdb came");
			return -1;
		}
		if (p[1].revents) {
			pr_err("debug: VM %s ended before gdb came", name);
			return -1;
		}
		if (!p[0].revents)
			continue;
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0 || (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED))
			return fd;
	}
}

/* Bytes both ways until one side ends (gdb detached or left, the VM closed the session, a
 * signal). gdb's protocol is a request and its answer: plain blocking writes cannot deadlock. */
static void relay(int gdb, int vm, int sig)
{
	char buf[4096];

	for (;;) {
		struct pollfd p[3] = { { .fd = gdb, .events = POLLIN },
				       { .fd = vm, .events = POLLIN },
				       { .fd = sig, .events = POLLIN } };

		if (poll(p, sig >= 0 ? 3 : 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		if (p[2].revents)
			return;
		for (int i = 0; i < 2; i++) {
			ssize_t n;

			if (!p[i].revents)
				continue;
			n = recv(p[i].fd, buf, sizeof(buf), 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0 || !send_all(p[!i].fd, buf, (size_t)n))
				return;
		}
	}
}

/*
 * --gdb: this process (the user's, unconfined) listens on ADDR and relays one gdb client to a
 * control connection that the VM has turned into a client of its gdb server (CTL_GDB). Why not
 * in the VM: its threads are sandboxed by now (no new listening socket, no file to create), and
 * its control socket already admits only its owner. The VM is asked first, so a busy or
 * unable VM says so before anything listens.
 */
static int debug_gdb(const char *name, const char *addr)
{
	char path[108], err[512] = "";
	int vm = -1, lfd, gdb, sig, ret;
	struct ctl_kvs kv;

	if (ctl_cli_call(name, CTL_GDB, &kv, &vm, 10000))
		return 1;
	ctl_kvs_free(&kv);
	ret = gdb_listen_addr(addr, &lfd, path, err, sizeof(err));
	if (ret < 0) {
		pr_err("debug --gdb %s: %s", addr, err[0] ? err : strerror(-ret));
		close(vm);
		return 1;
	}
	sig = signal_fd();
	printf("gdb: listening on %s (VM %s); the VM runs until gdb stops it\n", addr, name);
	fflush(stdout);
	gdb = wait_gdb(lfd, vm, sig, name);
	/* One gdb: nobody else is taken, and a unix socket's path goes now. */
	close(lfd);
	if (path[0])
		unlink(path);
	if (gdb >= 0) {
		relay(gdb, vm, sig);
		close(gdb);
	}
	close(vm); /* the VM's gdb session ends with it: a detach if gdb did not */
	if (sig >= 0)
		close(sig);
	return gdb >= 0 ? 0 : 1;
}

int cmd_debug(int argc, char **argv)
{
	struct ctl_kvs kv;

	if (ctl_cli_wants_help(argc, argv)) {
		debug_usage(stdout);
		return 0;
	}
	if (argc == 4 && argv[1][0] != '-' && !strcmp(argv[2], "--gdb"))
		return debug_gdb(argv[1], argv[3]);
	if (argc != 2 || argv[1][0] == '-') {
		pr_err("debug: give one VM name, and --gdb ADDR to attach gdb (see lkvm debug --help)");
		return 1;
	}
	if (ctl_cli_call(argv[1], CTL_DEBUG, &kv, NULL, 10000))
		return 1;
	printf("%s (%s):\n%s", ctl_kv_str(&kv, "name"), ctl_kv_str(&kv, "state"),
	       ctl_kv_str(&kv, "text"));
	ctl_kvs_free(&kv);
	return 0;
}
