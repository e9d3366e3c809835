/* Snapshot and restore of a whole VM: the file's sections in order (machine, vCPUs, devices, memory), on a paused VM and on a new one. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lkvm/dev.h"
#include "lkvm/kvm-cpu.h"
#include "lkvm/kvm.h"
#include "lkvm/snap.h"
#include "lkvm/version.h"
#include "lkvm/vm-snap.h"
#include "lkvm/x86.h"

#define VM_REC_ARGV 64 /* the run's options, NUL-terminated words (x86/snap.c has 1-63) */
/* u8: 1 for lkvm run -- CMD's machine (the host's / shared), which a restore's options cannot
 * tell once a restored VM is saved again (it was given no -k). */
#define VM_REC_HOST_ROOT 65
#define MAX_ARGV_BYTES 65536

static void machine_of(struct kvm *kvm, struct snap_machine *m)
{
	_Static_assert(sizeof(kvm->cpuid_digest) == SNAP_DIGEST_LEN, "the digest's size");
	memset(m, 0, sizeof(*m));
	m->nr_vcpus = (u32)kvm->nr_cpus;
	m->ram_bytes = kvm->mem.ram_size;
	snprintf(m->lkvm_version, sizeof(m->lkvm_version), "%s", LKVM_VERSION);
	memcpy(m->cpuid_digest, kvm->cpuid_digest, SNAP_DIGEST_LEN);
}

static void put_argv(struct kvm *kvm, struct snap_rec_buf *b)
{
	size_t len = 0, at = 0;
	char *buf;

	for (int i = 0; i < kvm->cfg.argc; i++)
		len += strlen(kvm->cfg.argv[i]) + 1;
	buf = malloc(len + 1);
	if (!buf) {
		b->err = b->err ? b->err : -ENOMEM;
		return;
	}
	for (int i = 0; i < kvm->cfg.argc; i++) {
		size_t n = strlen(kvm->cfg.argv[i]) + 1;

		memcpy(buf + at, kvm->cfg.argv[i], n);
		at += n;
	}
	snap_rec_put(b, VM_REC_ARGV, buf, len);
	free(buf);
}

/* Everything but the memory, each in its section. */
static int write_state(struct kvm *kvm, struct snap_writer *w, char *err, size_t errlen)
{
	struct snap_rec_buf b = { 0 };
	int ret = x86_snap_save_vm(kvm, &b, err, errlen);

	if (!ret) {
		u8 host_root = kvm->cfg.host_root.on;

		put_argv(kvm, &b);
		snap_rec_put(&b, VM_REC_HOST_ROOT, &host_root, sizeof(host_root));
		ret = b.err ? b.err : snap_add(w, SNAP_SEC_VM, 0, b.buf, b.len);
	}
	snap_rec_free(&b);
	for (int i = 0; !ret && i < kvm->nr_cpus; i++) {
		b = (struct snap_rec_buf){ 0 };
		ret = x86_snap_save_vcpu(kvm->cpus[i], &b, err, errlen);
		if (!ret)
			ret = b.err ? b.err : snap_add(w, SNAP_SEC_VCPU, (u32)i, b.buf, b.len);
		snap_rec_free(&b);
	}
	if (!ret)
		ret = kvm_devs_save(kvm, w, err, errlen);
	return ret;
}

static int write_file(struct kvm *kvm, int fd, struct kvm_snap_result *res, char *err,
		      size_t errlen)
{
	struct snap_machine m;
	struct snap_writer *w;
	off_t end;
	int ret;

	machine_of(kvm, &m);
	ret = snap_writer_open_fd(&w, fd, "file", &m, err, errlen);
	if (ret < 0)
		return ret;
	ret = write_state(kvm, w, err, errlen);
	if (ret < 0) {
		snap_writer_abort(w);
		return ret;
	}
	/* Its error sticks in w: finish reports it. */
	snap_add_memory(w, kvm->mem.base, kvm->mem.ram_size);
	ret = snap_writer_finish(w, err, errlen);
	end = ret == 0 ? lseek(fd, 0, SEEK_END) : -1;
	res->bytes = end > 0 ? (u64)end : 0;
	return ret;
}

int kvm_snapshot(struct kvm *kvm, int fd, bool stop, struct kvm_snap_result *res, char *err,
		 size_t errlen)
{
	u64 t0 = now_ns();
	bool was_paused;
	int ret = kvm_devs_can_save(kvm, err, errlen);

	memset(res, 0, sizeof(*res));
	if (ret < 0)
		return ret;
	ret = kvm_pause_by(kvm, PAUSE_CTL, SNAP_PAUSE_TIMEOUT_MS, err, errlen);
	was_paused = ret == -EALREADY; /* lkvm pause's: saved as it is, left paused */
	if (ret < 0 && !was_paused)
		return ret;
	res->pause_ns = now_ns() - t0;
	ret = write_file(kvm, fd, res, err, errlen);
	res->save_ns = now_ns() - t0 - res->pause_ns;
	if (ret == 0 && stop) {
		kvm_request_exit(kvm, EXIT_STOPPED,
				 "stopped after a snapshot (lkvm snapshot --stop)");
		return 0;
	}
	if (!was_paused) {
		char why[256];

		if (kvm_resume_by(kvm, PAUSE_CTL, why, sizeof(why)) < 0 && ret == 0) {
			errfmt(err, errlen, "saved, but the VM did not resume: %s", why);
			ret = -EIO;
		}
	}
	return ret;
}

