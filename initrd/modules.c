/* Kernel modules for the initramfs: where they are, and their closure over dependencies. */
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lkvm/initrd.h"

/* File names a module may have, the name being what comes before; ".o" is what newer kernel
 * trees write into modules.order for NAME.ko. */
static const struct {
	const char *suffix;
	const char *as; /* how the file is named on disk: NULL, as listed */
} mod_suffixes[] = {
	{ ".ko", NULL },    { ".ko.xz", NULL }, { ".ko.zst", NULL },
	{ ".ko.gz", NULL }, { ".o", ".ko" },
};

enum visit { UNSEEN, VISITING, DONE };

struct mod {
	char *name;
	char *rel;   /* below the directory (or absolute, as old modules.dep files had them) */
	char **deps; /* names; NULL until known */
	size_t nr_deps;
	bool deps_known;
	enum visit state;
};

struct moddb {
	const char *dir;
	struct mod *m;
	size_t n;
	char **builtin;
	size_t nr_builtin;
	char *err;
	size_t errlen;
};

static int read_text(const char *path, char **out)
{
	u8 *data;
	size_t len;
	char *s;
	int ret = read_file(path, &data, &len);

	if (ret)
		return ret;
	s = realloc(data, len + 1);
	if (!s) {
		free(data);
		return -ENOMEM;
	}
	s[len] = '\0';
	*out = s;
	return 0;
}

/* The module name of a path ("kernel/fs/9p/9p.ko.xz" -> "9p", '-' -> '_') and, in *rel, the
 * file's name on disk. NULL when it does not name a module, or on ENOMEM (*oom set). */
static char *mod_name(const char *path, size_t n, char **rel, bool *oom)
{
	const char *base = path;
	char *name;

	for (size_t i = 0; i < n; i++)
		if (path[i] == '/')
			base = path + i + 1;
	for (size_t i = 0; i < ARRAY_SIZE(mod_suffixes); i++) {
		size_t sl = strlen(mod_suffixes[i].suffix), bl = n - (size_t)(base - path);

		if (bl <= sl || memcmp(base + bl - sl, mod_suffixes[i].suffix, sl))
			continue;
		name = strndup(base, bl - sl);
		if (rel) {
			*rel = malloc(n - sl + 8);
			if (*rel)
				snprintf(*rel, n - sl + 8, "%.*s%s", (int)(n - sl), path,
					 mod_suffixes[i].as ? mod_suffixes[i].as
							    : mod_suffixes[i].suffix);
		}
		if (!name || (rel && !*rel)) {
			free(name);
			if (rel)
				free(*rel);
			*oom = true;
			return NULL;
		}
		for (char *c = name; *c; c++)
			if (*c == '-')
				*c = '_';
		return name;
	}
	return NULL;
}

static void normalize(char *name)
{
	for (; *name; name++)
		if (*name == '-')
			*name = '_';
}

static struct mod *find(struct moddb *db, const char *name)
{
	for (size_t i = 0; i < db->n; i++)
		if (!strcmp(db->m[i].name, name))
			return &db->m[i];
	return NULL;
}

static bool is_builtin(const struct moddb *db, const char *name)
{
	for (size_t i = 0; i < db->nr_builtin; i++)
		if (!strcmp(db->builtin[i], name))
			return true;
	return false;
}

static int push_name(char ***v, size_t *n, char *name)
{
	char **nv = realloc(*v, (*n + 1) * sizeof(**v));

	if (!nv) {
		free(name);
		return -ENOMEM;
	}
	*v = nv;
	(*v)[(*n)++] = name;
	return 0;
}

/* Each whitespace-separated word of a line, as (start, length). */
static const char *next_word(const char **p, const char *end, size_t *n)
{
	const char *s = *p;

	while (s < end && (*s == ' ' || *s == '\t'))
		s++;
	*n = 0;
	while (s + *n < end && s[*n] != ' ' && s[*n] != '\t')
		(*n)++;
	*p = s + *n;
	return *n ? s : NULL;
}

