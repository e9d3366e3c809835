/* lkvm run --restore's options: the snapshot's saved ones for the machine's shape, this command line's for the process and every host resource. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "lkvm/run.h"
#include "lkvm/snap.h"

#define VM_REC_ARGV 64 /* vm-snap.c's */
#define VM_REC_HOST_ROOT 65

static char path[] = "/tmp/lkvm-test-restore-XXXXXX";

static int host_root_rec = -1; /* the next snapshot_with's VM_REC_HOST_ROOT, -1: none */

/* A snapshot whose VM section holds the saved run's options (words, NUL-separated). */
static struct snap_reader *snapshot_with(const char *words, size_t len)
{
	struct snap_machine m = { .nr_vcpus = 1, .ram_bytes = SNAP_PAGE_SIZE };
	struct snap_rec_buf b = { 0 };
	struct snap_writer *w;
	struct snap_reader *r;
	char err[256];
	int fd = mkstemp(path);

	ck_assert_int_ge(fd, 0);
	close(fd);
	if (words)
		snap_rec_put(&b, VM_REC_ARGV, words, len);
	if (host_root_rec >= 0) {
		u8 v = (u8)host_root_rec;

		snap_rec_put(&b, VM_REC_HOST_ROOT, &v, 1);
	}
	snap_rec_put(&b, 1, "x", 1);
	ck_assert_int_eq(snap_writer_open(&w, path, &m, err, sizeof(err)), 0);
	ck_assert_int_eq(snap_add(w, SNAP_SEC_VM, 0, b.buf, b.len), 0);
	ck_assert_int_eq(snap_writer_finish(w, err, sizeof(err)), 0);
	snap_rec_free(&b);
	ck_assert_int_eq(snap_open(&r, path, 0, err, sizeof(err)), 0);
	unlink(path);
	memcpy(path + strlen(path) - 6, "XXXXXX", 6);
	return r;
}

/* run_restore_args on saved words and argv: 0 and the merged words joined by spaces in out, or
 * the error and its line in out. */
static int merge(const char *saved, size_t slen, int argc, char **argv, char *out, size_t len)
{
	struct restore_args ra = { .snap = snapshot_with(saved, slen) };
	char err[256] = "";
	int ret = run_restore_args(argc, argv, &ra, err, sizeof(err));

	out[0] = '\0';
	if (ret < 0)
		snprintf(out, len, "%s", err);
	for (int i = 0; ret == 0 && i < ra.argc; i++) {
		strncat(out, i ? " " : "", len - strlen(out) - 1);
		strncat(out, ra.argv[i], len - strlen(out) - 1);
	}
	if (ret == 0)
		ck_assert_ptr_null(ra.argv[ra.argc]);
	run_restore_free(&ra);
	snap_close(ra.snap);
	return ret;
}

static char *merged(const char *saved, size_t slen, int argc, char **argv)
{
	char *out = calloc(1, 4096);

	ck_assert_int_eq(merge(saved, slen, argc, argv, out, 4096), 0);
	return out;
}

/* The one-line refusal of a merge. */
static char *refused(const char *saved, size_t slen, int argc, char **argv)
{
	char *out = calloc(1, 4096);

	ck_assert_int_eq(merge(saved, slen, argc, argv, out, 4096), -EINVAL);
	ck_assert_ptr_null(strchr(out, '\n'));
	return out;
}

#define SAVED(lit) lit, sizeof(lit) - 1

START_TEST(machine_saved_process_new)
{
	char *argv[] = { "run", "--restore", "F", "--name", "new", "-n", "mode=tap,tapif=t9" };
	char *m = merged(SAVED("-k\0g.elf\0-m\0"
			       "64\0--name\0old\0-n\0mode=tap,tapif=t0\0--timeout\0"
			       "5\0"
			       "-p\0tick_ms=1\0--stats=json\0-c\0"
			       "2\0"),
			 7, argv);

	/* -m, -p, -c are the machine's; --name, --timeout, --stats the old process's; -k and the
	 * NIC's tap the saver's host's: the NIC is this command line's. */
	ck_assert_str_eq(m,
			 "run -m 64 -p tick_ms=1 -c 2 --restore F --name new -n mode=tap,tapif=t9");
	free(m);
}
END_TEST

START_TEST(spellings)
{
	char *argv[] = { "run",	  "--restore=F", "--mem=128",	"-nmode=tap",
			 "--net", "user",	 "--disk=a.img" };
	char *m =
		merged(SAVED("--kernel=g.elf\0--mem=64\0--name=old\0-kg2.elf\0--gdb\0:1\0--"
			     "rng\0--network=mode=user\0-nguest_mac=52:54:00:00:00:07\0-db.img\0"),
		       7, argv);

	/* --opt=V, -kV and --gdb's value word are each one option; a later -m wins over the saved
	 * one; each NIC and disk is this command line's as "-n V" / "-d V", the second NIC with
	 * the saved one's MAC. */
	ck_assert_str_eq(m, "run --rng --restore=F --mem=128 -n mode=tap -n "
			    "mode=user,guest_mac=52:54:00:00:00:07 -d a.img");
	free(m);
}
END_TEST

