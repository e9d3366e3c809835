/* Unit tests of the guest init's configuration codec: round trips, and malformed files refused. */
#include <errno.h>
#include <string.h>

#include "check_main.h"
#include "lkvm/initcfg.h"
#include "lkvm/util.h"

static char *argv_full[] = { "sh", "-c", "echo hi; exit 7", "", NULL };
static char *envp_full[] = { "HOME=/root", "PATH=/usr/bin:/bin", "EMPTY=", "EQ==x", NULL };

static struct initcfg full_cfg(void)
{
	struct initcfg c = {
		.argv = argv_full,
		.argc = 4,
		.envp = envp_full,
		.envc = 4,
		.cwd = "/home/u/linux",
		.root = INITCFG_ROOT_9P_OVERLAY,
		.root_tag = "/dev/root",
		.nr_shares = 2,
		.nr_modules = 2,
		.stdio_dev = "/dev/hvc0",
		.stderr_dev = "/dev/hvc1",
		.stdout_port = INITCFG_STDOUT_PORT,
		.tty = INITCFG_RAW,
		.rows = 50,
		.cols = 132,
		.exit_port = 0x508,
		.msize = 262144,
		.user = true,
		.uid = 1000,
		.gid = 100,
		.nr_groups = 2,
	};

	c.shares[0] = (struct initcfg_share){ .tag = "data", .path = "/data", .fs_tag = "fs-data" };
	c.shares[1] = (struct initcfg_share){ .tag = "ref", .path = "/srv/ref dir", .ro = true };
	c.root_fs_tag = "lkvm-fs-root";
	c.root_fs_only = true;
	c.debug = true;
	c.modules[0] = "/lkvm/modules/00-virtio_pci.ko";
	c.modules[1] = "/lkvm/modules/01-9p.ko.xz";
	c.groups[0] = 27;
	c.groups[1] = 4294967294u; /* the largest id */
	c.nics[0] =
		(struct initcfg_nic){ { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 }, INITCFG_NIC_DHCP };
	c.nics[1] = (struct initcfg_nic){ { 0x02, 0xab, 0xcd, 0xef, 0x00, 0xff }, INITCFG_NIC_UP };
	c.nr_nics = 2;
	return c;
}

static void encode(const struct initcfg *c, char **buf, size_t *len)
{
	ck_assert_int_eq(initcfg_encode(c, buf, len), 0);
	ck_assert_uint_le(*len, INITCFG_MAX_SIZE);
}

static void assert_same(const struct initcfg *a, const struct initcfg *b)
{
	ck_assert_uint_eq(a->argc, b->argc);
	for (size_t i = 0; i < a->argc; i++)
		ck_assert_str_eq(a->argv[i], b->argv[i]);
	ck_assert_ptr_null(b->argv[b->argc]);
	ck_assert_uint_eq(a->envc, b->envc);
	for (size_t i = 0; i < a->envc; i++)
		ck_assert_str_eq(a->envp[i], b->envp[i]);
	ck_assert_ptr_null(b->envp[b->envc]);
	if (a->cwd)
		ck_assert_str_eq(a->cwd, b->cwd);
	else
		ck_assert_ptr_null(b->cwd);
	ck_assert_int_eq(a->root, b->root);
	ck_assert_str_eq(a->root_tag ? a->root_tag : "", b->root_tag);
	ck_assert_uint_eq(a->nr_shares, b->nr_shares);
	for (size_t i = 0; i < a->nr_shares; i++) {
		ck_assert_str_eq(a->shares[i].tag, b->shares[i].tag);
		ck_assert_str_eq(a->shares[i].path, b->shares[i].path);
		ck_assert_int_eq(a->shares[i].ro, b->shares[i].ro);
		ck_assert_str_eq(a->shares[i].fs_tag ? a->shares[i].fs_tag : "",
				 b->shares[i].fs_tag ? b->shares[i].fs_tag : "");
		ck_assert_int_eq(a->shares[i].fs_only, b->shares[i].fs_only);
	}
	ck_assert_str_eq(a->root_fs_tag ? a->root_fs_tag : "",
			 b->root_fs_tag ? b->root_fs_tag : "");
	ck_assert_int_eq(a->root_fs_only, b->root_fs_only);
	ck_assert_int_eq(a->debug, b->debug);
	ck_assert_uint_eq(a->nr_modules, b->nr_modules);
	for (size_t i = 0; i < a->nr_modules; i++)
		ck_assert_str_eq(a->modules[i], b->modules[i]);
	ck_assert_int_eq(a->tty, b->tty);
	ck_assert_uint_eq(a->rows, b->rows);
	ck_assert_uint_eq(a->cols, b->cols);
	ck_assert_uint_eq(a->exit_port, b->exit_port);
	ck_assert_uint_eq(a->msize, b->msize);
	ck_assert_int_eq(a->user, b->user);
	ck_assert_uint_eq(a->uid, b->uid);
	ck_assert_uint_eq(a->gid, b->gid);
	ck_assert_uint_eq(a->nr_groups, b->nr_groups);
	for (size_t i = 0; i < a->nr_groups; i++)
		ck_assert_uint_eq(a->groups[i], b->groups[i]);
	ck_assert_uint_eq(a->nr_nics, b->nr_nics);
	for (size_t i = 0; i < a->nr_nics; i++) {
		ck_assert_mem_eq(a->nics[i].mac, b->nics[i].mac, 6);
		ck_assert_int_eq(a->nics[i].how, b->nics[i].how);
	}
}

