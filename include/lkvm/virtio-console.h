/* virtio-console (hvc0 in Linux) and virtio-rng devices. */
#ifndef LKVM_VIRTIO_CONSOLE_H
#define LKVM_VIRTIO_CONSOLE_H

#include "lkvm/virtio.h"

struct kvm;
struct stats_visitor;
struct virtio_console;
struct virtio_rng;

/* Where guest output goes (default term_output); tests catch it. */
typedef void (*virtio_console_out_fn)(struct kvm *kvm, const u8 *buf, size_t len);

/* One console port (no multiport): receiveq 0, transmitq 1. bare: no transport (tests
 * set up the queues and call ops->start). 0 or -errno. */
int virtio_console_create(struct kvm *kvm, enum virtio_trans trans, virtio_console_out_fn out,
			  bool bare, struct virtio_console **c) __must_check;
/* Terminal input (any thread): queues up to the free buffer space (4 KiB) for the guest's
 * receive buffers and returns how many bytes were taken. */
size_t virtio_console_receive(struct virtio_console *c, const u8 *buf, size_t n);
struct virtio_device *virtio_console_vdev(struct virtio_console *c);
/* Tests: a stop was asked for (what the queue thread looks at between pieces of output). */
bool virtio_console_stopping(struct virtio_console *c);
void virtio_console_destroy(struct virtio_console *c);
/* Pause: the thread parks where it is (output cut short goes on after resume, input waits
 * in its buffer); nothing reaches the guest, no interrupt, until resume. */
void virtio_console_quiesce(struct virtio_console *c);
void virtio_console_resume(struct virtio_console *c);
/* Snapshot (the VM paused): its state and the core's as records, and back on a console just
 * created with the same options (0 or -EINVAL with a reason; a failed load leaves it reset);
 * start runs it if it was running (virtio_snap_start). */
int virtio_console_save(struct virtio_console *c, struct snap_rec_buf *b, char *err,
			size_t errlen) __must_check;
int virtio_console_load(struct virtio_console *c, const void *sec, size_t len, char *err,
			size_t errlen) __must_check;
void virtio_console_start(struct virtio_console *c);
/* Counters of its queues (groups rx and tx): kicks, trapped, irqs, packets (chains), bytes. */
void virtio_console_stats(struct virtio_console *c, struct stats_visitor *v);
/* Add hvc0 to kvm's device list ("virtio-console", stats kind "console"), on
 * --virtio-transport; at init it takes the terminal's input (term_set_input). 0 or -ENOMEM. */
int virtio_console_add(struct kvm *kvm) __must_check;
/* The same for a console of `run -- CMD` (hvc0, hvc1, ... in the order added): its output to
 * out (NULL: term_output), and the terminal's input only when input is set. */
int virtio_console_add_port(struct kvm *kvm, virtio_console_out_fn out, bool input) __must_check;

/* Entropy device: fills every buffer the guest posts with getrandom(2) bytes. */
int virtio_rng_create(struct kvm *kvm, enum virtio_trans trans, bool bare,
		      struct virtio_rng **r) __must_check;
struct virtio_device *virtio_rng_vdev(struct virtio_rng *r);
void virtio_rng_destroy(struct virtio_rng *r);
/* Pause: the thread parks between two chains until resume. */
void virtio_rng_quiesce(struct virtio_rng *r);
void virtio_rng_resume(struct virtio_rng *r);
/* Counters of its queue (group req0): kicks, trapped, irqs, requests (chains), bytes. */
void virtio_rng_stats(struct virtio_rng *r, struct stats_visitor *v);
/* Add it to kvm's device list ("virtio-rng", stats kind "rng"), on --virtio-transport. */
int virtio_rng_add(struct kvm *kvm) __must_check;

#endif
