/* Unit tests for the core pieces: I/O bus dispatch, run options, command line, decoder, console matching. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "capture.h"
#include "check_main.h"
#include "lkvm/io.h"
#include "lkvm/kvm.h"
#include "lkvm/net.h"
#include "lkvm/run.h"
#include "lkvm/term.h"
#include "lkvm/virtio-9p.h"
#include "lkvm/virtio-blk.h"
#include "lkvm/x86.h"

struct hits {
	int n;
	u64 addr;
	u32 len;
	bool write;
	u8 last[8];
};

static void rec(struct kvm_cpu *v, u64 addr, u8 *data, u32 len, bool w, void *op)
{
	struct hits *h = op;

	h->n++;
	h->addr = addr;
	h->len = len;
	h->write = w;
	if (w)
		memcpy(h->last, data, len);
	else
		memset(data, 0x5a, len);
}

START_TEST(io_bus_dispatch_and_bounds)
{
	struct io_bus bus;
	struct hits a = { 0 }, b = { 0 };
	u8 d[8] = { 1, 2, 3, 4 };

	io_bus_init(&bus);
	ck_assert_int_eq(io_bus_register(&bus, 0x100, 8, rec, &a, "a"), 0);
	ck_assert_int_eq(io_bus_register(&bus, 0x10, 4, rec, &b, "b"), 0);
	ck_assert_int_eq(io_bus_register(&bus, 0x104, 8, rec, &b, "overlap"), -EEXIST);
	ck_assert_int_eq(io_bus_register(&bus, 0xe, 4, rec, &b, "overlap2"), -EEXIST);
	ck_assert_int_eq(io_bus_register(&bus, 0x0, 0, rec, &b, "empty"), -EINVAL);
	ck_assert_int_eq(io_bus_register(&bus, ~0ULL - 1, 4, rec, &b, "wrap"), -EINVAL);

	ck_assert(io_bus_dispatch(&bus, NULL, 0x104, d, 4, true));
	ck_assert_int_eq(a.n, 1);
	ck_assert_uint_eq(a.addr, 0x104);
	ck_assert_mem_eq(a.last, "\x01\x02\x03\x04", 4);
	/* Straddling the end of a range is not claimed. */
	ck_assert(!io_bus_dispatch(&bus, NULL, 0x106, d, 4, false));
	ck_assert_uint_eq(d[0], 0xff);
	ck_assert_uint_eq(d[3], 0xff);
	ck_assert_int_eq(a.n, 1);
	ck_assert(io_bus_dispatch(&bus, NULL, 0x10, d, 2, false));
	ck_assert_uint_eq(d[0], 0x5a);
	ck_assert_int_eq(b.n, 1);
	ck_assert(!io_bus_dispatch(&bus, NULL, 0x14, d, 1, true));
	ck_assert_uint_eq(bus.unhandled, 2);
	ck_assert_int_eq(io_bus_unregister(&bus, 0x10), 0);
	ck_assert_int_eq(io_bus_unregister(&bus, 0x10), -ENOENT);
	ck_assert(!io_bus_dispatch(&bus, NULL, 0x10, d, 1, false));
	io_bus_destroy(&bus);
}
END_TEST

START_TEST(io_bus_many_ranges_sorted)
{
	struct io_bus bus;
	struct hits h[40] = { 0 };
	u8 d[4];

	io_bus_init(&bus);
	/* Register out of order; lookups must still find each one. */
	for (int i = 0; i < 40; i++) {
		int k = (i * 17) % 40;

		ck_assert_int_eq(
			io_bus_register(&bus, 0x1000 + (u64)k * 0x10, 0x10, rec, &h[k], "r"), 0);
	}
	for (int k = 0; k < 40; k++) {
		ck_assert(io_bus_dispatch(&bus, NULL, 0x1000 + (u64)k * 0x10 + 0xc, d, 4, false));
		ck_assert_int_eq(h[k].n, 1);
	}
	io_bus_destroy(&bus);
}
END_TEST

