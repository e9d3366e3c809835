/* lkvm run --restore FILE: the machine the snapshot describes, with every host resource from this command line only. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/net.h"
#include "lkvm/opt.h"
#include "lkvm/run.h"
#include "lkvm/virtio-blk.h"
#include "lkvm/vm-snap.h"

/*
 * A snapshot may come from someone else (docs/snapshot.md, DESIGN.md rule 9): it gives the
 * machine's shape and the guest's state, never a host resource. Which options the restored VM
 * takes from where:
 * - the snapshot's, for the machine (-m, -c, -p, --console, --rng, --virtio-transport, ...),
 *   unless this command line gives the option again (then every saved occurrence is dropped);
 * - this command line's only, for the process (options marked .process: --name, --gdb, ...)
 *   and for the host's resources (options marked .host: -d, -n, --share, -k, -i, --modules,
 *   --exec, and -- CMD: the host's / shared). The saved ones are read for the shape alone:
 *   how many NICs, disks and shares, whether it is -- CMD's machine, and each NIC's MAC,
 *   transport and queue pairs and each disk's transport and read-only mode, which are added
 *   to this command line's -n and -d when it leaves them out (and refused when it gives
 *   others). A resource the machine has and this command line does not give is refused in
 *   one line naming the option that gives it; no saved path, tap, script or socket is used.
 */

#define UNITS_MAX 8 /* more NICs, disks or shares than lkvm run takes (4 each) */

enum unit_kind { U_OTHER, U_NIC, U_DISK, U_SHARE };

/* What one argv's options say of the machine's host side. */
struct units {
	const char *nic[UNITS_MAX], *disk[UNITS_MAX]; /* -n's and -d's values, in order */
	int nnic, ndisk, nshare;
	bool cmd;   /* "--" or --exec: -- CMD's machine */
	bool files; /* -k, -i or -d: without them (and without --) a run is -- CMD's too */
};

static enum unit_kind kind_of(const struct opt *o)
{
	if (!strcmp(o->name, "network") || !strcmp(o->name, "net"))
		return U_NIC;
	if (!strcmp(o->name, "disk"))
		return U_DISK;
	if (!strcmp(o->name, "share") || !strcmp(o->name, "rwdir"))
		return U_SHARE;
	return U_OTHER;
}

/* The value of option o at argv[i] (n words): "-n V", "-nV", "--network=V"; "--net user" is
 * -n mode=user. */
static const char *unit_value(const struct opt *o, char **argv, int i, int n)
{
	const char *w = argv[i], *v = n == 2	       ? argv[i + 1]
				      : w[1] != '-'    ? w + 2
				      : strchr(w, '=') ? strchr(w, '=') + 1
						       : "";

	return !strcmp(o->name, "net") && !strcmp(v, "user") ? "mode=user" : v;
}

static void add_unit(struct units *u, const struct opt *o, char **argv, int i, int n)
{
	switch (kind_of(o)) {
	case U_NIC:
		if (u->nnic < UNITS_MAX)
			u->nic[u->nnic] = unit_value(o, argv, i, n);
		u->nnic++;
		break;
	case U_DISK:
		if (u->ndisk < UNITS_MAX)
			u->disk[u->ndisk] = unit_value(o, argv, i, n);
		u->ndisk++;
		u->files = true;
		break;
	case U_SHARE:
		u->nshare++;
		break;
	default:
		u->cmd |= !strcmp(o->name, "exec");
		u->files |= !strcmp(o->name, "kernel") || !strcmp(o->name, "initrd");
	}
}

/* argv's options from argv[from] read into u; returns where they end (the index of "--" or
 * of the first other word). */
static int scan(int argc, char **argv, int from, struct units *u)
{
	int i, n;

	memset(u, 0, sizeof(*u));
	for (i = from; i < argc; i += n) {
		const struct opt *o = opt_argv_unit(&run_opt_set, argc, argv, i, &n);

		if (!o && (!strcmp(argv[i], "--") || argv[i][0] != '-'))
			break;
		if (o)
			add_unit(u, o, argv, i, n);
	}
	u->cmd |= i < argc && !strcmp(argv[i], "--");
	return i;
}