int kvm_snapshot_argv(const struct snap_reader *r, char ***argv, int *argc, char *err,
		      size_t errlen)
{
	const void *sec;
	size_t len;
	int ret = snap_section(r, SNAP_SEC_VM, 0, &sec, &len);

	if (ret == 0)
		ret = snap_rec_words(sec, len, VM_REC_ARGV, MAX_ARGV_BYTES, argv, argc);
	if (ret == -EBADMSG || ret == -ENOENT)
		errfmt(err, errlen,
		       "the snapshot's VM section has no valid record of the run's options");
	return ret == -ENOENT ? -EINVAL : ret == -EBADMSG ? -EINVAL : ret;
}

int kvm_snapshot_host_root(const struct snap_reader *r, bool *on)
{
	const void *sec;
	size_t len;
	u8 v;
	int ret = snap_section(r, SNAP_SEC_VM, 0, &sec, &len);

	if (ret == 0)
		ret = snap_rec_get(sec, len, VM_REC_HOST_ROOT, &v, sizeof(v));
	if (ret == 0 && v > 1)
		ret = -EBADMSG;
	if (ret == 0)
		*on = v;
	return ret;
}

void kvm_snapshot_argv_free(char **argv, int argc)
{
	snap_words_free(argv, argc);
}

int kvm_snapshot_device(const struct snap_reader *r, const char *name, int index, const void **sec,
			size_t *len)
{
	for (u32 i = 0; i < snap_nr_sections(r); i++) {
		u32 type, place, at;
		char got[32] = "";

		snap_section_at(r, i, &type, &place);
		if (type != SNAP_SEC_DEVICE || snap_section(r, type, place, sec, len) < 0)
			continue;
		/* The name record's bytes, no NUL (dev-snap.c's save_one). */
		for (struct snap_rec_iter it = { *sec, *len };;) {
			const void *data;
			u32 rlen;
			u16 tag;

			if (snap_rec_next(&it, &tag, &data, &rlen) != 1)
				break;
			if (tag == DEV_SNAP_TAG_NAME && rlen < sizeof(got))
				memcpy(got, data, rlen);
		}
		if (!strcmp(got, name) &&
		    snap_rec_get(*sec, *len, DEV_SNAP_TAG_INDEX, &at, sizeof(at)) == 0 &&
		    at == (u32)index)
			return 0;
	}
	return -ENOENT;
}

static int load_sections(struct kvm *kvm, const struct snap_reader *r, char *err, size_t errlen)
{
	const void *sec;
	size_t len;
	u64 host_tsc = x86_host_tsc();
	int ret = 0;

	for (int i = 0; !ret && i < kvm->nr_cpus; i++) {
		if (snap_section(r, SNAP_SEC_VCPU, (u32)i, &sec, &len) < 0) {
			errfmt(err, errlen, "vCPU %d is not in the snapshot", i);
			return -EINVAL;
		}
		ret = x86_snap_load_vcpu(kvm->cpus[i], sec, len, host_tsc, err, errlen);
	}
	if (!ret && snap_section(r, SNAP_SEC_VM, 0, &sec, &len) < 0) {
		errfmt(err, errlen, "the snapshot has no VM section");
		return -EINVAL;
	}
	if (!ret)
		ret = x86_snap_load_vm(kvm, sec, len, err, errlen);
	if (!ret)
		ret = kvm_devs_load(kvm, r, err, errlen);
	return ret;
}

/* Sections this lkvm does not know would be state it drops: refused. */
static int check_known(const struct snap_reader *r, char *err, size_t errlen)
{
	for (u32 i = 0; i < snap_nr_sections(r); i++) {
		u32 type, instance;

		snap_section_at(r, i, &type, &instance);
		if (type < SNAP_SEC_MEM_MAP || type > SNAP_SEC_DEVICE) {
			errfmt(err, errlen,
			       "the snapshot has a section of type %u this lkvm does not know",
			       type);
			return -EINVAL;
		}
	}
	return 0;
}

int kvm_restore(struct kvm *kvm, const struct snap_reader *r, char *err, size_t errlen)
{
	struct snap_machine m;
	char why[256];
	int ret;

	machine_of(kvm, &m);
	ret = snap_check_machine(r, &m, why, sizeof(why));
	if (ret == 0)
		ret = check_known(r, why, sizeof(why));
	if (ret < 0) {
		errfmt(err, errlen, "%s", why);
		return ret;
	}
	ret = snap_map_memory(r, kvm->mem.base, kvm->mem.ram_size, err, errlen);
	/* The vCPUs' paravirtual MSRs (PV EOI, steal time, kvm-clock) name guest pages that KVM
	 * looks up as they are set: the memslots must be in place first. */
	if (ret == 0)
		ret = kvm_ram_ready(kvm, err, errlen);
	if (ret == 0)
		ret = load_sections(kvm, r, err, errlen);
	return ret;
}
