/* MC146818 RTC and CMOS RAM (ports 0x70/0x71): the host's UTC time, read-only clock, 128 bytes of RAM. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lkvm/dev.h"
#include "lkvm/hw.h"
#include "lkvm/kvm.h"
#include "lkvm/snap.h"

#define RTC_INDEX_PORT 0x70
#define RTC_DATA_PORT 0x71
#define CMOS_SIZE 128

enum {
	RTC_SECONDS = 0x00,
	RTC_MINUTES = 0x02,
	RTC_HOURS = 0x04,
	RTC_DAY_OF_WEEK = 0x06,
	RTC_DAY_OF_MONTH = 0x07,
	RTC_MONTH = 0x08,
	RTC_YEAR = 0x09,
	RTC_REG_A = 0x0a,
	RTC_REG_B = 0x0b,
	RTC_REG_C = 0x0c,
	RTC_REG_D = 0x0d,
	RTC_CENTURY = 0x32,
};

#define REG_A_DEFAULT 0x26 /* 32.768 kHz divider, 1024 Hz rate; UIP (bit 7) never set */
#define REG_B_24H 0x02
#define REG_B_BINARY 0x04
#define REG_B_DEFAULT REG_B_24H
#define REG_D_VRT 0x80 /* RAM and time valid */
#define HOUR_PM 0x80

struct rtc {
	pthread_mutex_t lock;
	u8 index;
	u8 ram[CMOS_SIZE]; /* also holds A and B; the clock registers are computed */
};

/* The registers the clock computes at each read; writes to them are ignored. */
static bool is_clock_reg(u8 reg)
{
	switch (reg) {
	case RTC_SECONDS:
	case RTC_MINUTES:
	case RTC_HOURS:
	case RTC_DAY_OF_WEEK:
	case RTC_DAY_OF_MONTH:
	case RTC_MONTH:
	case RTC_YEAR:
	case RTC_CENTURY:
		return true;
	default:
		return false;
	}
}

/* Bytes of ram a guest write can change: not the clock, not the read-only C and D. */
static bool cmos_writable(u8 reg)
{
	return !is_clock_reg(reg) && reg != RTC_REG_C && reg != RTC_REG_D;
}

static u8 encode(const struct rtc *r, int v)
{
	if (r->ram[RTC_REG_B] & REG_B_BINARY)
		return (u8)v;
	return (u8)(((v / 10) << 4) | (v % 10));
}

/* The clock is the host's, read at each access: the guest cannot set it (writes to
 * the time registers are ignored), which keeps the VMM stateless across suspends. */
static bool clock_read_locked(const struct rtc *r, u8 reg, u8 *out)
{
	time_t now = time(NULL);
	struct tm tm;
	int h;

	if (!gmtime_r(&now, &tm))
		return false;
	switch (reg) {
	case RTC_SECONDS:
		*out = encode(r, tm.tm_sec > 59 ? 59 : tm.tm_sec);
		return true;
	case RTC_MINUTES:
		*out = encode(r, tm.tm_min);
		return true;
	case RTC_HOURS:
		if (r->ram[RTC_REG_B] & REG_B_24H) {
			*out = encode(r, tm.tm_hour);
		} else {
			h = tm.tm_hour % 12;
			*out = (u8)(encode(r, h ? h : 12) | (tm.tm_hour >= 12 ? HOUR_PM : 0));
		}
		return true;
	case RTC_DAY_OF_WEEK:
		*out = encode(r, tm.tm_wday + 1); /* 1 = Sunday */
		return true;
	case RTC_DAY_OF_MONTH:
		*out = encode(r, tm.tm_mday);
		return true;
	case RTC_MONTH:
		*out = encode(r, tm.tm_mon + 1);
		return true;
	case RTC_YEAR:
		*out = encode(r, tm.tm_year % 100);
		return true;
	case RTC_CENTURY:
		*out = encode(r, (tm.tm_year + 1900) / 100);
		return true;
	default:
		return false; /* not a clock register (is_clock_reg) */
	}
}

static u8 data_read_locked(struct rtc *r)
{
	u8 v;

	if (clock_read_locked(r, r->index, &v))
		return v;
	switch (r->index) {
	case RTC_REG_C:
		return 0; /* no interrupt sources: nothing ever flagged */
	case RTC_REG_D:
		return REG_D_VRT;
	default:
		return r->ram[r->index];
	}
}

static void data_write_locked(struct rtc *r, u8 v)
{
	if (!cmos_writable(r->index))
		return; /* the clock is the host's, C and D are read-only */
	if (r->index == RTC_REG_A)
		v &= 0x7f; /* UIP is read-only */
	r->ram[r->index] = v;
}