static int parse(struct run_args *a, char *err, int argc, ...)
{
	static char *argv[32]; /* lives on: a->cmd.argv points into it, as into main's argv */
	va_list ap;
	FILE *null = fopen("/dev/null", "w");
	int ret;

	va_start(ap, argc);
	for (int i = 0; i < argc; i++)
		argv[i] = va_arg(ap, char *);
	va_end(ap);
	argv[argc] = NULL;
	err[0] = 0;
	kvm_config_free(&a->cfg); /* the previous parse's -n and -d arrays */
	ret = kvm_run_parse(argc, argv, a, null, err, 256);
	fclose(null);
	return ret;
}

START_TEST(run_options_good)
{
	struct run_args a = { 0 };
	char err[256];

	ck_assert_int_eq(parse(&a, err, 3, "run", "-k", "bz"), 0);
	ck_assert_str_eq(a.cfg.kernel_path, "bz");
	ck_assert_uint_eq(a.cfg.ram_mib, 256);
	ck_assert_int_eq(a.cfg.nr_cpus, 1);
	ck_assert_int_eq(a.cfg.quirks, QUIRKS_AUTO);
	ck_assert_int_eq(parse(&a, err, 19, "run", "--kernel", "k", "-i", "rd", "-p", "quiet", "-m",
			       "2G", "-c", "4", "--timeout", "30", "--quirks", "none", "--exit-on",
			       "Run /init", "--name", "vm1"),
			 0);
	ck_assert_str_eq(a.cfg.initrd_path, "rd");
	ck_assert_str_eq(a.cfg.cmdline, "quiet");
	ck_assert_uint_eq(a.cfg.ram_mib, 2048);
	ck_assert_int_eq(a.cfg.nr_cpus, 4);
	ck_assert_int_eq(a.cfg.timeout_s, 30);
	ck_assert_int_eq(a.cfg.quirks, QUIRKS_NONE);
	ck_assert_str_eq(a.cfg.exit_on, "Run /init");
	ck_assert_str_eq(a.cfg.name, "vm1");
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "k", "--quirks", "pvm"), 0);
	ck_assert_int_eq(a.cfg.quirks, QUIRKS_PVM);
	ck_assert_int_eq(parse(&a, err, 14, "run", "-k", "k", "--console", "virtio", "--rng",
			       "--virtio-transport", "mmio", "-d", "a.img,ro", "--disk",
			       "b.img,trans=pci,aio=sync", "--dump-dtb", "t.dtb"),
			 0);
	ck_assert(a.cfg.console_virtio && a.cfg.rng);
	ck_assert_int_eq(a.cfg.virtio_trans, VIRTIO_TRANS_MMIO);
	ck_assert_int_eq(a.cfg.nr_disks, 2);
	ck_assert(a.cfg.disk[0].ro && !a.cfg.disk[0].trans_set);
	ck_assert(a.cfg.disk[1].trans_set && a.cfg.disk[1].trans == VIRTIO_TRANS_PCI &&
		  a.cfg.disk[1].io == BLK_IO_SYNC);
	ck_assert_str_eq(a.cfg.dump_dtb, "t.dtb");
	ck_assert_int_eq(parse(&a, err, 2, "run", "--help"), 1);
	kvm_config_free(&a.cfg);
}
END_TEST

