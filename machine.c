/* The machine `lkvm run` builds: the kernel and initrd loaded, the VM and its devices, the command line, device tree and boot registers; and its teardown. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/acpi.h"
#include "lkvm/boot.h"
#include "lkvm/ctl.h"
#include "lkvm/dev.h"
#include "lkvm/exitport.h"
#include "lkvm/fdt.h"
#include "lkvm/host-files.h"
#include "lkvm/host-root.h"
#include "lkvm/hw.h"
#include "lkvm/kvm-cpu.h"
#include "lkvm/kvm.h"
#include "lkvm/layout.h"
#include "lkvm/pci.h"
#include "lkvm/run.h"
#include "lkvm/snap.h"
#include "lkvm/term.h"
#include "lkvm/virtio-9p.h"
#include "lkvm/virtio-fs.h"
#include "lkvm/virtio-blk.h"
#include "lkvm/virtio-console.h"
#include "lkvm/virtio-mmio.h"
#include "lkvm/virtio-net.h"
#include "lkvm/vm-snap.h"
#include "lkvm/x86.h"

static const char base_kernel_params[] = BASE_KERNEL_PARAMS;

int kvm_run_cmdline(const struct kvm_config *cfg, bool pvm_quirks, char *buf, size_t len)
{
	const char *cmd = host_root_kernel_params(cfg);
	int n = snprintf(buf, len, "%s%s%s%s%s%s%s%s", base_kernel_params,
			 cfg->console_virtio ? " console=hvc0" : "", *cmd ? " " : "", cmd,
			 pvm_quirks ? " " : "", pvm_quirks ? x86_pvm_kernel_params : "",
			 cfg->cmdline && *cfg->cmdline ? " " : "",
			 cfg->cmdline ? cfg->cmdline : "");

	if (n < 0 || (size_t)n >= len)
		return -E2BIG;
	return 0;
}

static int load_file(const char *what, const char *path, u8 **data, size_t *len, char *err,
		     size_t errlen)
{
	int ret = read_file(path, data, len);

	if (ret < 0)
		errfmt(err, errlen, "cannot read %s '%s': %s", what, path, strerror(-ret));
	else if (*len == 0) {
		errfmt(err, errlen, "%s '%s' is empty", what, path);
		free(*data);
		*data = NULL;
		ret = -ENOEXEC;
	}
	return ret;
}

/* ---- The machine: what every VM has, then what the configuration asks for ---- */

static int add_nets(struct kvm *kvm, const struct kvm_config *cfg)
{
	int ret = 0;

	for (int i = 0; i < cfg->nr_nets && !ret; i++)
		if (cfg->net[i].mode != NET_MODE_NONE)
			ret = virtio_net_add(kvm, &cfg->net[i]);
	return ret;
}

static int add_disks(struct kvm *kvm, const struct kvm_config *cfg)
{
	int ret = 0;

	for (int i = 0; i < cfg->nr_disks && !ret; i++)
		ret = virtio_blk_add(kvm, &cfg->disk[i]);
	return ret;
}

static int add_console(struct kvm *kvm, const struct kvm_config *cfg)
{
	return cfg->console_virtio ? virtio_console_add(kvm) : 0;
}

static int add_rng(struct kvm *kvm, const struct kvm_config *cfg)
{
	return cfg->rng ? virtio_rng_add(kvm) : 0;
}

static int add_shares(struct kvm *kvm, const struct kvm_config *cfg)
{
	int ret = virtio_9p_add_shares(kvm, cfg->shares);

	return ret ? ret : virtio_fs_add_shares(kvm, cfg->shares);
}

/* Each row adds its devices to the list (each device file knows its own lifecycle); the
 * list orders them (buses, legacy devices, virtio devices), registration order within. */
static const struct {
	int (*always)(struct kvm *kvm);
	int (*asked)(struct kvm *kvm, const struct kvm_config *cfg);
} machine[] = {
	{ .always = pci_bus_add },
	{ .always = serial8250_add },
	{ .always = i8042_add },
	{ .always = rtc_add },
	{ .always = pvpanic_add },
	{ .always = acpi_pm_add }, /* the PM1 ports the ACPI tables name (acpi_write) */
	{ .always = exitport_add },
	{ .asked = host_root_add_devices },
	{ .asked = add_nets },
	{ .asked = add_disks },
	{ .asked = add_console },
	{ .asked = add_rng },
	{ .asked = add_shares },
};

int kvm_run_add_devices(struct kvm *kvm, char *err, size_t errlen)
{
	int ret = 0;

	for (size_t i = 0; i < ARRAY_SIZE(machine) && !ret; i++)
		ret = machine[i].always ? machine[i].always(kvm) : machine[i].asked(kvm, &kvm->cfg);
	if (ret < 0)
		errfmt(err, errlen, "registering devices: %s", strerror(-ret));
	return ret;
}

