/* What lkvm tells its guest init (/lkvm/config) and what init reports back (the exit port). */
#ifndef LKVM_INITCFG_H
#define LKVM_INITCFG_H

/*
 * This header is compiled into lkvm and into the static guest program init/lkvm-init.c, so it
 * uses nothing but the C library (no lkvm/util.h).
 *
 * The configuration file, format version 3 (2 added "user", "group", "nic" and "ports"; 3
 * "virtiofs" and "debug"): a sequence of NUL-terminated strings.
 *   "lkvm-initcfg" "2" "<N>"         magic, format version, N = the whole file's length in
 *                                    bytes (decimal), so a truncated or padded file is refused
 *   then records, each a key followed by a fixed number of fields (initcfg_keys[] in
 *   init/initcfg.c holds the table):
 *   "arg" ARG                        CMD's argv, in order (none: an interactive shell)
 *   "env" NAME=VALUE                 CMD's environment, in order
 *   "cwd" PATH                       the directory CMD starts in (absolute; / if it is missing)
 *   "root" MODE TAG                  MODE "initramfs" (stay in it; TAG "") or "9p-overlay" (the
 *                                    9p TAG read-only + a tmpfs upper layer, then chroot there)
 *   "share" TAG PATH ro|rw           a 9p share mounted at PATH (absolute) in the new root
 *   "module" PATH                    a kernel module in the initramfs, loaded in file order
 *   "console" STDIO STDERR tty|raw   devices for CMD's stdin+stdout and its stderr; tty keeps
 *                                    the line discipline (the shell's terminal), raw passes
 *                                    bytes unchanged both ways (cfmakeraw) and CMD's stdin
 *                                    arrives framed (below) through init, which ends it at
 *                                    the end-of-input mark; a STDERR other than STDIO is
 *                                    always raw (it is a file or a pipe on the host)
 *   "ports" STDOUT STDERR            virtio-serial ports (by name, "" for none) that carry
 *                                    CMD's stdout and stderr instead of STDIO and STDERR:
 *                                    init opens /dev/<P> of /sys/class/virtio-ports/<P>/name
 *                                    (their writes do not wait for the host, and CMD's
 *                                    output is not a terminal); optional
 *   "winsize" ROWS COLS              the console's size (optional)
 *   "exit-port" PORT                 I/O port of lkvm's exit device (decimal)
 *   "msize" BYTES                    9p msize (decimal)
 *   "user" UID GID                   CMD's user and group (decimal; optional: none, root),
 *                                    set after the mounts, just before CMD is started
 *   "group" GID                      one of CMD's supplementary groups (with "user" only)
 *   "nic" MAC up|dhcp                a NIC (aa:bb:cc:dd:ee:ff) init brings up, and with dhcp
 *                                    configures from a DHCP lease (init/net.c); lo is always
 *                                    brought up
 *   "virtiofs" TAG FSTAG first|only  the root or share of 9p tag TAG (an earlier record) is
 *                                    also a virtio-fs device of tag FSTAG: init mounts that
 *                                    first and 9p only if it fails (first), or virtio-fs
 *                                    alone (only: there is no 9p device)
 *   "debug"                          init says on its console which it mounted (no fields)
 * Every field is at most INITCFG_MAX_STRING bytes; the file at most INITCFG_MAX_SIZE. "root"
 * is required; the others have the defaults below. Nothing is optional in the format itself:
 * an unknown key, a missing field or a bad value makes the whole file invalid (a new field
 * means a new version).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define INITCFG_PATH "/lkvm/config"
#define INITCFG_MAGIC "lkvm-initcfg"
#define INITCFG_VERSION 3
#define INITCFG_MAX_SIZE (4u << 20)	/* above Linux's 2 MiB of argv + environment */
#define INITCFG_MAX_STRING (128u << 10) /* Linux's MAX_ARG_STRLEN */
#define INITCFG_MAX_SHARES 32
#define INITCFG_MAX_MODULES 256
#define INITCFG_MAX_GROUPS 1024
#define INITCFG_MAX_NICS 8

