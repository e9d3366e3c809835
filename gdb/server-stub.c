/* STUB of the gdb protocol server, replaced by gdb/server.c at merge (branch gdb-proto): lets the VM side link and its tests run. */
#include <errno.h>

#include "lkvm/gdb.h"

int gdb_server_start(const char *addr, const struct gdb_target_ops *ops, void *ctx,
		     struct gdb_server **out, char *err, size_t errlen)
{
	errfmt(err, errlen, "the gdb server is not built in (stub)");
	return -ENOSYS;
}

void gdb_server_notify_stop(struct gdb_server *s, const struct gdb_stop *st)
{
}

void gdb_server_stop(struct gdb_server *s)
{
}