/* The device tree, for the guest and for --dump-dtb FILE. */
static int make_dtb(struct run_state *st, const struct kvm_config *cfg, const char *cmdline,
		    char *err, size_t errlen)
{
	FILE *f;
	int n;

	st->dtb = malloc(FDT_MAX_SIZE);
	if (!st->dtb)
		return -ENOMEM;
	n = fdt_build(&st->kvm, cmdline, st->dtb, FDT_MAX_SIZE);
	if (n < 0) {
		errfmt(err, errlen, "building the device tree: %s", strerror(-n));
		return n;
	}
	st->dtb_len = (size_t)n;
	if (!cfg->dump_dtb)
		return 0;
	f = fopen(cfg->dump_dtb, "wb");
	if (!f) {
		errfmt(err, errlen, "--dump-dtb '%s': %s", cfg->dump_dtb, strerror(errno));
		return -EIO;
	}
	n = fwrite(st->dtb, 1, st->dtb_len, f) == st->dtb_len;
	if (fclose(f) != 0 || !n) {
		errfmt(err, errlen, "--dump-dtb '%s': write failed", cfg->dump_dtb);
		return -EIO;
	}
	pr_info("device tree (%zu bytes) written to %s", st->dtb_len, cfg->dump_dtb);
	return 0;
}

/* The kernel and initrd files, read whole (they are copied into guest RAM at boot). Without -i,
 * st->initrd is what the run handed over (-- CMD's initramfs), or none. */
static int load_images(struct run_state *st, const struct kvm_config *cfg, char *err, size_t errlen)
{
	int ret = load_file("kernel", cfg->kernel_path, &st->kernel, &st->kernel_len, err, errlen);

	if (ret < 0)
		return ret;
	if (boot_detect(st->kernel, st->kernel_len) < 0) {
		errfmt(err, errlen, "kernel '%s' is neither a bzImage nor an ELF vmlinux",
		       cfg->kernel_path);
		return -ENOEXEC;
	}
	if (cfg->initrd_path)
		return load_file("initrd", cfg->initrd_path, &st->initrd, &st->initrd_len, err,
				 errlen);
	return 0;
}

/* The VM and its devices (first: the command line and the device tree describe them). */
static int make_vm(struct run_state *st, const struct kvm_config *cfg, char *err, size_t errlen)
{
	struct kvm *kvm = &st->kvm;
	int ret = kvm_create(kvm, cfg, err, errlen);

	if (ret < 0)
		return ret;
	st->kvm_up = true;
	kvm->pvm_quirks = cfg->quirks == QUIRKS_PVM ||
			  (cfg->quirks == QUIRKS_AUTO && x86_host_is_pvm());
	if (kvm->pvm_quirks)
		pr_debug("PVM host quirks on: completing int3/clac/stac/fwait, adding \"%s\"",
			 x86_pvm_kernel_params);
	ret = kvm_run_add_devices(kvm, err, errlen);
	if (ret == 0)
		ret = kvm_devs_init(kvm, err, errlen);
	if (ret == 0)
		kvm_mark(kvm, "devices");
	return ret;
}

/* The kernel, initrd, command line and device tree in guest memory, the MP and ACPI tables. */
static int load_guest(struct run_state *st, const struct kvm_config *cfg, struct boot_entry *entry,
		      char *err, size_t errlen)
{
	struct kvm *kvm = &st->kvm;
	char cmdline[BOOT_CMDLINE_MAX];
	struct boot_args args;
	int ret = kvm_run_cmdline(cfg, kvm->pvm_quirks, cmdline, sizeof(cmdline));

	if (!ret)
		ret = virtio_mmio_cmdline(kvm, cmdline, sizeof(cmdline));
	if (ret < 0) {
		errfmt(err, errlen,
		       "kernel command line too long (at most %d bytes with lkvm's defaults)",
		       BOOT_CMDLINE_MAX - 1);
		return ret;
	}
	pr_debug("kernel command line: %s", cmdline);
	ret = make_dtb(st, cfg, cmdline, err, errlen);
	if (ret < 0)
		return ret;
	args = (struct boot_args){
		.kernel = st->kernel,
		.kernel_len = st->kernel_len,
		.initrd = st->initrd,
		.initrd_len = st->initrd_len,
		.cmdline = cmdline,
		.dtb = st->dtb,
		.dtb_len = st->dtb_len,
		.acpi_rsdp = ACPI_TABLES_ADDR,
	};
	ret = boot_load(&kvm->mem, &args, entry, err, errlen);
	if (ret < 0)
		return ret;
	/* Copied into guest RAM: the file images need not stay resident for the run. */
	free(st->kernel);
	free(st->initrd);
	free(st->dtb);
	st->kernel = st->initrd = st->dtb = NULL;
	ret = mptable_write(&kvm->mem, cfg->nr_cpus, err, errlen);
	/* Both: a kernel without ACPI reads the MP table, one with it the ACPI tables. */
	return ret ? ret : acpi_write(&kvm->mem, cfg->nr_cpus, err, errlen);
}

/* -n trace=on: the devices' stamps need the guest's TSC against the host's (kvm->guest_tsc,
 * which they read when they start). Unknown, the trace counts every transaction bad. */
