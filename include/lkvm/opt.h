/* Option tables: one entry per option (name, argument kind, target, help), from which the parsers of `lkvm run`, -n, -d and `lkvm bench` and their --help text are made. */
#ifndef LKVM_OPT_H
#define LKVM_OPT_H

#include <stddef.h>
#include <stdio.h>

#include "lkvm/util.h"

enum opt_kind {
	OPT_END,    /* ends a table */
	OPT_FLAG,   /* no value: the target (bool) becomes true */
	OPT_STR,    /* the value itself (const char *, into the argument); with .bad, never empty
		     * nor longer than .max (when set) */
	OPT_UINT,   /* a decimal number from .min to .max, into an integer target */
	OPT_CHOICE, /* one of .choices, whose value goes into an integer, enum or bool target */
	OPT_FN,	    /* .fn parses and stores, and words its own errors */
	OPT_HELP,   /* --help: the set's usage to the output, the parse returns 1 */
};

struct opt_choice {
	const char *name;
	int val;
};

struct opt {
	const char *name; /* the long option, or the key */
	char short_name;  /* argv sets: -k, or 0 */
	enum opt_kind kind;
	bool optional;	  /* argv sets: the value may be left out (--stats[=json]: fn gets NULL) */
	size_t off, size; /* the target: its offset and size in the struct being filled */
	size_t given; /* 1 + the offset of a bool that becomes true when it is given (0: none) */
	unsigned long long min, max;
	const struct opt_choice *choices; /* ends with a NULL name */
	int (*fn)(const struct opt *o, const char *v, void *base, char *err, size_t errlen);
	const char *arg;  /* the value's name in the help (FILE); choices: made from them */
	const char *help; /* one line per '\n' */
	const char *bad;  /* why a value is refused, after "NAME 'VALUE': " (see opt.c) */
	const struct opt_set *keys;   /* help only: the keys of this option's value (-n, -d) */
	void (*more_help)(FILE *out); /* lines printed after the help (lists of names) */
	/* lkvm run: the process's, not the machine's (--name, --gdb, --timeout, ...): a snapshot
	 * does not carry it to the restored VM, which takes its own. */
	bool process;
	/* lkvm run: names a host resource (a file read, a tap, a script, a socket, a directory
	 * shared, a command on the host's files): a restore never takes it from the snapshot, only
	 * from its own command line (builtin/run-restore.c). */
	bool host;
	/* KEY=VALUE sets: the key may be given more than once (-n fwd=), each value taken. */
	bool repeat;
};

/* Where a field is: .off/.size for a target, .given for its "given" bool. */
#define OPT_AT(type, member) .off = offsetof(type, member), .size = sizeof(((type *)0)->member)
#define OPT_GIVEN(type, member) .given = offsetof(type, member) + 1

struct opt_set {
	const struct opt *opts; /* ends with OPT_END */
	const char *prefix;	/* before an option's name in messages: "--", "-n ", "bench: --" */
	const char *verb;	/* before the list of choices in messages: "give", "want" */
	/* argv sets (opt_parse_argv): messages, each the argument between lead and tail. */
	struct opt_msg {
		const char *lead, *tail;
	} unknown, needs_value, unexpected;
	bool in_order; /* options end at the first word that is not one */
	/* argv sets: the words after a "--" that ended the options go here (argc may be 0);
	 * NULL: "--" only ends the options, and words after it are unexpected. 0 or -EINVAL
	 * with err. */
	int (*trailing)(void *base, int argc, char **argv, char *err, size_t errlen);
	bool exact;		  /* long options only in full (getopt_long takes a prefix) */
	bool empty_is_missing;	  /* --opt= (empty) is told as a missing value */
	void (*usage)(FILE *out); /* what OPT_HELP prints */
	int help_col;		  /* the help's column (the names before it) */
	bool short_col;		  /* long names aligned after a column of short ones */
	/* key=value sets (opt_parse_kv). */
	const char *name; /* the option the list is the value of: "-n" */
	bool lenient;	  /* empty items skipped, keys may repeat, flags stand alone, and any
				 * refused item is "unknown option" (with opt_kv_list's list); else
				 * each mistake has its own message */
};

/* Parse argv (argv[0] is the command) into base. 0; 1 after printing the usage to out
 * (--help); -EINVAL with a one-line message in err. */
/* The option argv[at] is (NULL: not an option, or "--"), and in *nwords how many words it takes
 * there (1, or 2 with its value in the next word), as opt_parse_argv would read it. */
const struct opt *opt_argv_unit(const struct opt_set *s, int argc, char **argv, int at,
				int *nwords);
int opt_parse_argv(const struct opt_set *s, int argc, char **argv, void *base, FILE *out, char *err,
		   size_t errlen) __must_check;
/* Parse a KEY=VALUE,... list (lenient sets: also bare flags) into base. whole: the option's
 * full value, for messages; seen (may be NULL): bit i set for each opts[i] given. 0 or
 * -EINVAL/-ENOMEM with a one-line message in err. */
int opt_parse_kv(const struct opt_set *s, const char *list, const char *whole, void *base,
		 unsigned *seen, char *err, size_t errlen) __must_check;
/* A decimal number from min to max, digits only. 0 or -EINVAL. */
int opt_uint(const char *s, unsigned long long min, unsigned long long max,
	     unsigned long long *out) __must_check;
/* The help lines of every option of s (and the keys of an option with .keys). */
void opt_usage(FILE *out, const struct opt_set *s);
/* "ro, trans=pci|mmio, aio=libaio|sync": every key of s with its choices, into buf. */
void opt_kv_list(const struct opt_set *s, char *buf, size_t len);

#endif