START_TEST(test_round_trip_full)
{
	struct initcfg in = full_cfg(), out;
	size_t len;
	char *buf;

	encode(&in, &buf, &len);
	ck_assert_int_eq(initcfg_decode(buf, len, &out), 0);
	assert_same(&in, &out);
	ck_assert_str_eq(out.stdio_dev, "/dev/hvc0");
	ck_assert_str_eq(out.stderr_dev, "/dev/hvc1");
	ck_assert_str_eq(out.stdout_port, "lkvm.stdout");
	ck_assert_ptr_null(out.stderr_port);
	initcfg_free(&out);
	free(buf);
}
END_TEST

/* The smallest file: no CMD (the shell), no environment, defaults for the rest. */
START_TEST(test_round_trip_minimal)
{
	struct initcfg in = { .root = INITCFG_ROOT_INITRAMFS }, out;
	/* the literal's own NUL is the empty tag's */
	static const char want[] = "lkvm-initcfg\0"
				   "3\0"
				   "34\0"
				   "root\0initramfs\0";
	size_t len;
	char *buf;

	encode(&in, &buf, &len);
	ck_assert_uint_eq(len, sizeof(want));
	ck_assert_mem_eq(buf, want, len);
	ck_assert_int_eq(initcfg_decode(buf, len, &out), 0);
	ck_assert_uint_eq(out.argc, 0);
	ck_assert_ptr_null(out.argv[0]);
	ck_assert_ptr_null(out.envp[0]);
	ck_assert_ptr_null(out.cwd);
	ck_assert_ptr_null(out.stdio_dev);
	ck_assert_ptr_null(out.stdout_port);
	ck_assert_ptr_null(out.stderr_port);
	ck_assert_int_eq(out.tty, INITCFG_TTY);
	ck_assert_uint_eq(out.exit_port, 0);
	ck_assert(!out.user);
	ck_assert_uint_eq(out.nr_groups, 0);
	initcfg_free(&out);
	free(buf);
}
END_TEST

/* The length field counts its own digits: files around 10, 100, 1000... bytes. */
START_TEST(test_length_digit_boundaries)
{
	char arg[1100];
	char *argv[] = { arg, NULL };

	for (size_t n = 0; n < sizeof(arg) - 1; n++) {
		struct initcfg in = { .argv = argv, .argc = 1 }, out;
		size_t len;
		char *buf;

		memset(arg, 'a', n);
		arg[n] = '\0';
		encode(&in, &buf, &len);
		ck_assert_int_eq(initcfg_decode(buf, len, &out), 0);
		ck_assert_str_eq(out.argv[0], arg);
		initcfg_free(&out);
		free(buf);
	}
}
END_TEST

