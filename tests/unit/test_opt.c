/* The option tables: every option of run, -n, -d and bench is in the help made from its table, and the engine's argv and KEY=VALUE parsing. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "lkvm/builtin.h"
#include "lkvm/net.h"
#include "lkvm/opt.h"
#include "lkvm/run.h"
#include "lkvm/virtio-blk.h"

static char *usage_text(void (*usage)(FILE *out))
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(f);
	usage(f);
	ck_assert_int_eq(fclose(f), 0);
	return buf;
}

/* Each option of s as the help shows it: "-k, --name" or "--name", or a key (" key=" or a
 * flag's " key ") on its line under the option it belongs to. */
static void check_lists(const char *help, const struct opt_set *s)
{
	char want[64];

	for (const struct opt *o = s->opts; o->kind != OPT_END; o++) {
		if (s->name)
			snprintf(want, sizeof(want), " %s%s", o->name,
				 o->kind == OPT_FLAG ? " " : "=");
		else if (o->short_name)
			snprintf(want, sizeof(want), "-%c, --%s", o->short_name, o->name);
		else
			snprintf(want, sizeof(want), "--%s", o->name);
		ck_assert_msg(strstr(help, want), "help lacks '%s'", want);
		ck_assert_msg(o->help && *o->help, "%s has no help line", o->name);
	}
}

START_TEST(help_lists_every_option)
{
	char *run = usage_text(kvm_run_usage), *bench = usage_text(bench_usage);

	check_lists(run, &run_opt_set);
	check_lists(run, &net_opt_set);
	check_lists(run, &blk_opt_set);
	check_lists(bench, &bench_opt_set);
	/* The sets of -n and -d are shown under their options. */
	ck_assert_ptr_nonnull(strstr(run, "--network OPTS"));
	ck_assert(strstr(run, "--network") < strstr(run, " tx_timer_us="));
	ck_assert(strstr(run, "--disk") < strstr(run, " aio="));
	free(run);
	free(bench);
}
END_TEST

struct t {
	bool flag, given;
	const char *str;
	int n;
	unsigned char pick;
};

static const struct opt_choice picks[] = { { "a", 1 }, { "b", 2 }, { "c", 3 }, { NULL, 0 } };
static const struct opt t_opts[] = {
	{ "flag", 'f', OPT_FLAG, OPT_AT(struct t, flag), .help = "a flag" },
	{ "str", 's', OPT_STR, OPT_AT(struct t, str), .bad = "not empty", .help = "a string" },
	{ "num", 0, OPT_UINT, OPT_AT(struct t, n), OPT_GIVEN(struct t, given), .min = 2, .max = 9,
	  .bad = "want from", .help = "a number" },
	{ "pick", 0, OPT_CHOICE, OPT_AT(struct t, pick), .choices = picks, .help = "a choice" },
	{ .kind = OPT_END },
};
static const struct opt_set t_argv = {
	.opts = t_opts,
	.prefix = "--",
	.verb = "give",
	.exact = true,
	.unknown = { "unknown '", "'" },
	.needs_value = { "", " needs a value" },
	.unexpected = { "extra '", "'" },
};
static const struct opt_set t_kv = { .opts = t_opts, .prefix = "-t ", .verb = "want", .name = "-t" };
static const struct opt_set t_lenient = {
	.opts = t_opts, .prefix = "-t ", .verb = "want", .name = "-t", .lenient = true
};

static int argv_parse(struct t *t, char *err, int argc, char **argv)
{
	memset(t, 0, sizeof(*t));
	err[0] = '\0';
	return opt_parse_argv(&t_argv, argc, argv, t, NULL, err, 128);
}

