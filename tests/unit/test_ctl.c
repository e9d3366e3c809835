/* Unit tests for the control plane: encoding and length checks, names, trust in directories and listeners, escaping, the server, stop's wait. */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "capture.h"
#include "check_main.h"
#include "lkvm/builtin.h"
#include "lkvm/ctl.h"
#include "lkvm/kvm.h"
#include "lkvm/run.h"
#include "lkvm/sandbox.h"

#include "fake_vm.h"

START_TEST(header_roundtrip)
{
	struct ctl_hdr h = { .magic = CTL_MAGIC,
			     .version = CTL_VERSION,
			     .type = CTL_STAT | CTL_REPLY,
			     .status = CTL_ERR_STATE,
			     .len = 1234 },
		       d;
	u8 b[CTL_HDR_LEN];

	ctl_hdr_encode(&h, b);
	/* Little-endian on the wire whatever the host. */
	ck_assert_int_eq(b[0], 'L');
	ck_assert_int_eq(b[1], 'K');
	ck_assert_int_eq(b[2], 'V');
	ck_assert_int_eq(b[3], 'C');
	ck_assert_int_eq(b[4], 1);
	ck_assert_int_eq(b[12], 1234 & 0xff);
	ck_assert_int_eq(b[13], 1234 >> 8);
	ck_assert_int_eq(ctl_hdr_decode(b, 4096, &d), 0);
	ck_assert_uint_eq(d.type, CTL_STAT | CTL_REPLY);
	ck_assert_uint_eq(d.status, CTL_ERR_STATE);
	ck_assert_uint_eq(d.len, 1234);
}
END_TEST

START_TEST(header_checks)
{
	struct ctl_hdr h = { .magic = CTL_MAGIC,
			     .version = CTL_VERSION,
			     .type = CTL_INFO,
			     .len = CTL_MAX_REQUEST },
		       d;
	u8 b[CTL_HDR_LEN];

	ctl_hdr_encode(&h, b);
	ck_assert_int_eq(ctl_hdr_decode(b, CTL_MAX_REQUEST, &d), 0);
	ck_assert_int_eq(ctl_hdr_decode(b, CTL_MAX_REQUEST - 1, &d), -EMSGSIZE);
	h.len = 0xffffffff;
	ctl_hdr_encode(&h, b);
	ck_assert_int_eq(ctl_hdr_decode(b, CTL_MAX_REPLY, &d), -EMSGSIZE);
	h.len = 0;
	h.version = 2;
	ctl_hdr_encode(&h, b);
	ck_assert_int_eq(ctl_hdr_decode(b, CTL_MAX_REQUEST, &d), -EPROTONOSUPPORT);
	ck_assert_uint_eq(d.version, 2); /* filled, so the error can name it */
	h.version = CTL_VERSION;
	h.magic = 0x54544547; /* "GETT" of an HTTP request */
	ctl_hdr_encode(&h, b);
	ck_assert_int_eq(ctl_hdr_decode(b, CTL_MAX_REQUEST, &d), -EPROTO);
}
END_TEST

static void build(struct ctl_msg *m)
{
	ctl_msg_init(m, CTL_INFO | CTL_REPLY, 0);
	ck_assert_int_eq(ctl_add_str(m, "name", "vm1"), 0);
	ck_assert_int_eq(ctl_add_u64(m, "pid", 0x1122334455667788ull), 0);
	ck_assert_int_eq(ctl_add_str(m, "empty", ""), 0);
	ck_assert_int_eq(ctl_add_u64(m, "net0.tx0.packets", 7), 0);
}

START_TEST(fields_roundtrip)
{
	struct ctl_msg m;
	struct ctl_field f;
	struct ctl_kvs kv;
	size_t off = 0;

	build(&m);
	ck_assert_uint_eq(m.len, (2 + 4 + 2 + 3) + (2 + 3 + 8) + (2 + 5 + 2) + (2 + 16 + 8));
	ck_assert_int_eq(ctl_next_field(m.buf, m.len, &off, &f), 1);
	ck_assert_int_eq(f.kind, CTL_F_STR);
	ck_assert_str_eq(f.name, "name");
	ck_assert_uint_eq(f.str_len, 3);
	ck_assert(!memcmp(f.str, "vm1", 3));
	ck_assert_int_eq(ctl_next_field(m.buf, m.len, &off, &f), 1);
	ck_assert_uint_eq(f.u, 0x1122334455667788ull);
	ck_assert_int_eq(ctl_next_field(m.buf, m.len, &off, &f), 1);
	ck_assert_uint_eq(f.str_len, 0);
	ck_assert_int_eq(ctl_next_field(m.buf, m.len, &off, &f), 1);
	ck_assert_int_eq(ctl_next_field(m.buf, m.len, &off, &f), 0);
	ck_assert_int_eq(ctl_find(m.buf, m.len, "net0.tx0.packets", CTL_F_U64, &f), 0);
	ck_assert_uint_eq(f.u, 7);
	ck_assert_int_eq(ctl_find(m.buf, m.len, "pid", CTL_F_STR, &f), -ENOENT);
	ck_assert_int_eq(ctl_kvs_decode(&m, &kv), 0);
	ck_assert_uint_eq(kv.n, 4);
	ck_assert_str_eq(ctl_kv_str(&kv, "name"), "vm1");
	ck_assert_str_eq(ctl_kv_str(&kv, "empty"), "");
	ck_assert_str_eq(ctl_kv_str(&kv, "missing"), "");
	ck_assert_uint_eq(ctl_kv_u64(&kv, "net0.tx0.packets"), 7);
	ck_assert_uint_eq(ctl_kv_u64(&kv, "name"), 0); /* a string is no number */
	ctl_kvs_free(&kv);
	ctl_msg_free(&m);
}
END_TEST

