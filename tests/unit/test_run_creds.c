/* Unit tests of whose credentials serve the host's files to `lkvm run -- CMD` (run_cmd_creds), on a passwd table of their own. */
#include <errno.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "lkvm/run-cmd.h"

/* The table the look-ups see: root, a user with two names (alice, alias), nobody. */
static struct passwd table[] = {
	{ .pw_name = "root", .pw_uid = 0, .pw_gid = 0, .pw_dir = "/root" },
	{ .pw_name = "alice", .pw_uid = 1000, .pw_gid = 1000, .pw_dir = "/home/alice" },
	{ .pw_name = "alias", .pw_uid = 1000, .pw_gid = 1000 },
	{ .pw_name = "bob", .pw_uid = 1001, .pw_gid = 100 },
	{ .pw_name = "nobody", .pw_uid = 65534, .pw_gid = 65533, .pw_dir = "/nonexistent" },
};
static bool no_nobody; /* the table without nobody */

static struct passwd *by_uid(uid_t uid)
{
	for (size_t i = 0; i < ARRAY_SIZE(table); i++)
		if (table[i].pw_uid == uid)
			return &table[i];
	return NULL;
}

static struct passwd *by_name(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(table); i++)
		if (!strcmp(table[i].pw_name, name) && !(no_nobody && !strcmp(name, "nobody")))
			return &table[i];
	return NULL;
}

static const struct run_cmd_pw pw = { by_uid, by_name };
static char err[256];

static int creds(uid_t euid, const char *user, const char *uid, const char *gid, const char *name,
		 struct run_cmd_creds *c)
{
	struct run_cmd_sudo sudo = { uid, gid, name };

	err[0] = '\0';
	memset(c, 0xa5, sizeof(*c)); /* nothing left over from before counts */
	return run_cmd_creds(euid, user, &sudo, &pw, c, err, sizeof(err));
}

/* Not root: lkvm's own user, whatever sudo left (sudo -u alice keeps SUDO_UID of the caller). */
START_TEST(not_root_unchanged)
{
	struct run_cmd_creds c;

	ck_assert_int_eq(creds(1000, NULL, NULL, NULL, NULL, &c), 0);
	ck_assert_int_eq(c.as, RUN_AS_LKVM);
	ck_assert_int_eq(creds(1001, NULL, "1000", "1000", "alice", &c), 0);
	ck_assert_int_eq(c.as, RUN_AS_LKVM);
	ck_assert_int_eq(creds(1001, NULL, "garbage", NULL, NULL, &c), 0);
	ck_assert_int_eq(c.as, RUN_AS_LKVM);
}
END_TEST

/* --user wins, root included, and the environment is not even looked at. */
START_TEST(explicit_user_wins)
{
	struct run_cmd_creds c;

	ck_assert_int_eq(creds(0, "root", "1000", "1000", "alice", &c), 0);
	ck_assert_int_eq(c.as, RUN_AS_LKVM);
	ck_assert_int_eq(creds(0, "bob", NULL, NULL, NULL, &c), 0);
	ck_assert_int_eq(c.as, RUN_AS_LKVM);
	ck_assert_int_eq(creds(0, "root", "12x", NULL, NULL, &c), 0);
	ck_assert_int_eq(c.as, RUN_AS_LKVM);
}
END_TEST

/* root through sudo: the caller, SUDO_GID as its gid, its groups by the name it used. */
START_TEST(sudo_user)
{
	struct run_cmd_creds c;

	ck_assert_int_eq(creds(0, NULL, "1001", "100", "bob", &c), 0);
	ck_assert_int_eq(c.as, RUN_AS_SUDO);
	ck_assert_int_eq(c.user.uid, 1001);
	ck_assert_int_eq(c.user.gid, 100);
	ck_assert(c.user.groups);
	ck_assert_str_eq(c.user.name, "bob");
	/* A gid of the moment (sg, newgrp) that is not the entry's. */
	ck_assert_int_eq(creds(0, NULL, "1000", "4242", "alias", &c), 0);
	ck_assert_int_eq(c.user.gid, 4242);
	ck_assert_str_eq(c.user.name, "alias");
	/* No SUDO_GID: the entry's; no SUDO_USER, or one of another uid: the entry's name. */
	ck_assert_int_eq(creds(0, NULL, "1000", NULL, NULL, &c), 0);
	ck_assert_int_eq(c.as, RUN_AS_SUDO);
	ck_assert_int_eq(c.user.uid, 1000);
	ck_assert_int_eq(c.user.gid, 1000);
	ck_assert_str_eq(c.user.name, "alice");
	ck_assert_int_eq(creds(0, NULL, "1000", NULL, "bob", &c), 0);
	ck_assert_int_eq(c.user.uid, 1000);
	ck_assert_str_eq(c.user.name, "alice");
}
END_TEST

