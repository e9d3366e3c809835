/* The initramfs of `run -- CMD` (cpio, init, config, modules) and finding the kernel to boot. */
#ifndef LKVM_INITRD_H
#define LKVM_INITRD_H

#include "lkvm/initcfg.h"
#include "lkvm/util.h"

/* ---- cpio "newc" archives in memory (initrd/cpio.c) ----
 * What the kernel unpacks into its rootfs (uncompressed is fine, and archives may be
 * concatenated: this one can follow a user's initrd). Paths are absolute or relative to the
 * archive's root, without "." or ".." components; missing parent directories are added
 * (0755) before the entry. Owner root, mtime 0. A zeroed struct cpio is an empty archive; each
 * call returns 0 or -errno (-EINVAL for a bad path, -EFBIG past 4 GiB, -ENOMEM). */
struct cpio {
	u8 *buf;
	size_t len, cap;
	u32 ino;
	char **dirs; /* directories already in the archive */
	size_t nr_dirs;
	bool finished;
};
int cpio_add_dir(struct cpio *c, const char *path, u32 perm) __must_check;
int cpio_add_file(struct cpio *c, const char *path, u32 perm, const void *data,
		  size_t len) __must_check;
int cpio_add_symlink(struct cpio *c, const char *path, const char *target) __must_check;
int cpio_add_chardev(struct cpio *c, const char *path, u32 perm, u32 major, u32 minor) __must_check;
/* Appends the trailer: c->buf[0..c->len) is then the archive. Nothing can be added after. */
int cpio_finish(struct cpio *c) __must_check;
void cpio_free(struct cpio *c);

/* ---- lkvm's initramfs (initrd/initrd.c) ---- */

/* Kernel modules in load order: the module's name (with '_') and its host file. */
struct kmod {
	char *name;
	char *path;
};
struct kmod_list {
	struct kmod *v;
	size_t n;
};
void kmod_list_free(struct kmod_list *l);

/* The directory in the initramfs that holds the modules (NN-NAME.ko..., in load order). */
#define INITRD_MODULE_DIR "/lkvm/modules"

/* Into c (not finished: the caller may add files, then cpio_finish): the directories init
 * mounts on, /dev/console (the kernel opens it for init), /init (lkvm-init, carried in lkvm),
 * the modules in mods under INITRD_MODULE_DIR, and INITCFG_PATH encoded from cfg with its
 * module list replaced by those files (cfg->nr_modules must be 0). 0 or -errno with err. */
int initrd_build(struct cpio *c, const struct initcfg *cfg, const struct kmod_list *mods, char *err,
		 size_t errlen) __must_check;

/* The whole initramfs of `run -- CMD` for the kernel at kernel_path: initrd_build's archive
 * with the modules that kernel needs (kmod_for_kernel: from moddir when not NULL; mmio: its
 * devices are on virtio-mmio),
 * finished. *data (malloc'd, the caller frees it) and *len, or -errno with err. */
int initrd_make(const struct initcfg *cfg, const char *kernel_path, const char *moddir, bool mmio,
		u8 **data, size_t *len, char *err, size_t errlen) __must_check;

/* The guest program itself (init/lkvm-init.c, linked into lkvm by init/blob.S). */
extern const u8 lkvm_init_start[], lkvm_init_end[];

/* CMD's environment from the host's: a malloc'd NULL-terminated array of env's entries (not
 * copies) in their order, without the variables that name the host's session (display,
 * D-Bus, agent sockets, ssh and terminal multiplexer state, systemd's socket and notify
 * hand-over, PWD/OLDPWD, which init sets; initrd.c's env_dropped[] lists them), and entries
 * longer than execve takes (INITCFG_MAX_STRING). NULL on ENOMEM. *n gets the count. */
char **initrd_env_filter(char *const *env, size_t *n);

/* ---- the kernel (initrd/kernel.c) ---- */

/* Where `lkvm run` looks for a kernel without -k, in order (kvmtool's order): ./bzImage,
 * ./arch/x86/boot/bzImage, ../../arch/x86/boot/bzImage below dir (NULL: the current
 * directory), then BOOT/vmlinuz-RELEASE (boot NULL: /boot; release NULL: uname -r). The
 * first regular file found goes into path and *rule says which (e.g. "./bzImage"). 0,
 * -ENOENT (none), -ENAMETOOLONG. */
