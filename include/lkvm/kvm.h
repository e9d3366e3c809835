/* The virtual machine: KVM file descriptors, guest memory, buses, vCPUs, configuration and exit state. */
#ifndef LKVM_KVM_H
#define LKVM_KVM_H

#include <pthread.h>
#include <stdatomic.h>
#include <linux/kvm.h>

#include "lkvm/io.h"
#include "lkvm/mem.h"
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
};

struct kvm_cpu;
struct serial8250;
struct term;
struct pci_bus;

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

	/* Ending the run: the first kvm_request_exit wins; stop_fd wakes the main thread. */
	atomic_bool stopping;
	atomic_int exit_status;
	char exit_reason[256];
	int stop_fd; /* eventfd */

	u64 start_ns; /* process start, for timing reports */
	atomic_ullong first_insn_ns;
};

/* Open /dev/kvm, check the API, create the VM with in-kernel irqchip and PIT, map RAM.
 * Returns 0 or -errno with a one-line reason in err. */
int kvm_create(struct kvm *kvm, const struct kvm_config *cfg, char *err, size_t errlen) __must_check;
void kvm_destroy(struct kvm *kvm);

/* Raise/lower a GSI on the in-kernel irqchip. */
int kvm_irq_line(struct kvm *kvm, u32 gsi, int level);

/* Ask the run to end with `status`; only the first request counts. Thread-safe. */
void kvm_request_exit(struct kvm *kvm, int status, const char *fmt, ...) __printf(3, 4);

#endif
