/* Unit tests of initrd/: cpio writer, lkvm's archive, environment, kernel discovery, modules. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "lkvm/initrd.h"

/* ---- helpers: a temporary directory, files in it, and a newc reader ---- */

static char tmp[64];

static void tmp_setup(void)
{
	strcpy(tmp, "/tmp/lkvm-initrd-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	return remove(p);
}

static void tmp_teardown(void)
{
	nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Writes data at tmp/rel, creating the directories on the way. */
static void put_file(const char *rel, const void *data, size_t len)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tmp, rel);
	for (char *s = strchr(path + strlen(tmp) + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = '\0';
		mkdir(path, 0755);
		*s = '/';
	}
	f = fopen(path, "wb");
	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	ck_assert_uint_eq(fwrite(data, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

static void put_text(const char *rel, const char *text)
{
	put_file(rel, text, strlen(text));
}

struct entry {
	char name[256];
	u32 mode, rmajor, rminor, size;
	const u8 *data;
};

static u32 hex8(const u8 *p)
{
	char s[9];

	memcpy(s, p, 8);
	s[8] = '\0';
	return (u32)strtoul(s, NULL, 16);
}

/* Reads a newc archive back, checking its framing; returns the number of entries (the
 * trailer excluded). */
static size_t parse_newc(const u8 *a, size_t len, struct entry *e, size_t max)
{
	size_t pos = 0, n = 0;

	ck_assert_uint_eq(len % 4, 0);
	for (;;) {
		struct entry x = { 0 };
		u32 namesize;

		ck_assert_uint_le(pos + 110, len);
		ck_assert_mem_eq(a + pos, "070701", 6);
		x.mode = hex8(a + pos + 14);
		x.size = hex8(a + pos + 54);
		x.rmajor = hex8(a + pos + 78);
		x.rminor = hex8(a + pos + 86);
		namesize = hex8(a + pos + 94);
		ck_assert_uint_eq(hex8(a + pos + 102), 0);
		ck_assert_uint_lt(namesize, sizeof(x.name));
		ck_assert_uint_le(pos + 110 + namesize, len);
		memcpy(x.name, a + pos + 110, namesize);
		ck_assert_uint_eq(x.name[namesize - 1], 0);
		pos = ALIGN_UP(pos + 110 + namesize, 4);
		x.data = a + pos;
		ck_assert_uint_le(pos + x.size, len);
		pos = ALIGN_UP(pos + x.size, 4);
		if (!strcmp(x.name, "TRAILER!!!")) {
			ck_assert_uint_eq(pos, len);
			return n;
		}
		ck_assert_uint_lt(n, max);
		e[n++] = x;
	}
}

static const struct entry *find_entry(const struct entry *e, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(e[i].name, name))
			return &e[i];
	return NULL;
}

/* Compares tmp/rel with data. */
static void assert_file(const char *rel, const void *data, size_t len)
{
	char path[512];
	u8 *got;
	size_t glen;

	snprintf(path, sizeof(path), "%s/%s", tmp, rel);
	ck_assert_msg(read_file(path, &got, &glen) == 0, "%s missing", path);
	ck_assert_uint_eq(glen, len);
	ck_assert(!memcmp(got, data, len));
	free(got);
}

/* Extracts the archive with GNU cpio (installed by scripts/deps.sh test) under tmp/x. */
static void extract(const struct cpio *c)
{
	char cmd[256];
	int rc;

	put_file("archive.cpio", c->buf, c->len);
	snprintf(cmd, sizeof(cmd),
		 "mkdir -p %s/x && cd %s/x && "
		 "cpio -idm --quiet --no-absolute-filenames < ../archive.cpio 2>&1",
		 tmp, tmp);
	rc = system(cmd);
	/* Only root may make /dev/console; everything else must come out. */
	ck_assert_msg(rc == 0 || geteuid() != 0, "cpio -idm failed: %d", rc);
}

/* ---- cpio ---- */

START_TEST(test_cpio_round_trip)
{
	static const char hello[] = "hello, world\n";
	static u8 big[100003];
	struct cpio c = { 0 };
	struct entry e[16];
	const struct entry *x;
	struct stat st;
	char path[512], link[64];
	size_t n;

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (u8)(i * 7 + i / 256);
	ck_assert_int_eq(cpio_add_file(&c, "/a/b/hello.txt", 0644, hello, sizeof(hello) - 1), 0);
	ck_assert_int_eq(cpio_add_file(&c, "big.bin", 0600, big, sizeof(big)), 0);
	ck_assert_int_eq(cpio_add_dir(&c, "/a", 0700), 0); /* already there (as a parent): no-op */
	ck_assert_int_eq(cpio_add_dir(&c, "/empty", 0711), 0);
	ck_assert_int_eq(cpio_add_symlink(&c, "/a/link", "b/hello.txt"), 0);
	ck_assert_int_eq(cpio_add_file(&c, "/zero", 0644, NULL, 0), 0);
	ck_assert_int_eq(cpio_add_chardev(&c, "/dev/console", 0600, 5, 1), 0);
	ck_assert_int_eq(cpio_finish(&c), 0);
	ck_assert_int_eq(cpio_add_dir(&c, "/late", 0755), -EINVAL);

	n = parse_newc(c.buf, c.len, e, ARRAY_SIZE(e));
	ck_assert_uint_eq(n, 9); /* a, a/b, hello, big, empty, link, zero, dev, console */
	ck_assert_str_eq(e[0].name, "a");
	ck_assert_str_eq(e[1].name, "a/b");
	ck_assert_uint_eq(e[0].mode, S_IFDIR | 0755);
	x = find_entry(e, n, "big.bin");
	ck_assert_uint_eq(x->mode, S_IFREG | 0600);
	ck_assert_uint_eq(x->size, sizeof(big));
	ck_assert(!memcmp(x->data, big, sizeof(big)));
	x = find_entry(e, n, "a/link");
	ck_assert_uint_eq(x->mode, S_IFLNK | 0777);
	ck_assert_mem_eq(x->data, "b/hello.txt", x->size);
	x = find_entry(e, n, "dev/console");
	ck_assert_uint_eq(x->mode, S_IFCHR | 0600);
	ck_assert_uint_eq(x->rmajor, 5);
	ck_assert_uint_eq(x->rminor, 1);
	ck_assert_uint_eq(find_entry(e, n, "empty")->mode, S_IFDIR | 0711);

	extract(&c);
	assert_file("x/a/b/hello.txt", hello, sizeof(hello) - 1);
	assert_file("x/big.bin", big, sizeof(big));
	assert_file("x/zero", "", 0);
	snprintf(path, sizeof(path), "%s/x/a/link", tmp);
	ck_assert_int_eq(readlink(path, link, sizeof(link)), 11);
	snprintf(path, sizeof(path), "%s/x/big.bin", tmp);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0600);
	cpio_free(&c);
}
END_TEST

START_TEST(test_cpio_bad_paths)
{
	static const char *const bad[] = { "",	  "/",	   "//",   "a/../b", "..",
					   "./a", "a/./b", "a//b", "a/" };
	struct cpio c = { 0 };

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		ck_assert_msg(cpio_add_file(&c, bad[i], 0644, "x", 1) == -EINVAL, "'%s' accepted",
			      bad[i]);
	ck_assert_int_eq(cpio_add_symlink(&c, "/l", ""), -EINVAL);
	ck_assert_uint_eq(c.len, 0);
	cpio_free(&c);
}
END_TEST

/* ---- lkvm's initramfs ---- */

START_TEST(test_initrd_build)
{
	static const char ko_a[] = "module a", ko_b[] = "module b, compressed";
	char *argv[] = { "sh", "-c", "exit 7", NULL }, *envp[] = { "A=1", NULL };
	struct initcfg cfg = { .argv = argv,
			       .argc = 3,
			       .envp = envp,
			       .envc = 1,
			       .root = INITCFG_ROOT_INITRAMFS },
		       got;
	struct kmod mods[2];
	struct kmod_list list = { mods, 2 };
	size_t init_len = (size_t)(lkvm_init_end - lkvm_init_start), n;
	struct cpio c = { 0 };
	const struct entry *x;
	struct entry e[32];
	char err[256] = "", pa[512], pb[512];

	put_text("mods/a.ko", ko_a);
	put_text("mods/b.ko.zst", ko_b);
	snprintf(pa, sizeof(pa), "%s/mods/a.ko", tmp);
	snprintf(pb, sizeof(pb), "%s/mods/b.ko.zst", tmp);
	mods[0] = (struct kmod){ "a", pa };
	mods[1] = (struct kmod){ "b", pb };
	ck_assert_msg(initrd_build(&c, &cfg, &list, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(cpio_finish(&c), 0);
	n = parse_newc(c.buf, c.len, e, ARRAY_SIZE(e));

	/* The guest program is there, as lkvm carries it: a static ELF executable. */
	ck_assert_uint_gt(init_len, 1000);
	ck_assert_mem_eq(lkvm_init_start, "\177ELF", 4);
	x = find_entry(e, n, "init");
	ck_assert_ptr_nonnull(x);
	ck_assert_uint_eq(x->mode, S_IFREG | 0755);
	ck_assert_uint_eq(x->size, init_len);
	ck_assert(!memcmp(x->data, lkvm_init_start, init_len));
	x = find_entry(e, n, "dev/console");
	ck_assert_uint_eq(x->mode, S_IFCHR | 0600);
	for (size_t i = 0; i < 8; i++) {
		static const char *const dirs[] = { "dev", "proc",	 "sys",	    "tmp",
						    "run", "lkvm/lower", "lkvm/rw", "lkvm/root" };

		ck_assert_msg(find_entry(e, n, dirs[i]) &&
				      find_entry(e, n, dirs[i])->mode == (S_IFDIR | 0755),
			      "%s", dirs[i]);
	}
	x = find_entry(e, n, "lkvm/modules/00-a.ko");
	ck_assert_mem_eq(x->data, ko_a, sizeof(ko_a) - 1);
	x = find_entry(e, n, "lkvm/modules/01-b.ko.zst");
	ck_assert_mem_eq(x->data, ko_b, sizeof(ko_b) - 1);

	/* The configuration init will read: cfg, with the modules where the archive put them. */
	x = find_entry(e, n, "lkvm/config");
	ck_assert_int_eq(initcfg_decode((const char *)x->data, x->size, &got), 0);
	ck_assert_uint_eq(got.argc, 3);
	ck_assert_str_eq(got.argv[2], "exit 7");
	ck_assert_str_eq(got.envp[0], "A=1");
	ck_assert_uint_eq(got.nr_modules, 2);
	ck_assert_str_eq(got.modules[0], "/lkvm/modules/00-a.ko");
	ck_assert_str_eq(got.modules[1], "/lkvm/modules/01-b.ko.zst");

	extract(&c);
	assert_file("x/init", lkvm_init_start, init_len);
	assert_file("x/lkvm/config", x->data, x->size);
	initcfg_free(&got);
	cpio_free(&c);

	/* A module that cannot be read is named. */
	mods[1].path = "/nonexistent/b.ko";
	ck_assert_int_eq(initrd_build(&c, &cfg, &list, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/b.ko"));
	cpio_free(&c);
}
END_TEST

START_TEST(test_env_filter)
{
	char *env[] = { "HOME=/home/u", "DISPLAY=:0",	   "PATH=/bin",	 "SSH_AUTH_SOCK=/tmp/s",
			"PWD=/x",	"TMUX=/tmp/t,1,0", "TERM=xterm", "NOEQ",
			"=bad",		"DISPLAYX=kept",   NULL };
	static const char *const want[] = { "HOME=/home/u", "PATH=/bin", "TERM=xterm",
					    "DISPLAYX=kept" };
	size_t n;
	char **out = initrd_env_filter(env, &n);

	ck_assert_ptr_nonnull(out);
	ck_assert_uint_eq(n, ARRAY_SIZE(want));
	for (size_t i = 0; i < n; i++)
		ck_assert_str_eq(out[i], want[i]);
	ck_assert_ptr_null(out[n]);
	free(out);
}
END_TEST

/* ---- the kernel ---- */

static void touch(const char *rel)
{
	put_text(rel, "kernel");
}

static void rm(const char *rel)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", tmp, rel);
	ck_assert_int_eq(unlink(path), 0);
}

/* Each rule in turn wins while the ones before it are absent. */
START_TEST(test_kernel_find_order)
{
	static const struct {
		const char *file, *rule, *path; /* file and path below tmp */
	} rules[] = {
		{ "src/linux/bzImage", "./bzImage", "src/linux/bzImage" },
		{ "src/linux/arch/x86/boot/bzImage", "./arch/x86/boot/bzImage",
		  "src/linux/arch/x86/boot/bzImage" },
		{ "arch/x86/boot/bzImage", "../../arch/x86/boot/bzImage",
		  "src/linux/../../arch/x86/boot/bzImage" },
		{ "boot/vmlinuz-6.1.0-test", "/boot/vmlinuz-$(uname -r)",
		  "boot/vmlinuz-6.1.0-test" },
	};
	char dir[128], boot[128], path[512], want[512];
	const char *rule = NULL;

	snprintf(dir, sizeof(dir), "%s/src/linux", tmp);
	snprintf(boot, sizeof(boot), "%s/boot", tmp);
	for (size_t i = 0; i < ARRAY_SIZE(rules); i++)
		touch(rules[i].file);
	ck_assert_int_eq(kernel_find(dir, boot, "6.1.0-test", path, 10, &rule), -ENAMETOOLONG);
	ck_assert_int_eq(kernel_find(dir, boot, "6.1.0-other", path, sizeof(path), &rule), 0);
	for (size_t i = 0; i < ARRAY_SIZE(rules); i++) {
		ck_assert_int_eq(kernel_find(dir, boot, "6.1.0-test", path, sizeof(path), &rule),
				 0);
		ck_assert_str_eq(rule, rules[i].rule);
		snprintf(want, sizeof(want), "%s/%s", tmp, rules[i].path);
		ck_assert_str_eq(path, want);
		rm(rules[i].file);
	}
	ck_assert_int_eq(kernel_find(dir, boot, "6.1.0-test", path, sizeof(path), &rule), -ENOENT);
	/* A directory of that name is no kernel. */
	put_text("src/linux/bzImage/x", "");
	ck_assert_int_eq(kernel_find(dir, boot, "6.1.0-test", path, sizeof(path), &rule), -ENOENT);
}
END_TEST

/* A synthetic bzImage: the setup header's kernel_version points at the version string. */
static void make_bzimage(const char *rel, u16 kv, const char *version, size_t size)
{
	u8 *img = calloc(1, size);

	memcpy(img + 0x202, "HdrS", 4);
	img[0x206] = 0x0f;
	img[0x207] = 0x02;
	img[0x20e] = (u8)kv;
	img[0x20f] = (u8)(kv >> 8);
	if (version)
		memcpy(img + kv + 0x200, version, strlen(version));
	put_file(rel, img, size);
	free(img);
}

static int release_of(const char *rel, char *out, size_t len)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", tmp, rel);
	return kernel_release(path, out, len);
}

START_TEST(test_kernel_release_synthetic)
{
	static const char banner[] =
		"\177ELF....junk\0Linux version 6.2.0-rc1+ (dev@box) (gcc) #3 SMP\n";
	char rel[64];

	make_bzimage("bz1", 0x3c0,
		     "6.1.0-57-amd64 (debian-kernel@lists.debian.org) #1 SMP PREEMPT_DYNAMIC",
		     0x4000);
	ck_assert_int_eq(release_of("bz1", rel, sizeof(rel)), 0);
	ck_assert_str_eq(rel, "6.1.0-57-amd64");
	ck_assert_int_eq(release_of("bz1", rel, 10), -ENAMETOOLONG);
	make_bzimage("bz0", 0, NULL, 0x1000); /* no kernel_version */
	ck_assert_int_eq(release_of("bz0", rel, sizeof(rel)), -ENOEXEC);
	make_bzimage("bzfar", 0x7000, NULL, 0x1000); /* points past the end */
	ck_assert_int_eq(release_of("bzfar", rel, sizeof(rel)), -ENOEXEC);
	make_bzimage("bzend", 0xdfc, "6.9", 0x1000); /* string runs into the end of the file */
	ck_assert_int_eq(release_of("bzend", rel, sizeof(rel)), 0);
	ck_assert_str_eq(rel, "6.9");
	put_file("vmlinux", banner, sizeof(banner) - 1);
	ck_assert_int_eq(release_of("vmlinux", rel, sizeof(rel)), 0);
	ck_assert_str_eq(rel, "6.2.0-rc1+");
	put_text("junk", "not a kernel at all");
	ck_assert_int_eq(release_of("junk", rel, sizeof(rel)), -ENOEXEC);
	put_text("empty", "");
	ck_assert_int_eq(release_of("empty", rel, sizeof(rel)), -ENOEXEC);
	ck_assert_int_eq(release_of("missing", rel, sizeof(rel)), -ENOENT);
}
END_TEST

/* The project's guest kernel, when built: its release is its tree's kernel.release. */
START_TEST(test_kernel_release_guest)
{
	char rel[64], *want;
	u8 *data;
	size_t len;

	ck_assert_int_eq(read_file("build/guest/linux/include/config/kernel.release", &data, &len),
			 0);
	want = strndup((char *)data, strcspn((char *)data, "\n"));
	ck_assert_int_eq(kernel_release("build/guest/bzImage", rel, sizeof(rel)), 0);
	ck_assert_str_eq(rel, want);
	free(want);
	free(data);
}
END_TEST

/* ---- modules ---- */

static void assert_order(const struct kmod_list *l, const char *const *want, size_t n)
{
	ck_assert_uint_eq(l->n, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(!strcmp(l->v[i].name, want[i]), "module %zu: %s, expected %s", i,
			      l->v[i].name, want[i]);
}

static const char modules_dep[] =
	"kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko kernel/fs/netfs/netfs.ko "
	"kernel/fs/fscache/fscache.ko\n"
	"kernel/net/9p/9pnet.ko:\n"
	"kernel/net/9p/9pnet_virtio.ko: kernel/drivers/virtio/virtio_ring.ko "
	"kernel/drivers/virtio/virtio.ko kernel/net/9p/9pnet.ko\n"
	"kernel/fs/fscache/fscache.ko: kernel/fs/netfs/netfs.ko\n"
	"kernel/fs/netfs/netfs.ko:\n"
	"kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko\n"
	"kernel/drivers/virtio/virtio_ring.ko:\n"
	"kernel/fs/overlayfs/overlay.ko.xz:\n"
	"kernel/drivers/x/dash-mod.ko: kernel/drivers/virtio/virtio.ko\n"
	"kernel/a.ko: kernel/missing.ko\n"
	"kernel/c1.ko: kernel/c2.ko\n"
	"kernel/c2.ko: kernel/c1.ko\n";

START_TEST(test_modules_dep)
{
	static const char *const names[] = { "virtio_pci", "9pnet_virtio", "9p", "overlay" };
	static const char *const want[] = { "virtio_ring", "virtio",  "9pnet", "9pnet_virtio",
					    "netfs",	   "fscache", "9p",    "overlay" };
	static const char *const dash[] = { "dash_mod", "virtio-ring" };
	char dir[128], err[256] = "", want_path[512];
	struct kmod_list l;
	const char *one;

	put_text("lib/modules/6.1.0-t/modules.dep", modules_dep);
	put_text("lib/modules/6.1.0-t/modules.builtin", "kernel/drivers/virtio/virtio_pci.ko\n");
	snprintf(dir, sizeof(dir), "%s/lib/modules/6.1.0-t", tmp);
	ck_assert_msg(kmod_resolve(dir, names, ARRAY_SIZE(names), &l, err, sizeof(err)) == 0, "%s",
		      err);
	assert_order(&l, want, ARRAY_SIZE(want));
	snprintf(want_path, sizeof(want_path), "%s/kernel/fs/overlayfs/overlay.ko.xz", dir);
	ck_assert_str_eq(l.v[7].path, want_path);
	kmod_list_free(&l);

	/* '-' and '_' are one; a module asked twice comes once. */
	ck_assert_int_eq(kmod_resolve(dir, dash, 2, &l, err, sizeof(err)), 0);
	assert_order(&l, (const char *const[]){ "virtio_ring", "virtio", "dash_mod" }, 3);
	kmod_list_free(&l);

	/* '?': optional, skipped when absent; a present one comes with its dependencies. */
	ck_assert_int_eq(kmod_resolve(dir, (const char *const[]){ "?nosuch", "?virtio" }, 2, &l,
				      err, sizeof(err)),
			 0);
	assert_order(&l, (const char *const[]){ "virtio_ring", "virtio" }, 2);
	kmod_list_free(&l);
	one = "nosuch";
	ck_assert_int_eq(kmod_resolve(dir, &one, 1, &l, err, sizeof(err)), -ENOPKG);
	ck_assert_ptr_nonnull(strstr(err, "nosuch"));
	ck_assert_uint_eq(l.n, 0);
	one = "a";
	ck_assert_int_eq(kmod_resolve(dir, &one, 1, &l, err, sizeof(err)), -ENOPKG);
	ck_assert_ptr_nonnull(strstr(err, "missing, needed by a"));
	one = "c1";
	ck_assert_int_eq(kmod_resolve(dir, &one, 1, &l, err, sizeof(err)), -ELOOP);
	snprintf(dir, sizeof(dir), "%s/lib/modules/none", tmp);
	ck_assert_int_eq(kmod_resolve(dir, &one, 1, &l, err, sizeof(err)), -ENOENT);
}
END_TEST

/* A minimal ELF64 relocatable with a .modinfo section holding `modinfo` (len bytes). */
static void make_ko(const char *rel, const char *modinfo, size_t len)
{
	static const char shstr[] = "\0.modinfo\0.shstrtab";
	size_t info_off = sizeof(Elf64_Ehdr), str_off = info_off + len;
	size_t sh_off = ALIGN_UP(str_off + sizeof(shstr), 8),
	       size = sh_off + 3 * sizeof(Elf64_Shdr);
	u8 *f = calloc(1, size);
	Elf64_Ehdr *eh = (Elf64_Ehdr *)f;
	Elf64_Shdr *sh = (Elf64_Shdr *)(f + sh_off);

	memcpy(eh->e_ident, ELFMAG, SELFMAG);
	eh->e_ident[EI_CLASS] = ELFCLASS64;
	eh->e_ident[EI_DATA] = ELFDATA2LSB;
	eh->e_type = ET_REL;
	eh->e_shoff = sh_off;
	eh->e_shentsize = sizeof(Elf64_Shdr);
	eh->e_shnum = 3;
	eh->e_shstrndx = 2;
	memcpy(f + info_off, modinfo, len);
	memcpy(f + str_off, shstr, sizeof(shstr));
	sh[1] = (Elf64_Shdr){
		.sh_name = 1, .sh_type = SHT_PROGBITS, .sh_offset = info_off, .sh_size = len
	};
	sh[2] = (Elf64_Shdr){
		.sh_name = 10, .sh_type = SHT_STRTAB, .sh_offset = str_off, .sh_size = sizeof(shstr)
	};
	put_file(rel, f, size);
	free(f);
}

#define MODINFO(s) s, sizeof(s) /* the literal's NUL ends the last string */

/* A build tree after `make modules`: modules.order (.ko, or .o in newer kernels), each
 * module's depends= from its own file. */
START_TEST(test_modules_tree)
{
	static const char *const names[] = { "9p", "overlay" };
	static const char *const want[] = { "9pnet", "netfs", "fscache", "9p", "overlay" };
	char dir[128], err[256] = "", found[256];
	struct kmod_list l;
	const char *one;

	put_text("linux/modules.order",
		 "fs/9p/9p.ko\nnet/9p/9pnet.o\nfs/netfs/netfs.ko\nfs/fscache/fscache.ko\n"
		 "fs/overlayfs/overlay.ko\nbad/bad.ko\n\n");
	put_text("linux/modules.builtin", "drivers/virtio/virtio.ko\n");
	put_text("linux/include/config/kernel.release", "6.3.0-rc1\n");
	make_ko("linux/fs/9p/9p.ko",
		MODINFO("license=GPL\0\0\0depends=9pnet,netfs,fscache\0vermagic=6.3.0-rc1 SMP"));
	make_ko("linux/net/9p/9pnet.ko", MODINFO("depends="));
	make_ko("linux/fs/netfs/netfs.ko", MODINFO("depends="));
	make_ko("linux/fs/fscache/fscache.ko", MODINFO("depends=netfs,virtio"));
	make_ko("linux/fs/overlayfs/overlay.ko", MODINFO("license=GPL"));
	put_text("linux/bad/bad.ko", "\177ELF but truncated");
	snprintf(dir, sizeof(dir), "%s/linux", tmp);
	ck_assert_msg(kmod_resolve(dir, names, 2, &l, err, sizeof(err)) == 0, "%s", err);
	assert_order(&l, want, ARRAY_SIZE(want));
	snprintf(found, sizeof(found), "%s/net/9p/9pnet.ko", dir);
	ck_assert_str_eq(l.v[0].path, found);
	kmod_list_free(&l);
	one = "bad";
	ck_assert_int_eq(kmod_resolve(dir, &one, 1, &l, err, sizeof(err)), -ENOEXEC);
	ck_assert_ptr_nonnull(strstr(err, "bad.ko"));

	/* kmod_dir_find: the tree for its own release, else LIBMOD/RELEASE. */
	put_text("lib/modules/6.3.0-rc1/modules.dep", "");
	put_text("lib/modules/6.1.0-x/modules.dep", "");
	{
		char libmod[128], got[256], want_dir[256];

		snprintf(libmod, sizeof(libmod), "%s/lib/modules", tmp);
		ck_assert_int_eq(kmod_dir_find(dir, libmod, "6.3.0-rc1", got, sizeof(got)), 0);
		ck_assert_str_eq(got, dir);
		ck_assert_int_eq(kmod_dir_find(dir, libmod, "6.1.0-x", got, sizeof(got)), 0);
		snprintf(want_dir, sizeof(want_dir), "%s/6.1.0-x", libmod);
		ck_assert_str_eq(got, want_dir);
		ck_assert_int_eq(kmod_dir_find(NULL, libmod, "6.1.0-x", got, sizeof(got)), 0);
		ck_assert_int_eq(kmod_dir_find(dir, libmod, "6.9.9", got, sizeof(got)), -ENOENT);
	}
}
END_TEST

/* The emulated host's Debian kernel (scripts/kvm-host.sh unpacks its package under
 * build/kvm-host/kernel: no modules.dep there, so the closure comes from each .ko). */
START_TEST(test_modules_debian)
{
	static const char *const names[] = { INITRD_MODULES_9P_ROOT };
	/* Each pair: the first must be loaded before the second. */
	static const char *const before[][2] = {
		{ "virtio", "virtio_pci" },  { "virtio_ring", "virtio" },
		{ "9pnet", "9pnet_virtio" }, { "9pnet", "9p" },
		{ "netfs", "9p" },	     { "virtio", "virtio_console" },
	};
	char dir[512], err[256] = "", rel[64], kernel[512];
	struct kmod_list l;
	glob_t g;

	ck_assert_int_eq(glob("build/kvm-host/kernel/boot/vmlinuz-*", 0, NULL, &g), 0);
	snprintf(kernel, sizeof(kernel), "%s", g.gl_pathv[0]);
	globfree(&g);
	ck_assert_int_eq(kernel_release(kernel, rel, sizeof(rel)), 0);
	ck_assert_int_eq(
		kmod_dir_find(NULL, "build/kvm-host/kernel/lib/modules", rel, dir, sizeof(dir)), 0);
	ck_assert_msg(kmod_resolve(dir, names, ARRAY_SIZE(names), &l, err, sizeof(err)) == 0, "%s",
		      err);
	printf("test_initrd: Debian %s: %zu modules for the 9p root:", rel, l.n);
	for (size_t i = 0; i < l.n; i++)
		printf(" %s", l.v[i].name);
	printf("\n");
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		size_t j;

		for (j = 0; j < l.n && strcmp(l.v[j].name, names[i]); j++)
			;
		ck_assert_msg(j < l.n, "%s missing", names[i]);
	}
	for (size_t p = 0; p < ARRAY_SIZE(before); p++) {
		size_t a = l.n, b = l.n;

		for (size_t i = 0; i < l.n; i++) {
			if (!strcmp(l.v[i].name, before[p][0]))
				a = i;
			if (!strcmp(l.v[i].name, before[p][1]))
				b = i;
		}
		ck_assert_msg(a < b && b < l.n, "%s must come before %s", before[p][0],
			      before[p][1]);
	}
	kmod_list_free(&l);
}
END_TEST

/* kmod_beside: <root>/lib/modules for <root>/boot/FILE, nothing for a kernel elsewhere. */
START_TEST(test_modules_beside_path)
{
	char d[64];

	ck_assert_int_eq(kmod_beside("x/kernel/boot/vmlinuz-6.1", d, sizeof(d)), 0);
	ck_assert_str_eq(d, "x/kernel/lib/modules");
	ck_assert_int_eq(kmod_beside("/boot/vmlinuz-6.1", d, sizeof(d)), 0);
	ck_assert_str_eq(d, "/lib/modules");
	ck_assert_int_eq(kmod_beside("boot/bzImage", d, sizeof(d)), 0);
	ck_assert_str_eq(d, "lib/modules");
	ck_assert_int_eq(kmod_beside("x/reboot/vmlinuz", d, sizeof(d)), -ENOENT);
	ck_assert_int_eq(kmod_beside("x/boot", d, sizeof(d)), -ENOENT);
	ck_assert_int_eq(kmod_beside("vmlinuz", d, sizeof(d)), -ENOENT);
	ck_assert_int_eq(kmod_beside("/a/very/long/root/boot/vmlinuz", d, 8), -ENAMETOOLONG);
}
END_TEST

/* The Debian kernel unpacked under build/kvm-host/kernel: its modules come from beside it
 * (this machine has no /lib/modules of its release, and would come after); --modules names
 * them too, and a DIR that is no module directory is refused with its reason. */
START_TEST(test_modules_beside_debian)
{
	const char *root = "build/kvm-host/kernel";
	char kernel[512], moddir[512], err[256] = "";
	struct kmod_list l = { 0 };
	glob_t g;

	ck_assert_int_eq(glob("build/kvm-host/kernel/boot/vmlinuz-*", 0, NULL, &g), 0);
	snprintf(kernel, sizeof(kernel), "%s", g.gl_pathv[0]);
	globfree(&g);
	ck_assert_msg(kmod_for_kernel(kernel, NULL, false, false, &l, err, sizeof(err)) == 0, "%s",
		      err);
	ck_assert_uint_gt(l.n, 4);
	ck_assert_msg(!strncmp(l.v[0].path, root, strlen(root)), "%s", l.v[0].path);
	kmod_list_free(&l);

	snprintf(moddir, sizeof(moddir), "%s/lib/modules/%s", root,
		 strrchr(kernel, '/') + strlen("/vmlinuz-"));
	ck_assert_msg(kmod_for_kernel(kernel, moddir, false, false, &l, err, sizeof(err)) == 0,
		      "%s", err);
	ck_assert_uint_gt(l.n, 4);
	kmod_list_free(&l);

	ck_assert_int_eq(kmod_for_kernel(kernel, "/no/such/dir", false, false, &l, err,
					 sizeof(err)),
			 -ENOTDIR);
	ck_assert_str_eq(
		err, "--modules '/no/such/dir': not a directory (give a lib/modules/RELEASE one)");
	ck_assert_int_eq(kmod_for_kernel(kernel, root, false, false, &l, err, sizeof(err)),
			 -ENOENT);
	ck_assert_str_eq(
		err,
		"--modules 'build/kvm-host/kernel': no modules.dep or modules.order in it (give a lib/modules/RELEASE directory)");
}
END_TEST

static Suite *initrd_suite(void)
{
	Suite *s = suite_create("initrd");
	TCase *tc = tcase_create("initrd");
	struct stat st;

	tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_add_test(tc, test_cpio_round_trip);
	tcase_add_test(tc, test_cpio_bad_paths);
	tcase_add_test(tc, test_initrd_build);
	tcase_add_test(tc, test_env_filter);
	tcase_add_test(tc, test_kernel_find_order);
	tcase_add_test(tc, test_kernel_release_synthetic);
	tcase_add_test(tc, test_modules_dep);
	tcase_add_test(tc, test_modules_tree);
	tcase_add_test(tc, test_modules_beside_path);
	if (!stat("build/guest/bzImage", &st) &&
	    !stat("build/guest/linux/include/config/kernel.release", &st))
		tcase_add_test(tc, test_kernel_release_guest);
	else
		lkvm_skip("test_initrd", 1, "the release of build/guest/bzImage",
			  "no guest kernel built yet");
	if (!stat("build/kvm-host/kernel/lib/modules", &st)) {
		tcase_add_test(tc, test_modules_debian);
		tcase_add_test(tc, test_modules_beside_debian);
	} else
		lkvm_skip("test_initrd", 1, "module closure of the emulated host's Debian kernel",
			  "build/kvm-host/kernel not unpacked yet (scripts/kvm-host.sh does it)");
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(initrd_suite)
