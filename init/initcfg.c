/* The /lkvm/config codec (lkvm encodes, its guest init decodes) and init's stage names. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/initcfg.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define HEADER_STRINGS 3 /* magic, version, length */

static const char *const root_names[] = {
	[INITCFG_ROOT_INITRAMFS] = "initramfs", [INITCFG_ROOT_9P_OVERLAY] = "9p-overlay"
};
static const char *const tty_names[] = { [INITCFG_TTY] = "tty", [INITCFG_RAW] = "raw" };
static const char *const ro_names[] = { "rw", "ro" };	   /* indexed by share.ro */
static const char *const fs_names[] = { "first", "only" }; /* indexed by fs_only */
static const char *const nic_names[] = { [INITCFG_NIC_UP] = "up", [INITCFG_NIC_DHCP] = "dhcp" };

static int name_index(const char *const *names, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(names[i], s))
			return (int)i;
	return -1;
}

/* A decimal number without sign, spaces or leading zeros, at most max. */
static int parse_uint(const char *s, unsigned long max, unsigned long *out)
{
	unsigned long v = 0;

	if (!*s || (s[0] == '0' && s[1]))
		return -EINVAL;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > (max - (unsigned long)(*s - '0')) / 10)
			return -EINVAL;
		v = v * 10 + (unsigned long)(*s - '0');
	}
	*out = v;
	return 0;
}

static bool str_ok(const char *s)
{
	return s && strnlen(s, INITCFG_MAX_STRING + 1) <= INITCFG_MAX_STRING;
}

static bool abs_path_ok(const char *s)
{
	return str_ok(s) && s[0] == '/';
}

/* (uid_t)-1 and (gid_t)-1 mean "unchanged" to setuid and setgid: never an id. */
#define MAX_ID 0xfffffffeUL

static int check_user(const struct initcfg *c)
{
	if (c->nr_groups > INITCFG_MAX_GROUPS || (c->nr_groups && !c->user))
		return -EINVAL;
	if (c->user && (c->uid > MAX_ID || c->gid > MAX_ID))
		return -EINVAL;
	for (size_t i = 0; i < c->nr_groups; i++)
		if (c->groups[i] > MAX_ID)
			return -EINVAL;
	return 0;
}

/* NULL (none), or 1 to INITCFG_PORT_NAME_MAX of A-Z a-z 0-9 . _ - */
static bool port_ok(const char *s)
{
	size_t n = s ? strlen(s) : 1;

	return !s ||
	       (n && n <= INITCFG_PORT_NAME_MAX &&
		strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
			n);
}

/* A virtio-fs tag: NULL, or a non-empty string (only with one beside it, for the root). */
static bool fs_tags_ok(const struct initcfg *c)
{
	if (c->root_fs_tag &&
	    (!str_ok(c->root_fs_tag) || !c->root_fs_tag[0] || c->root != INITCFG_ROOT_9P_OVERLAY))
		return false;
	for (size_t i = 0; i < c->nr_shares; i++) {
		const char *t = c->shares[i].fs_tag;

		if ((t && (!str_ok(t) || !t[0])) || (!t && c->shares[i].fs_only))
			return false;
	}
	return !c->root_fs_only || c->root_fs_tag;
}

