/* `lkvm run -- CMD`, the command's side: its options, whose credentials serve the host's files, the run prepared (kernel, initramfs, kernel log) and its end. */
#ifndef LKVM_RUN_CMD_H
#define LKVM_RUN_CMD_H

#include <pwd.h>

#include "lkvm/initcfg.h"
#include "lkvm/sandbox.h"
#include "lkvm/util.h"

struct kvm;
struct kvm_config;
struct opt;
struct term;

/*
 * The command's own options, which `lkvm run` keeps beside its struct kvm_config (struct
 * run_args, run.h): kvm_run_parse fills them. Host-root mode is on with `--` (CMD after it;
 * nothing after it: a shell), and when neither -k, -i nor -d is given (`lkvm run` alone:
 * kernel discovery, a shell); run_cmd_check decides it into cfg->host_root.on. An explicit -k
 * without `--` keeps the plain machine (the kernel's console on the terminal), which every
 * freestanding guest and -d/-i boot relies on.
 */
struct run_cmd_opts {
	bool dashdash; /* `--` was given */
	int argc;      /* CMD's words (0: the shell) */
	char **argv;
	const char *console_log; /* --console-log FILE: the serial console (kernel log) to FILE */
	bool root;	    /* --root: CMD runs as root in the guest (the files served as before) */
	bool rw;	    /* --rw (vng's): refused, the root's writes stay in the guest */
	char *exec_argv[4]; /* --exec CMD: sh -c CMD (argv points here) */
	const char *modules; /* --modules DIR: the kernel's module directory (initrd.h) */
};

/* opt_set.trailing of `lkvm run` (base: its struct run_args): the words after `--`. 0, or
 * -EINVAL with err when --exec gave CMD already. */
int run_cmd_trailing(void *base, int argc, char **argv, char *err, size_t errlen);
/* --exec CMD (vng's spelling): as `-- sh -c CMD`. 0. */
int run_cmd_exec(const struct opt *o, const char *v, void *base, char *err, size_t errlen);
/* Decides cfg->host_root.on and checks what cannot go with it (-i, --console virtio, --rw;
 * --root without it). 0 or -EINVAL with err. Parsing only: nothing is opened. */
int run_cmd_check(struct kvm_config *cfg, const struct run_cmd_opts *cmd, char *err,
		  size_t errlen) __must_check;

/*
 * Whose credentials serve the host's files (and the shares) to CMD: lkvm's user after set-up.
 * root's view is never the default: the guest would read what only root may (/etc/shadow,
 * root's keys) although the user asked to run a command on their own files.
 */
enum run_cmd_as {
	RUN_AS_LKVM,   /* lkvm's own user: not root, or --user given (which then applies) */
	RUN_AS_SUDO,   /* root through sudo: the invoking user, its gid and groups */
	RUN_AS_NOBODY, /* root with no other user behind it: user nobody */
};

struct run_cmd_creds {
	enum run_cmd_as as;
	struct sandbox_user user; /* RUN_AS_SUDO and RUN_AS_NOBODY */
};

/* What sudo left in the environment (getenv's values, NULL when unset). */
struct run_cmd_sudo {
	const char *uid, *gid, *user; /* SUDO_UID, SUDO_GID, SUDO_USER */
};

/* The passwd look-ups (getpwuid and getpwnam; a table in the unit tests). */
struct run_cmd_pw {
	struct passwd *(*byuid)(uid_t uid);
	struct passwd *(*byname)(const char *name);
};

/*
 * The choice, for a run as euid with --user `user` (NULL: none). Not root, or --user given:
 * RUN_AS_LKVM. root with SUDO_UID a non-root uid: that user (SUDO_UID must be digits only
 * and have a passwd entry; the gid is SUDO_GID's, else the entry's; the groups those of
 * SUDO_USER when it names the same uid, else of the entry's name). Otherwise (no SUDO_UID,
 * or 0): nobody (its passwd entry, else 65534:65534), without groups. A SUDO_UID or SUDO_GID
 * that is not a number, or a SUDO_UID without a passwd entry: -EINVAL or -ENOENT with err.
 */
int run_cmd_creds(uid_t euid, const char *user, const struct run_cmd_sudo *sudo,
		  const struct run_cmd_pw *pw, struct run_cmd_creds *c, char *err,
		  size_t errlen) __must_check;

/* The guest user's environment lines, which ic->envp points to (kept while it is used). */
struct run_cmd_guest {
	char home[4096 + 8], user[80], logname[80];
};

/*
 * The user CMD runs as in the guest (builtin/run-user.c), into ic->user, uid, gid and groups:
 * root with --root (`root`), else the one whose credentials serve the host's files: c's user
 * (sudo's, with its groups; nobody, without), --user's (`user`, without groups, as lkvm
 * becomes it), else lkvm's own (euid, egid, its groups). uid 0 leaves ic->user false (init
 * is root already). A guest user other than lkvm's own gets its passwd entry's HOME, USER and
 * LOGNAME in ic->envp (malloc'd, realloc'd here; the lines are in g). 0, -ENOENT (--user
 * unknown), -E2BIG (more than INITCFG_MAX_GROUPS groups) with err, or -ENOMEM.
 */
int run_cmd_guest_user(const struct run_cmd_creds *c, const char *user, bool root,
		       const struct run_cmd_pw *pw, struct initcfg *ic, struct run_cmd_guest *g,
		       char *err, size_t errlen) __must_check;

struct run_cmd;

/*
 * Before the VM is made (cfg is copied into it then): chooses whose credentials serve the
 * host's files (run_cmd_creds; one line says so when that is nobody), refuses a host that
 * cannot run guest user space (a PVM host), finds the kernel when there is no -k (kernel_find;
 * one line says which), decides the console modes (cfg->host_root), builds the initramfs in
 * memory (initrd_make: lkvm-init, its configuration, the modules a modular kernel needs) and
 * opens the kernel log's destination. *out is NULL when host-root mode is off and there is
 * no --console-log. 0 or -errno with err.
 */
int run_cmd_prepare(struct kvm_config *cfg, const struct run_cmd_opts *cmd, struct run_cmd **out,
		    char *err, size_t errlen) __must_check;
/* Hands over the initramfs (malloc'd; the caller frees it); NULL and 0 when there is none. */
void run_cmd_take_initrd(struct run_cmd *rc, u8 **data, size_t *len);
/* After term_init: the serial console (the kernel's log) goes to --console-log's file; in
 * host-root mode without it, to stderr with --debug, else nowhere. No-op for rc NULL. */
void run_cmd_term(struct run_cmd *rc, struct term *t);
/* After the vCPUs stopped: the run's status, with the reason rewritten where the guest ended
 * without the command's status; *quiet when the status is CMD's own (lkvm adds no closing
 * line to CMD's output). */
int run_cmd_end(struct kvm *kvm, int status, bool *quiet);
/* The user lkvm becomes after set-up in place of --user's (RUN_AS_SUDO, RUN_AS_NOBODY), or
 * NULL: --user's or none. NULL for rc NULL. */
const struct sandbox_user *run_cmd_user(const struct run_cmd *rc);
void run_cmd_free(struct run_cmd *rc);
/* The plain machine without a root: no -- CMD, -i, -d, --restore or root= in -p (a Linux
 * kernel can only panic for want of one; lkvm run then says how to get a shell). */
bool run_cmd_root_missing(const struct kvm_config *cfg);

#endif