START_TEST(run_options_bad)
{
	struct run_args a = { 0 };
	char err[256];

	/* `lkvm run` alone is the host-root mode (test_run_cmd); -i or -d without -k is not. */
	ck_assert_int_eq(parse(&a, err, 3, "run", "-i", "rd"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "no kernel"));
	ck_assert_int_eq(parse(&a, err, 3, "run", "-d", "a.img"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "no kernel"));
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "k", "-m", "0"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "--mem '0'"));
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "k", "-m", "12x"), -EINVAL);
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "k", "-m", "-5"), -EINVAL);
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "k", "-m", "99999999999999999999"),
			 -EINVAL);
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "k", "-c", "0"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "--cpus '0'"));
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "k", "-c", "65"), -EINVAL);
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "k", "--timeout", "0"), -EINVAL);
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "k", "--timeout", "1.5"), -EINVAL);
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "k", "--quirks", "maybe"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "auto, pvm or none"));
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "k", "--console", "usb"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "serial or virtio"));
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "k", "--virtio-transport", "isa"), -EINVAL);
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "k", "--dump-dtb", ""), -EINVAL);
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "k", "-d", "x.img,bogus"), -EINVAL);
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "k", "-n", "mode=tap,trans=isa"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "pci or mmio"));
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "k", "--exit-on", ""), -EINVAL);
	ck_assert_int_eq(parse(&a, err, 4, "run", "-k", "k", "--bogus"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "unknown option '--bogus'"));
	ck_assert_int_eq(parse(&a, err, 4, "run", "-k", "k", "extra"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "unexpected argument 'extra'"));
	ck_assert_int_eq(parse(&a, err, 2, "run", "-k"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "needs a value"));
	/* The device limits: 4 NICs, 4 disks, 9 virtio-mmio devices (whatever makes them mmio). */
	ck_assert_int_eq(parse(&a, err, 13, "run", "-k", "k", "-n", "mode=tap", "-n", "mode=tap",
			       "-n", "mode=tap", "-n", "mode=tap", "-n", "mode=tap"),
			 -EINVAL);
	ck_assert_str_eq(err, "-n: at most 4 network devices");
	ck_assert_int_eq(parse(&a, err, 13, "run", "-k", "k", "-d", "a", "-d", "b", "-d", "c", "-d",
			       "d", "-d", "e"),
			 -EINVAL);
	ck_assert_str_eq(err, "-d: at most 4 disks");
	ck_assert_int_eq(parse(&a, err, 24, "run", "-k", "k", "-n", "mode=tap", "-n", "mode=tap",
			       "-n", "mode=tap,trans=mmio", "-n", "mode=tap", "-d", "a", "-d",
			       "b,trans=mmio", "-d", "c", "-d", "d", "--console", "virtio",
			       "--virtio-transport", "mmio", "--rng"),
			 -EINVAL);
	ck_assert_str_eq(
		err,
		"10 virtio-mmio devices asked for: at most 9 (each needs one of the free ISA IRQs)");
	/* Nine are fine; a NIC on PCI, or one with mode=none (no device), does not count. */
	ck_assert_int_eq(parse(&a, err, 24, "run", "-k", "k", "-n", "mode=tap", "-n", "mode=tap",
			       "-n", "mode=tap,trans=pci", "-n", "mode=tap", "-d", "a", "-d", "b",
			       "-d", "c", "-d", "d", "--console", "virtio", "--virtio-transport",
			       "mmio", "--rng"),
			 0);
	ck_assert_int_eq(parse(&a, err, 24, "run", "-k", "k", "-n", "mode=tap", "-n", "mode=tap",
			       "-n", "mode=none", "-n", "mode=tap", "-d", "a", "-d", "b", "-d", "c",
			       "-d", "d", "--console", "virtio", "--virtio-transport", "mmio",
			       "--rng"),
			 0);
	kvm_config_free(&a.cfg);
}
END_TEST