#define INITCFG_DEFAULT_STDIO "/dev/hvc0"
#define INITCFG_DEFAULT_STDERR "/dev/hvc1"
#define INITCFG_DEFAULT_MSIZE (512u << 10)
#define INITCFG_PORT_NAME_MAX 31 /* VIRTIO_CONSOLE_NAME_MAX */
#define INITCFG_STDOUT_PORT "lkvm.stdout"
#define INITCFG_STDERR_PORT "lkvm.stderr"

enum initcfg_root { INITCFG_ROOT_INITRAMFS, INITCFG_ROOT_9P_OVERLAY };
enum initcfg_tty { INITCFG_TTY, INITCFG_RAW };
enum initcfg_nic_how { INITCFG_NIC_UP, INITCFG_NIC_DHCP };

struct initcfg_nic {
	uint8_t mac[6];
	enum initcfg_nic_how how;
};

struct initcfg_share {
	const char *tag;
	const char *path;
	bool ro;
	const char *fs_tag; /* "virtiofs": its virtio-fs tag, or NULL */
	bool fs_only;	    /* no 9p device: virtio-fs or nothing */
};

/* A decoded configuration (its strings point into the decoded buffer), or one to encode. */
struct initcfg {
	char **argv; /* argc strings then NULL; argc 0: the shell */
	size_t argc;
	char **envp; /* envc strings then NULL */
	size_t envc;
	const char *cwd; /* NULL: / */
	enum initcfg_root root;
	const char *root_tag;	 /* 9p-overlay only */
	const char *root_fs_tag; /* 9p-overlay: the root's virtio-fs tag, or NULL */
	bool root_fs_only;	 /* the root has no 9p device */
	bool debug;		 /* "debug" */
	struct initcfg_share shares[INITCFG_MAX_SHARES];
	size_t nr_shares;
	const char *modules[INITCFG_MAX_MODULES];
	size_t nr_modules;
	const char *stdio_dev, *stderr_dev;    /* NULL: the defaults */
	const char *stdout_port, *stderr_port; /* NULL: none (CMD's output on the consoles) */
	enum initcfg_tty tty;
	unsigned rows, cols; /* 0: not given */
	uint16_t exit_port;  /* 0: LKVM_EXIT_PORT */
	uint32_t msize;	     /* 0: INITCFG_DEFAULT_MSIZE */
	/* CMD's credentials (init/user.c): !user keeps init's, root's. */
	bool user;
	uint32_t uid, gid;
	uint32_t groups[INITCFG_MAX_GROUPS]; /* supplementary groups */
	size_t nr_groups;
	struct initcfg_nic nics[INITCFG_MAX_NICS];
	size_t nr_nics;
};

/* Checks what the format allows (absolute paths, non-empty tags, NAME=VALUE entries, string
 * and count limits); the encoder and the decoder both apply it. 0 or -EINVAL. */
int initcfg_check(const struct initcfg *c);
/* Encodes c into a malloc'd buffer. 0, -EINVAL (initcfg_check, or longer than
 * INITCFG_MAX_SIZE) or -ENOMEM. */
int initcfg_encode(const struct initcfg *c, char **out, size_t *len);
/* Decodes buf[0..len) into c; c's strings point into buf, which must outlive it, and its argv
 * and envp arrays are malloc'd (initcfg_free). 0, -EINVAL (malformed, truncated, too long, an
 * unknown key, a bad value) or -ENOMEM; on error c holds nothing to free. */
int initcfg_decode(const char *buf, size_t len, struct initcfg *c);
void initcfg_free(struct initcfg *c);

/*
 * CMD's standard input in raw mode: lkvm sends it on the stdio console framed, so that its end
 * can travel too (a console has no end of file): every 0xff byte is sent as 0xff 0xff, and
 * 0xff 0x00 marks the end of input (after it, nothing more is read). Init relays the decoded
 * bytes to CMD through a pipe and closes it at the mark. Any other byte after 0xff stands
 * for itself (lkvm never sends that).
 */
#define INITCFG_STDIN_ESC 0xffu
#define INITCFG_STDIN_EOF 0x00u

/* Frames n bytes of in into out (room for 2 * n bytes); returns out's length. */
size_t initcfg_stdin_encode(const uint8_t *in, size_t n, uint8_t *out);

