/* The control plane: the per-VM socket's wire protocol (versioned, length-checked), its server and client. */
#ifndef LKVM_CTL_H
#define LKVM_CTL_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "lkvm/util.h"

/*
 * Wire format (all integers little-endian). Every message is a 16-byte header and a payload:
 *   u32 magic "LKVC"   u16 version (1)   u16 type   u32 status   u32 length (payload bytes)
 * A request has status 0 and a payload of at most CTL_MAX_REQUEST bytes; a reply has the
 * request's type with CTL_REPLY set, status 0 (done) or CTL_ERR_* (then the payload holds a
 * string field "error"), and at most CTL_MAX_REPLY bytes. The payload is a list of fields,
 * each: u8 kind, u8 name length (1..CTL_NAME_MAX), the name, then for CTL_F_U64 a u64, for
 * CTL_F_STR a u16 length and that many bytes (no NUL). One request per connection.
 */
#define CTL_MAGIC 0x43564b4cu /* "LKVC" */
#define CTL_VERSION 1
#define CTL_HDR_LEN 16
#define CTL_MAX_REQUEST 4096
#define CTL_MAX_REPLY (1u << 20)
#define CTL_NAME_MAX 63
#define CTL_STR_MAX 65535
#define CTL_REPLY 0x8000
#define CTL_REQUEST_TIMEOUT_MS 2000 /* a client sends its whole request within this of connecting */
/* Descriptors the server may open while it runs, beyond those it holds from its creation on: 8
 * clients served at once, 16 `lkvm stop` clients waiting for the end, one turned away busy, and
 * the attached gdb server's copy of its client (ctl/server.c checks its own numbers against
 * this). */
#define CTL_SERVER_RUN_FDS 26

enum ctl_type {
	CTL_INFO = 1, /* name, pid, state, vcpus, ram_mib, uptime_ns, ... (lkvm list) */
	CTL_STOP = 2, /* orderly shutdown; the reply comes first, then the connection stays
	                 * open until the process exits (EOF tells the client it is gone) */
	CTL_PAUSE = 3,
	CTL_RESUME = 4,
	CTL_STAT = 5,	  /* counters, flat: vcpu.exits.total, net0.tx0.packets, ... */
	CTL_DEBUG = 6,	  /* one string field "text": every vCPU's registers and last exit */
	CTL_SNAPSHOT = 7, /* issue 31: the VM's state written to a file (docs/snapshot.md) */
	CTL_GDB = 8,	  /* lkvm debug NAME --gdb: after the reply ("name") the connection is a
			   * gdb client of the VM's gdb server (remote protocol bytes both ways) */
	CTL_DUMP = 9,	  /* issue 42: an ELF core of the paused VM written to the file passed */
	CTL_TYPE_MAX = 9,
};

enum ctl_status {
	CTL_OK = 0,
	CTL_ERR_PROTO = 1,   /* malformed message, bad magic, length out of bounds */
	CTL_ERR_VERSION = 2, /* the other side speaks another version (the reply has "version") */
	CTL_ERR_TYPE = 3,    /* unknown request type */
	CTL_ERR_STATE = 4,   /* not possible now (already paused, not paused, stopping) */
	CTL_ERR_FAILED = 5,  /* the VM could not do it (a vCPU did not park, an ioctl failed) */
};

enum ctl_field_kind { CTL_F_U64 = 1, CTL_F_STR = 2 };

struct ctl_hdr {
	u32 magic;
	u16 version;
	u16 type;
	u32 status;
	u32 len;
};

/* A message under construction or decoded: the header and a growable payload. */
struct ctl_msg {
	struct ctl_hdr hdr;
	u8 *buf; /* payload */
	size_t len, cap;
	bool oom; /* an add failed for lack of memory or room: the message is unusable */
};

/* One decoded field; str points into the message (not NUL-terminated). */
struct ctl_field {
	enum ctl_field_kind kind;
	char name[CTL_NAME_MAX + 1];
	u64 u;
	const char *str;
	size_t str_len;
};

void ctl_msg_init(struct ctl_msg *m, u16 type, u32 status);
void ctl_msg_free(struct ctl_msg *m);
/* Append a field; a name that is empty or too long, a string over CTL_STR_MAX or a payload
 * over CTL_MAX_REPLY marks the message unusable (m->oom) and returns -EINVAL/-ENOMEM. */
