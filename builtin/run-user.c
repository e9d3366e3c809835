/* `lkvm run -- CMD`: the guest user CMD runs as (whose credentials serve the host's files, or root with --root), its groups, HOME, USER and LOGNAME. */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lkvm/run-cmd.h"

/* NAME=VALUE into env (room for one more entry): in place of NAME's entry, else appended. */
static void env_set(struct initcfg *ic, char *line)
{
	size_t n = strcspn(line, "=") + 1;

	for (size_t i = 0; i < ic->envc; i++)
		if (!strncmp(ic->envp[i], line, n)) {
			ic->envp[i] = line;
			return;
		}
	ic->envp[ic->envc++] = line;
	ic->envp[ic->envc] = NULL;
}

/* HOME, USER and LOGNAME of uid's passwd entry (none: the host's stay). */
static int guest_env(struct initcfg *ic, uid_t uid, const struct run_cmd_pw *pw,
		     struct run_cmd_guest *g)
{
	struct passwd *p = pw->byuid(uid);
	char **env;

	if (!p)
		return 0;
	env = realloc(ic->envp, (ic->envc + 4) * sizeof(*env));
	if (!env)
		return -ENOMEM;
	ic->envp = env;
	snprintf(g->home, sizeof(g->home), "HOME=%s", p->pw_dir ? p->pw_dir : "/");
	snprintf(g->user, sizeof(g->user), "USER=%s", p->pw_name);
	snprintf(g->logname, sizeof(g->logname), "LOGNAME=%s", p->pw_name);
	env_set(ic, g->home);
	env_set(ic, g->user);
	env_set(ic, g->logname);
	return 0;
}

/* The supplementary groups: those of the user sudo names, or lkvm's own, or none. */
static int guest_groups(const struct sandbox_user *u, bool own, struct initcfg *ic, char *err,
			size_t errlen)
{
	gid_t groups[INITCFG_MAX_GROUPS];
	int n = 0;

	if (u->groups) {
		n = INITCFG_MAX_GROUPS;
		if (getgrouplist(u->name, u->gid, groups, &n) < 0)
			n = -1;
	} else if (own) {
		n = getgroups(INITCFG_MAX_GROUPS, groups);
	}
	if (n < 0) {
		errfmt(err, errlen,
		       "user %s is in more than %d groups, the most the command can get", u->name,
		       INITCFG_MAX_GROUPS);
		return -E2BIG;
	}
	for (int i = 0; i < n; i++)
		ic->groups[i] = groups[i];
	ic->nr_groups = (size_t)n;
	return 0;
}

int run_cmd_guest_user(const struct run_cmd_creds *c, const char *user, bool root,
		       const struct run_cmd_pw *pw, struct initcfg *ic, struct run_cmd_guest *g,
		       char *err, size_t errlen)
{
	struct sandbox_user u = { .uid = 0 };
	bool own = false; /* lkvm's own user, whose environment is the user's already */
	int ret = 0;

	if (root)
		snprintf(u.name, sizeof(u.name), "root");
	else if (c->as != RUN_AS_LKVM)
		u = c->user;
	else if (user)
		ret = sandbox_user_resolve(user, &u, err, errlen);
	else {
		own = true;
		u.uid = geteuid();
		u.gid = getegid();
		snprintf(u.name, sizeof(u.name), "%u", (unsigned)u.uid); /* for messages */
	}
	if (ret)
		return ret;
	ic->user = u.uid != 0; /* root: init's own credentials already */
	ic->uid = u.uid;
	ic->gid = u.gid;
	ic->nr_groups = 0;
	if (ic->user && (ret = guest_groups(&u, own, ic, err, errlen)))
		return ret;
	return own ? 0 : guest_env(ic, u.uid, pw, g);
}