/* Every cut of a valid payload is either a field boundary (valid) or rejected, never read past. */
START_TEST(fields_truncated)
{
	struct ctl_msg m;
	size_t bounds[] = { 0, 11, 24, 33, 59 };

	build(&m);
	for (size_t cut = 0; cut <= m.len; cut++) {
		/* A copy of exactly `cut` bytes, so ASan catches any read beyond it. */
		u8 *p = malloc(cut ? cut : 1);
		bool boundary = false;

		memcpy(p, m.buf, cut);
		for (size_t i = 0; i < ARRAY_SIZE(bounds); i++)
			boundary |= bounds[i] == cut;
		ck_assert_msg((ctl_payload_check(p, cut) == 0) == boundary, "cut at %zu", cut);
		free(p);
	}
	ctl_msg_free(&m);
}
END_TEST

START_TEST(fields_malformed)
{
	u8 zero_name[] = { CTL_F_U64, 0, 1, 2, 3, 4, 5, 6, 7, 8 };
	u8 long_name[2 + 64 + 8] = { CTL_F_U64, 64 };
	u8 bad_kind[] = { 9, 1, 'a', 0, 0, 0, 0, 0, 0, 0, 0 };
	u8 str_over[] = { CTL_F_STR, 1, 'a', 5, 0, 'x', 'y' };
	u8 nul_name[] = { CTL_F_U64, 2, 'a', 0, 1, 2, 3, 4, 5, 6, 7, 8 };
	u8 ok[] = { CTL_F_STR, 1, 'a', 2, 0, 'x', 'y' };

	memset(long_name + 2, 'n', 64);
	ck_assert_int_eq(ctl_payload_check(zero_name, sizeof(zero_name)), -EBADMSG);
	ck_assert_int_eq(ctl_payload_check(long_name, sizeof(long_name)), -EBADMSG);
	ck_assert_int_eq(ctl_payload_check(bad_kind, sizeof(bad_kind)), -EBADMSG);
	ck_assert_int_eq(ctl_payload_check(str_over, sizeof(str_over)), -EBADMSG);
	ck_assert_int_eq(ctl_payload_check(nul_name, sizeof(nul_name)), -EBADMSG);
	ck_assert_int_eq(ctl_payload_check(ok, sizeof(ok)), 0);
	ck_assert_int_eq(ctl_payload_check(NULL, 0), 0);
}
END_TEST

START_TEST(add_limits)
{
	char name[CTL_NAME_MAX + 2];
	struct ctl_msg m;
	char *big = malloc(CTL_STR_MAX + 2);

	memset(name, 'n', sizeof(name));
	name[CTL_NAME_MAX] = '\0';
	ctl_msg_init(&m, CTL_INFO, 0);
	ck_assert_int_eq(ctl_add_u64(&m, name, 1), 0); /* 63 characters: fits */
	name[CTL_NAME_MAX] = 'n';
	name[CTL_NAME_MAX + 1] = '\0';
	ck_assert_int_eq(ctl_add_u64(&m, name, 1), -EINVAL);
	ck_assert(m.oom);
	ck_assert_int_eq(ctl_send(-1, &m), -EMSGSIZE); /* an unusable message is never sent */
	ctl_msg_free(&m);

	ctl_msg_init(&m, CTL_INFO, 0);
	ck_assert_int_eq(ctl_add_u64(&m, "", 1), -EINVAL);
	ctl_msg_free(&m);

	memset(big, 'x', CTL_STR_MAX + 1);
	big[CTL_STR_MAX + 1] = '\0';
	ctl_msg_init(&m, CTL_INFO, 0);
	ck_assert_int_eq(ctl_add_strn(&m, "s", big, CTL_STR_MAX), 0);
	ck_assert_int_eq(ctl_add_str(&m, "t", big), -EINVAL);
	ctl_msg_free(&m);
	/* The whole reply stays under CTL_MAX_REPLY. */
	ctl_msg_init(&m, CTL_INFO, 0);
	int ret = 0;
	for (int i = 0; i < 100 && ret == 0; i++)
		ret = ctl_add_strn(&m, "s", big, CTL_STR_MAX);
	ck_assert_int_eq(ret, -EMSGSIZE);
	ck_assert(m.len <= CTL_MAX_REPLY);
	ctl_msg_free(&m);
	free(big);
}
END_TEST

