/* lkvm run --restore's options: the snapshot's saved ones for the machine, this command line's for the process and for whatever it gives again. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "lkvm/run.h"
#include "lkvm/snap.h"
#include "lkvm/vm-snap.h"

#define VM_REC_ARGV 64 /* vm-snap.c's */

static char path[] = "/tmp/lkvm-test-restore-XXXXXX";

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

/* The merged words joined by spaces. */
static char *merged(const char *saved, size_t slen, int argc, char **argv)
{
	struct snap_reader *r = snapshot_with(saved, slen);
	char **m, **s, err[256] = "", *out = calloc(1, 4096);
	int mc, sc;

	ck_assert_int_eq(run_restore_args(argc, argv, r, &m, &mc, &s, &sc, err, sizeof(err)), 0);
	for (int i = 0; i < mc; i++) {
		strcat(out, i ? " " : "");
		strcat(out, m[i]);
	}
	ck_assert_ptr_null(m[mc]);
	free(m);
	kvm_snapshot_argv_free(s, sc);
	snap_close(r);
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

	/* -k, -m, -p, -c are the machine's; --name, --timeout, --stats the old process's; the NIC
	 * given again replaces the saved one. */
	ck_assert_str_eq(
		m,
		"run -k g.elf -m 64 -p tick_ms=1 -c 2 --restore F --name new -n mode=tap,tapif=t9");
	free(m);
}
END_TEST

START_TEST(spellings)
{
	char *argv[] = { "run", "--restore=F", "--mem=128" };
	char *m =
		merged(SAVED("--kernel=g.elf\0--mem=64\0--name=old\0-kg2.elf\0--gdb\0:1\0--rng\0"),
		       3, argv);

	/* --opt=V, -kV and --gdb's value word are each one option; a later -m wins over the saved one. */
	ck_assert_str_eq(m, "run --kernel=g.elf -kg2.elf --rng --restore=F --mem=128");
	free(m);
}
END_TEST

START_TEST(command_words)
{
	char *keep[] = { "run", "--restore", "F" };
	char *mine[] = { "run", "--restore", "F", "--", "ls", "-l" };
	char *m = merged(SAVED("-m\0"
			       "64\0--\0echo\0--name\0"),
			 3, keep);

	/* After "--" nothing is an option: the saved command's words are kept whole. */
	ck_assert_str_eq(m, "run -m 64 --restore F -- echo --name");
	free(m);
	m = merged(SAVED("-m\0"
			 "64\0--\0echo\0hi\0"),
		   6, mine);
	ck_assert_str_eq(m, "run -m 64 --restore F -- ls -l");
	free(m);
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
	struct snap_reader *r;
	char **m, **s, err[256];
	int mc, sc;
	const struct {
		const char *w;
		size_t len;
	} bad[] = { { NULL, 0 },
		    { "", 0 },
		    { "-m\0"
		      "64",
		      5 } };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		r = snapshot_with(bad[i].w, bad[i].len);
		err[0] = 0;
		ck_assert_int_eq(run_restore_args(3, argv, r, &m, &mc, &s, &sc, err, sizeof(err)),
				 -EINVAL);
		ck_assert_str_eq(
			err, "the snapshot's VM section has no valid record of the run's options");
		snap_close(r);
	}
}
END_TEST

static Suite *restore_suite(void)
{
	Suite *s = suite_create("run-restore");
	TCase *tc = tcase_create("argv");

	tcase_add_test(tc, machine_saved_process_new);
	tcase_add_test(tc, spellings);
	tcase_add_test(tc, command_words);
	tcase_add_test(tc, restore_path);
	tcase_add_test(tc, bad_records);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(restore_suite)
