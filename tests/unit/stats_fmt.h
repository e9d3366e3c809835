/* Unit tests: one device's counters as --stats and lkvm stat print them (the device's stats visitor, flat names, the one formatter). */
#ifndef LKVM_TEST_STATS_FMT_H
#define LKVM_TEST_STATS_FMT_H

#include <stdio.h>
#include <stdlib.h>

#include "lkvm/ctl.h"
#include "lkvm/stats.h"
#include "lkvm/stats-fmt.h"

static void stats_fmt_put(void *arg, const char *name, u64 value)
{
	ck_assert_int_eq(ctl_add_u64(arg, name, value), 0);
}

/* visit(dev, v) reports the counters of device `kind` number 0; returns what stats_print
 * makes of them (malloc'd, for free()). */
static __attribute__((noinline)) char *
stats_fmt(const char *kind, void *dev, void (*visit)(void *dev, struct stats_visitor *v), bool json)
{
	struct stats_flat f;
	struct ctl_kvs kvs;
	struct ctl_msg m;
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(out);
	ctl_msg_init(&m, CTL_STAT, 0);
	stats_flat_init(&f, stats_fmt_put, &m);
	f.v.device(&f.v, kind, 0);
	visit(dev, &f.v);
	ck_assert_int_eq(ctl_kvs_decode(&m, &kvs), 0);
	stats_print(out, &kvs, NULL, 0, json);
	fclose(out);
	ctl_kvs_free(&kvs);
	ctl_msg_free(&m);
	return buf;
}

#endif