START_TEST(socket_roundtrip)
{
	int sv[2];
	struct ctl_msg m, r;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	build(&m);
	ck_assert_int_eq(ctl_send(sv[0], &m), 0);
	ck_assert_int_eq(ctl_recv(sv[1], &r, CTL_MAX_REPLY, 1000), 0);
	ck_assert_uint_eq(r.hdr.type, CTL_INFO | CTL_REPLY);
	ck_assert_uint_eq(r.len, m.len);
	ck_assert(!memcmp(r.buf, m.buf, m.len));
	ctl_msg_free(&r);
	/* The receiver's bound applies: a 59-byte payload against a 58-byte limit. */
	ck_assert_int_eq(ctl_send(sv[0], &m), 0);
	ck_assert_int_eq(ctl_recv(sv[1], &r, (u32)m.len - 1, 1000), -EMSGSIZE);
	ctl_msg_free(&m);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

START_TEST(socket_cut_and_garbage)
{
	struct ctl_hdr h = {
		.magic = CTL_MAGIC, .version = CTL_VERSION, .type = CTL_STAT, .len = 40
	};
	u8 b[CTL_HDR_LEN + 10];
	struct ctl_msg r;
	int sv[2];

	/* Nothing, then EOF. */
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	close(sv[0]);
	ck_assert_int_eq(ctl_recv(sv[1], &r, CTL_MAX_REPLY, 1000), -ECONNRESET);
	close(sv[1]);
	/* Half a header, then EOF. */
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ctl_hdr_encode(&h, b);
	ck_assert_int_eq(write(sv[0], b, 7), 7);
	close(sv[0]);
	ck_assert_int_eq(ctl_recv(sv[1], &r, CTL_MAX_REPLY, 1000), -EPIPE);
	close(sv[1]);
	/* A header announcing 40 bytes, 10 sent, then EOF. */
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	memset(b + CTL_HDR_LEN, 0, 10);
	ck_assert_int_eq(write(sv[0], b, sizeof(b)), (ssize_t)sizeof(b));
	close(sv[0]);
	ck_assert_int_eq(ctl_recv(sv[1], &r, CTL_MAX_REPLY, 1000), -EPIPE);
	close(sv[1]);
	/* The same, with the writer still there: a timeout, not a hang. */
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ck_assert_int_eq(write(sv[0], b, sizeof(b)), (ssize_t)sizeof(b));
	ck_assert_int_eq(ctl_recv(sv[1], &r, CTL_MAX_REPLY, 50), -ETIMEDOUT);
	close(sv[0]);
	close(sv[1]);
	/* Text instead of a header. */
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ck_assert_int_eq(write(sv[0], "GET / HTTP/1.0\r\n\r\n", 18), 18);
	ck_assert_int_eq(ctl_recv(sv[1], &r, CTL_MAX_REPLY, 1000), -EPROTO);
	close(sv[0]);
	close(sv[1]);
	/* A whole message whose payload is malformed. */
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	h.len = 3;
	ctl_hdr_encode(&h, b);
	b[CTL_HDR_LEN] = CTL_F_U64;
	b[CTL_HDR_LEN + 1] = 1;
	b[CTL_HDR_LEN + 2] = 'a';
	ck_assert_int_eq(write(sv[0], b, CTL_HDR_LEN + 3), CTL_HDR_LEN + 3);
	ck_assert_int_eq(ctl_recv(sv[1], &r, CTL_MAX_REPLY, 1000), -EBADMSG);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

START_TEST(names_and_paths)
{
	char long_name[66], p[200];

	ck_assert(ctl_name_valid("vm1"));
	ck_assert(ctl_name_valid("ci.smoke_2-a"));
	ck_assert(!ctl_name_valid(""));
	ck_assert(!ctl_name_valid(".hidden"));
	ck_assert(!ctl_name_valid("-rf"));
	ck_assert(!ctl_name_valid("a/b"));
	ck_assert(!ctl_name_valid("../x"));
	ck_assert(!ctl_name_valid("sp ace"));
	memset(long_name, 'a', 65);
	long_name[65] = '\0';
	ck_assert(!ctl_name_valid(long_name));
	long_name[64] = '\0';
	ck_assert(ctl_name_valid(long_name));
	ck_assert_int_eq(ctl_path(p, sizeof(p), "/run/lkvm", "vm1", ".sock"), 0);
	ck_assert_str_eq(p, "/run/lkvm/vm1.sock");
	/* Past sun_path (108 bytes) even though the buffer is larger. */
	ck_assert_int_eq(ctl_path(p, sizeof(p), "/run/user/1000/a-rather-long-directory-name/lkvm",
				  long_name, ".sock"),
			 -ENAMETOOLONG);
}
END_TEST

START_TEST(runtime_dir)
{
	char d[256];

	setenv("LKVM_RUNTIME_DIR", "/tmp/x-lkvm", 1);
	ck_assert_int_eq(ctl_runtime_dir(d, sizeof(d)), 0);
	ck_assert_str_eq(d, "/tmp/x-lkvm");
	unsetenv("LKVM_RUNTIME_DIR");
	ck_assert_int_eq(ctl_runtime_dir(d, sizeof(d)), 0);
	if (geteuid() == 0)
		ck_assert_str_eq(d, "/run/lkvm");
	ck_assert_int_eq(ctl_runtime_dir(d, 4), -ENAMETOOLONG);
}
END_TEST

START_TEST(run_name_option)
{
	struct run_args a;
	char err[256];
	char *ok[] = { "run", "-k", "k", "--name", "web-1" };
	char *bad[] = { "run", "-k", "k", "--name", "a/b" };

	ck_assert_int_eq(kvm_run_parse(5, ok, &a, stdout, err, sizeof(err)), 0);
	ck_assert_str_eq(a.cfg.name, "web-1");
	ck_assert_int_eq(kvm_run_parse(5, bad, &a, stdout, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "--name 'a/b'"));
}
END_TEST

/* ---- the runtime directory and who answers in it ---- */

/* A fresh runtime directory (mode 0700, ours) in dir, also set as LKVM_RUNTIME_DIR. */
static void rt_dir(char dir[64])
{
	strcpy(dir, "/tmp/lkvm-test-ctl-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	setenv("LKVM_RUNTIME_DIR", dir, 1);
}

/* Remove what rt_dir made; it must be empty but for `leave` (a fake VM's socket). */
static void rt_dir_end(const char *dir, const char *leave)
{
	char p[128];

	if (leave) {
		snprintf(p, sizeof(p), "%s/%s", dir, leave);
		unlink(p);
	}
	ck_assert_msg(rmdir(dir) == 0, "%s: %s (something left behind)", dir, strerror(errno));
	unsetenv("LKVM_RUNTIME_DIR");
}

START_TEST(dir_trust)
{
	char dir[64], sub[96], err[256];

	rt_dir(dir);
	ck_assert_int_eq(ctl_dir_check(dir, err, sizeof(err)), 0);
	/* Open to others: not trusted. */
	chmod(dir, 0755);
	ck_assert_int_eq(ctl_dir_check(dir, err, sizeof(err)), -EPERM);
	ck_assert_msg(strstr(err, "is not this user's") && strstr(err, "mode 0755"), "%s", err);
	chmod(dir, 0700);
	/* A symlink to a good directory: not trusted either (whoever made the link chose). */
	snprintf(sub, sizeof(sub), "%s/link", dir);
	ck_assert_int_eq(symlink(dir, sub), 0);
	ck_assert_int_eq(ctl_dir_check(sub, err, sizeof(err)), -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "a symlink"));
	unlink(sub);
	snprintf(sub, sizeof(sub), "%s/missing", dir);
	ck_assert_int_eq(ctl_dir_check(sub, err, sizeof(err)), -ENOENT);
	/* Another user's (needs root to make one). */
	if (geteuid() == 0) {
		ck_assert_int_eq(chown(dir, 65534, 65534), 0);
		ck_assert_int_eq(ctl_dir_check(dir, err, sizeof(err)), -EPERM);
		ck_assert_msg(strstr(err, "of uid 65534"), "%s", err);
		ck_assert_int_eq(ctl_connect(dir, "vm", err, sizeof(err)), -EPERM);
		ck_assert_int_eq(chown(dir, 0, 0), 0);
	}
	rt_dir_end(dir, NULL);
}
END_TEST

/* A fake VM: a process listening on dir/NAME.sock that answers `n` requests with `reply`'s
 * status and fields (as uid `uid` from listen() on, when not -1), then exits. Returns its pid
 * once it listens. */
static pid_t fake_vm(const char *dir, const char *name, const struct ctl_msg *reply, int n, int uid)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0), ready[2];
	pid_t pid;
	char b;

	ck_assert_int_eq(ctl_path(sa.sun_path, sizeof(sa.sun_path), dir, name, ".sock"), 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(pipe(ready), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if ((uid >= 0 && setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) < 0) ||
		    listen(fd, 4) < 0)
			_exit(1);
		close(ready[0]);
		close(ready[1]);
		for (int i = 0; i < n; i++) {
			int c = accept(fd, NULL, NULL);
			struct ctl_msg req, r = *reply;

			if (c < 0 || ctl_recv(c, &req, CTL_MAX_REQUEST, 5000) < 0)
				_exit(2);
			r.hdr.type = req.hdr.type | CTL_REPLY;
			if (ctl_send(c, &r) < 0)
				_exit(3);
			close(c);
		}
		_exit(0);
	}
	close(fd);
	close(ready[1]);
	ck_assert_int_eq(read(ready[0], &b, 1), 0); /* EOF: it listens (or died) */
	close(ready[0]);
	return pid;
}

