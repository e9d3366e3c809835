/* Finding the kernel to boot without -k (kvmtool's order), reading its release, and the build tree it sits in. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "lkvm/initrd.h"

/* Below dir, in order; the last rule (/boot) is kernel_find's own. */
static const struct {
	const char *rule; /* what the user is told */
	const char *rel;  /* below dir */
} tree_rules[] = {
	{ "./bzImage", "bzImage" },
	{ "./arch/x86/boot/bzImage", "arch/x86/boot/bzImage" },
	{ "../../arch/x86/boot/bzImage", "../../arch/x86/boot/bzImage" },
};

static bool is_file(const char *path)
{
	struct stat st;

	return !stat(path, &st) && S_ISREG(st.st_mode);
}

int kernel_find(const char *dir, const char *boot, const char *release, char *path, size_t len,
		const char **rule)
{
	struct utsname u;
	int n;

	for (size_t i = 0; i < ARRAY_SIZE(tree_rules); i++) {
		n = dir ? snprintf(path, len, "%s/%s", dir, tree_rules[i].rel)
			: snprintf(path, len, "./%s", tree_rules[i].rel);
		if (n < 0 || (size_t)n >= len)
			return -ENAMETOOLONG;
		if (is_file(path)) {
			*rule = tree_rules[i].rule;
			return 0;
		}
	}
	if (!release) {
		if (uname(&u))
			return -errno;
		release = u.release;
	}
	n = snprintf(path, len, "%s/vmlinuz-%s", boot ? boot : "/boot", release);
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	if (!is_file(path))
		return -ENOENT;
	*rule = "/boot/vmlinuz-$(uname -r)";
	return 0;
}

/* x86 boot protocol: the setup header's magic and the kernel_version pointer (2.00+). */
#define SETUP_HDR_MAGIC_OFF 0x202
#define SETUP_HDR_VERSION_OFF 0x206
#define SETUP_KERNEL_VERSION_OFF 0x20e
#define SETUP_KERNEL_VERSION_BASE 0x200 /* the pointer counts from here */
#define RELEASE_SCAN_MAX 256

static u16 le16(const u8 *p)
{
	return (u16)(p[0] | p[1] << 8);
}

/* The release is the first word of what starts at off: printable, at most len - 1 bytes. */
static int copy_release(const u8 *img, size_t size, size_t off, char *rel, size_t len)
{
	size_t n = 0;

	while (off + n < size && n < RELEASE_SCAN_MAX && isgraph(img[off + n]))
		n++;
	if (!n || !isdigit(img[off]))
		return -ENOEXEC;
	if (n >= len)
		return -ENAMETOOLONG;
	memcpy(rel, img + off, n);
	rel[n] = '\0';
	return 0;
}

static int release_of(const u8 *img, size_t size, char *rel, size_t len)
{
	static const char banner[] = "Linux version ";
	const u8 *b;

	if (size > SETUP_KERNEL_VERSION_OFF + 2 && !memcmp(img + SETUP_HDR_MAGIC_OFF, "HdrS", 4) &&
	    le16(img + SETUP_HDR_VERSION_OFF) >= 0x0200) {
		u16 kv = le16(img + SETUP_KERNEL_VERSION_OFF);

		if (!kv)
			return -ENOEXEC;
		return copy_release(img, size, (size_t)kv + SETUP_KERNEL_VERSION_BASE, rel, len);
	}
	if (size >= 4 && !memcmp(img, "\177ELF", 4)) {
		b = memmem(img, size, banner, sizeof(banner) - 1);
		if (!b)
			return -ENOEXEC;
		return copy_release(img, size, (size_t)(b - img) + sizeof(banner) - 1, rel, len);
	}
	return -ENOEXEC;
}

int kernel_release(const char *path, char *rel, size_t len)
{
	struct stat st;
	void *img;
	int fd, ret;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st)) {
		ret = -errno;
		close(fd);
		return ret;
	}
	if (!S_ISREG(st.st_mode) || !st.st_size) {
		close(fd);
		return -ENOEXEC;
	}
	img = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	ret = img == MAP_FAILED ? -errno : 0;
	close(fd);
	if (ret)
		return ret;
	ret = release_of(img, (size_t)st.st_size, rel, len);
	munmap(img, (size_t)st.st_size);
	return ret;
}

/* The kernel build tree a kernel image sits in, for its modules: PATH minus
 * arch/x86/boot/bzImage, else PATH's directory (a vmlinux, or ./bzImage). kmod_dir_find
 * checks that the tree's release is the kernel's. */
void kernel_tree(const char *path, char *tree, size_t len)
{
	static const char *const suffixes[] = { "arch/x86/boot/bzImage",
						"arch/x86_64/boot/bzImage" };
	size_t n = strlen(path);
	const char *slash;

	for (size_t i = 0; i < ARRAY_SIZE(suffixes); i++) {
		size_t sl = strlen(suffixes[i]);

		if (n >= sl && !strcmp(path + n - sl, suffixes[i])) {
			snprintf(tree, len, "%.*s", (int)(n - sl), path);
			if (!*tree)
				snprintf(tree, len, ".");
			return;
		}
	}
	slash = strrchr(path, '/');
	if (slash)
		snprintf(tree, len, "%.*s", (int)(slash == path ? 1 : slash - path), path);
	else
		snprintf(tree, len, ".");
}
