/* ACPI PM1a registers: the status, enable and control words the FADT points at; SLP_TYP(S5)|SLP_EN powers off. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/acpi.h"
#include "lkvm/dev.h"
#include "lkvm/io.h"
#include "lkvm/kvm.h"
#include "lkvm/snap.h"

/* PM1 enable bits kept: timer, global lock, power and sleep buttons, RTC. Nothing ever
 * sets a status bit (lkvm raises no events), so status reads 0 and a write-1-to-clear has
 * nothing to clear. */
#define PM1_EN_MASK 0x0721u
/* PM1 control bits kept: BM_RLD and SLP_TYP. SCI_EN always reads 1, GBL_RLS and SLP_EN
 * are write-only. */
#define PM1_CNT_KEEP (ACPI_PM1_CNT_SLP_TYP_MASK | 0x0002u)

struct acpi_pm {
	struct kvm *kvm;
	pthread_mutex_t lock; /* vCPUs may write at once */
	u16 en, cnt;
};

static u16 pm_read(struct acpi_pm *p, u64 off)
{
	switch (off) {
	case 2: /* PM1a_EN */
		return p->en;
	case ACPI_PM1_EVT_LEN: /* PM1a_CNT */
		return (u16)(p->cnt | ACPI_PM1_CNT_SCI_EN);
	default: /* PM1a_STS */
		return 0;
	}
}

/* Returns true when the write asks for S5. */
static bool pm_write(struct acpi_pm *p, u64 off, u16 v)
{
	if (off == 2) {
		p->en = v & PM1_EN_MASK;
	} else if (off == ACPI_PM1_EVT_LEN) {
		p->cnt = v & PM1_CNT_KEEP;
		return (v & ACPI_PM1_CNT_SLP_EN) && ((v & ACPI_PM1_CNT_SLP_TYP_MASK) >>
						     ACPI_PM1_CNT_SLP_TYP_SHIFT) == ACPI_SLP_TYP_S5;
	}
	return false;
}

/* One handler for both blocks (they are adjacent): off is from ACPI_PM1_EVT_PORT. An
 * access of any width at any byte reads or writes the bytes of the words it covers; a
 * byte write changes only its byte (ACPICA writes whole words, a hostile guest need not). */
static void acpi_pm_io(struct kvm_cpu *vcpu, u64 port, u8 *data, u32 len, bool is_write,
		       void *opaque)
{
	struct acpi_pm *p = opaque;
	u64 start = port - ACPI_PM1_EVT_PORT;
	bool off = false;

	pthread_mutex_lock(&p->lock);
	for (u32 i = 0; i < len && start + i < ACPI_PM1_EVT_LEN + ACPI_PM1_CNT_LEN; i++) {
		u64 at = start + i, word = at & ~1ull;
		u16 v = pm_read(p, word);
		unsigned shift = (unsigned)(at & 1) * 8;

		if (!is_write) {
			data[i] = (u8)(v >> shift);
			continue;
		}
		v = (u16)((v & ~(0xffu << shift)) | (u16)data[i] << shift);
		/* A word's low byte alone never powers off: SLP_EN is in its high byte. */
		if (pm_write(p, word, v))
			off = true;
	}
	pthread_mutex_unlock(&p->lock);
	/* EXIT_GUEST_OK even with -- CMD, where a reset ends with kvm->guest_end_status (125):
	 * S5 is the guest asking to be powered off, never a crashing kernel's fallback, so
	 * `lkvm run -- poweroff -f` ends with 0. */
	if (off)
		kvm_request_end(p->kvm, KVM_END_POWEROFF, EXIT_GUEST_OK, "guest powered off");
}

static int acpi_pm_dev_init(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen)
{
	struct acpi_pm *p = calloc(1, sizeof(*p));
	int ret;

	if (!p)
		return -ENOMEM;
	p->kvm = kvm;
	pthread_mutex_init(&p->lock, NULL);
	ret = io_bus_register(&kvm->pio, ACPI_PM1_EVT_PORT, ACPI_PM1_EVT_LEN + ACPI_PM1_CNT_LEN,
			      acpi_pm_io, p, "acpi-pm");
	if (ret) {
		pthread_mutex_destroy(&p->lock);
		free(p);
		return ret;
	}
	d->priv = p;
	return 0;
}

static void acpi_pm_dev_exit(struct kvm *kvm, struct kvm_dev *d)
{
	struct acpi_pm *p = d->priv;

	io_bus_unregister(&kvm->pio, ACPI_PM1_EVT_PORT);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

/* Snapshot: the enable and control words, one record; a value with bits the device
 * never keeps is refused (no guest could have written it). */
#define ACPI_PM_SNAP_TAG DEV_SNAP_TAG_MIN

struct acpi_pm_snap {
	u16 en, cnt;
	u8 reserved[4];
};
_Static_assert(sizeof(struct acpi_pm_snap) == 8, "acpi_pm_snap has no holes");

static int acpi_pm_dev_save(struct kvm_dev *d, struct snap_rec_buf *b, char *err, size_t errlen)
{
	struct acpi_pm *p = d->priv;
	struct acpi_pm_snap v = { 0 };

	pthread_mutex_lock(&p->lock);
	v.en = p->en;
	v.cnt = p->cnt;
	pthread_mutex_unlock(&p->lock);
	snap_rec_put(b, ACPI_PM_SNAP_TAG, &v, sizeof(v));
	return 0;
}

static int acpi_pm_dev_load(struct kvm_dev *d, const void *sec, size_t len, char *err,
			    size_t errlen)
{
	static const u8 zero[sizeof(((struct acpi_pm_snap *)0)->reserved)];
	struct acpi_pm *p = d->priv;
	struct acpi_pm_snap v;

	if (snap_rec_get(sec, len, ACPI_PM_SNAP_TAG, &v, sizeof(v)) < 0 ||
	    memcmp(v.reserved, zero, sizeof(zero)) || (v.en & ~PM1_EN_MASK) ||
	    (v.cnt & ~PM1_CNT_KEEP)) {
		errfmt(err, errlen, "the PM1 record is missing or malformed");
		return -EINVAL;
	}
	pthread_mutex_lock(&p->lock);
	p->en = v.en;
	p->cnt = v.cnt;
	pthread_mutex_unlock(&p->lock);
	return 0;
}

static const struct kvm_dev_ops acpi_pm_dev_ops = {
	.name = "acpi-pm",
	.prio = DEV_PRIO_LEGACY,
	.init = acpi_pm_dev_init,
	.save = acpi_pm_dev_save,
	.load = acpi_pm_dev_load,
	.exit = acpi_pm_dev_exit,
};

int acpi_pm_add(struct kvm *kvm)
{
	return kvm_dev_add(kvm, &acpi_pm_dev_ops, NULL, 0);
}
