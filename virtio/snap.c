/* A virtio device's transport-neutral state in a snapshot: status, features, selectors, ISR and every queue's set-up and ring indices, saved and checked back in, with what the driver's writes armed re-armed. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "lkvm/kvm.h"
#include "lkvm/snap.h"
#include "lkvm/virtio.h"

/*
 * Records: fixed layouts, little-endian, explicit widths, zeroed before filling (no padding
 * carries garbage). A record of a known tag changes size only with a new file version.
 *
 * Held chains: the ring indices are saved as they stand, last_avail counting every chain
 * popped. A device that holds popped chains after its quiesce (console: a transmit chain
 * cut short) records which (its head) and, at load, gives it back with vq_unpop and pops it
 * again from the restored ring, so no chain is lost or done twice; a device that holds none
 * has last_avail == used_idx on every queue.
 *
 * Not saved: the queues' counters (stats start again at 0) and the reason of a malformed
 * chain (a static string for the log); a device's own "queue broken" flag either: the vq's
 * broken flag is saved, and the device's next pop finds it again (one more config interrupt,
 * which a driver that saw NEEDS_RESET already ignores).
 */
struct snap_core {
	u64 host_features, features, driver_features;
	u32 status, isr;
	u32 dfselect, gfselect, queue_select;
	u32 nr_queues;
	u8 config_generation, needs_reset_logged;
	u8 pad[6];
};
_Static_assert(sizeof(struct snap_core) == 56, "snap_core has a hole");

struct snap_queue {
	u64 desc, driver, device; /* the addresses the driver wrote */
	u16 size, max_size;
	u16 last_avail, used_idx, signalled_used; /* the walker's (valid when ready) */
	u8 enabled, ready, broken, signalled_used_valid;
	u8 pad[2];
};
_Static_assert(sizeof(struct snap_queue) == 40, "snap_queue has a hole");

#define STATUS_KNOWN                                                                        \
	(VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER | VIRTIO_CONFIG_S_DRIVER_OK | \
	 VIRTIO_CONFIG_S_FEATURES_OK | VIRTIO_CONFIG_S_NEEDS_RESET | VIRTIO_CONFIG_S_FAILED)

/* ---- save ---- */

static void save_queue(struct virtio_device *vdev, int qi, struct snap_rec_buf *b)
{
	const struct virtio_queue *q = &vdev->q[qi];
	const struct virtqueue *vq = &q->vq;
	struct snap_queue s;

	memset(&s, 0, sizeof(s));
	s.desc = q->desc;
	s.driver = q->driver;
	s.device = q->device;
	s.size = q->size;
	s.max_size = q->max_size;
	s.enabled = q->enabled;
	s.ready = vq->ready;
	if (vq->ready) {
		s.last_avail = vq->last_avail;
		s.used_idx = vq->used_idx;
		s.signalled_used = vq->signalled_used;
		s.signalled_used_valid = vq->signalled_used_valid;
		s.broken = vq->broken;
	}
	snap_rec_put(b, (u16)(VIRTIO_SNAP_TAG_QUEUE + qi), &s, sizeof(s));
}

int virtio_snap_save(struct virtio_device *vdev, struct snap_rec_buf *b, char *err, size_t errlen)
{
	struct snap_core c;

	memset(&c, 0, sizeof(c));
	pthread_mutex_lock(&vdev->lock);
	c.host_features = vdev->host_features;
	c.features = atomic_load(&vdev->features);
	c.driver_features = vdev->driver_features;
	c.status = atomic_load(&vdev->status);
	c.isr = atomic_load(&vdev->isr);
	c.dfselect = vdev->dfselect;
	c.gfselect = vdev->gfselect;
	c.queue_select = vdev->queue_select;
	c.nr_queues = (u32)vdev->nr_queues;
	c.config_generation = atomic_load(&vdev->config_generation);
	c.needs_reset_logged = atomic_load(&vdev->needs_reset_logged);
	snap_rec_put(b, VIRTIO_SNAP_TAG_CORE, &c, sizeof(c));
	for (int qi = 0; qi < vdev->nr_queues; qi++)
		save_queue(vdev, qi, b);
	if (vdev->tops && vdev->tops->save)
		vdev->tops->save(vdev, b);
	pthread_mutex_unlock(&vdev->lock);
	if (b->err)
		errfmt(err, errlen, "virtio state: %s", strerror(-b->err));
	return b->err;
}

/* ---- load: the checks ---- */

int virtio_snap_get(const void *sec, size_t sec_len, u16 tag, void *out, size_t len,
		    const char *name, char *err, size_t errlen)
{
	if (snap_rec_get(sec, sec_len, tag, out, len) == 0)
		return 0;
	errfmt(err, errlen, "%s: record missing or of the wrong size", name);
	return -EINVAL;
}

