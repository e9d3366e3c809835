/* --fail-on: the kernel-bug lines searched for in the guest's console output, bounded whatever the guest prints. */
#include <errno.h>
#include <string.h>

#include "lkvm/failon.h"

/* What Linux prints when it reports a bug (the lines LAVA, KernelCI and syzkaller classify):
 * BUG: (and "BUG: soft lockup"), WARNING: (WARN_ON), the sanitizers' reports, an oops, a hung
 * task ("INFO: task X:N blocked for more than S seconds"), a panic. */
const char *const failon_default_set[] = {
	"BUG:",		"WARNING:", "KASAN:",	   "KFENCE:",
	"UBSAN:",	"Oops:",    "soft lockup", "blocked for more than",
	"Kernel panic", NULL,
};
_Static_assert(ARRAY_SIZE(failon_default_set) == FAILON_DEFAULT_NR + 1,
	       "FAILON_DEFAULT_NR counts it");
/* Its panic is told by pvpanic (status 2) when the guest has it: that report comes after the
 * line (the kernel's panic notifiers run after it prints), so this one waits for the end. */
#define FAILON_PANIC "Kernel panic"

static int add_one(struct failon *f, const char *p, bool deferred)
{
	size_t len = strlen(p);

	if (!len || len > FAILON_PATTERN_MAX)
		return -EINVAL;
	if (f->n >= FAILON_MAX)
		return -E2BIG;
	f->deferred[f->n] = deferred;
	f->pat[f->n++] = p;
	f->max_len = MAX(f->max_len, len);
	return 0;
}

int failon_add(struct failon *f, const char *pattern)
{
	if (strcmp(pattern, "default"))
		return add_one(f, pattern, false);
	for (int i = 0; failon_default_set[i]; i++) {
		int ret = add_one(f, failon_default_set[i],
				  !strcmp(failon_default_set[i], FAILON_PANIC));

		if (ret < 0)
			return ret;
	}
	return 0;
}

/* The line as the report shows it: printable ASCII as it is, every other byte (and the
 * backslash) as \xNN, so a hostile line cannot break the status file's lines or a terminal. */
static void escape_line(char *out, const char *in, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	_Static_assert(FAILON_TEXT_MAX >= 4 * FAILON_LINE_MAX + 1, "room for every byte escaped");
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)in[i];

		if (c >= 0x20 && c < 0x7f && c != '\\') {
			out[o++] = (char)c;
			continue;
		}
		out[o++] = '\\';
		out[o++] = 'x';
		out[o++] = hex[c >> 4];
		out[o++] = hex[c & 15];
	}
	out[o] = '\0';
}

/* Search the line so far; the first match's line is recorded. */
static bool check_line(struct failon *f)
{
	for (int i = 0; i < f->n; i++) {
		if (!memmem(f->line, f->len, f->pat[i], strlen(f->pat[i])))
			continue;
		f->hits++;
		if (f->hit)
			return false;
		f->hit = true;
		f->hit_deferred = f->deferred[i];
		escape_line(f->text, f->line, f->len);
		return true;
	}
	return false;
}

bool failon_feed(struct failon *f, const u8 *buf, size_t len)
{
	bool first = false;

	if (!f->n)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (buf[i] == '\n' || buf[i] == '\r') {
			first |= f->len && check_line(f);
			f->len = 0;
			continue;
		}
		f->line[f->len++] = (char)buf[i];
		if (f->len < sizeof(f->line))
			continue;
		/* A line longer than the buffer: this piece searched, its end kept so that a
		 * match across the cut is found in the next piece. */
		first |= check_line(f);
		f->len = f->max_len - 1;
		memmove(f->line, f->line + sizeof(f->line) - f->len, f->len);
	}
	return first;
}