static bool given_here(int argc, char **argv, const struct opt *want)
{
	int n;

	for (int i = 1; i < argc; i += n) {
		const struct opt *o = opt_argv_unit(&run_opt_set, argc, argv, i, &n);

		if (!o && (!strcmp(argv[i], "--") || argv[i][0] != '-'))
			return false; /* the options ended */
		if (o == want)
			return true;
	}
	return false;
}

/* The saved options the machine keeps (none of the process's or the host's), into out. */
static int saved_options(int sargc, char **sargv, int argc, char **argv, char **out)
{
	int n = 0, words;

	for (int i = 0; i < sargc; i += words) {
		const struct opt *o = opt_argv_unit(&run_opt_set, sargc, sargv, i, &words);

		if (!o || o->process || o->host || given_here(argc, argv, o))
			continue;
		for (int w = 0; w < words; w++)
			out[n++] = sargv[i + w];
	}
	return n;
}

/* Options that set up a boot, which a restore does not do: said, not silently ignored. */
static int check_no_boot(int argc, char **argv, int end, char *err, size_t errlen)
{
	static const char *const boot[] = { "kernel", "initrd", "params", "append", "modules" };
	int n;

	for (int i = 1; i < end; i += n) {
		const struct opt *o = opt_argv_unit(&run_opt_set, argc, argv, i, &n);

		for (size_t b = 0; o && b < ARRAY_SIZE(boot); b++) {
			if (strcmp(o->name, boot[b]))
				continue;
			errfmt(err, errlen,
			       "--%s: a restore boots nothing, its guest goes on where it was (leave --%s out)",
			       o->name, o->name);
			return -EINVAL;
		}
	}
	return 0;
}

/* -- CMD's machine shares the host's /: only this command line's -- (or --exec) gives it. The
 * file's record says which machine it is; an older lkvm's, its options. */
static int check_kind(const struct snap_reader *r, const struct units *s, const struct units *l,
		      char *err, size_t errlen)
{
	bool saved_cmd = s->cmd || !s->files;
	int ret = kvm_snapshot_host_root(r, &saved_cmd);

	if (ret < 0 && ret != -ENOENT) {
		errfmt(err, errlen, "the snapshot's VM section has a bad record of its kind");
		return -EINVAL;
	}
	if (saved_cmd && !l->cmd)
		errfmt(err, errlen,
		       "the snapshot's machine runs a command on the host's files (lkvm run -- CMD): give -- to share this host's / with it again");
	else if (!saved_cmd && l->cmd)
		errfmt(err, errlen,
		       "the snapshot's machine is not lkvm run -- CMD's: leave out -- and --exec");
	else
		return 0;
	return -EINVAL;
}

/* " (virtio-blk N, SIZE)": the saved disk's size from its device section, where it is. */
static void disk_desc(const struct snap_reader *r, int i, char *buf, size_t len)
{
	const void *sec;
	size_t slen;
	u64 size;

	if (kvm_snapshot_device(r, "virtio-blk", i, &sec, &slen) < 0 ||
	    virtio_blk_snap_size(sec, slen, &size) < 0)
		snprintf(buf, len, "virtio-blk %d", i);
	else if (size % (1024 * 1024) == 0)
		snprintf(buf, len, "virtio-blk %d, %llu MiB", i, (unsigned long long)(size >> 20));
	else
		snprintf(buf, len, "virtio-blk %d, %llu bytes", i, (unsigned long long)size);
}