/* A line of modules.dep ("REL: DEP..."), modules.order ("REL") or modules.builtin. */
static int parse_line(struct moddb *db, const char *line, const char *end, int kind)
{
	const char *colon = kind == 0 ? memchr(line, ':', (size_t)(end - line)) : NULL;
	const char *first_end = colon ? colon : end, *p = line, *w;
	struct mod m = { 0 }, *nm;
	bool oom = false;
	size_t n;
	int ret;

	w = next_word(&p, first_end, &n);
	if (!w)
		return 0;
	if (kind == 2) {
		char *name = mod_name(w, n, NULL, &oom);

		return name ? push_name(&db->builtin, &db->nr_builtin, name) : oom ? -ENOMEM : 0;
	}
	if (kind == 0 && !colon)
		return 0;
	m.name = mod_name(w, n, &m.rel, &oom);
	if (!m.name)
		return oom ? -ENOMEM : 0;
	if (find(db,
		 m.name)) { /* a second file of that name: the first one counts (modprobe's rule) */
		free(m.name);
		free(m.rel);
		return 0;
	}
	m.deps_known = kind == 0;
	for (p = colon ? colon + 1 : end; kind == 0 && (w = next_word(&p, end, &n));) {
		char *dep = mod_name(w, n, NULL, &oom);

		if (!dep && oom)
			ret = -ENOMEM;
		else
			ret = dep ? push_name(&m.deps, &m.nr_deps, dep) : 0;
		if (ret)
			goto err;
	}
	nm = realloc(db->m, (db->n + 1) * sizeof(*nm));
	if (!nm) {
		ret = -ENOMEM;
		goto err;
	}
	db->m = nm;
	db->m[db->n++] = m;
	return 0;
err:
	for (size_t i = 0; i < m.nr_deps; i++)
		free(m.deps[i]);
	free(m.deps);
	free(m.name);
	free(m.rel);
	return ret;
}

