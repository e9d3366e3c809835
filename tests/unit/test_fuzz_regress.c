/* Replays every fuzz regression input (tests/fuzz/regress/TARGET/) and seed (tests/fuzz/corpus/TARGET/) through the fuzz entry points. */
#include <dirent.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "fuzz.h"
#include "lkvm/util.h"

static const struct {
	const char *name;
	int (*fn)(const uint8_t *data, size_t size);
} targets[] = {
	{ "virtqueue", fuzz_virtqueue },
	{ "pci", fuzz_pci },
	{ "net", fuzz_net },
	{ "boot", fuzz_boot },
	{ "opts", fuzz_opts },
	{ "p9", fuzz_p9 },
	{ "stream", fuzz_stream },
	{ "bench", fuzz_bench },
	{ "snap", fuzz_snap },
	{ "gdb", fuzz_gdb },
	{ "dhcp", fuzz_dhcp },
	{ "vcon", fuzz_vcon },
	{ "fuse", fuzz_fuse },
	{ "qcow2", fuzz_qcow2 },
	{ "failon", fuzz_failon },
};

/* Feed every regular file in dir to fn; returns how many (-1 when dir is missing). */
static int replay_dir(const char *dir, int (*fn)(const uint8_t *, size_t))
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		char path[512];
		u8 *data;
		size_t len;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		ck_assert_msg(read_file(path, &data, &len) == 0, "cannot read %s", path);
		/* A crash here: replay the directory with build/fuzz/fuzz-TARGET DIR to find the file. */
		ck_assert_int_eq(fn(data, len), 0);
		free(data);
		n++;
	}
	closedir(d);
	return n;
}

/* How many files PATTERN matches, counted by glob(3) apart from the replay (which walks each
 * target's folder with readdir): a folder no target replays, or a file the replay passed
 * over, makes the two differ. */
static size_t count_files(const char *pattern)
{
	glob_t g;
	size_t n;
	int r = glob(pattern, 0, NULL, &g);

	if (r == GLOB_NOMATCH)
		return 0;
	ck_assert_msg(r == 0, "glob %s failed (%d)", pattern, r);
	n = g.gl_pathc;
	globfree(&g);
	return n;
}

/* Every regression input: a target without a folder has had no crash kept yet. */
START_TEST(replay_regressions)
{
	char dir[256];
	size_t total = 0, files;

	/* Its README proves the tests run from the checkout's root (else 0 of 0 would pass). */
	ck_assert_msg(access("tests/fuzz/regress/README", R_OK) == 0,
		      "no tests/fuzz/regress/README here");
	for (size_t i = 0; i < ARRAY_SIZE(targets); i++) {
		snprintf(dir, sizeof(dir), "tests/fuzz/regress/%s", targets[i].name);
		total += MAX(replay_dir(dir, targets[i].fn), 0);
	}
	files = count_files("tests/fuzz/regress/*/*");
	printf("fuzz_regress: replayed %zu regression inputs of %zu\n", total, files);
	ck_assert_msg(total == files,
		      "replayed %zu regression inputs, tests/fuzz/regress/*/ holds %zu", total,
		      files);
}
END_TEST

/* The seeds as well: each target must take its own corpus, and every corpus has seeds. */
START_TEST(replay_corpus)
{
	char dir[256];
	size_t total = 0, files;

	for (size_t i = 0; i < ARRAY_SIZE(targets); i++) {
		int n;

		snprintf(dir, sizeof(dir), "tests/fuzz/corpus/%s", targets[i].name);
		n = replay_dir(dir, targets[i].fn);
		ck_assert_msg(n > 0, "%s: no seed corpus (%s)", dir, n < 0 ? "missing" : "empty");
		total += n;
	}
	files = count_files("tests/fuzz/corpus/*/*");
	printf("fuzz_regress: replayed %zu seeds of %zu\n", total, files);
	ck_assert_msg(total == files, "replayed %zu seeds, tests/fuzz/corpus/*/ holds %zu", total,
		      files);
}
END_TEST

static Suite *fuzz_regress_suite(void)
{
	Suite *s = suite_create("fuzz_regress");
	TCase *tc = tcase_create("replay");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, replay_regressions);
	tcase_add_test(tc, replay_corpus);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(fuzz_regress_suite)