/* A snapshot's host resources are never used: its tap, script, socket, disk path, share and
 * modules; the NIC's MAC, transport and queue pairs and the disk's read-only mode are. */
START_TEST(host_never_saved)
{
	char *argv[] = { "run", "--restore", "F",	"-n", "mode=tap,tapif=mine,script=none",
			 "-d",	"my.img",    "--share", "." };
	char *m = merged(
		SAVED("-k\0/saver/vmlinux\0-n\0mode=tap,tapif=theirs,script=/tmp/X/evil.sh,"
		      "guest_mac=52:54:00:aa:bb:cc,queues=2,trans=mmio,host_ip=10.9.9.1\0-"
		      "d\0/etc/shadow,ro,trans=mmio\0--share\0/srv\0--modules\0/m\0-i\0/i\0"),
		9, argv);

	ck_assert_str_eq(m,
			 "run --restore F -n "
			 "mode=tap,tapif=mine,script=none,guest_mac=52:54:00:aa:bb:cc,trans=mmio,"
			 "queues=2 -d my.img,ro,trans=mmio --share .");
	free(m);
	/* A socket= of mode=user, a NIC given its own tap: nothing of the saved one's backend. */
	char *argv2[] = { "run", "--restore", "F", "-n", "mode=tap" };
	m = merged(SAVED("-k\0k\0-n\0mode=user,socket=/run/their.sock\0"), 5, argv2);
	ck_assert_str_eq(m, "run --restore F -n mode=tap");
	free(m);
}
END_TEST

/* Each resource the machine has and the command line does not give: one line naming the option. */
START_TEST(missing_resources)
{
	char *none[] = { "run", "--restore", "F" };
	char *nic[] = { "run", "--restore", "F", "-n", "mode=tap" };
	char *two[] = { "run", "--restore", "F", "-d", "a", "-d", "b" };
	char *e;

	e = refused(SAVED("-k\0k\0-n\0mode=tap,tapif=t0,script=/tmp/X/evil.sh\0"), 3, none);
	ck_assert_str_eq(e, "the snapshot's machine has a NIC (virtio-net 0): give it with -n OPTS "
			    "(mode=tap,tapif=NAME or mode=user)");
	free(e);
	e = refused(SAVED("-k\0k\0-d\0/etc/shadow\0"), 3, none);
	ck_assert_str_eq(e,
			 "the snapshot's machine has a disk (virtio-blk 0): give it with -d IMG");
	free(e);
	e = refused(SAVED("-k\0k\0--share\0/\0"), 3, none);
	ck_assert_str_eq(e, "the snapshot's machine has a 9p share (virtio-9p 0): give it with "
			    "--share DIR");
	free(e);
	e = refused(SAVED("-k\0k\0"), 5, nic);
	ck_assert_str_eq(e, "the snapshot's machine has 0 NICs, 0 disks and 0 9p shares, this "
			    "command line gives 1, 0 and 0 (-n, -d, --share)");
	free(e);
	e = refused(SAVED("-k\0k\0-d\0x\0"), 7, two);
	ck_assert_str_eq(e, "the snapshot's machine has 0 NICs, 1 disks and 0 9p shares, this "
			    "command line gives 0, 2 and 0 (-n, -d, --share)");
	free(e);
}
END_TEST

/* The shape given on the command line too must be the saved one. */
START_TEST(shape_conflicts)
{
	char *mac[] = { "run", "--restore", "F", "-n", "mode=tap,guest_mac=52:54:00:00:00:01" };
	char *q[] = { "run", "--restore", "F", "-n", "mode=tap,queues=1" };
	char *tr[] = { "run", "--restore", "F", "-d", "a,trans=pci" };
	char *e;

	e = refused(SAVED("-k\0k\0-n\0guest_mac=52:54:00:00:00:02\0"), 5, mac);
	ck_assert_str_eq(e, "-n guest_mac: the snapshot's NIC 0 has guest_mac=52:54:00:00:00:02 "
			    "(leave guest_mac out, or give that)");
	free(e);
	e = refused(SAVED("-k\0k\0-n\0queues=2\0"), 5, q);
	ck_assert_str_eq(e, "-n queues: the snapshot's NIC 0 has queues=2 (leave queues out, or "
			    "give that)");
	free(e);
	e = refused(SAVED("-k\0k\0-d\0x,trans=mmio\0"), 5, tr);
	ck_assert_str_eq(e, "-d trans: the snapshot's disk 0 has trans=mmio (leave trans out, or "
			    "give that)");
	free(e);
	e = refused(SAVED("-k\0k\0-n\0guest_mac=zz\0"), 5, q);
	ck_assert_str_eq(e, "the snapshot's NIC 0: -n guest_mac 'zz': want six hex pairs like "
			    "52:54:00:12:34:56");
	free(e);
}
END_TEST

/* -- CMD's machine shares the host's /: only a -- here gives it; the saved command's words are
 * never taken. */