struct initcfg_stdin_dec {
	bool esc; /* the last byte was an unpaired 0xff */
	bool eof; /* the end-of-input mark was seen */
};
/* Unframes n bytes of in into out (room for n bytes), carrying an escape split across two
 * calls in d; stops at the end-of-input mark (d->eof, the rest ignored). Returns out's
 * length. */
size_t initcfg_stdin_decode(struct initcfg_stdin_dec *d, const uint8_t *in, size_t n, uint8_t *out);

/*
 * The exit port: init reports how CMD ended, or why it could not run it, by writing one 32-bit
 * little-endian word to LKVM_EXIT_PORT..+3, either as one outl or as four byte writes in
 * increasing port order (what /dev/port does); the write that reaches the last byte commits.
 * The freestanding test guests (tests/guest/lib/) report through it too: their pass as
 * LKVM_EXIT_EXITED 0, a failed GUEST_ASSERT as LKVM_EXIT_GUEST_ASSERT (a GUEST_ASSERT_EQ sends
 * the two values before it, as LKVM_EXIT_ASSERT_VALUE pieces).
 *   bits 0-7   value: CMD's exit status, its signal number, or the init stage (below)
 *   bits 8-15  kind (enum lkvm_exit_kind)
 *   bits 16-31 detail: for LKVM_EXIT_INIT_FAILED the errno (0: none), for
 *              LKVM_EXIT_GUEST_ASSERT the assertion's line (0: unknown); 0 otherwise
 * The port is not a console: nothing CMD prints can forge it. 0x510 would have been QEMU's
 * fw_cfg selector (0x510-0x51b); 0x508 sits between pvpanic (0x505) and that range.
 */
#define LKVM_EXIT_PORT 0x508
#define LKVM_EXIT_PORT_LEN 4

enum lkvm_exit_kind {
	LKVM_EXIT_EXITED = 1,	   /* CMD exited; value = its status */
	LKVM_EXIT_SIGNALED = 2,	   /* CMD was killed; value = the signal (1-127) */
	LKVM_EXIT_INIT_FAILED = 3, /* init could not run CMD; value = the stage, detail = errno */
	/* Not an end: the stdio console is raw, lkvm may send CMD's framed stdin (value and
	 * detail 0). Bytes that arrived before would have met the terminal's line discipline,
	 * which drops input while its line buffer is full and echoes it. */
	LKVM_EXIT_STDIN_READY = 4,
	/* A test guest's assertion failed (value 0, detail its line; the file and the values
	 * are on its console, "GUEST FAIL file:line: ..."): lkvm exits EXIT_GUEST_ASSERT. */
	LKVM_EXIT_GUEST_ASSERT = 5,
	/* Not an end: one 16-bit piece (detail) of a failed GUEST_ASSERT_EQ's values, sent before
	 * its LKVM_EXIT_GUEST_ASSERT so lkvm's line shows them (KVM selftests' ucall carries them
	 * so): value = the piece, 0-3 the first value's from its low end, 4-7 the second's. */
	LKVM_EXIT_ASSERT_VALUE = 6,
};
#define LKVM_EXIT_ASSERT_PIECES 8

#define LKVM_EXIT_WORD(kind, value, detail) \
	((uint32_t)(value) | ((uint32_t)(kind) << 8) | ((uint32_t)(detail) << 16))

/* Where init stopped when it could not run CMD (names and hints: initcfg_stage_name/hint). */
enum lkvm_init_stage {
	LKVM_STAGE_CONFIG,  /* reading or decoding /lkvm/config */
	LKVM_STAGE_MOUNT,   /* proc, sys, dev, tmp, run, devpts */
	LKVM_STAGE_MODULE,  /* loading a kernel module */
	LKVM_STAGE_ROOT,    /* the 9p (or virtio-fs) root, its tmpfs and overlay, entering it */
	LKVM_STAGE_SHARE,   /* mounting a share */
	LKVM_STAGE_CONSOLE, /* opening the consoles */
	LKVM_STAGE_FORK,    /* starting CMD */
	LKVM_STAGE_NR
};

/* "mounting the 9p root" etc.; NULL for an unknown stage. */
const char *initcfg_stage_name(unsigned stage);
/* What to check when the stage failed with err (e.g. the CONFIG_ options), or "". */
const char *initcfg_stage_hint(unsigned stage, int err);

#endif
