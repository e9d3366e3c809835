/* lkvm run --restore FILE: the machine the snapshot's options describe, with this command line's options on top. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/opt.h"
#include "lkvm/run.h"
#include "lkvm/snap.h"
#include "lkvm/vm-snap.h"

/*
 * Which options the restored VM takes from where:
 * - the snapshot's, for what makes the machine (-m, -c, -k, -n, -d, --console, ...): the
 *   devices a restore loads must be the ones saved;
 * - this command line's, for what belongs to the process (options marked .process: --name,
 *   --gdb, --timeout, --stats, --user, ...), never the saved ones;
 * - an option given on both: this command line's, every saved occurrence dropped, so
 *   `-n mode=tap,tapif=tap7` given again replaces the saved NIC's backend (a NIC more or
 *   less than saved is refused when the devices are compared).
 * The words after "--" (run -- CMD) are this command line's if it has some, else the saved ones.
 */

static bool given_here(int argc, char **argv, const struct opt *want)
{
	int n;

	for (int i = 1; i < argc; i += n) {
		const struct opt *o = opt_argv_unit(&run_opt_set, argc, argv, i, &n);

		if (!o && (!strcmp(argv[i], "--") || argv[i][0] != '-'))
			return false; /* the options ended */
		if (o == want)
			return true;
	}
	return false;
}

/* Where the options that start at argv[from] end: the index of "--" or of the first other word. */
static int options_end(int argc, char **argv, int from)
{
	int i, n;

	for (i = from; i < argc; i += n)
		if (!opt_argv_unit(&run_opt_set, argc, argv, i, &n) &&
		    (!strcmp(argv[i], "--") || argv[i][0] != '-'))
			break;
	return i;
}

/* The saved options the machine keeps, in out (which has room for them all). */
static int saved_options(int sargc, char **sargv, int argc, char **argv, char **out)
{
	int n = 0, words;

	for (int i = 0; i < sargc; i += words) {
		const struct opt *o = opt_argv_unit(&run_opt_set, sargc, sargv, i, &words);

		if (!o && (!strcmp(sargv[i], "--") || sargv[i][0] != '-'))
			break;
		if (!o || o->process || given_here(argc, argv, o))
			continue;
		for (int w = 0; w < words; w++)
			out[n++] = sargv[i + w];
	}
	return n;
}

int run_restore_args(int argc, char **argv, struct snap_reader *r, char ***out, int *outc,
		     char ***saved, int *nsaved, char *err, size_t errlen)
{
	int ret = kvm_snapshot_argv(r, saved, nsaved, err, errlen), end, send, n = 0;
	char **m;

	if (ret < 0)
		return ret;
	m = calloc((size_t)(argc + *nsaved + 1), sizeof(char *));
	if (!m)
		return -ENOMEM;
	end = options_end(argc, argv, 1);
	/* The saved words are a run's argv without argv[0]: its options start at 0. */
	send = options_end(*nsaved, *saved, 0);
	m[n++] = argv[0];
	n += saved_options(send, *saved, argc, argv, m + n);
	for (int i = 1; i < end; i++)
		m[n++] = argv[i];
	if (end < argc) {
		for (int i = end; i < argc; i++)
			m[n++] = argv[i];
	} else {
		for (int i = send; i < *nsaved; i++)
			m[n++] = (*saved)[i];
	}
	*out = m;
	*outc = n;
	return 0;
}

const char *run_restore_path(int argc, char **argv)
{
	int n;

	for (int i = 1; i < argc; i += n) {
		const struct opt *o = opt_argv_unit(&run_opt_set, argc, argv, i, &n);

		if (!o && (!strcmp(argv[i], "--") || argv[i][0] != '-'))
			break;
		if (o && !strcmp(o->name, "restore"))
			return n == 2		      ? argv[i + 1]
			       : strchr(argv[i], '=') ? strchr(argv[i], '=') + 1
						      : NULL;
	}
	return NULL;
}
