/* Host-root mode's machine (`lkvm run -- CMD`): what it adds to the device list, its kernel parameters, and CMD's output consoles. */
#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include "lkvm/host-root.h"
#include "lkvm/initcfg.h"
#include "lkvm/kvm.h"
#include "lkvm/virtio-9p.h"
#include "lkvm/virtio-console.h"
#include "lkvm/virtio-fs.h"

const char *host_root_kernel_params(const struct kvm_config *cfg)
{
	if (!cfg->host_root.on)
		return "";
	/* A log someone keeps (--console-log, --debug's stderr) is the whole log: the console
	 * prints every level (ignore_loglevel), where it otherwise prints only errors. */
	if (cfg->debug || cfg->host_root.full_log)
		return "ignore_loglevel panic=-1";
	/* --fail-on reads the console: warnings (level 4: WARN_ON's "WARNING:", an oops) must
	 * reach it, which quiet (console level 4: errors and worse) keeps back. */
	return cfg->nr_fail_on ? "loglevel=5 panic=-1" : "quiet panic=-1";
}

/* ---- CMD's consoles ---- */

/* A closed stdout ends the run as it would end CMD on the host (SIGPIPE). */
static void cmd_output(struct kvm *kvm, int fd, const u8 *buf, size_t len)
{
	if (write_full(fd, buf, len) < len && errno == EPIPE)
		kvm_request_end(kvm, KVM_END_CLOSED, 128 + SIGPIPE,
				"the command's %s was closed (SIGPIPE)",
				fd == STDOUT_FILENO ? "stdout" : "stderr");
}

static void cmd_stdout(struct kvm *kvm, const u8 *buf, size_t len)
{
	cmd_output(kvm, STDOUT_FILENO, buf, len);
}

static void cmd_stderr(struct kvm *kvm, const u8 *buf, size_t len)
{
	cmd_output(kvm, STDERR_FILENO, buf, len);
}

/* ---- the machine's part ---- */

/* The host's /, read-only, over 9p, virtio-fs or both (--fs: host_root.no_9p, vfs). */
static int add_root(struct kvm *kvm, const struct host_root_cfg *hr)
{
	struct p9_share root = { .host_dir = "/", .tag = HOST_ROOT_TAG, .ro = true };
	struct virtio_fs_share fs = { .tag = VIRTIO_FS_ROOT_TAG, .cache = hr->cache };
	int ret = hr->no_9p ? 0 : virtio_9p_add(kvm, &root);

	return !ret && hr->vfs ? virtio_fs_add(kvm, &root, &fs) : ret;
}

int host_root_mmio_devices(const struct kvm_config *cfg)
{
	const struct host_root_cfg *hr = &cfg->host_root;

	return hr->on && cfg->virtio_trans == VIRTIO_TRANS_MMIO ? 3 + !hr->no_9p + hr->vfs : 0;
}

int host_root_add_devices(struct kvm *kvm, const struct kvm_config *cfg)
{
	const struct host_root_cfg *hr = &cfg->host_root;
	int ret;

	if (!hr->on)
		return 0;
	/* A guest reset before init's report is a run without CMD's status (an ACPI power-off
	 * ends it with 0: hw/acpi-pm.c). */
	kvm->guest_end_status = EXIT_GUEST_NO_STATUS;
	ret = add_root(kvm, hr);
	/* hvc0, the terminal or stdin's way in; output that is not a terminal on named ports,
	 * whose writes do not wait for lkvm (a console's each do, and make CMD's stdout a tty). */
	if (!ret)
		ret = virtio_console_add_port(kvm, cmd_stdout, hr->tty, NULL);
	if (!ret && !hr->tty)
		ret = virtio_console_add_port(kvm, cmd_stdout, false, INITCFG_STDOUT_PORT);
	if (!ret && hr->stderr_own)
		ret = virtio_console_add_port(kvm, cmd_stderr, false, INITCFG_STDERR_PORT);
	if (!ret && hr->stdin_framed)
		ret = cmd_stdin_add(kvm);
	return ret;
}
