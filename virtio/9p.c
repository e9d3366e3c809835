/* virtio-9p (virtio 1.2 §5.11): one request queue served by the 9P2000.L server (9p-server.c) on its own thread. */
#include <errno.h>

#include "lkvm/kvm.h"
#include "lkvm/virtio-9p.h"

int virtio_9p_add(struct kvm *kvm, const struct p9_share *share)
{
	return -ENOSYS; /* the device follows */
}

int virtio_9p_add_shares(struct kvm *kvm, const struct p9_shares *s)
{
	int ret = 0;

	for (int i = 0; i < s->nr && !ret; i++)
		ret = virtio_9p_add(kvm, &s->share[i]);
	return ret;
}
