/* The per-VM device list (kvmtool's init lists, but per VM and without globals): ordered init, start, pause and stats, reverse resume and exit. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/dev.h"
#include "lkvm/kvm.h"
#include "lkvm/stats.h"

int kvm_dev_add(struct kvm *kvm, const struct kvm_dev_ops *ops, const void *arg, size_t arg_len)
{
	struct kvm_dev *d = calloc(1, sizeof(*d)), **pos;

	if (!d)
		return -ENOMEM;
	if (arg_len) {
		d->arg = malloc(arg_len);
		if (!d->arg) {
			free(d);
			return -ENOMEM;
		}
		memcpy(d->arg, arg, arg_len);
	}
	d->ops = ops;
	for (struct kvm_dev *o = kvm->devs; o; o = o->next)
		d->index += !strcmp(o->ops->name, ops->name);
	for (pos = &kvm->devs; *pos && (*pos)->ops->prio <= ops->prio; pos = &(*pos)->next)
		;
	d->next = *pos;
	*pos = d;
	return 0;
}

int kvm_devs_init(struct kvm *kvm, char *err, size_t errlen)
{
	for (struct kvm_dev *d = kvm->devs; d; d = d->next) {
		char why[384] = "";
		int ret;

		if (d->up)
			continue;
		ret = d->ops->init(kvm, d, why, sizeof(why));
		if (ret < 0) {
			errfmt(err, errlen, "%s: %s", d->ops->name, *why ? why : strerror(-ret));
			return ret;
		}
		d->up = true;
	}
	return 0;
}

int kvm_devs_start(struct kvm *kvm, char *err, size_t errlen)
{
	for (struct kvm_dev *d = kvm->devs; d; d = d->next) {
		int ret = d->up && d->ops->start ? d->ops->start(d) : 0;

		if (ret < 0) {
			errfmt(err, errlen, "%s: %s", d->ops->name, strerror(-ret));
			return ret;
		}
	}
	return 0;
}

void kvm_devs_quiesce(struct kvm *kvm)
{
	for (struct kvm_dev *d = kvm->devs; d; d = d->next)
		if (d->up && d->ops->quiesce)
			d->ops->quiesce(d);
}

/* Reverse order without a back link: recurse down the (short) list first. */
static void resume_from(struct kvm_dev *d)
{
	if (!d)
		return;
	resume_from(d->next);
	if (d->up && d->ops->resume)
		d->ops->resume(d);
}

void kvm_devs_resume(struct kvm *kvm)
{
	resume_from(kvm->devs);
}

void kvm_devs_reset(struct kvm *kvm)
{
	for (struct kvm_dev *d = kvm->devs; d; d = d->next)
		if (d->up && d->ops->reset)
			d->ops->reset(d);
}

void kvm_devs_stats(struct kvm *kvm, struct stats_visitor *v)
{
	for (struct kvm_dev *d = kvm->devs; d; d = d->next) {
		if (!d->up || !d->ops->stats || !d->ops->stats_name)
			continue;
		v->device(v, d->ops->stats_name, d->index);
		d->ops->stats(d, v);
	}
}

static void exit_from(struct kvm *kvm, struct kvm_dev *d)
{
	if (!d)
		return;
	exit_from(kvm, d->next);
	if (d->up && d->ops->exit)
		d->ops->exit(kvm, d);
	d->up = false;
	free(d->arg);
	free(d);
}

void kvm_devs_exit(struct kvm *kvm)
{
	struct kvm_dev *list = kvm->devs;

	kvm->devs = NULL;
	exit_from(kvm, list);
}

struct kvm_dev *kvm_dev_find(struct kvm *kvm, const char *name, int n)
{
	for (struct kvm_dev *d = kvm->devs; d; d = d->next)
		if (d->up && d->index == n && !strcmp(d->ops->name, name))
			return d;
	return NULL;
}