/* `-- CMD` and the host-root mode (run-cmd.h). */
START_TEST(run_options_cmd)
{
	struct run_args a = { 0 };
	char err[256];

	/* Nothing at all: host-root mode, a shell, the kernel found later. */
	ck_assert_int_eq(parse(&a, err, 1, "run"), 0);
	ck_assert(a.cfg.host_root.on && !a.cmd.dashdash && !a.cmd.argc && !a.cfg.kernel_path);
	/* -k alone keeps the plain machine; with -- it runs CMD; -- alone is the shell. */
	ck_assert_int_eq(parse(&a, err, 3, "run", "-k", "bz"), 0);
	ck_assert(!a.cfg.host_root.on);
	ck_assert_int_eq(parse(&a, err, 8, "run", "-k", "bz", "-m", "1G", "--", "uname", "-r"), 0);
	ck_assert(a.cfg.host_root.on && a.cmd.dashdash);
	ck_assert_int_eq(a.cmd.argc, 2);
	ck_assert_str_eq(a.cmd.argv[0], "uname");
	ck_assert_str_eq(a.cmd.argv[1], "-r");
	ck_assert_uint_eq(a.cfg.ram_mib, 1024);
	ck_assert_int_eq(parse(&a, err, 4, "run", "-k", "bz", "--"), 0);
	ck_assert(a.cfg.host_root.on && a.cmd.dashdash && a.cmd.argc == 0);
	/* CMD's own options are CMD's, a second -- included. */
	ck_assert_int_eq(parse(&a, err, 6, "run", "--", "ls", "-k", "--", "-m"), 0);
	ck_assert_int_eq(a.cmd.argc, 4);
	ck_assert_str_eq(a.cmd.argv[1], "-k");
	ck_assert_str_eq(a.cmd.argv[2], "--");
	ck_assert(!a.cfg.kernel_path && a.cfg.ram_mib == 256);
	/* An option's value "--" ends nothing: -p -- is the kernel command line "--". */
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "bz", "-p", "--"), 0);
	ck_assert(!a.cfg.host_root.on && !a.cmd.dashdash);
	ck_assert_str_eq(a.cfg.cmdline, "--");
	/* A disk (the root disk) or an initrd without -- keeps the plain machine. */
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "bz", "-d", "a.img"), 0);
	ck_assert(!a.cfg.host_root.on);
	ck_assert_int_eq(parse(&a, err, 7, "run", "-k", "bz", "-d", "a.img", "--", "true"), 0);
	ck_assert(a.cfg.host_root.on && a.cfg.nr_disks == 1);
	ck_assert_int_eq(parse(&a, err, 5, "run", "--console-log", "k.log", "--", "true"), 0);
	ck_assert_str_eq(a.cmd.console_log, "k.log");
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "bz", "--console-log", "k.log"), 0);
	ck_assert(!a.cfg.host_root.on && a.cmd.console_log);
	/* What cannot go with it. */
	ck_assert_int_eq(parse(&a, err, 6, "run", "-i", "rd", "--", "true"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "-i and -- CMD"));
	ck_assert_int_eq(parse(&a, err, 5, "run", "--console", "virtio", "--"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "--console virtio and -- CMD"));
	ck_assert_int_eq(parse(&a, err, 3, "run", "--console-log", ""), -EINVAL);
	ck_assert_int_eq(parse(&a, err, 4, "run", "true", "--", "x"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "unexpected argument 'true'"));
	kvm_config_free(&a.cfg);
}
END_TEST