int initcfg_check(const struct initcfg *c)
{
	for (size_t i = 0; i < c->argc; i++)
		if (!str_ok(c->argv[i]))
			return -EINVAL;
	for (size_t i = 0; i < c->envc; i++) {
		const char *eq;

		if (!str_ok(c->envp[i]))
			return -EINVAL;
		eq = strchr(c->envp[i], '=');
		if (!eq || eq == c->envp[i])
			return -EINVAL;
	}
	if (c->cwd && !abs_path_ok(c->cwd))
		return -EINVAL;
	if ((unsigned)c->root >= NELEM(root_names) || (unsigned)c->tty >= NELEM(tty_names))
		return -EINVAL;
	if (c->root == INITCFG_ROOT_9P_OVERLAY ? !str_ok(c->root_tag) || !c->root_tag[0]
					       : c->root_tag && c->root_tag[0])
		return -EINVAL;
	if (c->nr_shares > INITCFG_MAX_SHARES || c->nr_modules > INITCFG_MAX_MODULES)
		return -EINVAL;
	for (size_t i = 0; i < c->nr_shares; i++)
		if (!str_ok(c->shares[i].tag) || !c->shares[i].tag[0] ||
		    !abs_path_ok(c->shares[i].path))
			return -EINVAL;
	for (size_t i = 0; i < c->nr_modules; i++)
		if (!abs_path_ok(c->modules[i]))
			return -EINVAL;
	if ((c->stdio_dev && !abs_path_ok(c->stdio_dev)) ||
	    (c->stderr_dev && !abs_path_ok(c->stderr_dev)) || !port_ok(c->stdout_port) ||
	    !port_ok(c->stderr_port))
		return -EINVAL;
	if (c->rows > 0xffff || c->cols > 0xffff || !c->rows != !c->cols)
		return -EINVAL;
	if (c->exit_port > 0xffff - (LKVM_EXIT_PORT_LEN - 1))
		return -EINVAL;
	if (c->nr_nics > INITCFG_MAX_NICS || !fs_tags_ok(c))
		return -EINVAL;
	for (size_t i = 0; i < c->nr_nics; i++)
		if ((unsigned)c->nics[i].how >= NELEM(nic_names))
			return -EINVAL;
	return check_user(c);
}

/* ---- decoding: a table of keys, each with its field count and what it sets ---- */

struct dec {
	struct initcfg *c;
	bool store;	   /* false: first pass, only count argv and envp */
	size_t argc, envc; /* filled so far */
};

typedef int (*key_fn)(struct dec *d, const char *const *f);

static int key_arg(struct dec *d, const char *const *f)
{
	if (d->store)
		d->c->argv[d->argc] = (char *)f[0];
	d->argc++;
	return 0;
}

static int key_env(struct dec *d, const char *const *f)
{
	if (d->store)
		d->c->envp[d->envc] = (char *)f[0];
	d->envc++;
	return 0;
}

static int key_cwd(struct dec *d, const char *const *f)
{
	d->c->cwd = f[0];
	return 0;
}

static int key_root(struct dec *d, const char *const *f)
{
	int i = name_index(root_names, NELEM(root_names), f[0]);

	if (i < 0)
		return -EINVAL;
	d->c->root = (enum initcfg_root)i;
	d->c->root_tag = f[1];
	return 0;
}

static int key_share(struct dec *d, const char *const *f)
{
	int ro = name_index(ro_names, NELEM(ro_names), f[2]);
	struct initcfg *c = d->c;

	if (ro < 0 || c->nr_shares == INITCFG_MAX_SHARES)
		return -EINVAL;
	c->shares[c->nr_shares++] =
		(struct initcfg_share){ .tag = f[0], .path = f[1], .ro = ro == 1 };
	return 0;
}

static int key_module(struct dec *d, const char *const *f)
{
	if (d->c->nr_modules == INITCFG_MAX_MODULES)
		return -EINVAL;
	d->c->modules[d->c->nr_modules++] = f[0];
	return 0;
}

static int key_console(struct dec *d, const char *const *f)
{
	int t = name_index(tty_names, NELEM(tty_names), f[2]);

	if (t < 0)
		return -EINVAL;
	d->c->stdio_dev = f[0];
	d->c->stderr_dev = f[1];
	d->c->tty = (enum initcfg_tty)t;
	return 0;
}

/* A port's name ("" in the file: none). */
static int key_ports(struct dec *d, const char *const *f)
{
	d->c->stdout_port = f[0][0] ? f[0] : NULL;
	d->c->stderr_port = f[1][0] ? f[1] : NULL;
	return 0;
}

static int key_winsize(struct dec *d, const char *const *f)
{
	unsigned long r, c;

	if (parse_uint(f[0], 0xffff, &r) || parse_uint(f[1], 0xffff, &c) || !r || !c)
		return -EINVAL;
	d->c->rows = (unsigned)r;
	d->c->cols = (unsigned)c;
	return 0;
}

static int key_exit_port(struct dec *d, const char *const *f)
{
	unsigned long v;

	if (parse_uint(f[0], 0xffff - (LKVM_EXIT_PORT_LEN - 1), &v) || !v)
		return -EINVAL;
	d->c->exit_port = (uint16_t)v;
	return 0;
}

