/* Replays every fuzz regression input (tests/fuzz/regress/TARGET/) and seed (tests/fuzz/corpus/TARGET/) through the fuzz entry points. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "fuzz.h"
#include "lkvm/util.h"

static const struct {
	const char *name;
	int (*fn)(const uint8_t *data, size_t size);
} targets[] = {
	{ "virtqueue", fuzz_virtqueue }, { "pci", fuzz_pci }, { "net", fuzz_net },
	{ "boot", fuzz_boot },           { "opts", fuzz_opts },	      { "p9", fuzz_p9 },
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

START_TEST(replay_regressions)
{
	char dir[256];
	int total = 0;

	for (size_t i = 0; i < ARRAY_SIZE(targets); i++) {
		snprintf(dir, sizeof(dir), "tests/fuzz/regress/%s", targets[i].name);
		total += MAX(replay_dir(dir, targets[i].fn), 0);
	}
	fprintf(stderr, "fuzz regression inputs replayed: %d\n", total);
}
END_TEST

/* The seeds as well: each target must take its own corpus (and every corpus exists). */
START_TEST(replay_corpus)
{
	char dir[256];

	for (size_t i = 0; i < ARRAY_SIZE(targets); i++) {
		snprintf(dir, sizeof(dir), "tests/fuzz/corpus/%s", targets[i].name);
		ck_assert_msg(replay_dir(dir, targets[i].fn) > 0, "%s: no seed corpus", dir);
	}
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
