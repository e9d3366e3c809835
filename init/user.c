/* Guest init: CMD's own user (uid, gid, groups) taken on just before it starts. */
#include <errno.h>
#include <grp.h>
#include <unistd.h>

#include "user.h"

int user_enter(const struct initcfg *c, const int *fds, size_t n, const char **what)
{
	static gid_t groups[INITCFG_MAX_GROUPS];

	if (!c->user)
		return 0;
	/* CMD's consoles and stdin pipe are init's (root's): as login does with a terminal,
	 * they become the user's, so that opening them again (/dev/stdout, /dev/stdin, tty,
	 * /proc/self/fd/N) works as it does on the host. The descriptors CMD inherits work
	 * either way. */
	*what = "giving the command its consoles";
	for (size_t i = 0; i < n; i++)
		if (fchown(fds[i], c->uid, (gid_t)-1))
			return -errno;
	for (size_t i = 0; i < c->nr_groups; i++)
		groups[i] = c->groups[i];
	/* Groups and gid first: once the uid is not 0 they cannot change. */
	*what = "setgroups";
	if (setgroups(c->nr_groups, groups))
		return -errno;
	*what = "setgid";
	if (setgid(c->gid))
		return -errno;
	*what = "setuid";
	if (setuid(c->uid))
		return -errno;
	return 0;
}
