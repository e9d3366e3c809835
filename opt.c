/* The option-table engine: argv (getopt_long, made from the table) and KEY=VALUE lists parsed into a struct, and --help made from the same table. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/opt.h"

#define MAX_OPTS 48	/* options of one argv set */
#define LONG_BASE 0x100 /* getopt_long's value for opts[i] is LONG_BASE + i */

int opt_uint(const char *s, unsigned long long min, unsigned long long max, unsigned long long *out)
{
	unsigned long long v;
	char *end;

	/* Digits only: no sign, space or prefix, which strtoull would take. */
	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

static void store(void *t, size_t size, unsigned long long v)
{
	switch (size) {
	case 1:
		*(u8 *)t = (u8)v;
		break;
	case 2:
		*(u16 *)t = (u16)v;
		break;
	case 4:
		*(u32 *)t = (u32)v;
		break;
	default:
		*(u64 *)t = v;
	}
}

/* "a|b|c" (sep "|", last "|") or "a, b or c" (sep ", ", last " or "). */
static void choice_list(const struct opt *o, const char *sep, const char *last, char *buf,
			size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (int i = 0; o->choices[i].name && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s",
				      i == 0		       ? ""
				      : o->choices[i + 1].name ? sep
							       : last,
				      o->choices[i].name);
}

static int apply(const struct opt_set *s, const struct opt *o, const char *v, void *base, char *err,
		 size_t errlen)
{
	char *t = (char *)base + o->off, list[128];
	unsigned long long n;

	switch (o->kind) {
	case OPT_STR:
		if (o->bad && (!*v || (o->max && strlen(v) > o->max))) {
			errfmt(err, errlen, "%s%s: %s", s->prefix, o->name, o->bad);
			return -EINVAL;
		}
		*(const char **)t = v;
		return 0;
	case OPT_UINT:
		if (opt_uint(v, o->min, o->max, &n)) {
			errfmt(err, errlen, "%s%s '%s': %s %llu to %llu", s->prefix, o->name, v,
			       o->bad, o->min, o->max);
			return -EINVAL;
		}
		store(t, o->size, n);
		return 0;
	case OPT_CHOICE:
		for (const struct opt_choice *c = o->choices; c->name; c++) {
			if (!strcmp(v, c->name)) {
				store(t, o->size, (unsigned long long)c->val);
				return 0;
			}
		}
		choice_list(o, ", ", " or ", list, sizeof(list));
		errfmt(err, errlen, "%s%s '%s': %s %s", s->prefix, o->name, v, s->verb, list);
		return -EINVAL;
	case OPT_FN:
		return o->fn(o, v, base, err, errlen);
	default:
		return -EINVAL;
	}
}

/* One option given (v NULL when it has none). 1 for --help. */
static int take(const struct opt_set *s, const struct opt *o, const char *v, void *base, FILE *out,
		char *err, size_t errlen)
{
	if (o->given)
		*(bool *)((char *)base + o->given - 1) = true;
	switch (o->kind) {
	case OPT_HELP:
		if (s->usage)
			s->usage(out);
		return 1;
	case OPT_FLAG:
		*(bool *)((char *)base + o->off) = true;
		return 0;
	default:
		return apply(s, o, v, base, err, errlen);
	}
}

static bool has_value(const struct opt *o)
{
	return o->kind != OPT_FLAG && o->kind != OPT_HELP;
}

static void msg(char *err, size_t errlen, const struct opt_msg *m, const char *arg, size_t len)
{
	errfmt(err, errlen, "%s%.*s%s", m->lead, (int)len, arg, m->tail);
}

/* getopt_long's tables, made from s: the long options and the short-option string. */
static int make_getopt(const struct opt_set *s, struct option *lo, char *shorts)
{
	int n = 0;

	if (s->in_order)
		*shorts++ = '+';
	*shorts++ = ':'; /* a missing value is ':', not '?' */
	for (const struct opt *o = s->opts; o->kind != OPT_END; o++, n++) {
		if (n == MAX_OPTS)
			return -E2BIG;
		lo[n] = (struct option){ o->name,
					 !has_value(o) ? no_argument
					 : o->optional ? optional_argument
						       : required_argument,
					 NULL, LONG_BASE + n };
		if (o->short_name) {
			*shorts++ = o->short_name;
			if (has_value(o))
				*shorts++ = ':';
		}
	}
	lo[n] = (struct option){ 0 };
	*shorts = '\0';
	return 0;
}

static const struct opt *by_short(const struct opt_set *s, int c)
{
	for (const struct opt *o = s->opts; o->kind != OPT_END; o++)
		if (o->short_name && o->short_name == c)
			return o;
	return NULL;
}

/* s->exact: the word is --NAME or --NAME=..., not a prefix that getopt_long took. */
static bool spelled_out(const char *word, const char *name)
{
	size_t n = strlen(name);

	return !strncmp(word, "--", 2) && !strncmp(word + 2, name, n) &&
	       (!word[n + 2] || word[n + 2] == '=');
}

int opt_parse_argv(const struct opt_set *s, int argc, char **argv, void *base, FILE *out, char *err,
		   size_t errlen)
{
	struct option lo[MAX_OPTS + 1];
	char shorts[3 * MAX_OPTS + 3];
	int c, ret, at; /* at: where the last getopt_long call started */

	if (make_getopt(s, lo, shorts) < 0) {
		errfmt(err, errlen, "more than %d options in one table", MAX_OPTS);
		return -E2BIG;
	}
	/* getopt keeps its position in globals; reset so parsing can run more than once. */
	optind = 0;
	opterr = 0;
	for (;;) {
		int idx = -1;
		const struct opt *o;

		at = optind ? optind : 1;
		c = getopt_long(argc, argv, shorts, lo, &idx);
		if (c == -1)
			break;
		if (c == ':') {
			msg(err, errlen, &s->needs_value, argv[optind - 1],
			    strcspn(argv[optind - 1], "="));
			return -EINVAL;
		}
		o = c >= LONG_BASE ? &s->opts[c - LONG_BASE] : by_short(s, c);
		if (!o || (s->exact && idx >= 0 && !spelled_out(argv[at], o->name))) {
			msg(err, errlen, &s->unknown, argv[o ? at : optind - 1],
			    strlen(argv[o ? at : optind - 1]));
			return -EINVAL;
		}
		if (s->empty_is_missing && has_value(o) && !o->optional && optarg && !*optarg) {
			errfmt(err, errlen, "%s--%s%s", s->needs_value.lead, o->name,
			       s->needs_value.tail);
			return -EINVAL;
		}
		ret = take(s, o, optarg, base, out, err, errlen);
		if (ret)
			return ret < 0 ? -EINVAL : ret;
	}
	/* The last call took exactly a "--" (not an option's value "--"): the rest is trailing. */
	if (s->trailing && optind == at + 1 && !strcmp(argv[at], "--"))
		return s->trailing(base, argc - optind, argv + optind, err, errlen) ? -EINVAL : 0;
	if (optind < argc) {
		msg(err, errlen, &s->unexpected, argv[optind], strlen(argv[optind]));
		return -EINVAL;
	}
	return 0;
}

/* A long option as getopt_long takes it: the exact name, else the one name it begins. */
static const struct opt *by_long(const struct opt_set *s, const char *w, size_t len)
{
	const struct opt *found = NULL;
	int n = 0;

	for (const struct opt *o = s->opts; o->kind != OPT_END; o++) {
		if (!strncmp(o->name, w, len) && strlen(o->name) == len)
			return o;
		if (!strncmp(o->name, w, len)) {
			found = o;
			n++;
		}
	}
	return n == 1 ? found : NULL;
}

const struct opt *opt_argv_unit(const struct opt_set *s, int argc, char **argv, int at, int *nwords)
{
	const char *w = argv[at];
	const struct opt *o;

	*nwords = 1;
	if (w[0] != '-' || !w[1] || !strcmp(w, "--"))
		return NULL;
	if (w[1] == '-') {
		o = by_long(s, w + 2, strcspn(w + 2, "="));
		if (o && has_value(o) && !o->optional && !strchr(w, '=') && at + 1 < argc)
			*nwords = 2;
		return o;
	}
	o = by_short(s, w[1]);
	if (o && has_value(o) && !w[2] && at + 1 < argc)
		*nwords = 2;
	return o;
}

static int find_key(const struct opt_set *s, const char *k, size_t len)
{
	for (int i = 0; s->opts[i].kind != OPT_END; i++)
		if (strlen(s->opts[i].name) == len && !memcmp(s->opts[i].name, k, len))
			return i;
	return -1;
}

/* Strict sets: what is wrong with one KEY=VALUE item, or NULL. */
static int check_item(const struct opt_set *s, const char *p, size_t tlen, const char *eq,
		      const char *whole, int i, unsigned seen, char *err, size_t errlen)
{
	size_t klen = eq ? (size_t)(eq - p) : tlen;

	if (tlen == 0)
		errfmt(err, errlen, "%s: empty item in '%s' (stray comma?)", s->name, whole);
	else if (!eq)
		errfmt(err, errlen, "%s: '%.*s' is not key=value", s->name, (int)tlen, p);
	else if (i < 0)
		errfmt(err, errlen, "%s: unknown key '%.*s'", s->name, (int)klen, p);
	else if ((seen & (1u << i)) && !s->opts[i].repeat)
		errfmt(err, errlen, "%s: duplicate key '%s'", s->name, s->opts[i].name);
	else if (klen + 1 == tlen)
		errfmt(err, errlen, "%s: empty value for '%s'", s->name, s->opts[i].name);
	else
		return 0;
	return -EINVAL;
}

/* Lenient sets: whether the item fits its key (a flag alone, a key with a value). */
static bool item_fits(const struct opt_set *s, int i, const char *eq, size_t vlen)
{
	return i >= 0 && (s->opts[i].kind == OPT_FLAG) == !eq && (!eq || vlen > 0);
}

int opt_parse_kv(const struct opt_set *s, const char *list, const char *whole, void *base,
		 unsigned *seen, char *err, size_t errlen)
{
	unsigned got = 0;

	for (const char *p = list;; p++) {
		size_t tlen = strcspn(p, ",");
		const char *eq = memchr(p, '=', tlen);
		int i = find_key(s, p, eq ? (size_t)(eq - p) : tlen), ret = 0;
		size_t vlen = eq ? tlen - (size_t)(eq - p) - 1 : 0;
		char *val = NULL;

		if (s->lenient && tlen == 0)
			goto next;
		if (s->lenient ? !item_fits(s, i, eq, vlen)
			       : check_item(s, p, tlen, eq, whole, i, got, err, errlen) < 0)
			goto refused;
		if (eq && !(val = strndup(eq + 1, vlen))) {
			errfmt(err, errlen, "%s: out of memory", s->name);
			return -ENOMEM;
		}
		got |= 1u << i;
		ret = take(s, &s->opts[i], val, base, NULL, err, errlen);
		free(val);
		if (ret < 0)
			goto refused;
next:
		p += tlen;
		if (!*p)
			break;
		continue;
refused:
		if (s->lenient) {
			char keys[256];

			opt_kv_list(s, keys, sizeof(keys));
			errfmt(err, errlen, "%s '%s': unknown option '%.*s' (want %s)", s->name,
			       whole, (int)tlen, p, keys);
		}
		return -EINVAL;
	}
	if (seen)
		*seen = got;
	return 0;
}

/* ---- help ---- */

/* "--name ARG", "-k, --kernel FILE", "key=ARG", "flag", by the set's kind. */
static void left_column(const struct opt_set *s, const struct opt *o, char *buf, size_t len)
{
	char arg[128] = "";
	size_t n = 0;

	if (o->arg)
		snprintf(arg, sizeof(arg), "%s", o->arg);
	else if (o->kind == OPT_CHOICE)
		choice_list(o, "|", "|", arg, sizeof(arg));
	else if (o->kind == OPT_UINT)
		snprintf(arg, sizeof(arg), "N");
	if (s->name) { /* a key of -n or -d */
		snprintf(buf, len, "%s%s%s", o->name, has_value(o) ? "=" : "",
			 has_value(o) ? arg : "");
		return;
	}
	if (o->short_name)
		n = (size_t)snprintf(buf, len, "  -%c, ", o->short_name);
	else
		n = (size_t)snprintf(buf, len, s->short_col ? "      " : "  ");
	if (!has_value(o))
		snprintf(buf + n, len - n, "--%s", o->name);
	else
		snprintf(buf + n, len - n, o->optional ? "--%s[=%s]" : "--%s %s", o->name, arg);
}

/* left at indent, then the help from column col (two spaces after a longer left), one line
 * per '\n'. */
static void help_lines(FILE *out, int indent, const char *left, int col, const char *help)
{
	int n = fprintf(out, "%*s%s", indent, "", left);

	for (const char *h = help; h && *h;) {
		size_t l = strcspn(h, "\n");

		fprintf(out, "%*s%.*s\n", n + 2 <= col ? col - n : 2, "", (int)l, h);
		h += l + (h[l] == '\n');
		n = 0;
	}
	if (!help || !*help)
		fputc('\n', out);
}

static void usage_at(FILE *out, const struct opt_set *s, int indent)
{
	char left[160];

	for (const struct opt *o = s->opts; o->kind != OPT_END; o++) {
		left_column(s, o, left, sizeof(left));
		help_lines(out, indent, left, indent + s->help_col, o->help);
		if (o->more_help)
			o->more_help(out);
		if (o->keys)
			usage_at(out, o->keys, s->help_col + 2);
	}
}

void opt_usage(FILE *out, const struct opt_set *s)
{
	usage_at(out, s, 0);
}

void opt_kv_list(const struct opt_set *s, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (const struct opt *o = s->opts; o->kind != OPT_END && n < len; o++) {
		char item[160];

		left_column(s, o, item, sizeof(item));
		n += (size_t)snprintf(buf + n, len - n, "%s%s", o == s->opts ? "" : ", ", item);
	}
}