/* Each NIC, disk and share of the saved machine given here, and no more. */
static int check_counts(const struct snap_reader *r, const struct units *s, const struct units *l,
			char *err, size_t errlen)
{
	char desc[64];

	if (s->nnic > UNITS_MAX || s->ndisk > UNITS_MAX || l->nnic > UNITS_MAX ||
	    l->ndisk > UNITS_MAX) {
		errfmt(err, errlen, "more than %d NICs or disks", UNITS_MAX);
		return -EINVAL;
	}
	if (l->nnic < s->nnic) {
		errfmt(err, errlen,
		       "the snapshot's machine has a NIC (virtio-net %d): give it with -n OPTS (mode=tap,tapif=NAME or mode=user)",
		       l->nnic);
		return -EINVAL;
	}
	if (l->ndisk < s->ndisk) {
		disk_desc(r, l->ndisk, desc, sizeof(desc));
		errfmt(err, errlen, "the snapshot's machine has a disk (%s): give it with -d IMG",
		       desc);
		return -EINVAL;
	}
	if (l->nshare < s->nshare) {
		errfmt(err, errlen,
		       "the snapshot's machine has a 9p share (virtio-9p %d): give it with --share DIR",
		       l->nshare);
		return -EINVAL;
	}
	if (l->nnic == s->nnic && l->ndisk == s->ndisk && l->nshare == s->nshare)
		return 0;
	errfmt(err, errlen,
	       "the snapshot's machine has %d NICs, %d disks and %d 9p shares, this command line gives %d, %d and %d (-n, -d, --share)",
	       s->nnic, s->ndisk, s->nshare, l->nnic, l->ndisk, l->nshare);
	return -EINVAL;
}

/* Key KEY of the saved device (its value saved) into extra when this command line left it out
 * (given false); given with another value (same false), refused. */
static int keep_key(const char *opt, const char *what, int i, const char *key, const char *saved,
		    bool given, bool same, char *extra, size_t len, char *err, size_t errlen)
{
	size_t n = strlen(extra);

	if (!given) {
		snprintf(extra + n, len - n, ",%s=%s", key, saved);
		return 0;
	}
	if (same)
		return 0;
	errfmt(err, errlen, "%s %s: the snapshot's %s %d has %s=%s (leave %s out, or give that)",
	       opt, key, what, i, key, saved, key);
	return -EINVAL;
}

/* This command line's -n value with the saved NIC's MAC, transport and queue pairs. */
static int nic_shape(const char *saved, const char *live, int i, char *extra, size_t len, char *err,
		     size_t errlen)
{
	struct net_opts s, l;
	char why[256], v[32];
	int ret = 0;

	if (net_parse_opts(saved, &s, why, sizeof(why)) < 0) {
		errfmt(err, errlen, "the snapshot's NIC %d: %s", i, why);
		return -EINVAL;
	}
	if (net_parse_opts(live, &l, err, errlen) < 0)
		return -EINVAL;
	snprintf(v, sizeof(v), "%02x:%02x:%02x:%02x:%02x:%02x", s.guest_mac[0], s.guest_mac[1],
		 s.guest_mac[2], s.guest_mac[3], s.guest_mac[4], s.guest_mac[5]);
	if (s.mac_set)
		ret = keep_key("-n", "NIC", i, "guest_mac", v, l.mac_set,
			       !memcmp(s.guest_mac, l.guest_mac, 6), extra, len, err, errlen);
	if (!ret && s.trans_set)
		ret = keep_key("-n", "NIC", i, "trans", virtio_trans_name(s.trans), l.trans_set,
			       s.trans == l.trans, extra, len, err, errlen);
	snprintf(v, sizeof(v), "%d", s.queue_pairs);
	if (!ret && s.queues_set)
		ret = keep_key("-n", "NIC", i, "queues", v, l.queues_set,
			       s.queue_pairs == l.queue_pairs, extra, len, err, errlen);
	return ret;
}

/* This command line's -d value with the saved disk's transport and read-only mode. */
static int disk_shape(const char *saved, const char *live, int i, char *extra, size_t len,
		      char *err, size_t errlen)
{
	struct blk_opts *s = calloc(2, sizeof(*s)), *l = s + 1; /* PATH_MAX each */
	char why[256];
	int ret = s ? 0 : -ENOMEM;

	if (!ret && blk_parse_opts(saved, s, why, sizeof(why)) < 0) {
		errfmt(err, errlen, "the snapshot's disk %d: %s", i, why);
		ret = -EINVAL;
	}
	if (!ret && blk_parse_opts(live, l, err, errlen) < 0)
		ret = -EINVAL;
	/* A disk saved read-only stays so: its guest was told (and the image is not written). */
	if (!ret && s->ro && !l->ro)
		snprintf(extra, len, ",ro");
	if (!ret && s->trans_set)
		ret = keep_key("-d", "disk", i, "trans", virtio_trans_name(s->trans), l->trans_set,
			       s->trans == l->trans, extra, len, err, errlen);
	free(s);
	return ret;
}

