/* `lkvm snapshot NAME FILE [--stop]`: a running VM's whole state written to FILE through its control socket. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "lkvm/builtin.h"
#include "lkvm/ctl.h"
#include "lkvm/sandbox.h"
#include "lkvm/snap.h"

/* Writing a large guest's memory takes as long as the disk does: the reply may be late. */
#define SNAPSHOT_REPLY_MS 600000
#define STOP_WAIT_MS 30000

void snapshot_usage(FILE *out)
{
	fprintf(out,
		"usage: lkvm snapshot NAME FILE [--stop]\n"
		"\n"
		"Write VM NAME's whole state to FILE: it is paused as lkvm pause pauses it (vCPUs\n"
		"parked, devices quiet, clocks frozen), its vCPUs, interrupt controllers, clock,\n"
		"devices and memory (pages that are all zero left out) are written, and it resumes;\n"
		"a VM lkvm pause paused stays paused. lkvm run --restore FILE starts it again, as\n"
		"many times as wanted, with its disks, NICs and shares given again (-d, -n,\n"
		"--share: a snapshot names no host resource). FILE is created by this command (as\n"
		"the user running it) in a private directory beside its final name and renamed\n"
		"into place once whole: FILE is the old file or the whole new one, exactly as\n"
		"written (else an error). A VM with a device that cannot be saved (a vhost-net\n"
		"NIC) refuses, naming it, and runs on.\n"
		"\n"
		"      --stop      stop the VM once it is saved (its run exits with 3), and wait\n"
		"                  until its process is gone\n"
		"  -h, --help      this text\n"
		"\n"
		"Exit status: 0 saved, 1 not (no such VM, a device that cannot be saved, FILE's\n"
		"directory not writable, the disk full).\n");
}

/* Send the request with the file and read the reply into kv. 0, or 1 after the error line. */
static int request(int sock, const char *name, int file_fd, bool stop, struct ctl_kvs *kv)
{
	struct ctl_msg req, reply;
	int ret;

	ctl_msg_init(&req, CTL_SNAPSHOT, 0);
	ctl_add_u64(&req, "stop", stop);
	ret = ctl_send_fd(sock, &req, file_fd);
	ctl_msg_free(&req);
	if (ret == 0)
		ret = ctl_recv(sock, &reply, CTL_MAX_REPLY, SNAPSHOT_REPLY_MS);
	if (ret < 0) {
		pr_err("%s: %s", name,
		       ret == -ETIMEDOUT ? "no reply in time"
		       : ret == -ECONNRESET || ret == -EPIPE
			       ? "the VM closed the connection without a reply (it is shutting down, or an older lkvm)"
			       : strerror(-ret));
		return 1;
	}
	ret = ctl_kvs_decode(&reply, kv);
	if (ret == 0 && reply.hdr.status != CTL_OK) {
		pr_err("%s", *ctl_kv_str(kv, "error") ? ctl_kv_str(kv, "error")
						      : "the VM refused the snapshot");
		ctl_kvs_free(kv);
		ret = -EREMOTEIO;
	} else if (ret < 0) {
		pr_err("%s: malformed reply", name);
	}
	ctl_msg_free(&reply);
	return ret < 0 ? 1 : 0;
}

/* Between the write and the rename: where the test build lets a test act (sandbox.h). */
static void before_rename(void *arg)
{
	lkvm_test_pause("snapshot-rename", ((struct snap_place *)arg)->sub);
}

static int snapshot(const char *dir, const char *name, const char *path, bool stop)
{
	struct snap_place place;
	char err[512];
	struct ctl_kvs kv;
	int sock, pidfd = -1, rc;

	sock = ctl_cli_connect(dir, name, err, sizeof(err));
	if (sock < 0) {
		pr_err("%s", err);
		return 1;
	}
	/* Made in a private directory beside FILE (snap/place.c says why). */
	if (snap_place_open(&place, path, err, sizeof(err)) < 0) {
		pr_err("%s", err);
		close(sock);
		return 1;
	}
	if (stop && ctl_peer_pid(sock) > 0)
		pidfd = (int)syscall(SYS_pidfd_open, ctl_peer_pid(sock), 0);
	rc = request(sock, name, place.fd, stop, &kv);
	if (rc == 0 && snap_place_commit(&place, before_rename, &place, err, sizeof(err)) < 0) {
		pr_err("%s", err);
		ctl_kvs_free(&kv);
		rc = 1;
	}
	snap_place_close(&place);
	if (rc == 0) {
		printf("%s: snapshot %s (%.1f MiB; paused in %.1f ms, written in %.1f ms)%s\n",
		       name, path, ctl_kv_u64(&kv, "bytes") / 1048576.0,
		       ctl_kv_u64(&kv, "pause_ns") / 1e6, ctl_kv_u64(&kv, "save_ns") / 1e6,
		       stop ? "; stopped" : "");
		ctl_kvs_free(&kv);
		if (stop && ctl_wait_gone(sock, pidfd, STOP_WAIT_MS) < 0) {
			pr_err("%s: saved, but did not exit within %d s", name,
			       STOP_WAIT_MS / 1000);
			rc = 1;
		}
	}
	if (pidfd >= 0)
		close(pidfd);
	close(sock);
	return rc;
}

int cmd_snapshot(int argc, char **argv)
{
	const char *args[2];
	char dir[PATH_MAX];
	bool stop = false;
	int n = 0;

	if (ctl_cli_wants_help(argc, argv)) {
		snapshot_usage(stdout);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--stop")) {
			stop = true;
		} else if (argv[i][0] == '-' || n == 2) {
			pr_err("snapshot: unexpected '%s' (see lkvm snapshot --help)", argv[i]);
			return 1;
		} else {
			args[n++] = argv[i];
		}
	}
	if (n != 2) {
		pr_err("snapshot: give a VM name and a file (see lkvm snapshot --help)");
		return 1;
	}
	if (ctl_runtime_dir(dir, sizeof(dir)) < 0) {
		pr_err("the runtime directory's path is too long");
		return 1;
	}
	return snapshot(dir, args[0], args[1], stop);
}