static void fake_vm_end(pid_t pid)
{
	int st;

	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fake VM: status %#x", st);
}

/* A socket served by another uid is not believed: whatever it would answer, no request is
 * sent (it could claim a stop succeeded). */
START_TEST(foreign_listener_not_believed)
{
	struct ctl_msg reply;
	char dir[64], err[256];
	pid_t pid;

	if (geteuid() != 0) {
		lkvm_skip("test_ctl", 1, "foreign_listener_not_believed",
			  "needs root to listen as another uid");
		return;
	}
	rt_dir(dir);
	ctl_msg_init(&reply, CTL_STOP | CTL_REPLY, 0);
	ctl_add_str(&reply, "name", "vm");
	pid = fake_vm(dir, "vm", &reply, 1, 65534);
	ck_assert_int_eq(ctl_connect(dir, "vm", err, sizeof(err)), -EPERM);
	ck_assert_msg(strstr(err, "served by a process of uid 65534") &&
			      strstr(err, "not believed"),
		      "%s", err);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	ctl_msg_free(&reply);
	rt_dir_end(dir, "vm.sock");
}
END_TEST

/* Strings from a VM are kept escaped; field names are plain, or the reply is malformed. */
START_TEST(reply_text_escaped)
{
	struct ctl_msg m;
	struct ctl_kvs kv;
	u8 bad_name[] = { CTL_F_U64, 2, 'a', 0x1b, 1, 2, 3, 4, 5, 6, 7, 8 };

	ctl_msg_init(&m, CTL_DEBUG | CTL_REPLY, 0);
	ck_assert_int_eq(ctl_add_str(&m, "text",
				     "vCPU 0:\n\x1b]0;owned\x07\r\x9b"
				     "2J"),
			 0);
	ck_assert_int_eq(ctl_kvs_decode(&m, &kv), 0);
	ck_assert_str_eq(ctl_kv_str(&kv, "text"), "vCPU 0:\n\\x1b]0;owned\\x07\\x0d\\x9b2J");
	ctl_kvs_free(&kv);
	ctl_msg_free(&m);
	ck_assert_int_eq(ctl_payload_check(bad_name, sizeof(bad_name)), -EBADMSG);
	ctl_msg_init(&m, CTL_INFO, 0);
	ck_assert_int_eq(ctl_add_u64(&m, "a\"b", 1), -EINVAL);
	ctl_msg_free(&m);
}
END_TEST

/* lkvm list and debug print what a VM sends escaped; an error reply is a warning, and
 * (under ASan) nothing leaks on either path. */
