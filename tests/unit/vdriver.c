/* Unit tests: the virtio driver of the device tests, the fake device of the transport tests. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "vdriver.h"
#include "wait.h"

struct vdriver vd;

/* ---- the VM ---- */

void vd_vm_new(u64 ram_size, u64 buf_base)
{
	memset(&vd, 0, sizeof(vd));
	vd.kvm = calloc(1, sizeof(*vd.kvm));
	ck_assert_ptr_nonnull(vd.kvm);
	fake_vm_init(vd.kvm, ram_size);
	vd.ram = vd.kvm->mem.base;
	vd.ram_size = ram_size;
	vd.buf_next = buf_base;
}

void vd_vm_free(void)
{
	fake_vm_free(vd.kvm);
	memset(&vd, 0, sizeof(vd));
}

void *gp(u64 gpa)
{
	return vd.ram + gpa;
}

u64 vd_galloc(u64 len, u64 align)
{
	u64 a = ALIGN_UP(vd.buf_next, align);

	vd.buf_next = a + len;
	ck_assert_uint_le(vd.buf_next, vd.ram_size);
	return a;
}

/* ---- set-up of a queue, as a transport would ---- */

void vd_queue_at(struct vd_queue *d, u64 base, u16 size)
{
	*d = (struct vd_queue){ .size = size,
				.desc = gp(base),
				.avail = gp(base + VD_AVAIL_OFF),
				.used = gp(base + VD_USED_OFF) };
}

void vd_queue_up(struct virtio_device *vdev, int qi, struct vd_queue *d, u64 base, u16 size,
		 bool event_idx)
{
	struct virtio_queue *q = &vdev->q[qi];

	ck_assert_int_eq(vq_init(&q->vq, &vd.kvm->mem, size, base, base + VD_AVAIL_OFF,
				 base + VD_USED_OFF, event_idx),
			 0);
	q->size = size;
	q->enabled = true;
	q->desc = base;
	q->driver = base + VD_AVAIL_OFF;
	q->device = base + VD_USED_OFF;
	q->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	q->irq_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ck_assert_int_ge(q->kick_fd, 0);
	ck_assert_int_ge(q->irq_fd, 0);
	vd_queue_at(d, base, size);
}

void vd_driver_ok(struct virtio_device *vdev)
{
	atomic_store(&vdev->status, VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER |
					    VIRTIO_CONFIG_S_FEATURES_OK |
					    VIRTIO_CONFIG_S_DRIVER_OK);
	ck_assert_int_eq(vdev->ops->start(vdev), 0);
}

void vd_fds_save(struct vd_fds *f, const struct virtio_device *vdev, int n)
{
	f->n = n;
	for (int i = 0; i < n; i++) {
		f->kick[i] = vdev->q[i].kick_fd;
		f->irq[i] = vdev->q[i].irq_fd;
	}
}

void vd_fds_close(const struct vd_fds *f)
{
	for (int i = 0; i < f->n; i++) {
		if (f->kick[i] >= 0)
			close(f->kick[i]);
		if (f->irq[i] >= 0) /* -1: irq_hook_set closed it */
			close(f->irq[i]);
	}
}

/* ---- the ring ---- */

void vd_publish(struct vd_queue *d, u16 head)
{
	d->avail->ring[d->aidx % d->size] = head;
	/* Release: pairs with the device's acquire of avail->idx (vq_has_avail). */
	__atomic_store_n(&d->avail->idx, ++d->aidx, __ATOMIC_RELEASE);
}

void vd_fill_descs(struct vring_desc *table, u16 first, u16 n, const struct vd_buf *b, int nb)
{
	for (int i = 0; i < nb; i++) {
		u16 idx = (u16)((first + i) % n);

		table[idx] = (struct vring_desc){
			.addr = b[i].gpa,
			.len = b[i].len,
			.flags = (u16)((b[i].write ? VRING_DESC_F_WRITE : 0) |
				       (i + 1 < nb ? VRING_DESC_F_NEXT : 0)),
			.next = (u16)((idx + 1) % n),
		};
	}
}

u16 vd_post(struct vd_queue *d, const struct vd_buf *b, int nb)
{
	u16 head = d->next_desc;

	vd_fill_descs(d->desc, head, d->size, b, nb);
	d->next_desc = (u16)((d->next_desc + nb) % d->size);
	vd_publish(d, head);
	return head;
}

u16 vd_post_desc(struct vd_queue *d, u64 gpa, u32 len, u16 flags)
{
	u16 head = d->next_desc;

	d->desc[head] = (struct vring_desc){ .addr = gpa, .len = len, .flags = flags };
	d->next_desc = (u16)((head + 1) % d->size);
	vd_publish(d, head);
	return head;
}

void vd_kick(const struct virtio_device *vdev, int qi)
{
	u64 one = 1;

	ck_assert_int_eq(write(vdev->q[qi].kick_fd, &one, sizeof(one)), sizeof(one));
}

u16 vd_used_idx(const struct vd_queue *d)
{
	/* Acquire: pairs with the device's release of used->idx; the used entries are read after. */
	return __atomic_load_n(&d->used->idx, __ATOMIC_ACQUIRE);
}

bool vd_wait_used(const struct vd_queue *d, u16 want, int ms)
{
	return WAIT_UNTIL(ms, vd_used_idx(d) == want);
}

/* ---- the transport tests' fake device ---- */

static u64 tdev_get_features(struct virtio_device *vdev)
{
	return VD_TDEV_FEATURE_LO | VD_TDEV_FEATURE_HI | VD_TDEV_REFUSED;
}

static void tdev_config_read(struct virtio_device *vdev, u32 off, u8 *data, u32 len)
{
	struct vd_tdev *t = vdev->priv;

	memcpy(data, t->config + off, len);
}

static void tdev_config_write(struct virtio_device *vdev, u32 off, const u8 *data, u32 len)
{
	struct vd_tdev *t = vdev->priv;

	memcpy(t->config + off, data, len);
}

static bool tdev_features_ok(struct virtio_device *vdev, u64 f)
{
	struct vd_tdev *t = vdev->priv;

	t->features_seen = f;
	return !(f & VD_TDEV_REFUSED);
}

static int tdev_start(struct virtio_device *vdev)
{
	struct vd_tdev *t = vdev->priv;

	t->starts++;
	for (int i = 0; i < 2; i++)
		t->ready_at_start[i] = vdev->q[i].vq.ready;
	return t->start_ret;
}

static void tdev_stop(struct virtio_device *vdev)
{
	struct vd_tdev *t = vdev->priv;

	t->stops++;
}

void vd_tdev_init(struct vd_tdev *t, u16 device_id, u32 class_code, const void *config)
{
	t->ops = (struct virtio_dev_ops){
		.device_id = device_id,
		.class_code = class_code,
		.get_features = tdev_get_features,
		.config_size = sizeof(t->config),
		.config_read = tdev_config_read,
		.config_write = tdev_config_write,
		.features_ok = tdev_features_ok,
		.start = tdev_start,
		.stop = tdev_stop,
	};
	t->vdev.ops = &t->ops;
	t->vdev.priv = t;
	if (config)
		memcpy(t->config, config, sizeof(t->config));
}

void vd_tdev_detach(struct vd_tdev *t, void (*detach)(struct virtio_device *), struct kvm *kvm)
{
	int stops = t->stops;

	detach(&t->vdev);
	ck_assert_int_eq(t->stops, stops + 1);
	ck_assert_ptr_null(t->vdev.transport);
	ck_assert_int_eq(kvm->mmio.nr, 0);
}