int ctl_add_u64(struct ctl_msg *m, const char *name, u64 v);
int ctl_add_str(struct ctl_msg *m, const char *name, const char *s);
int ctl_add_strn(struct ctl_msg *m, const char *name, const char *s, size_t len);

/* Header to/from its 16 wire bytes. ctl_hdr_decode checks magic, then version (-EPROTO for a
 * bad magic, -EPROTONOSUPPORT for another version: the header is filled then), then that len is at
 * most max (-EMSGSIZE). */
void ctl_hdr_encode(const struct ctl_hdr *h, u8 out[CTL_HDR_LEN]);
int ctl_hdr_decode(const u8 in[CTL_HDR_LEN], u32 max, struct ctl_hdr *h) __must_check;

/* Walk a payload: *off starts at 0; returns 1 with *f filled, 0 at the exact end, -EBADMSG
 * when a field is truncated, has an unknown kind or a bad name length. */
int ctl_next_field(const u8 *p, size_t len, size_t *off, struct ctl_field *f) __must_check;
/* Check a whole payload (every field well formed). Returns 0 or -EBADMSG. */
int ctl_payload_check(const u8 *p, size_t len) __must_check;
/* The first field called name of that kind, or NULL-ish: returns 0 and fills *f, or -ENOENT. */
int ctl_find(const u8 *p, size_t len, const char *name, enum ctl_field_kind kind,
	     struct ctl_field *f);

/* Blocking I/O of one whole message on a stream socket: header, then payload. ctl_send returns
 * 0 or -errno; ctl_recv returns 0, -ECONNRESET on EOF before the first byte, -EPIPE on EOF
 * mid-message, -ETIMEDOUT after timeout_ms without progress (<0: wait forever), or what
 * ctl_hdr_decode/ctl_payload_check return. On success m owns a payload of m->len bytes. */
int ctl_send(int fd, const struct ctl_msg *m) __must_check;
int ctl_recv(int fd, struct ctl_msg *m, u32 max, int timeout_ms) __must_check;
/* As ctl_send for a request, with descriptor fd passed along (SCM_RIGHTS) on its first bytes:
 * the server keeps the first one a request brings (lkvm snapshot's file). */
int ctl_send_fd(int sock, const struct ctl_msg *m, int fd) __must_check;

/* ---- names and the runtime directory ---- */

/* A VM name is 1..64 of [A-Za-z0-9._-], not starting with '.' or '-'. */
bool ctl_name_valid(const char *name);
/* The runtime directory: $LKVM_RUNTIME_DIR, else /run/lkvm for root, else
 * $XDG_RUNTIME_DIR/lkvm, else /tmp/lkvm-UID. Returns 0 or -ENAMETOOLONG. */
int ctl_runtime_dir(char *buf, size_t len) __must_check;
/* Whether dir may be trusted: a directory (not a symlink) of this process's effective uid
 * with no permission for group or others. Anyone else's could hold sockets that answer in
 * a VM's place. Returns 0, -EPERM (err says why), or -errno of lstat (-ENOENT: missing). */
int ctl_dir_check(const char *dir, char *err, size_t errlen) __must_check;
/* Path of NAME's socket (".sock") or lock (".lock") in dir; -ENAMETOOLONG past sun_path. */
int ctl_path(char *buf, size_t len, const char *dir, const char *name,
	     const char *suffix) __must_check;

/* ---- client ---- */

/* Connect to NAME's socket in dir, after ctl_dir_check, and believe it only when the process
 * that listens there has our uid (SO_PEERCRED: its credentials when it called listen(), so a
 * VM that switched to --user afterwards still qualifies). Returns the fd, -ENOENT (no such
 * VM), -ECONNREFUSED (a stale socket: nobody listens), -EPERM (a directory or listener that
 * is not ours), or another -errno; err says which in words. */
int ctl_connect(const char *dir, const char *name, char *err, size_t errlen) __must_check;
/* The pid of the process serving a connection from ctl_connect (SO_PEERCRED), or 0 when it
 * is not visible from here (another pid namespace). */
int ctl_peer_pid(int fd);
/* Send a request of `type` without fields, read the reply (timeout_ms). Returns 0 with the reply
 * in *reply (status may be an error: the caller prints its "error" field), or -errno with err.
 * *reply is initialised either way (ctl_msg_free is always safe). */
int ctl_call(int fd, u16 type, struct ctl_msg *reply, int timeout_ms, char *err,
	     size_t errlen) __must_check;
/* Remove NAME's socket if no VM holds its lock (stale after a SIGKILL). Returns 1 when removed,
 * 0 when a VM holds it, -errno otherwise. */