/* root alone, or root behind sudo: nobody, without groups; 65534 where no entry names it. */
START_TEST(root_alone_is_nobody)
{
	static const char *const sudo_uids[] = { NULL, "0" };
	struct run_cmd_creds c;

	for (size_t i = 0; i < ARRAY_SIZE(sudo_uids); i++) {
		ck_assert_int_eq(creds(0, NULL, sudo_uids[i], "0", "root", &c), 0);
		ck_assert_int_eq(c.as, RUN_AS_NOBODY);
		ck_assert_int_eq(c.user.uid, 65534);
		ck_assert_int_eq(c.user.gid, 65533);
		ck_assert(!c.user.groups);
		ck_assert_str_eq(c.user.name, "nobody");
	}
	no_nobody = true;
	ck_assert_int_eq(creds(0, NULL, NULL, NULL, NULL, &c), 0);
	no_nobody = false;
	ck_assert_int_eq(c.as, RUN_AS_NOBODY);
	ck_assert_int_eq(c.user.uid, 65534);
	ck_assert_int_eq(c.user.gid, 65534);
}
END_TEST

/* Anything but plain digits of a uid below (uid_t)-1 with a passwd entry: one line, no run. */
START_TEST(sudo_garbage_refused)
{
	static const char *const bad[] = { "",	    "12x",   "-1",	   "+1000",	 " 1000",
					   "1000 ", "0x3e8", "4294967295", "99999999999" };
	struct run_cmd_creds c;

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		ck_assert_msg(creds(0, NULL, bad[i], NULL, NULL, &c) == -EINVAL, "SUDO_UID '%s'",
			      bad[i]);
		ck_assert_msg(strstr(err, "SUDO_UID '") && !strchr(err, '\n'), "'%s': %s", bad[i],
			      err);
		ck_assert_msg(creds(0, NULL, "1000", bad[i], NULL, &c) == -EINVAL, "SUDO_GID '%s'",
			      bad[i]);
		ck_assert_msg(strstr(err, "SUDO_GID '"), "'%s': %s", bad[i], err);
	}
	ck_assert_int_eq(creds(0, NULL, "4242", NULL, NULL, &c), -ENOENT);
	ck_assert_str_eq(
		err,
		"SUDO_UID 4242: no such user (no passwd entry): unset it, or give --user USER");
}
END_TEST

/* The guest user (run_cmd_guest_user) for creds c, on an environment of root's. */
static void guest(const struct run_cmd_creds *c, const char *user, bool root, struct initcfg *ic,
		  struct run_cmd_guest *g)
{
	static char *env[] = { "HOME=/root", "PATH=/bin", "USER=root" };

	memset(ic, 0, sizeof(*ic));
	ic->envp = calloc(4, sizeof(*ic->envp));
	ck_assert_ptr_nonnull(ic->envp);
	memcpy(ic->envp, env, sizeof(env));
	ic->envc = 3;
	ck_assert_int_eq(run_cmd_guest_user(c, user, root, &pw, ic, g, err, sizeof(err)), 0);
	ck_assert_ptr_null(ic->envp[ic->envc]);
}

/* The command's user is the one serving the files; its passwd entry gives HOME, USER, LOGNAME
 * (replaced in place, else added); --root, and a uid 0, leave init's root. */
START_TEST(guest_user)
{
	struct run_cmd_creds c;
	struct run_cmd_guest g;
	struct initcfg ic;

	ck_assert_int_eq(creds(0, NULL, NULL, NULL, NULL, &c), 0); /* nobody */
	guest(&c, NULL, false, &ic, &g);
	ck_assert(ic.user && ic.uid == 65534 && ic.gid == 65533 && ic.nr_groups == 0);
	ck_assert_uint_eq(ic.envc, 4);
	ck_assert_str_eq(ic.envp[0], "HOME=/nonexistent");
	ck_assert_str_eq(ic.envp[1], "PATH=/bin");
	ck_assert_str_eq(ic.envp[2], "USER=nobody");
	ck_assert_str_eq(ic.envp[3], "LOGNAME=nobody");
	free(ic.envp);
	guest(&c, NULL, true, &ic, &g); /* --root: root in the guest, root's HOME */
	ck_assert(!ic.user && ic.nr_groups == 0);
	ck_assert_str_eq(ic.envp[0], "HOME=/root");
	ck_assert_str_eq(ic.envp[3], "LOGNAME=root");
	free(ic.envp);
	ck_assert_int_eq(creds(0, NULL, "1000", NULL, "alice", &c), 0); /* sudo */
	guest(&c, NULL, false, &ic, &g);
	ck_assert(ic.user && ic.uid == 1000 && ic.gid == 1000);
	ck_assert_str_eq(ic.envp[0], "HOME=/home/alice");
	ck_assert_str_eq(ic.envp[2], "USER=alice");
	free(ic.envp);
}
END_TEST

static Suite *run_creds_suite(void)
{
	Suite *s = suite_create("run_creds");
	TCase *tc = tcase_create("choice");

	tcase_add_test(tc, not_root_unchanged);
	tcase_add_test(tc, explicit_user_wins);
	tcase_add_test(tc, sudo_user);
	tcase_add_test(tc, root_alone_is_nobody);
	tcase_add_test(tc, sudo_garbage_refused);
	tcase_add_test(tc, guest_user);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(run_creds_suite)
