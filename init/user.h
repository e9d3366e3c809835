/* Guest init: CMD's own user (init/user.c). */
#ifndef LKVM_INIT_USER_H
#define LKVM_INIT_USER_H

#include <stddef.h>

#include "lkvm/initcfg.h"

/* In CMD's process, just before the exec: with c->user, the descriptors fds[0..n) (CMD's
 * consoles and stdin) become c->uid's, then the supplementary groups, the gid and the uid are
 * c's. Nothing without c->user. 0 or -errno (*what says which step). */
int user_enter(const struct initcfg *c, const int *fds, size_t n, const char **what);

#endif