int ctl_remove_stale(const char *dir, const char *name);
/* True when the open lock file fd is still the file at path (not unlinked or replaced). */
bool ctl_lock_is_current(int fd, const char *path);

/* ---- for the client commands (builtin/list.c, stop.c, ...) ---- */

/* A reply's fields, decoded and copied (strings NUL-terminated, every byte outside printable
 * ASCII but the newline written as \xNN: they came from another process). */
struct ctl_kv {
	char name[CTL_NAME_MAX + 1];
	bool is_str;
	u64 u;
	char *s;
};
struct ctl_kvs {
	struct ctl_kv *v;
	size_t n;
};
int ctl_kvs_decode(const struct ctl_msg *m, struct ctl_kvs *out) __must_check;
void ctl_kvs_free(struct ctl_kvs *k);
const struct ctl_kv *ctl_kv_get(const struct ctl_kvs *k, const char *name);
u64 ctl_kv_u64(const struct ctl_kvs *k, const char *name);	   /* 0 when missing */
const char *ctl_kv_str(const struct ctl_kvs *k, const char *name); /* "" when missing */

/* ctl_connect, and a stale socket found on the way removed (said on stderr). */
int ctl_cli_connect(const char *dir, const char *name, char *err, size_t errlen) __must_check;
/* One request on a connection to VM `name`: returns 0 with the reply's fields in *out, or
 * -errno with err in words (-EREMOTEIO: the VM's own words for an error reply; -ECONNRESET:
 * it closed the connection without a reply). *out is empty on failure. */
int ctl_request(int fd, const char *name, u16 type, struct ctl_kvs *out, int timeout_ms, char *err,
		size_t errlen) __must_check;
/* One request to VM `name` in the runtime directory: prints a one-line error (the VM's own
 * words for an error reply) and returns 1, or returns 0 with the reply's fields in *out.
 * *fd_out, when not NULL, receives the still-open connection (the caller closes it). */
int ctl_cli_call(const char *name, u16 type, struct ctl_kvs *out, int *fd_out, int timeout_ms);
/* The names of the NAME.sock entries in dir, sorted (malloc'd, each too); none when dir is
 * missing; *err = -errno when it cannot be read. */
char **ctl_list_names(const char *dir, size_t *n, int *err);
/* For list and stop --all: the runtime directory into dir and its VMs' names (ctl_list_names,
 * after ctl_dir_check). Returns 0 (none when the directory does not exist), or 1 after
 * printing a one-line error. Free the names with ctl_names_free. */
int ctl_cli_names(char *dir, size_t dirlen, char ***names, size_t *n);
void ctl_names_free(char **names, size_t n);
/* Wait until the process behind a connection has exited: pidfd (pidfd_open of ctl_peer_pid)
 * turning readable, or when there is none (a kernel before 5.3, a server in another pid
 * namespace) the server closing fd. Returns 0, or -ETIMEDOUT after timeout_ms. */
int ctl_wait_gone(int fd, int pidfd, int timeout_ms) __must_check;
/* JSON string literal of s, escaped. */
void ctl_json_str(FILE *out, const char *s);
/* "1h02m03s", "4.2s": a duration for people. */
void ctl_fmt_duration(char *buf, size_t len, u64 ns);
/* Parse "--help"/"-h" as the only argument pattern shared by the commands; returns true if asked. */
bool ctl_cli_wants_help(int argc, char **argv);

/* ---- server (one per VM, a thread; see ctl/server.c) ---- */

struct kvm;
struct ctl_server;
/* Take NAME's lock and listen on its socket (removing a stale one), and start the helper
 * that removes both once the process is gone. Only clients of uid owner are served (lkvm
 * run: its geteuid() before any --user switch; tests give another to play a stranger).
 * -EADDRINUSE: a VM of that name runs; -EPERM: the runtime directory is not this user's
 * (ctl_dir_check); other -errno with err. */
int ctl_server_create(struct kvm *kvm, const char *name, uid_t owner, struct ctl_server **out,
		      char *err, size_t errlen) __must_check;
int ctl_server_start(struct ctl_server *s) __must_check;
/* Stop answering (join the thread); clients waiting on a stop keep their connection. */
void ctl_server_stop(struct ctl_server *s);
/* Remove the socket and lock, close every connection (waiting `lkvm stop` clients see EOF). */
void ctl_server_destroy(struct ctl_server *s);
const char *ctl_server_path(const struct ctl_server *s);

#endif