static bool features_ok(struct virtio_device *vdev, u64 f)
{
	if ((f & ~vdev->host_features) || !(f & (1ULL << VIRTIO_F_VERSION_1)))
		return false;
	return !vdev->ops->features_ok || vdev->ops->features_ok(vdev, f);
}

/* The core record against this device (made from the same options) and the state machine's
 * rules. Runs features_ok, as FEATURES_OK's write did, for what devices derive from it. */
static int check_core(struct virtio_device *vdev, const struct snap_core *c, char *err,
		      size_t errlen)
{
	if (c->nr_queues != (u32)vdev->nr_queues || c->host_features != vdev->host_features) {
		errfmt(err, errlen,
		       "%d queues and features 0x%llx here, the snapshot's %u and 0x%llx (start it with the same options)",
		       vdev->nr_queues, (unsigned long long)vdev->host_features, c->nr_queues,
		       (unsigned long long)c->host_features);
		return -EINVAL;
	}
	if ((c->status & ~(u32)STATUS_KNOWN) || c->isr > 3 || c->needs_reset_logged > 1 ||
	    ((c->status & VIRTIO_CONFIG_S_DRIVER_OK) &&
	     !(c->status & VIRTIO_CONFIG_S_FEATURES_OK))) {
		errfmt(err, errlen, "virtio status 0x%x or ISR 0x%x out of range", c->status,
		       c->isr);
		return -EINVAL;
	}
	if ((c->status & VIRTIO_CONFIG_S_FEATURES_OK)
		    ? c->features != c->driver_features || !features_ok(vdev, c->features)
		    : c->features != 0) {
		errfmt(err, errlen, "negotiated features 0x%llx not acceptable",
		       (unsigned long long)c->features);
		return -EINVAL;
	}
	return 0;
}

static int check_queue(struct virtio_device *vdev, int qi, const struct snap_queue *s, u32 status,
		       char *err, size_t errlen)
{
	bool running = status & VIRTIO_CONFIG_S_DRIVER_OK;

	if (s->max_size != vdev->q[qi].max_size || !s->size || (s->size & (s->size - 1)) ||
	    s->size > s->max_size) {
		errfmt(err, errlen, "queue %d: size %u (at most %u), this device's at most %u", qi,
		       s->size, s->max_size, vdev->q[qi].max_size);
		return -EINVAL;
	}
	if (s->enabled > 1 || s->ready > 1 || s->broken > 1 || s->signalled_used_valid > 1 ||
	    (s->ready && (!s->enabled || !running)) ||
	    /* DRIVER_OK with an enabled queue not mapped: its vq_init failed, NEEDS_RESET */
	    (running && s->enabled && !s->ready && !(status & VIRTIO_CONFIG_S_NEEDS_RESET)) ||
	    (!s->ready && (s->last_avail || s->used_idx || s->signalled_used || s->broken ||
			   s->signalled_used_valid))) {
		errfmt(err, errlen, "queue %d: state out of range", qi);
		return -EINVAL;
	}
	if (s->ready && (u16)(s->last_avail - s->used_idx) > s->size) {
		errfmt(err, errlen, "queue %d: %u chains in flight, more than its %u entries", qi,
		       (u16)(s->last_avail - s->used_idx), s->size);
		return -EINVAL;
	}
	return 0;
}

/* No queue record past this device's queues; the section walks to its end. */
static int check_extra(struct virtio_device *vdev, const void *sec, size_t len, char *err,
		       size_t errlen)
{
	struct snap_rec_iter it = { sec, len };
	const void *data;
	u32 rlen;
	u16 tag;
	int ret;

	while ((ret = snap_rec_next(&it, &tag, &data, &rlen)) == 1) {
		if (tag >= VIRTIO_SNAP_TAG_QUEUE + vdev->nr_queues &&
		    tag < VIRTIO_SNAP_TAG_TRANSPORT) {
			errfmt(err, errlen, "queue %d: not on this device",
			       tag - VIRTIO_SNAP_TAG_QUEUE);
			return -EINVAL;
		}
	}
	if (ret < 0)
		errfmt(err, errlen, "a record runs past the section's end");
	return ret < 0 ? -EINVAL : 0;
}

/* ---- load: the state back ---- */

static void apply_core(struct virtio_device *vdev, const struct snap_core *c)
{
	vdev->driver_features = c->driver_features;
	vdev->dfselect = c->dfselect;
	vdev->gfselect = c->gfselect;
	vdev->queue_select = c->queue_select;
	atomic_store(&vdev->features, c->features);
	atomic_store(&vdev->isr, c->isr);
	atomic_store(&vdev->config_generation, c->config_generation);
	atomic_store(&vdev->needs_reset_logged, c->needs_reset_logged != 0);
	atomic_store(&vdev->status, c->status);
}