START_TEST(command_words)
{
	char *keep[] = { "run", "--restore", "F" };
	char *mine[] = { "run", "--restore", "F", "--", "ls", "-l" };
	char *bare[] = { "run", "--restore", "F", "--" };
	char *e;
	char *m = merged(SAVED("-m\0"
			       "64\0--\0echo\0--name\0"),
			 6, mine);

	ck_assert_str_eq(m, "run -m 64 --restore F -- ls -l");
	free(m);
	m = merged(SAVED("-m\0"
			 "64\0--exec\0rm -rf ~\0"),
		   4, bare);
	ck_assert_str_eq(m, "run -m 64 --restore F --");
	free(m);
	e = refused(SAVED("-m\0"
			  "64\0--\0echo\0hi\0"),
		    3, keep);
	ck_assert_str_eq(e, "the snapshot's machine runs a command on the host's files (lkvm run "
			    "-- CMD): give -- to share this host's / with it again");
	free(e);
	/* lkvm run alone is -- CMD's machine too. */
	free(refused(SAVED("-m\0"
			   "64\0"),
		     3, keep));
	e = refused(SAVED("-k\0k\0"), 4, bare);
	ck_assert_str_eq(
		e, "the snapshot's machine is not lkvm run -- CMD's: leave out -- and --exec");
	free(e);
}
END_TEST

/* What sets up a boot is refused at a restore, not ignored (issue 40, finding 9). */
START_TEST(boot_options_refused)
{
	char *k[] = { "run", "--restore", "F", "-k", "vmlinux" };
	char *p[] = { "run", "--restore", "F", "-pquiet" };
	char *mod[] = { "run", "--restore", "F", "--modules=/m", "--" };
	char *e;

	e = refused(SAVED("-k\0k\0"), 5, k);
	ck_assert_str_eq(e, "--kernel: a restore boots nothing, its guest goes on where it was "
			    "(leave --kernel out)");
	free(e);
	e = refused(SAVED("-k\0k\0"), 4, p);
	ck_assert_str_eq(e, "--params: a restore boots nothing, its guest goes on where it was "
			    "(leave --params out)");
	free(e);
	free(refused(SAVED("--\0sh\0"), 5, mod));
}
END_TEST

/* The file's mark of a -- CMD machine decides, not its options (a restored VM saved again was
 * given no -k); an older file without it: its options. */
START_TEST(machine_kind_record)
{
	char *plain[] = { "run", "--restore", "F" };
	char *cmd[] = { "run", "--restore", "F", "--" };
	char *m;

	host_root_rec = 0;
	m = merged(SAVED("-m\0"
			 "64\0--restore\0G\0"),
		   3, plain);
	ck_assert_str_eq(m, "run -m 64 --restore F");
	free(m);
	host_root_rec = 1;
	free(refused(SAVED("-k\0k\0"), 3, plain));
	m = merged(SAVED("-k\0k\0"), 4, cmd);
	ck_assert_str_eq(m, "run --restore F --");
	free(m);
	host_root_rec = 2;
	m = refused(SAVED("-k\0k\0"), 3, plain);
	ck_assert_str_eq(m, "the snapshot's VM section has a bad record of its kind");
	free(m);
	host_root_rec = -1;
}
END_TEST

START_TEST(restore_path)
{
	char *a[] = { "run", "-m", "64", "--restore", "F" };
	char *b[] = { "run", "--restore=G", "-k", "x" };
	char *c[] = { "run", "-k", "x", "--", "--restore", "H" };
	char *d[] = { "run", "-p", "--restore", "-k", "x" };

	ck_assert_str_eq(run_restore_path(5, a), "F");
	ck_assert_str_eq(run_restore_path(4, b), "G");
	ck_assert_ptr_null(run_restore_path(6, c)); /* the command's own word */
	ck_assert_ptr_null(run_restore_path(5, d)); /* -p's value */
}
END_TEST

START_TEST(bad_records)
{
	char *argv[] = { "run", "--restore", "F" };
	const struct {
		const char *w;
		size_t len;
	} bad[] = { { NULL, 0 },
		    { "", 0 },
		    { "-m\0"
		      "64",
		      5 } };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *e = refused(bad[i].w, bad[i].len, 3, argv);

		ck_assert_str_eq(
			e, "the snapshot's VM section has no valid record of the run's options");
		free(e);
	}
}
END_TEST

static Suite *restore_suite(void)
{
	Suite *s = suite_create("run-restore");
	TCase *tc = tcase_create("argv");

	tcase_add_test(tc, machine_saved_process_new);
	tcase_add_test(tc, spellings);
	tcase_add_test(tc, host_never_saved);
	tcase_add_test(tc, missing_resources);
	tcase_add_test(tc, shape_conflicts);
	tcase_add_test(tc, boot_options_refused);
	tcase_add_test(tc, machine_kind_record);
	tcase_add_test(tc, command_words);
	tcase_add_test(tc, restore_path);
	tcase_add_test(tc, bad_records);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(restore_suite)