/* kind: 0 modules.dep, 1 modules.order, 2 modules.builtin. -ENOENT when the file is absent. */
static int load_list(struct moddb *db, const char *file, int kind)
{
	char path[4096], *text;
	int ret;

	if (snprintf(path, sizeof(path), "%s/%s", db->dir, file) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	ret = read_text(path, &text);
	if (ret)
		return ret;
	for (char *line = text, *nl; *line && !ret; line = nl + (*nl == '\n')) {
		nl = line + strcspn(line, "\n");
		ret = parse_line(db, line, nl, kind);
	}
	free(text);
	return ret;
}

static int host_path(const struct moddb *db, const struct mod *m, char *buf, size_t len)
{
	int n = m->rel[0] == '/' ? snprintf(buf, len, "%s", m->rel)
				 : snprintf(buf, len, "%s/%s", db->dir, m->rel);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* The "depends=" value of a module file's .modinfo section (not NUL-terminated: *vlen bytes),
 * bounds-checked against the file; NULL when the file is not a 64-bit little-endian ELF with
 * such a section. */
static const char *modinfo_depends(const u8 *f, size_t size, size_t *vlen)
{
	static const char key[] = "depends=";
	const Elf64_Ehdr *eh = (const void *)f;
	const Elf64_Shdr *sh, *strsec;

	if (size < sizeof(*eh) || memcmp(eh->e_ident, ELFMAG, SELFMAG) ||
	    eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB ||
	    eh->e_shentsize != sizeof(*sh) || !eh->e_shnum || eh->e_shstrndx >= eh->e_shnum ||
	    !range_ok(eh->e_shoff, (u64)eh->e_shnum * sizeof(*sh), size) || eh->e_shoff % 8)
		return NULL;
	sh = (const void *)(f + eh->e_shoff);
	strsec = &sh[eh->e_shstrndx];
	if (!range_ok(strsec->sh_offset, strsec->sh_size, size))
		return NULL;
	for (unsigned i = 0; i < eh->e_shnum; i++) {
		const char *sec, *end;

		if (sh[i].sh_name >= strsec->sh_size ||
		    strnlen((const char *)f + strsec->sh_offset + sh[i].sh_name,
			    strsec->sh_size - sh[i].sh_name) != sizeof(".modinfo") - 1 ||
		    memcmp(f + strsec->sh_offset + sh[i].sh_name, ".modinfo",
			   sizeof(".modinfo") - 1) ||
		    !range_ok(sh[i].sh_offset, sh[i].sh_size, size))
			continue;
		sec = (const char *)f + sh[i].sh_offset;
		end = sec + sh[i].sh_size;
		/* NUL-separated key=value strings, sometimes with NUL padding between them. */
		for (const char *s = sec; s < end; s += strnlen(s, (size_t)(end - s)) + 1) {
			size_t n = strnlen(s, (size_t)(end - s));

			if (n >= sizeof(key) - 1 && !memcmp(s, key, sizeof(key) - 1) &&
			    s + n < end) {
				*vlen = n - (sizeof(key) - 1);
				return s + sizeof(key) - 1;
			}
		}
		*vlen = 0; /* modpost always writes depends=; without it, nothing to load first */
		return "";
	}
	return NULL;
}

/* A module's dependencies from its own file (no modules.dep). */
static int read_deps(struct moddb *db, struct mod *m)
{
	char path[4096];
	const char *dep;
	size_t size, vlen;
	u8 *f;
	int ret = host_path(db, m, path, sizeof(path));

	if (!ret)
		ret = read_file(path, &f, &size);
	if (ret) {
		errfmt(db->err, db->errlen, "module %s: %s: %s", m->name, path, strerror(-ret));
		return ret;
	}
	dep = modinfo_depends(f, size, &vlen);
	if (!dep) {
		errfmt(db->err, db->errlen,
		       "module %s: %s has no readable .modinfo (a compressed module "
		       "needs modules.dep beside it: run depmod)",
		       m->name, path);
		free(f);
		return -ENOEXEC;
	}
	for (size_t i = 0; i < vlen && !ret;) {
		size_t n = strcspn(dep + i, ",");
		char *name;

		if (n > vlen - i)
			n = vlen - i;
		if (n) {
			name = strndup(dep + i, n);
			if (name)
				normalize(name);
			ret = name ? push_name(&m->deps, &m->nr_deps, name) : -ENOMEM;
		}
		i += n + 1;
	}
	free(f);
	m->deps_known = !ret;
	return ret;
}

static int append(struct moddb *db, const struct mod *m, struct kmod_list *out)
{
	char path[4096];
	struct kmod *v;
	int ret = host_path(db, m, path, sizeof(path));

	if (ret)
		return ret;
	v = realloc(out->v, (out->n + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	out->v = v;
	v[out->n].name = strdup(m->name);
	v[out->n].path = strdup(path);
	if (!v[out->n].name || !v[out->n].path) {
		free(v[out->n].name);
		free(v[out->n].path);
		return -ENOMEM;
	}
	out->n++;
	return 0;
}

/* Depth first: every dependency before the module, each module once. */
static int visit(struct moddb *db, const char *name, const char *needed_by, struct kmod_list *out)
{
	struct mod *m = find(db, name);
	int ret;

	if (!m) {
		if (is_builtin(db, name))
			return 0;
		errfmt(db->err, db->errlen,
		       "module %s%s%s: not in %s (neither a module nor built in)", name,
		       needed_by ? ", needed by " : "", needed_by ? needed_by : "", db->dir);
		return -ENOPKG;
	}
	if (m->state == DONE)
		return 0;
	if (m->state == VISITING) {
		errfmt(db->err, db->errlen, "module %s: dependency cycle", name);
		return -ELOOP;
	}
	m->state = VISITING;
	if (!m->deps_known) {
		ret = read_deps(db, m);
		if (ret)
			return ret;
	}
	/* The array may not move under us: find() results stay valid (no insertions now). */
	for (size_t i = 0; i < m->nr_deps; i++) {
		ret = visit(db, m->deps[i], m->name, out);
		if (ret)
			return ret;
	}
	m->state = DONE;
	return append(db, m, out);
}

static void moddb_free(struct moddb *db)
{
	for (size_t i = 0; i < db->n; i++) {
		for (size_t j = 0; j < db->m[i].nr_deps; j++)
			free(db->m[i].deps[j]);
		free(db->m[i].deps);
		free(db->m[i].name);
		free(db->m[i].rel);
	}
	free(db->m);
	for (size_t i = 0; i < db->nr_builtin; i++)
		free(db->builtin[i]);
	free(db->builtin);
}

void kmod_list_free(struct kmod_list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].name);
		free(l->v[i].path);
	}
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

int kmod_resolve(const char *dir, const char *const *names, size_t n, struct kmod_list *out,
		 char *err, size_t errlen)
{
	struct moddb db = { .dir = dir, .err = err, .errlen = errlen };
	int ret;

	out->v = NULL;
	out->n = 0;
	ret = load_list(&db, "modules.dep", 0);
	if (ret == -ENOENT)
		ret = load_list(&db, "modules.order", 1);
	if (ret) {
		errfmt(err, errlen, "%s: no modules.dep or modules.order: %s", dir, strerror(-ret));
		goto out;
	}
	ret = load_list(&db, "modules.builtin", 2);
	if (ret == -ENOENT)
		ret = 0;
	if (ret) {
		errfmt(err, errlen, "%s/modules.builtin: %s", dir, strerror(-ret));
		goto out;
	}
	for (size_t i = 0; i < n && !ret; i++) {
		bool optional = names[i][0] == '?';
		char *name = strdup(names[i] + optional);

		if (!name) {
			ret = -ENOMEM;
			break;
		}
		normalize(name);
		if (!optional || find(&db, name))
			ret = visit(&db, name, NULL, out);
		free(name);
	}
out:
	moddb_free(&db);
	if (ret)
		kmod_list_free(out);
	return ret;
}

static bool is_dir(const char *path)
{
	struct stat st;

	return !stat(path, &st) && S_ISDIR(st.st_mode);
}

/* Whether tree is a build tree of `release` where `make modules` ran. */
static bool tree_matches(const char *tree, const char *release)
{
	char path[4096], *rel;
	struct stat st;
	bool same;

	if (snprintf(path, sizeof(path), "%s/modules.order", tree) >= (int)sizeof(path) ||
	    stat(path, &st))
		return false;
	if (snprintf(path, sizeof(path), "%s/include/config/kernel.release", tree) >=
		    (int)sizeof(path) ||
	    read_text(path, &rel))
		return false;
	rel[strcspn(rel, "\n")] = '\0';
	same = !strcmp(rel, release);
	free(rel);
	return same;
}

int kmod_dir_find(const char *tree, const char *libmod, const char *release, char *dir, size_t len)
{
	int n;

	if (tree && tree_matches(tree, release)) {
		n = snprintf(dir, len, "%s", tree);
		return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
	}
	n = snprintf(dir, len, "%s/%s", libmod ? libmod : "/lib/modules", release);
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	return is_dir(dir) ? 0 : -ENOENT;
}

int kmod_beside(const char *kernel_path, char *libmod, size_t len)
{
	const char *slash = strrchr(kernel_path, '/'), *dir;
	int n;

	if (!slash)
		return -ENOENT;
	for (dir = slash; dir > kernel_path && dir[-1] != '/'; dir--)
		;
	if (slash - dir != 4 || strncmp(dir, "boot", 4))
		return -ENOENT;
	n = snprintf(libmod, len, "%.*slib/modules", (int)(dir - kernel_path), kernel_path);
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	return 0;
}

/* Where the modules of kernel_path (of `release`) are: --modules' DIR (moddir) as it is;
 * else its build tree, then <root>/lib/modules/RELEASE beside <root>/boot/KERNEL (an
 * unpacked package: that kernel's own, where the host's /lib/modules may hold another build
 * of the same release), then /lib/modules/RELEASE. 0, or -ENOENT: none. */
static int find_dir(const char *kernel_path, const char *moddir, const char *release, char *dir,
		    size_t len)
{
	char tree[PATH_MAX], beside[PATH_MAX];
	int n;

	if (moddir) {
		n = snprintf(dir, len, "%s", moddir);
		return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
	}
	kernel_tree(kernel_path, tree, sizeof(tree));
	if (!kmod_beside(kernel_path, beside, sizeof(beside)) &&
	    !kmod_dir_find(tree, beside, release, dir, len))
		return 0;
	return kmod_dir_find(tree, NULL, release, dir, len);
}

/* The modules the guest needs when the kernel has them as modules (a distribution kernel, a
 * tree after `make modules`); none when no module directory of its release exists (the
 * kernel then has to have everything built in, as the project's guest kernel does). */
int kmod_for_kernel(const char *kernel_path, const char *moddir, bool mmio, bool net,
		    struct kmod_list *mods, char *err, size_t errlen)
{
	/* pvpanic_pci where there is one, so a panic ends the run with 2 (panic=-1 alone would
	 * make it a reset, 125). */
	static const char *const names[] = { INITRD_MODULES_VIRTIOFS, INITRD_MODULES_9P_ROOT,
					     "?pvpanic_pci", "virtio_mmio", "?virtio_net" };
	const char *want[ARRAY_SIZE(names)];
	char release[256], dir[PATH_MAX];
	size_t n = 0;
	int ret;

	/* virtio_mmio only when a device of ours is on it, virtio_net when init sets up a NIC. */
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if ((mmio || strcmp(names[i], "virtio_mmio")) &&
		    (net || strcmp(names[i], "?virtio_net")))
			want[n++] = names[i];

	if (moddir && !is_dir(moddir)) {
		errfmt(err, errlen,
		       "--modules '%s': not a directory (give a lib/modules/RELEASE one)", moddir);
		return -ENOTDIR;
	}
	if (kernel_release(kernel_path, release, sizeof(release)) && !moddir)
		return 0; /* no release in it: nothing to look up (a freestanding kernel) */
	ret = find_dir(kernel_path, moddir, release, dir, sizeof(dir));
	if (ret) {
		pr_debug(
			"kernel %s: no module directory, assuming 9p, virtio and overlay are built in",
			release);
		return 0;
	}
	ret = kmod_resolve(dir, want, n, mods, err, errlen);
	if (ret == -ENOENT && moddir) {
		errfmt(err, errlen,
		       "--modules '%s': no modules.dep or modules.order in it (give a lib/modules/RELEASE directory)",
		       moddir);
		return ret;
	}
	if (ret == -ENOENT) {
		pr_debug(
			"kernel %s: no modules.dep or modules.order in %s, assuming 9p, virtio and overlay are built in",
			release, dir);
		return 0;
	}
	if (ret) {
		char why[256];

		snprintf(why, sizeof(why), "%s", err);
		errfmt(err, errlen, "kernel %s: its modules in %s: %s", release, dir, why);
		return ret;
	}
	pr_debug("kernel %s: %zu modules from %s", release, mods->n, dir);
	return 0;
}
