/* `lkvm dump NAME FILE`: a running VM's RAM and vCPU registers written to FILE as an ELF core through its control socket. */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "lkvm/builtin.h"
#include "lkvm/ctl.h"
#include "lkvm/snap.h"

/* Writing a large guest's memory takes as long as the disk does: the reply may be late. */
#define DUMP_REPLY_MS 600000

void dump_usage(FILE *out)
{
	fprintf(out,
		"usage: lkvm dump NAME FILE\n"
		"\n"
		"Write VM NAME's RAM and vCPU registers to FILE as an ELF64 core: one PT_LOAD per\n"
		"RAM range at Linux's direct map (0xffff888000000000 + the physical address; p_paddr\n"
		"the physical one), the first GiB again at the kernel map (0xffffffff80000000), one\n"
		"NT_PRSTATUS per vCPU. gdb VMLINUX FILE reads a nokaslr guest's variables (p\n"
		"jiffies); crash VMLINUX FILE too. The VM is paused as lkvm pause pauses it while\n"
		"the file is written, then resumes (a VM lkvm pause paused stays paused). FILE is\n"
		"created by this command (as the user running it) in a private directory beside\n"
		"its final name and renamed into place once whole, as lkvm snapshot does.\n"
		"\n"
		"  -h, --help      this text\n"
		"\n"
		"Exit status: 0 written, 1 not (no such VM, FILE's directory not writable, the\n"
		"disk full).\n");
}

/* Send the request with the file and read the reply into kv. 0, or 1 after the error line. */
static int request(int sock, const char *name, int file_fd, struct ctl_kvs *kv)
{
	struct ctl_msg req, reply;
	int ret;

	ctl_msg_init(&req, CTL_DUMP, 0);
	ret = ctl_send_fd(sock, &req, file_fd);
	ctl_msg_free(&req);
	if (ret == 0)
		ret = ctl_recv(sock, &reply, CTL_MAX_REPLY, DUMP_REPLY_MS);
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
						      : "the VM refused the dump");
		ctl_kvs_free(kv);
		ret = -EREMOTEIO;
	} else if (ret < 0) {
		pr_err("%s: malformed reply", name);
	}
	ctl_msg_free(&reply);
	return ret < 0 ? 1 : 0;
}

static int dump(const char *dir, const char *name, const char *path)
{
	struct snap_place place;
	char err[512];
	struct ctl_kvs kv;
	int sock, rc;

	sock = ctl_cli_connect(dir, name, err, sizeof(err));
	if (sock < 0) {
		pr_err("%s", err);
		return 1;
	}
	/* Made in a private directory beside FILE, never through a symlink or over another's
	 * file (snap/place.c says why). */
	if (snap_place_open(&place, path, err, sizeof(err)) < 0) {
		pr_err("%s", err);
		close(sock);
		return 1;
	}
	rc = request(sock, name, place.fd, &kv);
	if (rc == 0 && snap_place_commit(&place, NULL, NULL, err, sizeof(err)) < 0) {
		pr_err("%s", err);
		ctl_kvs_free(&kv);
		rc = 1;
	}
	snap_place_close(&place);
	if (rc == 0) {
		printf("%s: core %s (%.1f MiB; paused in %.1f ms, written in %.1f ms)\n", name,
		       path, ctl_kv_u64(&kv, "bytes") / 1048576.0,
		       ctl_kv_u64(&kv, "pause_ns") / 1e6, ctl_kv_u64(&kv, "write_ns") / 1e6);
		ctl_kvs_free(&kv);
	}
	close(sock);
	return rc;
}

int cmd_dump(int argc, char **argv)
{
	char dir[PATH_MAX];

	if (ctl_cli_wants_help(argc, argv)) {
		dump_usage(stdout);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		if (argv[i][0] == '-') {
			pr_err("dump: unexpected '%s' (see lkvm dump --help)", argv[i]);
			return 1;
		}
	}
	if (argc != 3) {
		pr_err("dump: give a VM name and a file (see lkvm dump --help)");
		return 1;
	}
	if (ctl_runtime_dir(dir, sizeof(dir)) < 0) {
		pr_err("the runtime directory's path is too long");
		return 1;
	}
	return dump(dir, argv[1], argv[2]);
}
