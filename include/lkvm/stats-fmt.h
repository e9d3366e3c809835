/* The one formatter of --stats and lkvm stat (ctl/stats-fmt.c): a VM's flat counters as a table or one line of JSON. */
#ifndef LKVM_STATS_FMT_H
#define LKVM_STATS_FMT_H

#include <stdbool.h>
#include <stdio.h>

struct ctl_kvs;

/* Print flat counters cur as a table or one line of JSON. With prev (lkvm stat --watch),
 * counters are what changed since prev, ratios are of those changes, and interval_s says
 * over how long. The header (name, state, uptime, guest clock) is printed when cur has a
 * "name"; the JSON then starts with it, else with "vcpu_exits". */
void stats_print(FILE *out, const struct ctl_kvs *cur, const struct ctl_kvs *prev, double interval,
		 bool json);

#endif