static void read_guest_tsc(struct kvm *kvm, const struct kvm_config *cfg)
{
	int i, ret;

	for (i = 0; i < cfg->nr_nets && !cfg->net[i].trace; i++)
		;
	if (i == cfg->nr_nets)
		return;
	ret = kvm_cpu_guest_tsc(kvm->cpus[0], &kvm->guest_tsc);
	if (ret < 0)
		pr_warn("-n trace=on: the guest's TSC is unknown (%s): no stage is timed",
			strerror(-ret));
	else
		pr_debug("guest TSC: %llu kHz, offset %lld, within %llu ns",
			 (unsigned long long)kvm->guest_tsc.khz, (long long)kvm->guest_tsc.offset,
			 (unsigned long long)kvm->guest_tsc.err_ns);
}

/*
 * Descriptors a run opens after its set-up, beyond those open when the host-file shares' descriptor caps
 * are settled (host_files_fit counts those): the control socket's clients
 * (CTL_SERVER_RUN_FDS), the terminal's wake eventfd (term_init), --debug's /proc/self/statm,
 * and 8 short-lived ones (the C library's: --user's look-up of the user and its groups reads
 * /etc/passwd, /etc/group, nsswitch.conf).
 */
#define RUN_LATER_FDS (CTL_SERVER_RUN_FDS + 1 + 1 + 8)

/* --restore: the machine built from the snapshot's options, then its state instead of a boot.
 * The reader is closed once done: guest RAM keeps its mappings of the file. */
static int restore_setup(struct run_state *st, const struct kvm_config *cfg, char *err,
			 size_t errlen)
{
	struct kvm *kvm = &st->kvm;
	int ret = make_vm(st, cfg, err, errlen);

	for (int i = 0; !ret && i < cfg->nr_cpus; i++)
		ret = kvm_cpu_create(kvm, i, err, errlen);
	if (!ret) {
		kvm_mark(kvm, "vCPUs");
		ret = kvm_restore(kvm, st->snap, err, errlen);
	}
	if (!ret)
		kvm_mark(kvm, "restore");
	/* What the probe of issue 31 found (docs/snapshot.md): said once, at the restore. */
	if (!ret && x86_host_is_pvm())
		pr_info("restore: this PVM host's guests read the host's TSC: the guest's TSC ran on while the VM was a file (kvm-clock did not)");
	snap_close(st->snap);
	st->snap = NULL;
	return ret;
}

/* A boot: the files read, the VM built, the kernel loaded, the boot vCPU at its entry. */
static int boot_setup(struct run_state *st, const struct kvm_config *cfg, char *err, size_t errlen)
{
	struct kvm *kvm = &st->kvm;
	struct boot_entry entry;
	int ret = load_images(st, cfg, err, errlen);

	kvm_mark(kvm, "read kernel");
	if (!ret)
		ret = make_vm(st, cfg, err, errlen);
	if (!ret)
		ret = load_guest(st, cfg, &entry, err, errlen);
	if (!ret)
		kvm_mark(kvm, "load guest");
	for (int i = 0; !ret && i < cfg->nr_cpus; i++)
		ret = kvm_cpu_create(kvm, i, err, errlen);
	if (!ret) {
		kvm_mark(kvm, "vCPUs");
		ret = kvm_cpu_setup_boot(kvm->cpus[0], &entry, err, errlen);
	}
	if (!ret)
		pr_debug("%s kernel at 0x%llx-0x%llx, entry 0x%llx%s",
			 entry.kind == BOOT_KIND_PVH ? "PVH" : "bzImage",
			 (unsigned long long)entry.kernel_start,
			 (unsigned long long)entry.kernel_end, (unsigned long long)entry.rip,
			 entry.initrd_size ? ", with initrd" : "");
	return ret;
}

int kvm_run_setup(struct run_state *st, const struct kvm_config *cfg, char *err, size_t errlen)
{
	struct kvm *kvm = &st->kvm;
	int ret = st->snap ? restore_setup(st, cfg, err, errlen) : boot_setup(st, cfg, err, errlen);

	if (!ret)
		read_guest_tsc(kvm, cfg);
	/* Everything of the set-up is open: what is left of RLIMIT_NOFILE goes to the shares. */
	if (!ret)
		ret = host_files_fit(kvm, RUN_LATER_FDS, err, errlen);
	/* Last: the memslots' thread had the whole set-up to finish in. */
	if (!ret)
		ret = kvm_ram_ready(kvm, err, errlen);
	return ret;
}

void kvm_run_teardown(struct run_state *st)
{
	struct kvm *kvm = &st->kvm;

	/* The run started the vCPUs, so the run stops them (kvm_destroy does not): before the
	 * terminal goes, which they write to, and the devices, whose registers they reach. */
	if (st->kvm_up)
		kvm_cpu_stop_all(kvm);
	if (st->term_up)
		term_exit(&st->term);
	if (st->kvm_up)
		kvm_destroy(kvm); /* devices too, in reverse order */
	free(st->kernel);
	free(st->initrd);
	free(st->dtb);
	if (st->snap)
		snap_close(st->snap);
	st->snap = NULL;
}