/* This command line's options from argv[1] to end into m, each -n and -d as "-n V"/"-d V" with
 * the saved shape added (its words kept in ra->made). */
static int live_options(int argc, char **argv, int end, const struct units *s,
			struct restore_args *ra, char **m, int *nm, char *err, size_t errlen)
{
	int n, nic = 0, disk = 0, ret = 0;

	for (int i = 1; !ret && i < end; i += n) {
		const struct opt *o = opt_argv_unit(&run_opt_set, argc, argv, i, &n);
		enum unit_kind k = o ? kind_of(o) : U_OTHER;
		const char *v = k == U_NIC || k == U_DISK ? unit_value(o, argv, i, n) : NULL;
		char extra[96] = "", *word;

		if (!v) {
			for (int w = 0; w < n; w++)
				m[(*nm)++] = argv[i + w];
			continue;
		}
		ret = k == U_NIC ? nic_shape(s->nic[nic], v, nic, extra, sizeof(extra), err, errlen)
				 : disk_shape(s->disk[disk], v, disk, extra, sizeof(extra), err,
					      errlen);
		nic += k == U_NIC;
		disk += k == U_DISK;
		if (ret == 0 && asprintf(&word, "%s%s", v, extra) < 0)
			ret = -ENOMEM;
		if (ret == 0) {
			ra->made[ra->nmade++] = word;
			m[(*nm)++] = k == U_NIC ? "-n" : "-d";
			m[(*nm)++] = word;
		}
	}
	return ret;
}

int run_restore_args(int argc, char **argv, struct restore_args *ra, char *err, size_t errlen)
{
	struct units s, l;
	int ret = kvm_snapshot_argv(ra->snap, &ra->saved, &ra->nsaved, err, errlen), send, end;
	char **m;

	if (ret < 0)
		return ret;
	/* The saved words are a run's argv without argv[0]: its options start at 0. */
	send = scan(ra->nsaved, ra->saved, 0, &s);
	end = scan(argc, argv, 1, &l);
	ret = check_no_boot(argc, argv, end, err, errlen);
	if (ret == 0)
		ret = check_kind(ra->snap, &s, &l, err, errlen);
	if (ret == 0)
		ret = check_counts(ra->snap, &s, &l, err, errlen);
	if (ret < 0)
		return ret;
	/* A unit of one word may become two ("-nV" is "-n" "V'"). */
	m = ra->argv = calloc((size_t)(2 * argc + send + 1), sizeof(char *));
	ra->made = calloc(2 * UNITS_MAX, sizeof(char *));
	if (!m || !ra->made)
		return -ENOMEM;
	m[ra->argc++] = argv[0];
	ra->argc += saved_options(send, ra->saved, argc, argv, m + ra->argc);
	ret = live_options(argc, argv, end, &s, ra, m, &ra->argc, err, errlen);
	for (int i = end; ret == 0 && i < argc; i++)
		m[ra->argc++] = argv[i];
	return ret;
}

void run_restore_free(struct restore_args *ra)
{
	kvm_snapshot_argv_free(ra->saved, ra->nsaved);
	for (int i = 0; i < ra->nmade; i++)
		free(ra->made[i]);
	free(ra->made);
	free(ra->argv);
	ra->saved = ra->argv = ra->made = NULL;
	ra->nsaved = ra->argc = ra->nmade = 0;
}

const char *run_restore_path(int argc, char **argv)
{
	int n;

	for (int i = 1; i < argc; i += n) {
		const struct opt *o = opt_argv_unit(&run_opt_set, argc, argv, i, &n);

		if (!o && (!strcmp(argv[i], "--") || argv[i][0] != '-'))
			break;
		if (o && !strcmp(o->name, "restore"))
			return n == 2		      ? argv[i + 1]
			       : strchr(argv[i], '=') ? strchr(argv[i], '=') + 1
						      : NULL;
	}
	return NULL;
}
