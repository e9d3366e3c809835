/* The per-VM device list (kvmtool's init lists, but per VM and without globals): ordered init, reverse exit. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/dev.h"
#include "lkvm/kvm.h"

int kvm_dev_add(struct kvm *kvm, const char *name, int prio, kvm_dev_init_fn init,
		kvm_dev_exit_fn exit, const void *arg, size_t arg_len)
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
	d->name = name;
	d->prio = prio;
	d->init = init;
	d->exit = exit;
	for (struct kvm_dev *o = kvm->devs; o; o = o->next)
		d->index += !strcmp(o->name, name);
	for (pos = &kvm->devs; *pos && (*pos)->prio <= prio; pos = &(*pos)->next)
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
		ret = d->init(kvm, d, why, sizeof(why));
		if (ret < 0) {
			errfmt(err, errlen, "%s: %s", d->name, *why ? why : strerror(-ret));
			return ret;
		}
		d->up = true;
	}
	return 0;
}

/* Reverse order without a back link: recurse down the (short) list first. */
static void exit_from(struct kvm *kvm, struct kvm_dev *d)
{
	if (!d)
		return;
	exit_from(kvm, d->next);
	if (d->up && d->exit)
		d->exit(kvm, d);
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
		if (d->up && d->index == n && !strcmp(d->name, name))
			return d;
	return NULL;
}