/* virtme-ng's spellings (the same options under its names), --root and --rw. */
START_TEST(run_options_vng)
{
	struct run_args a = { 0 };
	char err[256];

	ck_assert_int_eq(parse(&a, err, 15, "run", "-k", "bz", "--memory", "1G", "--append",
			       "loglevel=8", "--cpus", "2", "-v", "--net", "user", "--net",
			       "mode=tap,tapif=t0", "--root"),
			 -EINVAL); /* --root without -- CMD */
	ck_assert_str_eq(err, "--root is for -- CMD (the command runs as root in the guest)");
	ck_assert_int_eq(parse(&a, err, 16, "run", "-k", "bz", "--memory", "1G", "--append",
			       "loglevel=8", "--cpus", "2", "-v", "--net", "user", "--net",
			       "mode=tap,tapif=t0", "--root", "--"),
			 0);
	ck_assert_uint_eq(a.cfg.ram_mib, 1024);
	ck_assert_str_eq(a.cfg.cmdline, "loglevel=8");
	ck_assert_int_eq(a.cfg.nr_cpus, 2);
	ck_assert(a.cfg.debug && a.cmd.root && a.cfg.host_root.on);
	ck_assert_int_eq(a.cfg.nr_nets, 2);
	ck_assert_int_eq(a.cfg.net[0].mode, NET_MODE_USER);
	ck_assert_int_eq(a.cfg.net[1].mode, NET_MODE_TAP);
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "bz", "--memory", "0"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "--memory '0'"));
	/* --exec CMD is -- sh -c CMD, and not both. */
	ck_assert_int_eq(parse(&a, err, 3, "run", "--exec", "echo $HOME; id"), 0);
	ck_assert(a.cfg.host_root.on && a.cmd.dashdash);
	ck_assert_int_eq(a.cmd.argc, 3);
	ck_assert_str_eq(a.cmd.argv[0], "sh");
	ck_assert_str_eq(a.cmd.argv[1], "-c");
	ck_assert_str_eq(a.cmd.argv[2], "echo $HOME; id");
	ck_assert_ptr_null(a.cmd.argv[3]);
	ck_assert_int_eq(parse(&a, err, 6, "run", "-k", "bz", "--exec", "true", "--"), 0);
	ck_assert_int_eq(a.cmd.argc, 3);
	ck_assert_int_eq(parse(&a, err, 6, "run", "--exec", "true", "--", "ls"), -EINVAL);
	ck_assert_str_eq(err, "--exec CMD and -- CMD: give the command once");
	/* --rwdir DIR: a read-write share at the same path; --share's own syntax is refused. */
	ck_assert_int_eq(parse(&a, err, 4, "run", "--rwdir", "/tmp", "--"), 0);
	ck_assert_str_eq(p9_share_get(a.cfg.shares, 0)->guest_dir, "/tmp");
	ck_assert(!p9_share_get(a.cfg.shares, 0)->ro);
	ck_assert_int_eq(parse(&a, err, 3, "run", "--rwdir", "/tmp,ro"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "--rwdir '/tmp,ro': give a directory without"));
	ck_assert_int_eq(parse(&a, err, 3, "run", "--rwdir", "/tmp:/mnt"), -EINVAL);
	/* --modules is -- CMD's: without it, one line, not ignored (issue 40, finding 9). */
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "bz", "--modules", "/tmp"), -EINVAL);
	ck_assert_str_eq(
		err,
		"--modules without -- CMD: lkvm puts modules only in the initramfs it makes for -- CMD");
	/* --rw: one line naming --share. */
	ck_assert_int_eq(parse(&a, err, 3, "run", "--rw", "--"), -EINVAL);
	ck_assert_str_eq(
		err,
		"--rw: lkvm keeps the guest's writes to / in its tmpfs overlay; give --share DIR (or --rwdir DIR) for a host directory the command writes to");
	kvm_config_free(&a.cfg);
}
END_TEST

/* The plain machine without a root (the panic's hint): not with -i, -d, root= or --. */
START_TEST(run_root_missing)
{
	struct run_args a = { 0 };
	char err[256];

	ck_assert_int_eq(parse(&a, err, 3, "run", "-k", "bz"), 0);
	ck_assert(run_cmd_root_missing(&a.cfg));
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "bz", "-p", "quiet rootwait"), 0);
	ck_assert(run_cmd_root_missing(&a.cfg));
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "bz", "-p", "quiet root=/dev/vda"), 0);
	ck_assert(!run_cmd_root_missing(&a.cfg));
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "bz", "-i", "rd"), 0);
	ck_assert(!run_cmd_root_missing(&a.cfg));
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "bz", "-d", "a.img"), 0);
	ck_assert(!run_cmd_root_missing(&a.cfg));
	ck_assert_int_eq(parse(&a, err, 4, "run", "-k", "bz", "--"), 0);
	ck_assert(!run_cmd_root_missing(&a.cfg));
	kvm_config_free(&a.cfg);
}
END_TEST

/* --gdb ADDR, -s (QEMU's 127.0.0.1:1234) and --gdb-wait, which needs one of them. */
START_TEST(run_options_gdb)
{
	struct run_args a = { 0 };
	char err[256];

	ck_assert_int_eq(parse(&a, err, 3, "run", "-k", "bz"), 0);
	ck_assert_ptr_null(a.cfg.gdb_addr);
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "bz", "-s", "--gdb-wait"), 0);
	ck_assert_str_eq(a.cfg.gdb_addr, "127.0.0.1:1234");
	ck_assert(a.cfg.gdb_wait);
	ck_assert_int_eq(parse(&a, err, 5, "run", "-k", "bz", "--gdb", "unix:/run/g.sock"), 0);
	ck_assert_str_eq(a.cfg.gdb_addr, "unix:/run/g.sock");
	ck_assert(!a.cfg.gdb_wait);
	/* An address given wins over -s, in either order. */
	ck_assert_int_eq(parse(&a, err, 6, "run", "-k", "bz", "-s", "--gdb", "4444"), 0);
	ck_assert_str_eq(a.cfg.gdb_addr, "4444");
	ck_assert_int_eq(parse(&a, err, 4, "run", "-k", "bz", "--gdb-wait"), -EINVAL);
	ck_assert_str_eq(err, "--gdb-wait needs --gdb ADDR (or -s)");
	kvm_config_free(&a.cfg);
}
END_TEST

