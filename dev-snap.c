/* The device list's part of a snapshot: one section per device, named and placed, saved and loaded by each device's ops. */
#include <errno.h>
#include <string.h>

#include "lkvm/dev.h"
#include "lkvm/kvm.h"
#include "lkvm/snap.h"

int kvm_devs_can_save(struct kvm *kvm, char *err, size_t errlen)
{
	for (struct kvm_dev *d = kvm->devs; d; d = d->next) {
		if (d->up && !d->ops->save) {
			errfmt(err, errlen, "%s %d: cannot be saved in a snapshot", d->ops->name,
			       d->index);
			return -EOPNOTSUPP;
		}
	}
	return 0;
}

static int save_one(struct kvm_dev *d, u32 place, struct snap_writer *w, char *err, size_t errlen)
{
	struct snap_rec_buf b = { 0 };
	u32 index = (u32)d->index;
	char why[384] = "";
	int ret;

	snap_rec_put(&b, DEV_SNAP_TAG_NAME, d->ops->name, strlen(d->ops->name));
	snap_rec_put(&b, DEV_SNAP_TAG_INDEX, &index, sizeof(index));
	ret = d->ops->save(d, &b, why, sizeof(why));
	if (ret == 0 && b.err)
		ret = b.err;
	if (ret == 0)
		ret = snap_add(w, SNAP_SEC_DEVICE, place, b.buf, b.len);
	if (ret < 0)
		errfmt(err, errlen, "%s %d: %s", d->ops->name, d->index,
		       *why ? why : strerror(-ret));
	snap_rec_free(&b);
	return ret;
}

int kvm_devs_save(struct kvm *kvm, struct snap_writer *w, char *err, size_t errlen)
{
	u32 place = 0;
	int ret = kvm_devs_can_save(kvm, err, errlen);

	for (struct kvm_dev *d = kvm->devs; ret == 0 && d; d = d->next)
		if (d->up)
			ret = save_one(d, place++, w, err, errlen);
	return ret;
}

/* The section at this place is this device's: same name, same index. */
static int check_id(struct kvm_dev *d, const void *sec, size_t len, char *err, size_t errlen)
{
	struct snap_rec_iter it = { sec, len };
	const void *data;
	u16 tag;
	u32 rlen, index;
	bool named = false;
	int ret;

	while ((ret = snap_rec_next(&it, &tag, &data, &rlen)) == 1 && !named)
		if (tag == DEV_SNAP_TAG_NAME)
			named = rlen == strlen(d->ops->name) && !memcmp(data, d->ops->name, rlen);
	if (ret < 0 || snap_rec_get(sec, len, DEV_SNAP_TAG_INDEX, &index, sizeof(index)) < 0 ||
	    !named || index != (u32)d->index) {
		errfmt(err, errlen,
		       "%s %d: the snapshot has another device in its place (start it with the same devices)",
		       d->ops->name, d->index);
		return -EINVAL;
	}
	return 0;
}

static int load_one(struct kvm_dev *d, u32 place, const struct snap_reader *r, char *err,
		    size_t errlen)
{
	const void *sec;
	size_t len;
	char why[384] = "";
	int ret = snap_section(r, SNAP_SEC_DEVICE, place, &sec, &len);

	if (ret < 0) {
		errfmt(err, errlen, "%s %d: not in the snapshot (start it with the same devices)",
		       d->ops->name, d->index);
		return -EINVAL;
	}
	ret = check_id(d, sec, len, err, errlen);
	if (ret < 0)
		return ret;
	ret = d->ops->load ? d->ops->load(d, sec, len, why, sizeof(why)) : -EOPNOTSUPP;
	if (ret < 0)
		errfmt(err, errlen, "%s %d: %s", d->ops->name, d->index,
		       *why ? why : "cannot be restored");
	return ret;
}

int kvm_devs_load(struct kvm *kvm, const struct snap_reader *r, char *err, size_t errlen)
{
	u32 place = 0, type, instance;
	int ret = 0;

	for (struct kvm_dev *d = kvm->devs; ret == 0 && d; d = d->next)
		if (d->up)
			ret = load_one(d, place++, r, err, errlen);
	for (u32 i = 0; ret == 0 && i < snap_nr_sections(r); i++) {
		snap_section_at(r, i, &type, &instance);
		if (type == SNAP_SEC_DEVICE && instance >= place) {
			errfmt(err, errlen,
			       "the snapshot has %u or more devices, this machine %u (start it with the same devices)",
			       instance + 1, place);
			ret = -EINVAL;
		}
	}
	return ret;
}