START_TEST(list_and_debug_escape)
{
	struct ctl_msg info, refuse, dbg;
	struct capture out, errs;
	char dir[64], o[4096], e[4096];
	char *list_argv[] = { "list" }, *debug_argv[] = { "debug", "b-dbg" };
	pid_t p1, p2, p3;

	rt_dir(dir);
	ctl_msg_init(&info, CTL_INFO | CTL_REPLY, 0);
	ctl_add_str(&info, "name", "\x1b[31mevil\x07");
	ctl_add_str(&info, "state", "running");
	ctl_add_u64(&info, "pid", 42);
	ctl_msg_init(&refuse, CTL_INFO | CTL_REPLY, CTL_ERR_STATE);
	ctl_add_str(&refuse, "error", "busy\x1b[2J");
	ctl_msg_init(&dbg, CTL_DEBUG | CTL_REPLY, 0);
	ctl_add_str(&dbg, "name", "b-dbg");
	ctl_add_str(&dbg, "state", "running");
	ctl_add_str(&dbg, "text", "vCPU 0:\n\x1b]0;owned\x07\n");
	p1 = fake_vm(dir, "a-evil", &info, 1, -1);
	p2 = fake_vm(dir, "b-dbg", &dbg, 2, -1);
	p3 = fake_vm(dir, "c-refuses", &refuse, 1, -1);
	capture_start_fd(&out, STDOUT_FILENO);
	capture_start(&errs);
	ck_assert_int_eq(cmd_list(1, list_argv), 0);
	ck_assert_int_eq(cmd_debug(2, debug_argv), 0);
	capture_end(&errs, e, sizeof(e));
	capture_end(&out, o, sizeof(o));
	/* (The text itself is not printed here: it would reach the terminal.) */
	ck_assert_msg(!strchr(o, 0x1b), "an ESC byte on stdout");
	ck_assert_msg(!strchr(e, 0x1b), "an ESC byte on stderr");
	ck_assert_msg(strstr(o, "\\x1b[31mevil\\x07 "), "%s", o);
	ck_assert_msg(strstr(o, "vCPU 0:\n\\x1b]0;owned\\x07\n"), "%s", o);
	ck_assert_msg(strstr(e, "warning: busy\\x1b[2J"), "%s", e);
	fake_vm_end(p1);
	fake_vm_end(p2);
	fake_vm_end(p3);
	ctl_msg_free(&info);
	ctl_msg_free(&refuse);
	ctl_msg_free(&dbg);
	unlink(strcat(strcpy(o, dir), "/a-evil.sock"));
	unlink(strcat(strcpy(o, dir), "/b-dbg.sock"));
	rt_dir_end(dir, "c-refuses.sock");
}
END_TEST

/* A call whose request cannot be sent leaves the reply initialised (empty), so the caller may
 * read its status and free it. */
START_TEST(call_unsent_reply_initialised)
{
	struct ctl_msg r;
	char err[256];
	int p[2];

	ck_assert_int_eq(pipe(p), 0);
	memset(&r, 0xa5, sizeof(r));
	ck_assert_int_eq(ctl_call(p[0], CTL_INFO, &r, 100, err, sizeof(err)), -ENOTSOCK);
	ck_assert_ptr_null(r.buf);
	ck_assert_uint_eq(r.len, 0);
	ck_assert_uint_eq(r.hdr.status, 0);
	ctl_msg_free(&r);
	close(p[0]);
	close(p[1]);
}
END_TEST

/* ---- the server ---- */

struct srv {
	char dir[64];
	struct kvm *kvm;
	struct ctl_server *s;
};

/* A server whose clients of uid owner are served (geteuid(): this process's own). */
static void srv_start_owned(struct srv *t, uid_t owner)
{
	char err[256];

	rt_dir(t->dir);
	t->kvm = fake_vm_new(0);
	ck_assert_msg(ctl_server_create(t->kvm, "vm", owner, &t->s, err, sizeof(err)) == 0, "%s",
		      err);
	ck_assert_int_eq(ctl_server_start(t->s), 0);
}

static void srv_start(struct srv *t)
{
	srv_start_owned(t, geteuid());
}

/* Destroyed: the socket and lock are gone (rt_dir_end finds the directory empty). */
static void srv_end(struct srv *t)
{
	ctl_server_destroy(t->s);
	fake_vm_free(t->kvm);
	rt_dir_end(t->dir, NULL);
}

static int send_request(int fd, u16 type)
{
	struct ctl_msg m;

	ctl_msg_init(&m, type, 0);
	return ctl_send(fd, &m);
}

/*
 * A client's request that arrived while the single server thread was busy is answered
 * even though the client's deadline passed meanwhile. A pause makes the server busy for
 * as long as this test wants: it waits for a fake vCPU (nr_started 1) to park, which the
 * test does only after the stop client's deadline has passed.
 */
START_TEST(late_request_answered)
{
	struct srv t;
	struct ctl_msg r;
	char err[256];
	int a, b;
	u64 busy;

	srv_start(&t);
	atomic_store(&t.kvm->nr_started, 1);
	b = ctl_connect(t.dir, "vm", err,
			sizeof(err)); /* accepted first; its request comes later */
	ck_assert_int_ge(b, 0);
	a = ctl_connect(t.dir, "vm", err, sizeof(err));
	ck_assert_int_ge(a, 0);
	ck_assert_int_eq(send_request(a, CTL_PAUSE), 0);
	while (!atomic_load(&t.kvm->park_req)) /* the server thread is in the pause */
		sched_yield();
	busy = now_ns();
	ck_assert_int_eq(send_request(b, CTL_STOP), 0);
	/* The premise: b's deadline (set when it was accepted, before `busy`) passes while the
	 * server waits. Time itself is the event here. */
	while (now_ns() < busy + (CTL_REQUEST_TIMEOUT_MS + 100) * 1000000ull)
		poll(NULL, 0, 20);
	pthread_mutex_lock(&t.kvm->park_lock);
	t.kvm->parked = 1;
	pthread_cond_broadcast(&t.kvm->park_cond);
	pthread_mutex_unlock(&t.kvm->park_lock);
	ck_assert_int_eq(ctl_recv(a, &r, CTL_MAX_REPLY, 10000), 0);
	ck_assert_uint_eq(r.hdr.status, CTL_OK);
	ctl_msg_free(&r);
	ck_assert_int_eq(ctl_recv(b, &r, CTL_MAX_REPLY, 10000), 0);
	ck_assert_uint_eq(r.hdr.type, CTL_STOP | CTL_REPLY);
	ck_assert_uint_eq(r.hdr.status, CTL_OK);
	ctl_msg_free(&r);
	ck_assert(atomic_load(&t.kvm->stopping));
	close(a);
	close(b);
	srv_end(&t);
}
END_TEST