START_TEST(cmdline_building)
{
	struct kvm_config cfg = { .cmdline = "root=/dev/vda" };
	char buf[2048], small[16];

	ck_assert_int_eq(kvm_run_cmdline(&cfg, false, buf, sizeof(buf)), 0);
	ck_assert_ptr_nonnull(strstr(buf, "console=ttyS0"));
	ck_assert_ptr_null(strstr(buf, "clearcpuid"));
	/* The user's parameters come last so they override lkvm's. */
	ck_assert_str_eq(buf + strlen(buf) - strlen("root=/dev/vda"), "root=/dev/vda");
	ck_assert_int_eq(kvm_run_cmdline(&cfg, true, buf, sizeof(buf)), 0);
	ck_assert_ptr_nonnull(strstr(buf, "clearcpuid="));
	ck_assert_ptr_nonnull(strstr(buf, "noxsave"));
	ck_assert_int_eq(kvm_run_cmdline(&cfg, true, small, sizeof(small)), -E2BIG);
	/* --console virtio: hvc0 becomes the console, still before the user's parameters. */
	cfg.console_virtio = true;
	ck_assert_int_eq(kvm_run_cmdline(&cfg, false, buf, sizeof(buf)), 0);
	ck_assert_ptr_nonnull(strstr(buf, "console=ttyS0 "));
	ck_assert(strstr(buf, "console=hvc0") > strstr(buf, "console=ttyS0"));
	ck_assert_str_eq(buf + strlen(buf) - strlen("root=/dev/vda"), "root=/dev/vda");
	/* -- CMD: the kernel's log stays on ttyS0, quiet unless --debug, and a panic reboots;
	 * the user's parameters still last. */
	cfg.console_virtio = false;
	cfg.host_root.on = true;
	ck_assert_int_eq(kvm_run_cmdline(&cfg, false, buf, sizeof(buf)), 0);
	ck_assert_ptr_nonnull(strstr(buf, "console=ttyS0 "));
	ck_assert_ptr_nonnull(strstr(buf, " quiet panic=-1 root=/dev/vda"));
	cfg.debug = true;
	ck_assert_int_eq(kvm_run_cmdline(&cfg, false, buf, sizeof(buf)), 0);
	ck_assert_ptr_null(strstr(buf, "quiet"));
	ck_assert_ptr_nonnull(strstr(buf, " panic=-1 root=/dev/vda"));
}
END_TEST

START_TEST(emulation_decoder)
{
	int len = 0;

	ck_assert_int_eq(x86_emu_classify((const u8 *)"\xcc\x90", 2, &len), EMU_INT3);
	ck_assert_int_eq(len, 1);
	ck_assert_int_eq(x86_emu_classify((const u8 *)"\x0f\x01\xca", 3, &len), EMU_CLAC);
	ck_assert_int_eq(len, 3);
	ck_assert_int_eq(x86_emu_classify((const u8 *)"\x0f\x01\xcb", 3, &len), EMU_STAC);
	ck_assert_int_eq(x86_emu_classify((const u8 *)"\x9b", 1, &len), EMU_FWAIT);
	ck_assert_int_eq(x86_emu_classify((const u8 *)"\x0f\x01", 2, &len), -1);     /* truncated */
	ck_assert_int_eq(x86_emu_classify((const u8 *)"\x0f\x01\xc8", 3, &len), -1); /* monitor */
	ck_assert_int_eq(x86_emu_classify((const u8 *)"\xf3\x48\x0f\xb8", 4, &len),
			 -1); /* popcnt */
	ck_assert_int_eq(x86_emu_classify((const u8 *)"", 0, &len), -1);
	ck_assert_str_eq(x86_emu_name(EMU_CLAC), "clac");
	ck_assert_str_eq(x86_emu_name(99), "?");
}
END_TEST