/* The queue's registers, and its ring mapped as DRIVER_OK mapped it, the walker's indices
 * where they stood. */
static int load_queue(struct virtio_device *vdev, int qi, const struct snap_queue *s,
		      bool event_idx, char *err, size_t errlen)
{
	struct virtio_queue *q = &vdev->q[qi];
	struct virtqueue *vq = &q->vq;

	q->size = s->size;
	q->enabled = s->enabled;
	q->desc = s->desc;
	q->driver = s->driver;
	q->device = s->device;
	if (!s->ready)
		return 0;
	if (vq_init(vq, &vdev->kvm->mem, q->size, q->desc, q->driver, q->device, event_idx) < 0) {
		errfmt(err, errlen, "queue %d: ring outside guest RAM or misaligned", qi);
		return -EINVAL;
	}
	vq->last_avail = s->last_avail;
	vq->used_idx = s->used_idx;
	vq->signalled_used = s->signalled_used;
	vq->signalled_used_valid = s->signalled_used_valid;
	vq->broken = s->broken;
	return 0;
}

static int load_queues(struct virtio_device *vdev, const void *sec, size_t len, u32 status,
		       char *err, size_t errlen)
{
	bool event_idx = atomic_load(&vdev->features) & (1ULL << VIRTIO_RING_F_EVENT_IDX);
	bool started = status & VIRTIO_CONFIG_S_DRIVER_OK;

	for (int qi = 0; qi < vdev->nr_queues; qi++) {
		struct snap_queue s;
		char what[24];
		int ret;

		snprintf(what, sizeof(what), "queue %d", qi);
		ret = virtio_snap_get(sec, len, (u16)(VIRTIO_SNAP_TAG_QUEUE + qi), &s, sizeof(s),
				      what, err, errlen);
		if (ret == 0)
			ret = check_queue(vdev, qi, &s, status, err, errlen);
		if (ret == 0)
			ret = load_queue(vdev, qi, &s, event_idx, err, errlen);
		if (ret < 0)
			return ret;
		started &= !s.enabled || s.ready;
	}
	/* Running when every enabled queue was mapped: device_start went on to start it. (One
	 * whose start op failed is started again at restore, or fails again.) */
	vdev->snap_start = started;
	return 0;
}

static int load_locked(struct virtio_device *vdev, const void *sec, size_t len, char *err,
		       size_t errlen)
{
	struct snap_core c;
	int ret = virtio_snap_get(sec, len, VIRTIO_SNAP_TAG_CORE, &c, sizeof(c), "virtio state",
				  err, errlen);

	if (ret == 0)
		ret = check_extra(vdev, sec, len, err, errlen);
	if (ret == 0)
		ret = check_core(vdev, &c, err, errlen);
	if (ret < 0)
		return ret;
	apply_core(vdev, &c);
	ret = load_queues(vdev, sec, len, c.status, err, errlen);
	if (ret == 0 && vdev->tops && vdev->tops->load)
		ret = vdev->tops->load(vdev, sec, len, err, errlen);
	if (ret < 0)
		return ret;
	/* The ioeventfds DRIVER_OK placed, where the doorbells are now (the bus, loaded before
	 * the devices, has put the BARs back). */
	virtio_doorbells_moved(vdev);
	return 0;
}

int virtio_snap_load(struct virtio_device *vdev, const void *sec, size_t len, char *err,
		     size_t errlen)
{
	int ret;

	pthread_mutex_lock(&vdev->lock);
	ret = load_locked(vdev, sec, len, err, errlen);
	if (ret < 0) {
		/* Back to power-on: nothing of the file's half-loaded state stays. */
		virtio_reset(vdev);
		vdev->snap_start = false;
	}
	pthread_mutex_unlock(&vdev->lock);
	return ret;
}

int virtio_snap_start(struct virtio_device *vdev)
{
	u64 one = 1;

	if (!vdev->initialised)
		return 0;
	pthread_mutex_lock(&vdev->lock);
	if (vdev->snap_start) {
		vdev->snap_start = false;
		/* The kicks the old process had not read yet are gone with it: one for each
		 * queue makes the device look at what the driver posted before the snapshot. */
		for (int qi = 0; qi < vdev->nr_queues; qi++)
			if (vdev->q[qi].vq.ready && vdev->q[qi].kick_fd >= 0 &&
			    write(vdev->q[qi].kick_fd, &one, sizeof(one)) < 0)
				pr_debug("virtio: kick_fd write failed");
		if (vdev->ops->start && vdev->ops->start(vdev) < 0)
			virtio_set_needs_reset(vdev, "device failed to start");
	}
	pthread_mutex_unlock(&vdev->lock);
	return 0;
}