/*
 * SO_PEERCRED decides, not the socket's mode: a client of another uid (here this process,
 * the server's owner being some other uid) gets the permission-denied reply and changes
 * nothing; the owner's own client is answered. The integration test (test-ctl other-user)
 * needs root; this one runs anywhere.
 */
START_TEST(peer_of_another_uid_refused)
{
	uid_t other = geteuid() == 4242 ? 4243 : 4242;
	struct capture errs;
	struct ctl_kvs kv;
	struct ctl_msg r;
	struct srv t;
	char err[256], want[96], e[512];
	int fd;

	srv_start_owned(&t, other);
	capture_start(&errs);
	fd = ctl_connect(t.dir, "vm", err, sizeof(err)); /* the listener is ours: believed */
	ck_assert_msg(fd >= 0, "%s", err);
	ck_assert_int_eq(ctl_call(fd, CTL_PAUSE, &r, 10000, err, sizeof(err)), 0);
	ck_assert_uint_eq(r.hdr.status, CTL_ERR_PROTO);
	/* Answered at once, before the request is read: a reply of no type. */
	ck_assert_uint_eq(r.hdr.type, CTL_REPLY);
	ck_assert_int_eq(ctl_kvs_decode(&r, &kv), 0);
	snprintf(want, sizeof(want), "permission denied: only uid %u may control this VM",
		 (unsigned)other);
	ck_assert_str_eq(ctl_kv_str(&kv, "error"), want);
	ctl_kvs_free(&kv);
	ctl_msg_free(&r);
	close(fd);
	/* (Logged before the reply was sent.) */
	ck_assert_int_eq(capture_end(&errs, e, sizeof(e)), 1);
	ck_assert_msg(strstr(e, "control socket: refused a client of another user"), "%s", e);
	ck_assert(!atomic_load(&t.kvm->park_req));
	ck_assert(!atomic_load(&t.kvm->paused));
	srv_end(&t);

	srv_start(&t); /* the owner: served */
	fd = ctl_connect(t.dir, "vm", err, sizeof(err));
	ck_assert_msg(fd >= 0, "%s", err);
	ck_assert_int_eq(ctl_call(fd, CTL_INFO, &r, 10000, err, sizeof(err)), 0);
	ck_assert_uint_eq(r.hdr.status, CTL_OK);
	ck_assert_int_eq(ctl_kvs_decode(&r, &kv), 0);
	ck_assert_str_eq(ctl_kv_str(&kv, "name"), "vm");
	ck_assert_str_eq(ctl_kv_str(&kv, "error"), "");
	ctl_kvs_free(&kv);
	ctl_msg_free(&r);
	close(fd);
	srv_end(&t);
}
END_TEST

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	while (d && readdir(d))
		n++;
	if (d)
		closedir(d);
	return n;
}

/*
 * Teardown with a client in the middle of its request (half a header) runs under main's
 * filter, as in lkvm run: the server thread closes that client (reading off its bytes
 * first), not main, whose filter has no recvfrom. In a child, which the filter may end
 * (159); Check's own assertions cannot run once it is in, so the child reports by status.
 */
START_TEST(teardown_with_pending_client)
{
	struct ctl_hdr h = { .magic = CTL_MAGIC, .version = CTL_VERSION, .type = CTL_STAT };
	char dir[64], err[256];
	u8 hb[CTL_HDR_LEN];
	int st;
	pid_t pid;

	rt_dir(dir);
	ctl_hdr_encode(&h, hb);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct kvm *kvm = calloc(1, sizeof(*kvm));
		struct ctl_server *s;
		int c, before, i;

		if (!kvm)
			_exit(100);
		fake_vm_init(kvm, 0);
		if (ctl_server_create(kvm, "vm", geteuid(), &s, err, sizeof(err)) < 0 ||
		    sandbox_drop_privileges(NULL, err, sizeof(err)) < 0)
			_exit(101);
		kvm->sandbox = true;
		if (ctl_server_start(s) < 0)
			_exit(102);
		before = open_fds();
		c = ctl_connect(dir, "vm", err, sizeof(err));
		if (c < 0 || write(c, hb, 5) != 5)
			_exit(103);
		/* Accepted once the server's own fd for it shows (its 2 s deadline starts then). */
		for (i = 0; i < 1000 && open_fds() < before + 2; i++)
			poll(NULL, 0, 5);
		if (i == 1000)
			_exit(104);
		if (sandbox_enter(kvm, SB_MAIN) < 0)
			_exit(105);
		ctl_server_destroy(s);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "child status %#x (159: a forbidden call)", st);
	rt_dir_end(dir, NULL);
}
END_TEST

/* Connect an already made socket (no descriptor needed) and send a request of type. */
static int starved_call(int fd, const char *dir, u16 type)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/vm.sock", dir);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	return send_request(fd, type);
}