START_TEST(console_match_across_writes)
{
	struct term t;
	char match[] = "Run /init";
	char tail[16];

	memset(&t, 0, sizeof(t));
	t.match = match;
	t.match_len = strlen(match);
	t.tail = tail;
	ck_assert(!term_match_feed(&t, (const u8 *)"booting... Ru", 13));
	ck_assert(!term_match_feed(&t, (const u8 *)"n /in", 5));
	ck_assert(term_match_feed(&t, (const u8 *)"it as init", 10));
	t.tail_len = 0;
	ck_assert(!term_match_feed(&t, (const u8 *)"Run /ini", 8));
	ck_assert(!term_match_feed(&t, (const u8 *)"x", 1));
	ck_assert(term_match_feed(&t, (const u8 *)"Run /init", 9));
	/* Byte by byte. */
	t.tail_len = 0;
	for (const char *p = "xxRun /ini"; *p; p++)
		ck_assert(!term_match_feed(&t, (const u8 *)p, 1));
	ck_assert(term_match_feed(&t, (const u8 *)"t", 1));
}
END_TEST

/* Console output of a VM of `run -- CMD` (halt_watch) or a plain one, to /dev/null. */
static void halt_vm(struct kvm *kvm, struct term *t, bool cmd)
{
	memset(kvm, 0, sizeof(*kvm));
	memset(t, 0, sizeof(*t));
	kvm->stop_fd = -1;
	atomic_store(&kvm->exit_status, -1);
	kvm->cfg.host_root.on = cmd;
	kvm->guest_end_status = cmd ? EXIT_GUEST_NO_STATUS : EXIT_GUEST_OK;
	t->kvm = kvm;
	t->halt_watch = cmd;
	t->out_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	ck_assert_int_ge(t->out_fd, 0);
	pthread_mutex_init(&t->out_lock, NULL);
	kvm->term = t;
}

/*
 * A kernel without ACPI halts where it was asked to power off: with -- CMD its console's
 * "reboot: System halted" ends the run as a power-off (0, ended=poweroff), written a byte at
 * a time as the UART does or in one write longer than the search window; without -- CMD, or
 * with the text cut, it does not.
 */
START_TEST(console_halt_ends_cmd_run)
{
	static const char log[] = "[    9.1] reboot: System halted\r\n";
	struct kvm kvm;
	struct term t;
	char big[300];

	halt_vm(&kvm, &t, true);
	for (const char *p = log; *p; p++)
		term_output(&kvm, (const u8 *)p, 1);
	ck_assert(atomic_load(&kvm.stopping));
	ck_assert_int_eq(atomic_load(&kvm.exit_status), EXIT_GUEST_OK);
	ck_assert_int_eq(kvm.exit_by, KVM_END_POWEROFF);
	close(t.out_fd);

	halt_vm(&kvm, &t, true);
	memset(big, '.', sizeof(big));
	memcpy(big + 90, "reboot: System halted", 21); /* across the first window's end */
	term_output(&kvm, (const u8 *)big, sizeof(big));
	ck_assert(atomic_load(&kvm.stopping));
	close(t.out_fd);

	halt_vm(&kvm, &t, true);
	term_output(&kvm, (const u8 *)"reboot: System halte", 20);
	term_output(&kvm, (const u8 *)"x reboot: System", 16);
	ck_assert(!atomic_load(&kvm.stopping));
	close(t.out_fd);

	halt_vm(&kvm, &t, false); /* a plain machine stays as it is, halted */
	term_output(&kvm, (const u8 *)log, sizeof(log) - 1);
	ck_assert(!atomic_load(&kvm.stopping));
	close(t.out_fd);
}
END_TEST