static void rtc_io(struct kvm_cpu *vcpu, u64 port, u8 *data, u32 len, bool is_write, void *opaque)
{
	struct rtc *r = opaque;

	pthread_mutex_lock(&r->lock);
	if (port == RTC_INDEX_PORT) {
		/* Bit 7 masks NMIs on real hardware; we have none to mask. */
		if (is_write)
			r->index = data[0] & 0x7f;
		else
			data[0] = r->index;
	} else if (is_write) {
		data_write_locked(r, data[0]);
	} else {
		data[0] = data_read_locked(r);
	}
	pthread_mutex_unlock(&r->lock);
}

static int rtc_dev_init(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen)
{
	struct rtc *r = calloc(1, sizeof(*r));
	int ret;

	if (!r)
		return -ENOMEM;
	r->ram[RTC_REG_A] = REG_A_DEFAULT;
	r->ram[RTC_REG_B] = REG_B_DEFAULT;
	pthread_mutex_init(&r->lock, NULL);
	ret = io_bus_register(&kvm->pio, RTC_INDEX_PORT, 2, rtc_io, r, "rtc");
	if (ret) {
		pthread_mutex_destroy(&r->lock);
		free(r);
		return ret;
	}
	d->priv = r;
	return 0;
}

static void rtc_dev_exit(struct kvm *kvm, struct kvm_dev *d)
{
	struct rtc *r = d->priv;

	io_bus_unregister(&kvm->pio, RTC_INDEX_PORT);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

/*
 * Snapshot (issue 31): the index register and the CMOS bytes, one record. The time is not
 * saved: it is the host's, read at each access, so a restored guest reads the time of the
 * restore (as after a suspend). The NMI-disable bit (bit 7 of a 0x70 write) is not kept by
 * this RTC (no NMI source to mask), so there is nothing of it to save.
 */
#define RTC_SNAP_TAG DEV_SNAP_TAG_MIN

struct rtc_snap {
	u8 index;
	u8 reserved[7];
	u8 ram[CMOS_SIZE];
};
_Static_assert(sizeof(struct rtc_snap) == 8 + CMOS_SIZE, "rtc_snap has no holes");

static int rtc_dev_save(struct kvm_dev *d, struct snap_rec_buf *b, char *err, size_t errlen)
{
	struct rtc *r = d->priv;
	struct rtc_snap v = { 0 };

	pthread_mutex_lock(&r->lock);
	v.index = r->index;
	memcpy(v.ram, r->ram, sizeof(v.ram));
	pthread_mutex_unlock(&r->lock);
	snap_rec_put(b, RTC_SNAP_TAG, &v, sizeof(v));
	return 0;
}

/* The first byte the guest cannot write (clock, C, D) that is not as at power-on, or -1:
 * the live code never changes them, so a file that does is not ours. */
static int fixed_byte_changed(const struct rtc *r, const u8 *ram)
{
	for (int i = 0; i < CMOS_SIZE; i++)
		if (!cmos_writable((u8)i) && ram[i] != r->ram[i])
			return i;
	return -1;
}

static int rtc_dev_load(struct kvm_dev *d, const void *sec, size_t len, char *err, size_t errlen)
{
	static const u8 zero[sizeof(((struct rtc_snap *)0)->reserved)];
	struct rtc *r = d->priv;
	struct rtc_snap v;
	int bad;

	if (snap_rec_get(sec, len, RTC_SNAP_TAG, &v, sizeof(v)) < 0) {
		errfmt(err, errlen, "the CMOS record is missing or malformed");
		return -EINVAL;
	}
	if (v.index >= CMOS_SIZE || memcmp(v.reserved, zero, sizeof(zero)) ||
	    (v.ram[RTC_REG_A] & 0x80)) {
		errfmt(err, errlen,
		       "index %#x, reserved bytes or register A's UIP bit out of range", v.index);
		return -EINVAL;
	}
	pthread_mutex_lock(&r->lock);
	bad = fixed_byte_changed(r, v.ram);
	if (bad < 0) {
		r->index = v.index;
		memcpy(r->ram, v.ram, sizeof(r->ram));
	}
	pthread_mutex_unlock(&r->lock);
	if (bad >= 0) {
		errfmt(err, errlen, "CMOS byte %#x is not the guest's to write and was changed",
		       bad);
		return -EINVAL;
	}
	return 0;
}

static const struct kvm_dev_ops rtc_dev_ops = {
	.name = "rtc",
	.prio = DEV_PRIO_LEGACY,
	.init = rtc_dev_init,
	.save = rtc_dev_save,
	.load = rtc_dev_load,
	.exit = rtc_dev_exit,
};

int rtc_add(struct kvm *kvm)
{
	return kvm_dev_add(kvm, &rtc_dev_ops, NULL, 0);
}