static int key_msize(struct dec *d, const char *const *f)
{
	unsigned long v;

	if (parse_uint(f[0], UINT32_MAX, &v) || !v)
		return -EINVAL;
	d->c->msize = (uint32_t)v;
	return 0;
}

static int key_user(struct dec *d, const char *const *f)
{
	unsigned long uid, gid;

	if (parse_uint(f[0], MAX_ID, &uid) || parse_uint(f[1], MAX_ID, &gid))
		return -EINVAL;
	d->c->user = true;
	d->c->uid = (uint32_t)uid;
	d->c->gid = (uint32_t)gid;
	return 0;
}

static int key_group(struct dec *d, const char *const *f)
{
	unsigned long gid;

	if (parse_uint(f[0], MAX_ID, &gid) || d->c->nr_groups == INITCFG_MAX_GROUPS)
		return -EINVAL;
	d->c->groups[d->c->nr_groups++] = (uint32_t)gid;
	return 0;
}

static int hex_digit(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	return -1;
}

/* "aa:bb:cc:dd:ee:ff", lower case, exactly (what put_mac writes). */
static int parse_mac(const char *s, uint8_t mac[6])
{
	for (int i = 0; i < 6; i++, s += 3) {
		int hi = hex_digit(s[0]), lo = hi < 0 ? -1 : hex_digit(s[1]);

		if (lo < 0 || s[2] != (i == 5 ? '\0' : ':'))
			return -EINVAL;
		mac[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

static int key_nic(struct dec *d, const char *const *f)
{
	int how = name_index(nic_names, NELEM(nic_names), f[1]);
	struct initcfg *c = d->c;

	if (how < 0 || c->nr_nics == INITCFG_MAX_NICS || parse_mac(f[0], c->nics[c->nr_nics].mac))
		return -EINVAL;
	c->nics[c->nr_nics++].how = (enum initcfg_nic_how)how;
	return 0;
}

/* The root's or a share's virtio-fs tag, by its 9p tag (an earlier record), once. */
static int key_virtiofs(struct dec *d, const char *const *f)
{
	int only = name_index(fs_names, NELEM(fs_names), f[2]);
	struct initcfg *c = d->c;

	if (only < 0)
		return -EINVAL;
	if (c->root_tag && !strcmp(c->root_tag, f[0]) && !c->root_fs_tag) {
		c->root_fs_tag = f[1];
		c->root_fs_only = only;
		return 0;
	}
	for (size_t i = 0; i < c->nr_shares; i++)
		if (!strcmp(c->shares[i].tag, f[0]) && !c->shares[i].fs_tag) {
			c->shares[i].fs_tag = f[1];
			c->shares[i].fs_only = only;
			return 0;
		}
	return -EINVAL;
}

static int key_debug(struct dec *d, const char *const *f)
{
	d->c->debug = true;
	return 0;
}

#define MAX_FIELDS 3
static const struct {
	const char *key;
	unsigned nfields;
	bool repeat; /* may appear more than once */
	key_fn fn;
} keys[] = {
	{ "arg", 1, true, key_arg },	       { "env", 1, true, key_env },
	{ "cwd", 1, false, key_cwd },	       { "root", 2, false, key_root },
	{ "share", 3, true, key_share },       { "module", 1, true, key_module },
	{ "console", 3, false, key_console },  { "ports", 2, false, key_ports },
	{ "winsize", 2, false, key_winsize },  { "exit-port", 1, false, key_exit_port },
	{ "msize", 1, false, key_msize },      { "user", 2, false, key_user },
	{ "group", 1, true, key_group },       { "nic", 2, true, key_nic },
	{ "virtiofs", 3, true, key_virtiofs }, { "debug", 0, false, key_debug },
};

/* The next string at *pos (the buffer ends with a NUL, checked by the caller). */
static const char *next_string(const char *buf, size_t len, size_t *pos)
{
	const char *s = buf + *pos;
	size_t n;

	if (*pos >= len)
		return NULL;
	n = strnlen(s, len - *pos);
	if (n > INITCFG_MAX_STRING)
		return NULL;
	*pos += n + 1;
	return s;
}

/* One walk over the records after the header. */
static int walk(const char *buf, size_t len, size_t pos, struct dec *d)
{
	bool seen[NELEM(keys)] = { false };
	bool have_root = false;

	while (pos < len) {
		const char *key = next_string(buf, len, &pos), *f[MAX_FIELDS];
		size_t k;
		int ret;

		if (!key)
			return -EINVAL;
		for (k = 0; k < NELEM(keys) && strcmp(keys[k].key, key); k++)
			;
		if (k == NELEM(keys) || (seen[k] && !keys[k].repeat))
			return -EINVAL;
		seen[k] = true;
		for (unsigned i = 0; i < keys[k].nfields; i++)
			if (!(f[i] = next_string(buf, len, &pos)))
				return -EINVAL;
		if (keys[k].fn == key_root)
			have_root = true;
		/* The first pass only counts; the second one sets everything. */
		if (!d->store && keys[k].fn != key_arg && keys[k].fn != key_env)
			continue;
		ret = keys[k].fn(d, f);
		if (ret)
			return ret;
	}
	return have_root ? 0 : -EINVAL;
}

void initcfg_free(struct initcfg *c)
{
	free(c->argv);
	free(c->envp);
	c->argv = c->envp = NULL;
	c->argc = c->envc = 0;
}

int initcfg_decode(const char *buf, size_t len, struct initcfg *c)
{
	const char *magic, *version, *length;
	struct dec d = { .c = c };
	unsigned long v, total;
	size_t pos = 0;
	int ret;

	memset(c, 0, sizeof(*c));
	if (!len || len > INITCFG_MAX_SIZE || buf[len - 1] != '\0')
		return -EINVAL;
	magic = next_string(buf, len, &pos);
	version = next_string(buf, len, &pos);
	length = next_string(buf, len, &pos);
	if (!magic || !version || !length || strcmp(magic, INITCFG_MAGIC) ||
	    parse_uint(version, 0xffff, &v) || v != INITCFG_VERSION ||
	    parse_uint(length, INITCFG_MAX_SIZE, &total) || total != len)
		return -EINVAL;
	ret = walk(buf, len, pos, &d);
	if (ret)
		return ret;
	c->argv = calloc(d.argc + 1, sizeof(*c->argv));
	c->envp = calloc(d.envc + 1, sizeof(*c->envp));
	if (!c->argv || !c->envp) {
		initcfg_free(c);
		return -ENOMEM;
	}
	c->argc = d.argc;
	c->envc = d.envc;
	d = (struct dec){ .c = c, .store = true };
	ret = walk(buf, len, pos, &d);
	if (!ret)
		ret = initcfg_check(c);
	if (ret) {
		initcfg_free(c);
		memset(c, 0, sizeof(*c));
	}
	return ret;
}

/* ---- encoding ---- */

struct enc {
	char *buf;
	size_t len, cap;
	int err;
};

static void put(struct enc *e, const char *s)
{
	size_t n = strlen(s) + 1;

	if (e->err)
		return;
	if (n > e->cap - e->len) {
		size_t cap = e->cap ? e->cap : 4096;
		char *b;

		while (n > cap - e->len && cap <= INITCFG_MAX_SIZE)
			cap *= 2;
		if (n > cap - e->len) {
			e->err = -EINVAL;
			return;
		}
		b = realloc(e->buf, cap);
		if (!b) {
			e->err = -ENOMEM;
			return;
		}
		e->buf = b;
		e->cap = cap;
	}
	memcpy(e->buf + e->len, s, n);
	e->len += n;
}

static void put_uint(struct enc *e, unsigned long v)
{
	char s[24];
	size_t i = sizeof(s) - 1;

	s[i] = '\0';
	do
		s[--i] = (char)('0' + v % 10);
	while ((v /= 10));
	put(e, s + i);
}

static size_t digits(size_t v)
{
	size_t n = 1;

	while (v >= 10) {
		v /= 10;
		n++;
	}
	return n;
}

/* CMD, its environment, the root, shares, modules, consoles and the numbers (format version 1). */
static void put_cmd(struct enc *e, const struct initcfg *c)
{
	for (size_t i = 0; i < c->argc; i++) {
		put(e, "arg");
		put(e, c->argv[i]);
	}
	for (size_t i = 0; i < c->envc; i++) {
		put(e, "env");
		put(e, c->envp[i]);
	}
	if (c->cwd) {
		put(e, "cwd");
		put(e, c->cwd);
	}
	put(e, "root");
	put(e, root_names[c->root]);
	put(e, c->root_tag ? c->root_tag : "");
	for (size_t i = 0; i < c->nr_shares; i++) {
		put(e, "share");
		put(e, c->shares[i].tag);
		put(e, c->shares[i].path);
		put(e, ro_names[c->shares[i].ro]);
	}
	for (size_t i = 0; i < c->nr_modules; i++) {
		put(e, "module");
		put(e, c->modules[i]);
	}
	if (c->stdio_dev || c->stderr_dev || c->tty != INITCFG_TTY) {
		put(e, "console");
		put(e, c->stdio_dev ? c->stdio_dev : INITCFG_DEFAULT_STDIO);
		put(e, c->stderr_dev ? c->stderr_dev : INITCFG_DEFAULT_STDERR);
		put(e, tty_names[c->tty]);
	}
	if (c->stdout_port || c->stderr_port) {
		put(e, "ports");
		put(e, c->stdout_port ? c->stdout_port : "");
		put(e, c->stderr_port ? c->stderr_port : "");
	}
	if (c->rows) {
		put(e, "winsize");
		put_uint(e, c->rows);
		put_uint(e, c->cols);
	}
	if (c->exit_port) {
		put(e, "exit-port");
		put_uint(e, c->exit_port);
	}
	if (c->msize) {
		put(e, "msize");
		put_uint(e, c->msize);
	}
}

/* The records of CMD's user and its NICs (format version 2). */
static void put_user_nics(struct enc *e, const struct initcfg *c)
{
	if (c->user) {
		put(e, "user");
		put_uint(e, c->uid);
		put_uint(e, c->gid);
	}
	for (size_t i = 0; i < c->nr_groups; i++) {
		put(e, "group");
		put_uint(e, c->groups[i]);
	}
	for (size_t i = 0; i < c->nr_nics; i++) {
		const uint8_t *m = c->nics[i].mac;
		char mac[18];

		snprintf(mac, sizeof(mac), "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3],
			 m[4], m[5]);
		put(e, "nic");
		put(e, mac);
		put(e, nic_names[c->nics[i].how]);
	}
}

static void put_virtiofs(struct enc *e, const char *tag, const char *fs_tag, bool only)
{
	if (!fs_tag)
		return;
	put(e, "virtiofs");
	put(e, tag);
	put(e, fs_tag);
	put(e, fs_names[only]);
}

/* The virtio-fs tags of the root and the shares, and "debug" (format version 3). */
static void put_fs_debug(struct enc *e, const struct initcfg *c)
{
	put_virtiofs(e, c->root_tag, c->root_fs_tag, c->root_fs_only);
	for (size_t i = 0; i < c->nr_shares; i++)
		put_virtiofs(e, c->shares[i].tag, c->shares[i].fs_tag, c->shares[i].fs_only);
	if (c->debug)
		put(e, "debug");
}

static void put_body(struct enc *e, const struct initcfg *c)
{
	put_cmd(e, c);
	put_user_nics(e, c);
	put_fs_debug(e, c);
}

int initcfg_encode(const struct initcfg *c, char **out, size_t *len)
{
	struct enc body = { 0 }, e = { 0 };
	size_t fixed, total;
	int ret = initcfg_check(c);

	if (ret)
		return ret;
	put_body(&body, c);
	if (body.err) {
		free(body.buf);
		return body.err;
	}
	/* The length field counts itself: find the digit count that is a fixed point. */
	fixed = sizeof(INITCFG_MAGIC) + digits(INITCFG_VERSION) + 1 + 1 /* the length's NUL */ +
		body.len;
	total = fixed + 1;
	while (digits(total) + fixed != total)
		total = fixed + digits(total);
	put(&e, INITCFG_MAGIC);
	put_uint(&e, INITCFG_VERSION);
	put_uint(&e, total);
	if (!e.err && total > INITCFG_MAX_SIZE)
		e.err = -EINVAL;
	if (!e.err && body.len > e.cap - e.len) {
		char *b = realloc(e.buf, total);

		if (b) {
			e.buf = b;
			e.cap = total;
		} else {
			e.err = -ENOMEM;
		}
	}
	if (!e.err) {
		memcpy(e.buf + e.len, body.buf, body.len);
		e.len += body.len;
	}
	free(body.buf);
	if (e.err) {
		free(e.buf);
		return e.err;
	}
	*out = e.buf;
	*len = e.len;
	return 0;
}

/* ---- CMD's framed standard input ---- */

size_t initcfg_stdin_encode(const uint8_t *in, size_t n, uint8_t *out)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		if (in[i] == INITCFG_STDIN_ESC)
			out[o++] = INITCFG_STDIN_ESC;
		out[o++] = in[i];
	}
	return o;
}

size_t initcfg_stdin_decode(struct initcfg_stdin_dec *d, const uint8_t *in, size_t n, uint8_t *out)
{
	size_t o = 0;

	for (size_t i = 0; i < n && !d->eof; i++) {
		if (d->esc) {
			d->esc = false;
			if (in[i] == INITCFG_STDIN_EOF)
				d->eof = true;
			else
				out[o++] = in[i];
		} else if (in[i] == INITCFG_STDIN_ESC) {
			d->esc = true;
		} else {
			out[o++] = in[i];
		}
	}
	return o;
}

/* ---- init stages ---- */

static const char *const stage_names[] = {
	[LKVM_STAGE_CONFIG] = ("reading " INITCFG_PATH),
	[LKVM_STAGE_MOUNT] = "mounting proc, sys, dev, tmp or run",
	[LKVM_STAGE_MODULE] = "loading a kernel module",
	[LKVM_STAGE_ROOT] = "mounting the 9p root and its overlay",
	[LKVM_STAGE_SHARE] = "mounting a share",
	[LKVM_STAGE_CONSOLE] = "opening the console",
	[LKVM_STAGE_FORK] = "starting the command",
};
_Static_assert(NELEM(stage_names) == LKVM_STAGE_NR, "one name per stage");

static const struct {
	unsigned stage;
	int err; /* 0: any */
	const char *hint;
} stage_hints[] = {
	{ LKVM_STAGE_MOUNT, ENODEV,
	  "the kernel needs CONFIG_PROC_FS, CONFIG_SYSFS, CONFIG_DEVTMPFS, "
	  "CONFIG_TMPFS and CONFIG_UNIX98_PTYS" },
	{ LKVM_STAGE_MODULE, ENOEXEC,
	  "the module was built for another kernel (release or build)" },
	{ LKVM_STAGE_MODULE, EOPNOTSUPP, "a compressed module needs CONFIG_MODULE_DECOMPRESS" },
	{ LKVM_STAGE_MODULE, ENOSYS, "the kernel has no module support (CONFIG_MODULES)" },
	{ LKVM_STAGE_ROOT, ENODEV,
	  "the kernel needs CONFIG_9P_FS, CONFIG_NET_9P and CONFIG_OVERLAY_FS; "
	  "--fs virtiofs: CONFIG_FUSE_FS and CONFIG_VIRTIO_FS" },
	{ LKVM_STAGE_ROOT, EINVAL, "the kernel needs CONFIG_NET_9P_VIRTIO (9p over virtio)" },
	{ LKVM_STAGE_ROOT, ENOENT, "no virtio-9p or virtio-fs device with the root's tag" },
	{ LKVM_STAGE_SHARE, ENODEV,
	  "the kernel needs CONFIG_9P_FS and CONFIG_NET_9P; "
	  "--fs virtiofs: CONFIG_FUSE_FS and CONFIG_VIRTIO_FS" },
	{ LKVM_STAGE_SHARE, EINVAL, "the kernel needs CONFIG_NET_9P_VIRTIO (9p over virtio)" },
	{ LKVM_STAGE_SHARE, ENOENT, "no virtio-9p or virtio-fs device with the share's tag" },
	{ LKVM_STAGE_CONSOLE, 0,
	  "the kernel needs CONFIG_VIRTIO_CONSOLE and the VM a virtio-console" },
};

const char *initcfg_stage_name(unsigned stage)
{
	return stage < NELEM(stage_names) ? stage_names[stage] : NULL;
}

const char *initcfg_stage_hint(unsigned stage, int err)
{
	for (size_t i = 0; i < NELEM(stage_hints); i++)
		if (stage_hints[i].stage == stage &&
		    (!stage_hints[i].err || stage_hints[i].err == err))
			return stage_hints[i].hint;
	return "";
}