START_TEST(ratelimit_bounds_lines)
{
	struct ratelimit rl = { 0 };
	struct capture c;
	char out[2048];
	unsigned missed = 99, allowed = 0;
	int lines;

	for (int i = 0; i < 1000; i++) {
		if (ratelimit_allow(&rl, &missed)) {
			allowed++;
			ck_assert_uint_eq(missed, 0);
		}
	}
	ck_assert_uint_eq(allowed, RATELIMIT_BURST);
	/* The next window: the first line says how many were suppressed. */
	atomic_store(&rl.start_ns, atomic_load(&rl.start_ns) - RATELIMIT_INTERVAL_MS * 1000000ull);
	ck_assert(ratelimit_allow(&rl, &missed));
	ck_assert_uint_eq(missed, 1000 - RATELIMIT_BURST);

	memset(&rl, 0, sizeof(rl));
	capture_start(&c);
	for (int i = 0; i < 1000; i++)
		pr_warn_rl(&rl, "flood %d", i);
	pr_debug_rl(&rl, "below the threshold: neither printed nor counted");
	atomic_store(&rl.start_ns, atomic_load(&rl.start_ns) - RATELIMIT_INTERVAL_MS * 1000000ull);
	pr_warn_rl(&rl, "later");
	lines = capture_end(&c, out, sizeof(out));
	ck_assert_int_eq(lines, RATELIMIT_BURST + 1);
	ck_assert_msg(strstr(out, "lkvm: warning: later (995 similar messages suppressed)\n"), "%s",
		      out);
	/* A log file gets lines, not a raw terminal's \r\n (ONLCR adds the \r on a terminal). */
	ck_assert_ptr_null(strchr(out, '\r'));
}
END_TEST

static long vm_size_kib(void)
{
	char line[128];
	long kib = -1;
	FILE *f = fopen("/proc/self/status", "r");

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmSize: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static int open_fds(void)
{
	int n = 0;

	for (int fd = 0; fd < 1024; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

/* A guest RAM size the memory map refuses (above 1 TiB): kvm_create fails and leaves
 * nothing behind, neither the mapping nor a file descriptor. */
START_TEST(kvm_create_failure_leaks_nothing)
{
	static struct kvm kvm;
	struct kvm_config cfg = { .ram_mib = 1024 * 1024 + 1, .nr_cpus = 1 };
	char err[256] = "";
	long before = vm_size_kib();
	int fds = open_fds();

	ck_assert_int_lt(kvm_create(&kvm, &cfg, err, sizeof(err)), 0);
	/* Refused by the memory map, or (under ThreadSanitizer, whose shadow memory leaves
	 * no 1 TiB hole) by mmap itself: either way nothing may stay behind. */
	ck_assert_msg(strstr(err, "memory size") || strstr(err, "cannot map"), "%s", err);
	ck_assert_int_eq(open_fds(), fds);
	/* A leak would keep the whole 1 TiB mapping. */
	ck_assert_int_lt(vm_size_kib() - before, 1024 * 1024);
}
END_TEST

static Suite *core_suite(void)
{
	Suite *s = suite_create("core");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, io_bus_dispatch_and_bounds);
	tcase_add_test(tc, io_bus_many_ranges_sorted);
	tcase_add_test(tc, run_options_good);
	tcase_add_test(tc, run_options_bad);
	tcase_add_test(tc, run_options_cmd);
	tcase_add_test(tc, run_options_gdb);
	tcase_add_test(tc, run_options_vng);
	tcase_add_test(tc, run_root_missing);
	tcase_add_test(tc, cmdline_building);
	tcase_add_test(tc, emulation_decoder);
	tcase_add_test(tc, console_match_across_writes);
	tcase_add_test(tc, console_halt_ends_cmd_run);
	tcase_add_test(tc, ratelimit_bounds_lines);
	if (access("/dev/kvm", R_OK | W_OK) == 0)
		tcase_add_test(tc, kvm_create_failure_leaks_nothing);
	else
		lkvm_skip("test_core", 1, "kvm_create_failure_leaks_nothing", "no usable /dev/kvm");
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(core_suite)