/* Every strict prefix of a valid file, and the file with a byte more, are refused. */
START_TEST(test_truncated_and_padded)
{
	struct initcfg in = full_cfg(), out;
	size_t len;
	char *buf, *big;

	encode(&in, &buf, &len);
	for (size_t n = 0; n < len; n++)
		ck_assert_msg(initcfg_decode(buf, n, &out) == -EINVAL,
			      "prefix of %zu bytes accepted", n);
	big = malloc(len + 1);
	memcpy(big, buf, len);
	big[len] = '\0';
	ck_assert_int_eq(initcfg_decode(big, len + 1, &out), -EINVAL);
	free(big);
	free(buf);
}
END_TEST

START_TEST(test_oversized)
{
	size_t len = INITCFG_MAX_SIZE + 1;
	char *buf = calloc(1, len);
	char *argv[] = { NULL, NULL };
	struct initcfg in = { .argv = argv, .argc = 1 }, out;
	char *enc;
	size_t elen;

	ck_assert_int_eq(initcfg_decode(buf, len, &out), -EINVAL);
	/* One string over the limit is refused by the encoder, and by the decoder if forged. */
	memset(buf, 'x', INITCFG_MAX_STRING + 1);
	buf[INITCFG_MAX_STRING + 1] = '\0';
	argv[0] = buf;
	ck_assert_int_eq(initcfg_encode(&in, &enc, &elen), -EINVAL);
	buf[INITCFG_MAX_STRING] = '\0';
	ck_assert_int_eq(initcfg_encode(&in, &enc, &elen), 0);
	ck_assert_int_eq(initcfg_decode(enc, elen, &out), 0);
	ck_assert_uint_eq(strlen(out.argv[0]), INITCFG_MAX_STRING);
	initcfg_free(&out);
	free(enc);
	/* More than INITCFG_MAX_SIZE in total: 40 arguments of 128 KiB. */
	{
		char *many[41];

		for (int i = 0; i < 40; i++)
			many[i] = buf;
		many[40] = NULL;
		in.argv = many;
		in.argc = 40;
		ck_assert_int_eq(initcfg_encode(&in, &enc, &elen), -EINVAL);
	}
	free(buf);
}
END_TEST

/* Hand-made files: a valid header (its length computed here) with each kind of bad body. */
static int decode_body(const char *body, size_t body_len)
{
	const size_t fixed = sizeof(INITCFG_MAGIC) + 2 + 1 + body_len;
	char buf[1024], num[16];
	struct initcfg out;
	size_t total = fixed + 1;
	int ret;

	while ((size_t)snprintf(num, sizeof(num), "%zu", total) + fixed != total)
		total = fixed + strlen(num);
	ck_assert_uint_lt(total, sizeof(buf));
	memcpy(buf,
	       INITCFG_MAGIC "\0"
			     "3",
	       sizeof(INITCFG_MAGIC) + 2);
	memcpy(buf + sizeof(INITCFG_MAGIC) + 2, num, strlen(num) + 1);
	memcpy(buf + total - body_len, body, body_len);
	ret = initcfg_decode(buf, total, &out);
	if (!ret)
		initcfg_free(&out);
	return ret;
}

#define BODY(s) s, sizeof(s) - 1