START_TEST(argv_kinds)
{
	char err[128], *ok[] = { "x", "-f", "--str=v", "--num", "7", "--pick", "b", NULL };
	char *bad_num[] = { "x", "--num", "10", NULL }, *bad_pick[] = { "x", "--pick=d", NULL };
	char *prefix[] = { "x", "--nu", "3", NULL }, *empty[] = { "x", "-s", "", NULL };
	char *missing[] = { "x", "--num", NULL }, *extra[] = { "x", "-f", "y", NULL };
	struct t t;

	ck_assert_int_eq(argv_parse(&t, err, 7, ok), 0);
	ck_assert(t.flag && t.given && t.n == 7 && t.pick == 2);
	ck_assert_str_eq(t.str, "v");
	ck_assert_int_eq(argv_parse(&t, err, 3, bad_num), -EINVAL);
	ck_assert_str_eq(err, "--num '10': want from 2 to 9");
	ck_assert_int_eq(argv_parse(&t, err, 2, bad_pick), -EINVAL);
	ck_assert_str_eq(err, "--pick 'd': give a, b or c");
	ck_assert_int_eq(argv_parse(&t, err, 3, prefix), -EINVAL); /* .exact */
	ck_assert_str_eq(err, "unknown '--nu'");
	ck_assert_int_eq(argv_parse(&t, err, 3, empty), -EINVAL);
	ck_assert_str_eq(err, "--str: not empty");
	ck_assert_int_eq(argv_parse(&t, err, 2, missing), -EINVAL);
	ck_assert_str_eq(err, "--num needs a value");
	ck_assert_int_eq(argv_parse(&t, err, 3, extra), -EINVAL);
	ck_assert_str_eq(err, "extra 'y'");
}
END_TEST

START_TEST(kv_strict_and_lenient)
{
	char err[128];
	unsigned seen;
	struct t t = { 0 };

	ck_assert_int_eq(opt_parse_kv(&t_kv, "num=3,pick=c", "w", &t, &seen, err, sizeof(err)), 0);
	ck_assert(t.n == 3 && t.pick == 3 && t.given && seen == (1u << 2 | 1u << 3));
	ck_assert_int_eq(opt_parse_kv(&t_kv, "num=3,num=4", "w", &t, NULL, err, sizeof(err)),
			 -EINVAL);
	ck_assert_str_eq(err, "-t: duplicate key 'num'");
	ck_assert_int_eq(opt_parse_kv(&t_kv, "num=3,,pick=a", "w", &t, NULL, err, sizeof(err)),
			 -EINVAL);
	ck_assert_str_eq(err, "-t: empty item in 'w' (stray comma?)");
	ck_assert_int_eq(opt_parse_kv(&t_kv, "pick", "w", &t, NULL, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "-t: 'pick' is not key=value");
	ck_assert_int_eq(opt_parse_kv(&t_kv, "pick=", "w", &t, NULL, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "-t: empty value for 'pick'");
	ck_assert_int_eq(opt_parse_kv(&t_kv, "size=1", "w", &t, NULL, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "-t: unknown key 'size'");
	/* Lenient: flags alone, empty items and repeats taken, anything refused is unknown. */
	memset(&t, 0, sizeof(t));
	ck_assert_int_eq(
		opt_parse_kv(&t_lenient, ",flag,,num=2,num=5", "w", &t, NULL, err, sizeof(err)), 0);
	ck_assert(t.flag && t.n == 5);
	ck_assert_int_eq(opt_parse_kv(&t_lenient, "flag,num=1", "img,flag,num=1", &t, NULL, err,
				      sizeof(err)),
			 -EINVAL);
	ck_assert_str_eq(
		err,
		"-t 'img,flag,num=1': unknown option 'num=1' (want flag, str=, num=N, pick=a|b|c)");
}
END_TEST

START_TEST(uint_digits_only)
{
	unsigned long long v;

	ck_assert_int_eq(opt_uint("42", 1, 100, &v), 0);
	ck_assert_uint_eq(v, 42);
	ck_assert_int_eq(opt_uint("+4", 1, 100, &v), -EINVAL);
	ck_assert_int_eq(opt_uint(" 4", 1, 100, &v), -EINVAL);
	ck_assert_int_eq(opt_uint("4x", 1, 100, &v), -EINVAL);
	ck_assert_int_eq(opt_uint("101", 1, 100, &v), -EINVAL);
	ck_assert_int_eq(opt_uint("99999999999999999999999", 1, ~0ULL, &v), -EINVAL);
}
END_TEST

static Suite *opt_suite(void)
{
	Suite *s = suite_create("opt");
	TCase *tc = tcase_create("opt");

	tcase_add_test(tc, help_lists_every_option);
	tcase_add_test(tc, argv_kinds);
	tcase_add_test(tc, kv_strict_and_lenient);
	tcase_add_test(tc, uint_digits_only);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(opt_suite)
