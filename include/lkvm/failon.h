/* --fail-on: the kernel-bug lines (BUG:, WARNING:, ...) searched for in the guest's console output. */
#ifndef LKVM_FAILON_H
#define LKVM_FAILON_H

#include <stddef.h>

#include "lkvm/util.h"

#define FAILON_MAX 32	      /* patterns, the default set's included */
#define FAILON_PATTERN_MAX 64 /* bytes of one pattern */
#define FAILON_LINE_MAX 256   /* bytes of a console line kept for the report */
#define FAILON_TEXT_MAX 1025  /* the reported line escaped (\xNN: 4 bytes per byte) */
#define FAILON_DEFAULT_NR 9   /* patterns "default" stands for */

/*
 * The patterns and the line being read. A line ends at \n or \r; one longer than
 * FAILON_LINE_MAX is searched in pieces that overlap by a pattern's length, so a match is
 * never missed and what is kept stays bounded. Only the first match is recorded (the guest
 * can print a bug line at every write: the report is one line however many it prints).
 */
struct failon {
	int n;
	const char *pat[FAILON_MAX]; /* static strings or the command line's */
	bool deferred[FAILON_MAX];   /* "Kernel panic": pvpanic, if it reports, tells it better */
	size_t max_len;		     /* the longest pattern's length */
	char line[FAILON_LINE_MAX];
	size_t len;
	bool hit; /* a line matched: text holds it */
	bool hit_deferred;
	char text[FAILON_TEXT_MAX];
	unsigned long hits; /* matches (a line, or a long line's piece), the first included */
};

/* Add PATTERN, or the named set "default" (docs/run.md). 0, or -EINVAL (empty, too long),
 * -E2BIG (too many). The string must outlive f. */
int failon_add(struct failon *f, const char *pattern) __must_check;
/* Feed console output. True only for the feed that records the first match (f->text). */
bool failon_feed(struct failon *f, const u8 *buf, size_t len);
/* The default set's patterns, NULL-terminated (for --help and the docs' tests). */
extern const char *const failon_default_set[];

#endif