int kernel_find(const char *dir, const char *boot, const char *release, char *path, size_t len,
		const char **rule) __must_check;

/* The kernel release of a bzImage (the setup header's kernel_version string: "6.1.0-18-amd64
 * (debian-kernel@...) #1 SMP ..." gives "6.1.0-18-amd64") or of an ELF vmlinux (its
 * "Linux version " banner). 0, -ENOEXEC (no release in it), or -errno from reading. */
int kernel_release(const char *path, char *rel, size_t len) __must_check;

/* The kernel build tree a kernel image at path sits in, for its modules: path minus
 * arch/x86/boot/bzImage, else path's directory. Into tree (len bytes, truncated). */
void kernel_tree(const char *path, char *tree, size_t len);

/* ---- kernel modules (initrd/modules.c) ---- */

/* What `run -- CMD` needs when the kernel has them as modules (in this order; virtio_mmio is
 * for --virtio-transport mmio). */
#define INITRD_MODULES_9P_ROOT "virtio_pci", "virtio_console", "9pnet_virtio", "9p", "overlay"
/* virtio-fs, which init tries before 9p (--fs auto), where the kernel has it. */
#define INITRD_MODULES_VIRTIOFS "?fuse", "?virtiofs"

/* The module directory for a kernel of release `release`: tree (a kernel build tree, or
 * NULL) when `make modules` ran there (its modules.order) for that same release
 * (include/config/kernel.release), else LIBMOD/RELEASE (libmod NULL: /lib/modules) when
 * it exists. 0, -ENOENT (neither: the kernel may have everything built in), -ENAMETOOLONG. */
int kmod_dir_find(const char *tree, const char *libmod, const char *release, char *dir,
		  size_t len) __must_check;

/* The modules `names` needs, dependencies first, each once, in dir (from kmod_dir_find); a
 * name that starts with '?' is optional (nothing when it is not in dir, built in or not):
 * dependencies from modules.dep when depmod ran there (an installed kernel), else from each
 * module's own .modinfo "depends=" with modules.order naming the files (a build tree, an
 * unpacked package); names in modules.builtin are skipped. '-' and '_' are the same in a
 * name. Compressed modules (.ko.xz, .ko.zst, .ko.gz) are listed as they are: init asks the
 * guest kernel to decompress them (CONFIG_MODULE_DECOMPRESS). 0; -ENOPKG (a module or a
 * dependency is nowhere, err says which), -ELOOP (a dependency cycle), -ENOENT (no
 * modules.order or modules.dep), -ENOEXEC (a .ko without a readable .modinfo), -ENOMEM. */
int kmod_resolve(const char *dir, const char *const *names, size_t n, struct kmod_list *out,
		 char *err, size_t errlen) __must_check;

/* The module root beside a packaged kernel: for KERNEL_PATH <root>/boot/FILE,
 * <root>/lib/modules (as virtme-ng looks; "/lib/modules" for /boot/FILE) into libmod. 0,
 * -ENOENT (not in a directory named boot), -ENAMETOOLONG. */
int kmod_beside(const char *kernel_path, char *libmod, size_t len) __must_check;

/* The modules `run -- CMD` needs (INITRD_MODULES_9P_ROOT, pvpanic_pci where there is one,
 * virtio_mmio when mmio, virtio_net where there is one when net) for the kernel at kernel_path: from moddir (--modules DIR; not a
 * directory, or without modules.dep and modules.order: -ENOTDIR or -ENOENT with err), else
 * from its build tree, <root>/lib/modules/RELEASE beside <root>/boot/KERNEL (kmod_beside) or
 * /lib/modules/RELEASE, in that order (kmod_dir_find, kmod_resolve): none when it has no
 * release or no module directory (it then has to have them built in; a debug line says so).
 * 0 or -errno with err. */
int kmod_for_kernel(const char *kernel_path, const char *moddir, bool mmio, bool net,
		    struct kmod_list *mods, char *err, size_t errlen) __must_check;

#endif