/* The reply to a starved_call: 0 when it came, of type, with status OK. */
static int starved_reply(int fd, u16 type)
{
	struct ctl_msg r;
	int ok;

	if (ctl_recv(fd, &r, CTL_MAX_REPLY, 5000) < 0)
		return -1;
	ok = r.hdr.type == (type | CTL_REPLY) && r.hdr.status == CTL_OK;
	ctl_msg_free(&r);
	return ok ? 0 : -1;
}

static u64 cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (u64)ts.tv_sec * 1000000000ull + (u64)ts.tv_nsec;
}

/* A control server in a child whose descriptor table is full (as a guest's 9p fids can make
 * lkvm's), and n client sockets made before it filled; last: the last descriptor taken. */
struct starved {
	struct kvm *kvm;
	struct ctl_server *s;
	int c[3], n, last;
};

/* Returns 0, or the child's exit status saying what failed (100-104). */
static int starve(struct starved *t, int n)
{
	struct rlimit rl = { .rlim_cur = 64, .rlim_max = 64 };
	char err[256];
	int fd;

	t->kvm = calloc(1, sizeof(*t->kvm));
	t->n = n;
	t->last = -1;
	if (!t->kvm)
		return 100;
	fake_vm_init(t->kvm, 0);
	if (ctl_server_create(t->kvm, "vm", geteuid(), &t->s, err, sizeof(err)) < 0 ||
	    ctl_server_start(t->s) < 0)
		return 101;
	for (int i = 0; i < n; i++)
		if ((t->c[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
			return 102;
	/* The table full (contained in this child). */
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 103;
	while ((fd = dup(0)) >= 0)
		t->last = fd;
	return errno == EMFILE && t->last >= 0 ? 0 : 104;
}

static int starved_end(struct starved *t)
{
	for (int i = 0; i < t->n; i++)
		close(t->c[i]);
	ctl_server_destroy(t->s);
	return 0;
}

/* Runs child(dir) in a child process; its exit status must be 0 (why: what the others mean). */
static void in_starved_child(int (*child)(const char *dir), const char *why)
{
	char dir[64], sock[128];
	int st;
	pid_t pid;

	rt_dir(dir);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(child(dir));
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x (%s)", st, why);
	/* The cleanup helper removes the socket and lock once the child is gone. */
	snprintf(sock, sizeof(sock), "%s/vm.sock", dir);
	for (int i = 0; i < 1000 && access(sock, F_OK) == 0; i++)
		poll(NULL, 0, 10);
	rt_dir_end(dir, NULL);
}

/* The child of out_of_descriptors: what failed, as its exit status. */
static int starved_child(const char *dir)
{
	struct starved t;
	int ret = starve(&t, 3);
	u64 cpu;

	if (ret)
		return ret;
	/* Served on the spare, which comes back once the client is closed. */
	if (starved_call(t.c[0], dir, CTL_INFO) < 0 || starved_reply(t.c[0], CTL_INFO) < 0)
		return 105;
	/* Served on the spare again; stop keeps its client until the end: no spare now. */
	if (starved_call(t.c[1], dir, CTL_STOP) < 0 || starved_reply(t.c[1], CTL_STOP) < 0)
		return 106;
	if (!atomic_load(&t.kvm->stopping))
		return 107;
	/* A client that cannot be accepted: the server backs off instead of spinning on the
	 * readable listening socket (this process's CPU time is the server thread's here). */
	if (starved_call(t.c[2], dir, CTL_INFO) < 0)
		return 108;
	cpu = cpu_ns();
	poll(NULL, 0, 500);
	if (cpu_ns() - cpu > 100 * 1000000ull)
		return 109;
	/* A descriptor freed: that client is answered. */
	close(t.last);
	if (starved_reply(t.c[2], CTL_INFO) < 0)
		return 110;
	return starved_end(&t);
}

/*
 * lkvm out of descriptors (RLIMIT_NOFILE reached, as a guest holding many 9p fids can make
 * it): `lkvm stat` and `lkvm stop` are still answered, and the control thread does not spin
 * on a listening socket it cannot accept from. In a child, whose exit status says what failed.
 */
START_TEST(out_of_descriptors)
{
	in_starved_child(starved_child,
			 "105/106: no answer, 109: the server spun, 110: no recovery");
}
END_TEST

/* The child of queued_clients_answered_at_stop: what failed, as its exit status. */
static int queued_child(const char *dir)
{
	struct starved t;
	int ret = starve(&t, 2);

	if (ret)
		return ret;
	/* A stop, served on the spare and kept to the end: no spare left. */
	if (starved_call(t.c[0], dir, CTL_STOP) < 0 || starved_reply(t.c[0], CTL_STOP) < 0)
		return 105;
	/* Queued on the socket: the server cannot accept it, so it stays there (no descriptor). */
	if (starved_call(t.c[1], dir, CTL_INFO) < 0)
		return 106;
	/* lkvm ends with the client still queued (a descriptor free for it now): it is answered,
	 * not reset when the socket closes. */
	close(t.last);
	ctl_server_stop(t.s);
	if (starved_reply(t.c[1], CTL_INFO) < 0)
		return 107;
	return starved_end(&t);
}

/*
 * Clients queued on the control socket when lkvm ends (a burst of `lkvm stop`s while lkvm was
 * busy) are answered before the socket closes. The queue is made certain by the descriptor
 * table being full (the server cannot accept), then lkvm ends: without the drain the client's
 * connection was reset.
 */
START_TEST(queued_clients_answered_at_stop)
{
	in_starved_child(queued_child, "107: the queued client was not answered");
}
END_TEST

/* The socket and lock go when the process goes, SIGKILL included: the cleanup helper
 * removes them once it sees lkvm's end of its pipe close. */
START_TEST(killed_server_leaves_nothing)
{
	char dir[64], sock[128], lock[128], b;
	int ready[2], st;
	pid_t pid;

	rt_dir(dir);
	snprintf(sock, sizeof(sock), "%s/vm.sock", dir);
	snprintf(lock, sizeof(lock), "%s/vm.lock", dir);
	ck_assert_int_eq(pipe(ready), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct kvm *kvm = calloc(1, sizeof(*kvm));
		struct ctl_server *s;
		char err[256];

		if (!kvm || ctl_server_create(kvm, "vm", geteuid(), &s, err, sizeof(err)) < 0)
			_exit(1);
		close(ready[1]); /* made: tell the test */
		pause();
		_exit(0);
	}
	close(ready[1]);
	ck_assert_int_eq(read(ready[0], &b, 1), 0);
	close(ready[0]);
	ck_assert_int_eq(access(sock, F_OK), 0);
	ck_assert_int_eq(access(lock, F_OK), 0);
	kill(pid, SIGKILL);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFSIGNALED(st));
	/* The helper runs on its own: wait (10 s at most) for the files to go. */
	for (int i = 0; i < 1000 && (access(sock, F_OK) == 0 || access(lock, F_OK) == 0); i++)
		poll(NULL, 0, 10);
	ck_assert_msg(access(sock, F_OK) < 0 && access(lock, F_OK) < 0,
		      "socket or lock left after SIGKILL");
	rt_dir_end(dir, NULL);
}
END_TEST

/* `lkvm stop --all`: every VM of the runtime directory is asked to stop, none skipped (its
 * threads share the names: a lost or repeated index leaves one running), and a stale socket
 * (nobody listening) is passed over without failing the command. */
START_TEST(stop_all_stops_every_vm)
{
	enum { NR = 5 };
	char *argv[] = { "stop", "--all", "--wait", "0", NULL };
	struct ctl_server *s[NR];
	struct kvm *kvm[NR];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dir[64], err[256], name[16];
	int stale;

	rt_dir(dir);
	for (int i = 0; i < NR; i++) {
		kvm[i] = fake_vm_new(0);
		snprintf(name, sizeof(name), "vm%d", i);
		ck_assert_msg(ctl_server_create(kvm[i], name, geteuid(), &s[i], err, sizeof(err)) ==
				      0,
			      "%s", err);
		ck_assert_int_eq(ctl_server_start(s[i]), 0);
	}
	/* A socket left by a killed VM: bound, never listened on. */
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/stale.sock", dir);
	stale = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(stale, 0);
	ck_assert_int_eq(bind(stale, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(cmd_stop(4, argv), 0);
	for (int i = 0; i < NR; i++) {
		ck_assert_msg(atomic_load(&kvm[i]->stopping), "vm%d was not asked to stop", i);
		ck_assert_int_eq(atomic_load(&kvm[i]->exit_status), EXIT_STOPPED);
		ctl_server_destroy(s[i]);
		fake_vm_free(kvm[i]);
	}
	close(stale);
	rt_dir_end(dir, "stale.sock");
}
END_TEST

/* lkvm stop's wait: the end of the connection is not the end of the process. */
START_TEST(wait_gone_waits_for_the_process)
{
	int sv[2], p[2], pidfd, st;
	pid_t pid;
	char c;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ck_assert_int_eq(pipe(p), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(p[1]);
		_exit(read(p[0], &c, 1) == 0 ? 0 : 1); /* lives until the test closes the pipe */
	}
	close(p[0]);
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	ck_assert_int_ge(pidfd, 0);
	close(sv[1]); /* the server closed the connection; the process lives on */
	ck_assert_int_eq(ctl_wait_gone(sv[0], pidfd, 200), -ETIMEDOUT);
	close(p[1]);
	ck_assert_int_eq(ctl_wait_gone(sv[0], pidfd, 10000), 0);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* Without a pidfd, the connection's end is all there is. */
	ck_assert_int_eq(ctl_wait_gone(sv[0], -1, 10000), 0);
	close(pidfd);
	close(sv[0]);
}
END_TEST

static Suite *ctl_suite(void)
{
	Suite *s = suite_create("ctl");
	TCase *tc = tcase_create("proto");

	tcase_add_test(tc, header_roundtrip);
	tcase_add_test(tc, header_checks);
	tcase_add_test(tc, fields_roundtrip);
	tcase_add_test(tc, fields_truncated);
	tcase_add_test(tc, fields_malformed);
	tcase_add_test(tc, add_limits);
	tcase_add_test(tc, socket_roundtrip);
	tcase_add_test(tc, socket_cut_and_garbage);
	tcase_add_test(tc, names_and_paths);
	tcase_add_test(tc, runtime_dir);
	tcase_add_test(tc, run_name_option);
	tcase_add_test(tc, reply_text_escaped);
	tcase_add_test(tc, call_unsent_reply_initialised);
	tcase_add_test(tc, wait_gone_waits_for_the_process);
	suite_add_tcase(s, tc);
	tc = tcase_create("plane");
	/* late_request_answered waits out the 2 s request deadline on purpose. */
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, dir_trust);
	tcase_add_test(tc, foreign_listener_not_believed);
	tcase_add_test(tc, list_and_debug_escape);
	tcase_add_test(tc, late_request_answered);
	tcase_add_test(tc, peer_of_another_uid_refused);
	tcase_add_test(tc, killed_server_leaves_nothing);
	tcase_add_test(tc, teardown_with_pending_client);
	tcase_add_test(tc, out_of_descriptors);
	tcase_add_test(tc, queued_clients_answered_at_stop);
	tcase_add_test(tc, stop_all_stops_every_vm);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(ctl_suite)
