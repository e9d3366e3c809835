/* VM creation and teardown: /dev/kvm checks, the VM (its x86 parts in x86/vm.c), guest RAM, the stop request. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lkvm/dev.h"
#include "lkvm/kvm-cpu.h"
#include "lkvm/kvm.h"
#include "lkvm/x86.h"

static int open_kvm(char *err, size_t errlen)
{
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);

	if (fd >= 0)
		return fd;
	switch (errno) {
	case ENOENT:
		errfmt(err, errlen, "/dev/kvm does not exist: KVM is not available on this host");
		break;
	case EACCES:
	case EPERM:
		errfmt(err, errlen,
		       "cannot open /dev/kvm: permission denied (join the kvm group or run as root)");
		break;
	default:
		errfmt(err, errlen, "cannot open /dev/kvm: %s", strerror(errno));
	}
	return -errno;
}

/* /dev/kvm opened, and what lkvm needs of it there. */
static int check_kvm(struct kvm *kvm, char *err, size_t errlen)
{
	static const struct {
		long cap;
		const char *name;
	} required[] = {
		{ KVM_CAP_IRQCHIP, "KVM_CAP_IRQCHIP" },
		{ KVM_CAP_USER_MEMORY, "KVM_CAP_USER_MEMORY" },
		{ KVM_CAP_PIT2, "KVM_CAP_PIT2" },
		{ KVM_CAP_IMMEDIATE_EXIT, "KVM_CAP_IMMEDIATE_EXIT" },
	};
	int ret = open_kvm(err, errlen);

	if (ret < 0)
		return ret;
	kvm->sys_fd = ret;
	ret = ioctl(kvm->sys_fd, KVM_GET_API_VERSION, 0);
	if (ret != KVM_API_VERSION) {
		errfmt(err, errlen, "KVM API version %d, lkvm needs %d", ret, KVM_API_VERSION);
		return -ENOTSUP;
	}
	for (size_t i = 0; i < ARRAY_SIZE(required); i++) {
		if (ioctl(kvm->sys_fd, KVM_CHECK_EXTENSION, required[i].cap) <= 0) {
			errfmt(err, errlen, "host KVM lacks %s", required[i].name);
			return -ENOTSUP;
		}
	}
	kvm->vcpu_mmap_size = ioctl(kvm->sys_fd, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (kvm->vcpu_mmap_size < (int)sizeof(struct kvm_run)) {
		errfmt(err, errlen, "KVM_GET_VCPU_MMAP_SIZE: %s", strerror(errno));
		return -ENOTSUP;
	}
	return 0;
}

/* Every RAM region given to KVM, slot by slot; the result in memslot_ret (and _err). */
static void *memslots_thread(void *arg)
{
	struct kvm *kvm = arg;

	for (int i = 0; i < kvm->mem.nr; i++) {
		struct kvm_userspace_memory_region region = {
			.slot = (u32)i,
			.guest_phys_addr = kvm->mem.r[i].gpa,
			.memory_size = kvm->mem.r[i].size,
			.userspace_addr = (u64)(uintptr_t)kvm->mem.r[i].hva,
		};

		if (ioctl(kvm->vm_fd, KVM_SET_USER_MEMORY_REGION, &region) < 0) {
			kvm->memslot_ret = -errno;
			snprintf(kvm->memslot_err, sizeof(kvm->memslot_err),
				 "KVM_SET_USER_MEMORY_REGION: %s", strerror(errno));
			break;
		}
	}
	return NULL;
}

/* Guest RAM: mapped, laid out around the PCI hole (gmem_init), given to KVM slot by slot on
 * a thread of its own (kvm_ram_ready waits for it). */
static int map_ram(struct kvm *kvm, u64 ram_mib, char *err, size_t errlen)
{
	u64 ram_size = ram_mib << 20;
	u8 *base;
	int ret;

	/* NORESERVE: guest RAM is touched lazily, so a large -m costs only what the guest uses. */
	base = mmap(NULL, ram_size, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED) {
		ret = -errno;
		errfmt(err, errlen, "cannot map %llu MiB of guest memory: %s",
		       (unsigned long long)ram_mib, strerror(errno));
		return ret;
	}
	ret = gmem_init(&kvm->mem, base, ram_size);
	if (ret < 0) {
		/* gmem_init cleared kvm->mem (ram_size 0 included): unmap here, with the
		 * size that was mapped, or kvm_destroy would munmap(base, 0) and leak it. */
		errfmt(err, errlen, "bad memory size %llu MiB", (unsigned long long)ram_mib);
		munmap(base, ram_size);
		kvm->mem.base = MAP_FAILED;
		return ret;
	}
	madvise(kvm->mem.base, ram_size, MADV_HUGEPAGE);
	/* Nothing reads guest RAM through KVM before a vCPU runs: the memslots can come later. */
	if (pthread_create(&kvm->memslot_thread, NULL, memslots_thread, kvm) == 0) {
		kvm->memslot_pending = true;
		return 0;
	}
	memslots_thread(kvm); /* no thread: here, as before */
	if (kvm->memslot_ret < 0)
		errfmt(err, errlen, "%s", kvm->memslot_err);
	return kvm->memslot_ret;
}

int kvm_ram_ready(struct kvm *kvm, char *err, size_t errlen)
{
	if (kvm->memslot_pending) {
		pthread_join(kvm->memslot_thread, NULL);
		kvm->memslot_pending = false;
		kvm_mark(kvm, "memslots (waited)");
	}
	if (kvm->memslot_ret < 0)
		errfmt(err, errlen, "%s", kvm->memslot_err);
	return kvm->memslot_ret;
}

int kvm_create(struct kvm *kvm, const struct kvm_config *cfg, char *err, size_t errlen)
{
	struct kvm_startup profile = kvm->startup; /* steps before the VM: reading the kernel */
	int ret;

	memset(kvm, 0, sizeof(*kvm));
	kvm->startup = profile;
	kvm->cfg = *cfg;
	kvm->sys_fd = kvm->vm_fd = kvm->stop_fd = kvm->statm_fd = -1;
	kvm->mem.base = MAP_FAILED;
	io_bus_init(&kvm->pio);
	io_bus_init(&kvm->mmio);

	kvm->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (kvm->stop_fd < 0) {
		ret = -errno;
		errfmt(err, errlen, "eventfd: %s", strerror(errno));
		goto fail;
	}
	ret = check_kvm(kvm, err, errlen);
	if (ret < 0)
		goto fail;
	kvm_mark(kvm, "open /dev/kvm");
	do {
		kvm->vm_fd = ioctl(kvm->sys_fd, KVM_CREATE_VM, 0);
	} while (kvm->vm_fd < 0 && errno == EINTR);
	if (kvm->vm_fd < 0) {
		ret = -errno;
		errfmt(err, errlen, "KVM_CREATE_VM: %s", strerror(errno));
		goto fail;
	}
	kvm_mark(kvm, "KVM_CREATE_VM");
	ret = x86_vm_init(kvm, err, errlen);
	if (ret == 0)
		ret = map_ram(kvm, cfg->ram_mib, err, errlen);
	if (ret == 0) {
		kvm_mark(kvm, "guest RAM");
		return 0;
	}
fail:
	kvm_destroy(kvm);
	return ret < 0 ? ret : -EINVAL;
}

/* Guest RAM's resident pages, a chunk of mincore at a time (a 64 GiB guest would want a 16 MiB
 * vector in one go). */
static u64 guest_resident_pages(const struct kvm *kvm)
{
	const size_t chunk = 1u << 16;
	u64 pages = kvm->mem.ram_size / 4096, resident = 0;
	unsigned char *vec = malloc(chunk);

	for (u64 at = 0; vec && at < pages; at += chunk) {
		size_t n = (size_t)MIN(chunk, pages - at);

		if (mincore(kvm->mem.base + at * 4096, n * 4096, vec) < 0)
			break;
		for (size_t i = 0; i < n; i++)
			resident += vec[i] & 1;
	}
	free(vec);
	return resident;
}

int kvm_mem_usage(struct kvm *kvm, struct kvm_mem_usage *u)
{
	unsigned long long size, rss, shared;
	long page_kib = sysconf(_SC_PAGESIZE) / 1024;
	char line[128];
	ssize_t n;

	if (kvm->statm_fd < 0)
		return -EBADF;
	/* statm: size resident shared text lib data dt, in pages; "shared" is the resident
	 * pages backed by files (and shared memory, which lkvm has none of). */
	/* lseek and read, not pread (which the sandbox's main and ctl kinds do not have): the
	 * offset is shared, but only the ctl thread reads here while the VM runs, and main only
	 * after the ctl thread stopped (print_stats, report_memory). */
	if (lseek(kvm->statm_fd, 0, SEEK_SET) != 0)
		return -errno;
	n = read(kvm->statm_fd, line, sizeof(line) - 1);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	line[n] = '\0';
	if (sscanf(line, "%llu %llu %llu", &size, &rss, &shared) != 3)
		return -EIO;
	u->rss_kib = rss * (u64)page_kib;
	u->files_kib = shared * (u64)page_kib;
	u->guest_kib = kvm->mem.base == MAP_FAILED ? 0 : guest_resident_pages(kvm) * 4;
	return 0;
}

void kvm_mark(struct kvm *kvm, const char *step)
{
	struct kvm_startup *s = &kvm->startup;

	if (s->n < KVM_STARTUP_MAX) {
		s->step[s->n] = step;
		s->ns[s->n++] = now_ns();
	}
}

void kvm_startup_format(const struct kvm *kvm, char *buf, size_t len)
{
	const struct kvm_startup *s = &kvm->startup;
	u64 prev = kvm->start_ns, first = atomic_load(&kvm->first_insn_ns);
	size_t at = 0;

	buf[0] = '\0';
	for (int i = 0; i < s->n && at < len; i++) {
		/* A step marked before start_ns was set (none should be) counts from there. */
		u64 t = MAX(s->ns[i], prev);

		at += (size_t)snprintf(buf + at, len - at, "%s%s %.2f", i ? ", " : "", s->step[i],
				       (double)(t - prev) / 1e6);
		prev = t;
	}
	if (first && at < len)
		snprintf(buf + at, len - at, "%sfirst guest instruction at %.2f ms",
			 s->n ? "; " : "", (double)(first - kvm->start_ns) / 1e6);
}

void kvm_destroy(struct kvm *kvm)
{
	char err[96];

	/* The memslots' thread uses vm_fd and the regions: done before either goes. */
	if (kvm_ram_ready(kvm, err, sizeof(err)) < 0)
		pr_debug("%s", err);
	kvm_devs_exit(kvm);
	for (int i = 0; i < kvm->nr_cpus; i++) {
		kvm_cpu_destroy(kvm->cpus[i]);
		kvm->cpus[i] = NULL;
	}
	kvm->nr_cpus = 0;
	if (kvm->mem.base && kvm->mem.base != MAP_FAILED)
		munmap(kvm->mem.base, kvm->mem.ram_size);
	kvm->mem.base = MAP_FAILED;
	kvm->mem.nr = 0;
	if (kvm->vm_fd >= 0)
		close(kvm->vm_fd);
	if (kvm->sys_fd >= 0)
		close(kvm->sys_fd);
	if (kvm->stop_fd >= 0)
		close(kvm->stop_fd);
	kvm->vm_fd = kvm->sys_fd = kvm->stop_fd = -1;
	io_bus_destroy(&kvm->pio);
	io_bus_destroy(&kvm->mmio);
}

int kvm_irq_line(struct kvm *kvm, u32 gsi, int level)
{
	struct kvm_irq_level irq = { .irq = gsi, .level = (u32)level };

	if (ioctl(kvm->vm_fd, KVM_IRQ_LINE, &irq) < 0)
		return -errno;
	return 0;
}

bool kvm_has_ioeventfd(struct kvm *kvm)
{
	return kvm->vm_fd >= 0 && ioctl(kvm->vm_fd, KVM_CHECK_EXTENSION, KVM_CAP_IOEVENTFD) > 0;
}

int kvm_ioeventfd(struct kvm *kvm, const struct kvm_ioevent *ev, int fd, bool assign)
{
	struct kvm_ioeventfd req = {
		.addr = ev->addr,
		.len = ev->len,
		.datamatch = ev->match ? ev->data : 0,
		.fd = fd,
		.flags = (ev->match ? KVM_IOEVENTFD_FLAG_DATAMATCH : 0) |
			 (assign ? 0 : KVM_IOEVENTFD_FLAG_DEASSIGN),
	};

	if (kvm->vm_fd < 0)
		return -ENODEV;
	return ioctl(kvm->vm_fd, KVM_IOEVENTFD, &req) < 0 ? -errno : 0;
}

int kvm_irqfd(struct kvm *kvm, int fd, u32 gsi, bool assign)
{
	struct kvm_irqfd req = {
		.fd = (u32)fd,
		.gsi = gsi,
		.flags = assign ? 0 : KVM_IRQFD_FLAG_DEASSIGN,
	};

	if (kvm->vm_fd < 0)
		return -ENODEV;
	return ioctl(kvm->vm_fd, KVM_IRQFD, &req) < 0 ? -errno : 0;
}

/* The kind a status tells alone; the others are said by their callers (kvm_request_end). */
static enum kvm_end end_of_status(int status)
{
	switch (status) {
	case EXIT_LKVM_ERROR:
		return KVM_END_ERROR;
	case EXIT_GUEST_PANIC:
		return KVM_END_PANIC;
	case EXIT_STOPPED:
		return KVM_END_STOP;
	case EXIT_GUEST_ASSERT:
		return KVM_END_ASSERT;
	case EXIT_TIMEOUT:
		return KVM_END_TIMEOUT;
	default:
		return KVM_END_OTHER;
	}
}

static __printf(4, 0) void request_end(struct kvm *kvm, enum kvm_end by, int status,
				       const char *fmt, va_list ap)
{
	bool expected = false;

	if (!atomic_compare_exchange_strong(&kvm->stopping, &expected, true))
		return;
	atomic_store(&kvm->exit_status, status);
	kvm->exit_by = by;
	vsnprintf(kvm->exit_reason, sizeof(kvm->exit_reason), fmt, ap);
	if (kvm->stop_fd >= 0) {
		u64 one = 1;

		if (write(kvm->stop_fd, &one, sizeof(one)) < 0) {
			/* The counter cannot overflow from one write; nothing to do. */
		}
	}
}

void kvm_request_exit(struct kvm *kvm, int status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	request_end(kvm, end_of_status(status), status, fmt, ap);
	va_end(ap);
}

void kvm_request_end(struct kvm *kvm, enum kvm_end by, int status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	request_end(kvm, by, status, fmt, ap);
	va_end(ap);
}
