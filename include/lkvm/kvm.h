/* The virtual machine: KVM file descriptors, guest memory, buses, vCPUs, configuration and exit state. */
#ifndef LKVM_KVM_H
#define LKVM_KVM_H

#include <pthread.h>
#include <stdatomic.h>
#include <linux/kvm.h>

#include "lkvm/io.h"
#include "lkvm/mem.h"
#include "lkvm/net.h"
#include "lkvm/util.h"

#define LKVM_MAX_CPUS 64

/* Exit statuses of `lkvm run`. */
enum {
	EXIT_GUEST_OK = 0,     /* guest powered off or rebooted, or --exit-on text was seen */
	EXIT_LKVM_ERROR = 1,   /* bad input, host problem, or an exit lkvm cannot handle */
	EXIT_GUEST_PANIC = 2,  /* pvpanic reported a guest panic */
	EXIT_TIMEOUT = 124,    /* --timeout expired (the timeout(1) convention) */
};

enum quirks_mode { QUIRKS_AUTO, QUIRKS_PVM, QUIRKS_NONE };

struct kvm_config {
	const char *kernel_path;
	const char *initrd_path;
	const char *cmdline;   /* user's -p, may be NULL */
	const char *name;
	const char *exit_on;   /* --exit-on TEXT: end with 0 when the console prints TEXT */
	u64 ram_mib;
	int nr_cpus;
	int timeout_s;         /* 0: none */
	enum quirks_mode quirks;
	bool console_serial;   /* --console serial (the only console for now) */
	bool debug;
	bool no_ioeventfd;     /* --no-ioeventfd: every virtio notify is a trapped exit */
	enum { STATS_OFF, STATS_TABLE, STATS_JSON } stats;
	int nr_nets;
	struct net_opts net[4]; /* -n, once per NIC */
	bool sandbox;          /* --sandbox=on (default): drop capabilities, seccomp per thread */
	const char *user;      /* --user USER: switch to it after set-up, or NULL */
};

struct kvm_cpu;
struct serial8250;

/* GSI routing (x86/irq.c). KVM's routing table is per VM and KVM_SET_GSI_ROUTING
 * replaces all of it, so lkvm keeps the whole table: KVM's default routes for GSIs 0-23
 * (IOAPIC pins, PICs for 0-15) plus one MSI route per allocated GSI from 24 up. */
#define KVM_IRQ_MSI_GSI_BASE 24
#define KVM_IRQ_MSI_ROUTES 1024 /* GSIs 24..1047; KVM allows 4096 routes */

struct kvm_msi_route {
	u64 addr;
	u32 data;
	bool used;  /* GSI allocated */
	bool valid; /* addr/data programmed: part of the table sent to KVM */
};
struct term;
struct pci_bus;
struct virtio_net;

/* Counters of the host-instruction completions (x86/emulate.c); see `--stats`. */
enum emu_insn {
	EMU_INT3,
	EMU_CLAC,
	EMU_STAC,
	EMU_FWAIT,
	EMU_NR
};

struct kvm {
	int sys_fd;
	int vm_fd;
	int vcpu_mmap_size;
	struct kvm_config cfg;
	struct guest_mem mem;

	struct io_bus pio;
	struct io_bus mmio;

	int nr_cpus;
	struct kvm_cpu *cpus[LKVM_MAX_CPUS];

	bool pvm_quirks;                       /* host needs instruction completions */
	atomic_ullong emu_hits[EMU_NR];

	struct serial8250 *uart;
	struct term *term;
	struct pci_bus *pci;
	void *pvpanic;
	void *i8042;
	void *rtc;
	struct virtio_net *nets[4];

	/* Ending the run: the first kvm_request_exit wins; stop_fd wakes the main thread. */
	atomic_bool stopping;
	atomic_int exit_status;
	char exit_reason[256];
	int stop_fd; /* eventfd */

	/* GSI allocator and MSI routes; irq_lock is usable zero-initialised (glibc's
	 * PTHREAD_MUTEX_INITIALIZER is all zeroes, and kvm_create starts from memset 0). */
	pthread_mutex_t irq_lock;
	struct kvm_msi_route msi_routes[KVM_IRQ_MSI_ROUTES];

	/* Threads install their seccomp filter when they start (sandbox_enter); set by the
	 * run once privileges are dropped, before any thread starts. */
	bool sandbox;

	u64 start_ns; /* process start, for timing reports */
	atomic_ullong first_insn_ns;
};

/* Open /dev/kvm, check the API, create the VM with in-kernel irqchip and PIT, map RAM.
 * Returns 0 or -errno with a one-line reason in err. */
int kvm_create(struct kvm *kvm, const struct kvm_config *cfg, char *err, size_t errlen) __must_check;
void kvm_destroy(struct kvm *kvm);

/* Raise/lower a GSI on the in-kernel irqchip. */
int kvm_irq_line(struct kvm *kvm, u32 gsi, int level);

/* Allocate a GSI >= KVM_IRQ_MSI_GSI_BASE for an MSI route (not yet routed). Returns
 * the GSI or -ENOSPC. Thread-safe; works without a VM (vm_fd < 0: no ioctl). */
int kvm_gsi_alloc(struct kvm *kvm) __must_check;
/* Drop the GSI's route (re-sending the table if it had one) and free it. */
void kvm_gsi_free(struct kvm *kvm, int gsi);
/* Point an allocated GSI at an MSI message and send the whole table (default
 * IOAPIC/PIC routes included) with KVM_SET_GSI_ROUTING. Returns 0 or -errno (the
 * GSI is left unrouted then). */
int kvm_gsi_route_msi(struct kvm *kvm, int gsi, u64 addr, u32 data) __must_check;

/* Ask the run to end with `status`; only the first request counts. Thread-safe. */
void kvm_request_exit(struct kvm *kvm, int status, const char *fmt, ...) __printf(3, 4);

#endif