START_TEST(test_bad_bodies)
{
	static const struct {
		const char *body;
		size_t len;
	} bad[] = {
		{ BODY("") },	      /* no root */
		{ BODY("arg\0x\0") }, /* no root */
		{ BODY("root\0initramfs\0"
		       "bogus\0x\0") }, /* unknown key */
		{ BODY("root\0initramfs\0"
		       "root\0initramfs\0\0") },    /* root twice */
		{ BODY("root\0tmpfs\0\0") },	    /* unknown mode */
		{ BODY("root\09p-overlay\0\0") },   /* 9p without a tag */
		{ BODY("root\0initramfs\0tag\0") }, /* initramfs with one */
		{ BODY("root\0initramfs\0\0"
		       "cwd\0relative\0") }, /* relative cwd */
		{ BODY("root\0initramfs\0\0"
		       "env\0NOEQUALS\0") },
		{ BODY("root\0initramfs\0\0"
		       "env\0=x\0") },
		{ BODY("root\0initramfs\0\0"
		       "share\0t\0/p\0rx\0") },
		{ BODY("root\0initramfs\0\0"
		       "virtiofs\0t\0fs\0first\0") }, /* no share or root of that tag */
		{ BODY("root\0initramfs\0\0"
		       "share\0t\0/p\0ro\0"
		       "virtiofs\0t\0fs\0maybe\0") }, /* neither first nor only */
		{ BODY("root\0initramfs\0\0"
		       "share\0t\0/p\0ro\0"
		       "virtiofs\0t\0\0first\0") }, /* no tag */
		{ BODY("root\0initramfs\0\0"
		       "share\0t\0/p\0ro\0"
		       "virtiofs\0t\0fs\0first\0"
		       "virtiofs\0t\0fs2\0first\0") }, /* twice */
		{ BODY("root\0initramfs\0\0"
		       "debug\0"
		       "debug\0") },
		{ BODY("root\0initramfs\0\0"
		       "share\0\0/p\0ro\0") },
		{ BODY("root\0initramfs\0\0"
		       "share\0t\0p\0ro\0") },
		{ BODY("root\0initramfs\0\0"
		       "module\0x.ko\0") },
		{ BODY("root\0initramfs\0\0"
		       "console\0/dev/a\0/dev/b\0cooked\0") },
		{ BODY("root\0initramfs\0\0"
		       "ports\0../vport0p1\0\0") }, /* not a name */
		{ BODY("root\0initramfs\0\0"
		       "ports\0\0"
		       "23456789012345678901234567890123\0") }, /* 32 bytes */
		{ BODY("root\0initramfs\0\0"
		       "winsize\0"
		       "0\0"
		       "80\0") },
		{ BODY("root\0initramfs\0\0"
		       "winsize\0"
		       "70000\0"
		       "80\0") },
		{ BODY("root\0initramfs\0\0"
		       "exit-port\0"
		       "0\0") },
		{ BODY("root\0initramfs\0\0"
		       "exit-port\0"
		       "65533\0") }, /* the word would pass 0xffff */
		{ BODY("root\0initramfs\0\0"
		       "exit-port\0"
		       "0x508\0") },
		{ BODY("root\0initramfs\0\0"
		       "exit-port\0"
		       "01288\0") },
		{ BODY("root\0initramfs\0\0"
		       "msize\0"
		       "-1\0") },
		{ BODY("root\0initramfs\0\0"
		       "msize\0"
		       "4294967296\0") },
		{ BODY("root\0initramfs\0\0"
		       "nic\0"
		       "52:54:00:12:34:56\0static\0") }, /* unknown way */
		{ BODY("root\0initramfs\0\0"
		       "nic\0"
		       "52:54:00:12:34\0up\0") }, /* five bytes */
		{ BODY("root\0initramfs\0\0"
		       "nic\0"
		       "52:54:00:12:34:5g\0up\0") },
		{ BODY("root\0initramfs\0\0"
		       "nic\0"
		       "52:54:00:12:34:56:\0up\0") },
		{ BODY("root\0initramfs\0\0"
		       "nic\0"
		       "52-54-00-12-34-56\0up\0") },
		{ BODY("root\0initramfs\0\0"
		       "cwd\0") }, /* missing field: file ends */
		{ BODY("root\0initramfs\0\0"
		       "cwd\0/a\0cwd\0/b\0") }, /* a single value twice */
		{ BODY("root\0initramfs\0\0"
		       "group\0"
		       "5\0") }, /* groups without a user */
		{ BODY("root\0initramfs\0\0"
		       "user\0"
		       "4294967295\0"
		       "0\0") }, /* (uid_t)-1: "unchanged" to setuid */
		{ BODY("root\0initramfs\0\0"
		       "user\0"
		       "0\0"
		       "-1\0") },
		{ BODY("root\0initramfs\0\0"
		       "user\0"
		       "1\0"
		       "1\0"
		       "user\0"
		       "2\0"
		       "2\0") }, /* two users */
	};

	ck_assert_int_eq(decode_body(BODY("root\0initramfs\0\0"
					  "exit-port\0"
					  "65532\0")),
			 0);
	ck_assert_int_eq(decode_body(BODY("root\09p-overlay\0/dev/root\0"
					  "arg\0\0")),
			 0);
	ck_assert_int_eq(decode_body(BODY("root\0initramfs\0\0"
					  "group\0"
					  "0\0"
					  "user\0"
					  "0\0"
					  "0\0")),
			 0);
	ck_assert_int_eq(decode_body(BODY("root\0initramfs\0\0"
					  "nic\0"
					  "52:54:00:12:34:56\0dhcp\0")),
			 0);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		ck_assert_msg(decode_body(bad[i].body, bad[i].len) == -EINVAL,
			      "bad body %zu accepted", i);
}
END_TEST

