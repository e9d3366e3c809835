/* Fuzz target: the option parsers: `lkvm run` arguments (builtin/run.c) and -n values (net/options.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "lkvm/kvm.h"
#include "lkvm/net.h"
#include "lkvm/run.h"

/* Input: NUL-separated arguments after "run" (at most 64). A first byte of 0x01 instead
 * hands the rest to the -n, MAC and address parsers directly. */
#define OF_MAX_ARGS 64

static FILE *devnull;

int fuzz_opts(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1), *argv[OF_MAX_ARGS + 2];
	struct run_args *a = malloc(sizeof(*a));
	struct kvm_config *cfg = a ? &a->cfg : NULL;
	char err[256];
	int argc = 0;

	FUZZ_ASSERT(buf && a);
	if (!devnull)
		FUZZ_ASSERT((devnull = fopen("/dev/null", "w")) != NULL);
	memcpy(buf, data, size);
	buf[size] = '\0';
	if (size && buf[0] == 1) {
		struct net_opts o;
		u32 addr;
		int prefix;
		u8 mac[6];

		err[0] = '\0';
		if (net_parse_opts(buf + 1, &o, err, sizeof(err)) == 0)
			FUZZ_ASSERT(o.queue_pairs >= 1 && o.queue_pairs <= NET_MAX_QUEUE_PAIRS &&
				    o.tx_mode < NET_TX_NR &&
				    memchr(o.tapif, '\0', sizeof(o.tapif)));
		else
			FUZZ_ASSERT(err[0]);
		if (net_parse_host_ip(buf + 1, &addr, &prefix) == 0)
			FUZZ_ASSERT(prefix >= 0 && prefix <= 32);
		(void)!net_parse_mac(buf + 1, mac);
		goto out;
	}
	argv[argc++] = "run";
	for (char *p = buf; p < buf + size && argc <= OF_MAX_ARGS; p += strlen(p) + 1)
		argv[argc++] = p;
	argv[argc] = NULL;
	err[0] = '\0';
	switch (kvm_run_parse(argc, argv, a, devnull, err, sizeof(err))) {
	case 0:
		/* Host-root mode (`--`, or none of -k, -i, -d) finds its kernel later. */
		FUZZ_ASSERT((cfg->kernel_path || cfg->host_root.on) && cfg->nr_cpus >= 1 &&
			    cfg->nr_cpus <= LKVM_MAX_CPUS);
		FUZZ_ASSERT(cfg->ram_mib >= 1 && cfg->nr_nets >= 0 && cfg->nr_nets <= 4);
		kvm_config_free(cfg);
		break;
	case 1:
		break;
	default:
		FUZZ_ASSERT(err[0] && memchr(err, '\0', sizeof(err)));
	}
out:
	free(a);
	free(buf);
	return 0;
}