START_TEST(test_bad_headers)
{
	/* Each 34 bytes with the literal's NUL, like the valid one. */
	static const char *const bad[] = {
		"lkvm-initcfg\0"
		"2\0"
		"34\0"
		"root\0initramfs\0", /* version (an older one) */
		"lkvm-initcfX\0"
		"3\0"
		"34\0"
		"root\0initramfs\0", /* magic */
		"lkvm-initcfg\0"
		"3\0"
		"35\0"
		"root\0initramfs\0", /* length */
		"lkvm-initcfg\0"
		"3\0"
		"034\0"
		"root\0initramfs", /* leading zero */
		"lkvm-initcfg\0"
		"3\0"
		"34\0"
		"root\0initramfs\0", /* made to end without a NUL below */
	};
	char copy[34];
	struct initcfg out;

	ck_assert_int_eq(initcfg_decode("lkvm-initcfg\0"
					"3\0"
					"34\0"
					"root\0initramfs\0",
					34, &out),
			 0);
	initcfg_free(&out);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		memcpy(copy, bad[i], sizeof(copy));
		if (i == ARRAY_SIZE(bad) - 1)
			copy[33] = 'x';
		ck_assert_msg(initcfg_decode(copy, sizeof(copy), &out) == -EINVAL,
			      "bad file %zu accepted", i);
	}
}
END_TEST

START_TEST(test_encoder_refuses_invalid)
{
	struct initcfg c = full_cfg();
	char *buf;
	size_t len;

	c.root_tag = NULL;
	ck_assert_int_eq(initcfg_encode(&c, &buf, &len), -EINVAL);
	c = full_cfg();
	c.shares[1].path = "relative";
	ck_assert_int_eq(initcfg_encode(&c, &buf, &len), -EINVAL);
	c = full_cfg();
	c.nr_shares = INITCFG_MAX_SHARES + 1;
	ck_assert_int_eq(initcfg_encode(&c, &buf, &len), -EINVAL);
	c = full_cfg();
	c.cols = 0;
	ck_assert_int_eq(initcfg_encode(&c, &buf, &len), -EINVAL);
	c = full_cfg();
	c.exit_port = 0xfffd;
	ck_assert_int_eq(initcfg_encode(&c, &buf, &len), -EINVAL);
	c = full_cfg();
	c.user = false; /* groups need a user */
	ck_assert_int_eq(initcfg_encode(&c, &buf, &len), -EINVAL);
	c = full_cfg();
	c.nr_groups = INITCFG_MAX_GROUPS + 1;
	ck_assert_int_eq(initcfg_encode(&c, &buf, &len), -EINVAL);
	c = full_cfg();
	c.gid = 0xffffffffu;
	ck_assert_int_eq(initcfg_encode(&c, &buf, &len), -EINVAL);
	c = full_cfg();
	c.stderr_port = "";
	ck_assert_int_eq(initcfg_encode(&c, &buf, &len), -EINVAL);
	c = full_cfg();
	c.stdout_port = "a b";
	ck_assert_int_eq(initcfg_encode(&c, &buf, &len), -EINVAL);
}
END_TEST

START_TEST(test_stage_names)
{
	for (unsigned s = 0; s < LKVM_STAGE_NR; s++)
		ck_assert_ptr_nonnull(initcfg_stage_name(s));
	ck_assert_ptr_null(initcfg_stage_name(LKVM_STAGE_NR));
	ck_assert_ptr_nonnull(strstr(initcfg_stage_hint(LKVM_STAGE_ROOT, ENODEV), "CONFIG_9P_FS"));
	ck_assert_str_eq(initcfg_stage_hint(LKVM_STAGE_ROOT, EPERM), "");
	ck_assert_uint_eq(LKVM_EXIT_WORD(LKVM_EXIT_EXITED, 7, 0), 0x107);
	ck_assert_uint_eq(LKVM_EXIT_WORD(LKVM_EXIT_SIGNALED, 9, 0), 0x209);
	ck_assert_uint_eq(LKVM_EXIT_WORD(LKVM_EXIT_INIT_FAILED, LKVM_STAGE_ROOT, ENODEV), 0x130303);
}
END_TEST

/* CMD's framed stdin: every byte value round-trips, split anywhere between two reads (an
 * escape may end one read and its pair start the next), and nothing after the end mark. */
START_TEST(test_stdin_framing)
{
	uint8_t in[512], enc[2 * sizeof(in) + 2], dec[sizeof(enc)];
	size_t n, len;

	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (uint8_t)(i * 7 + (i & 1 ? 0xff : 0)); /* every value, many 0xff and 0x00 */
	len = initcfg_stdin_encode(in, sizeof(in), enc);
	enc[len++] = INITCFG_STDIN_ESC;
	enc[len++] = INITCFG_STDIN_EOF;
	for (size_t split = 0; split <= len; split++) {
		struct initcfg_stdin_dec d = { 0 };

		n = initcfg_stdin_decode(&d, enc, split, dec);
		ck_assert(!d.eof || split == len);
		n += initcfg_stdin_decode(&d, enc + split, len - split, dec + n);
		ck_assert(d.eof);
		ck_assert_uint_eq(n, sizeof(in));
		ck_assert_mem_eq(dec, in, sizeof(in));
	}
	/* The mark ends the input: what follows is not data; 0xff 0xff is one 0xff. */
	{
		static const uint8_t tail[] = { 'a', 0xff, 0xff, 0xff, 0x00, 'b', 0xff };
		struct initcfg_stdin_dec d = { 0 };

		n = initcfg_stdin_decode(&d, tail, sizeof(tail), dec);
		ck_assert(d.eof);
		ck_assert_uint_eq(n, 2);
		ck_assert(dec[0] == 'a' && dec[1] == 0xff);
		ck_assert_uint_eq(initcfg_stdin_decode(&d, tail, sizeof(tail), dec), 0);
	}
	ck_assert_uint_eq(initcfg_stdin_encode((const uint8_t *)"\xff", 1, enc), 2);
	ck_assert_uint_eq(initcfg_stdin_encode(in, 0, enc), 0);
}
END_TEST

static Suite *initcfg_suite(void)
{
	Suite *s = suite_create("initcfg");
	TCase *tc = tcase_create("codec");

	tcase_add_test(tc, test_round_trip_full);
	tcase_add_test(tc, test_round_trip_minimal);
	tcase_add_test(tc, test_length_digit_boundaries);
	tcase_add_test(tc, test_truncated_and_padded);
	tcase_add_test(tc, test_oversized);
	tcase_add_test(tc, test_bad_bodies);
	tcase_add_test(tc, test_bad_headers);
	tcase_add_test(tc, test_encoder_refuses_invalid);
	tcase_add_test(tc, test_stage_names);
	tcase_add_test(tc, test_stdin_framing);
	tcase_set_timeout(tc, 30);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(initcfg_suite)
