/* virtio-console (hvc0 in Linux, or one named port: /dev/vportNp0) and virtio-rng devices. */
#ifndef LKVM_VIRTIO_CONSOLE_H
#define LKVM_VIRTIO_CONSOLE_H

#include "lkvm/virtio.h"

struct kvm;
struct stats_visitor;
struct virtio_console;
struct virtio_rng;

/* Where guest output goes (default term_output); tests catch it. */
typedef void (*virtio_console_out_fn)(struct kvm *kvm, const u8 *buf, size_t len);

/* Longest port name (VIRTIO_CONSOLE_PORT_NAME's text). */
#define VIRTIO_CONSOLE_NAME_MAX 31

/* One port: receiveq 0, transmitq 1. name NULL: a console without multiport (hvc0 in
 * Linux, a terminal); else VIRTIO_CONSOLE_F_MULTIPORT with one port of that name (at most
 * VIRTIO_CONSOLE_NAME_MAX bytes) that is not a console: Linux's generic port /dev/vportNp0,
 * whose writes do not wait for the device (control receiveq 2, transmitq 3). bare: no
 * transport (tests set up the queues and call ops->start). 0 or -errno. */
int virtio_console_create(struct kvm *kvm, enum virtio_trans trans, virtio_console_out_fn out,
			  const char *name, bool bare, struct virtio_console **c) __must_check;
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
/* Counters of its queues (groups rx and tx, and ctl-rx and ctl-tx for a named port): kicks,
 * trapped, irqs, packets (chains), bytes. */
void virtio_console_stats(struct virtio_console *c, struct stats_visitor *v);
/* The VM is going away (the device's worker stopped): what the guest made available on the
 * transmitq is written out, up to a bound, so a named port's output (whose writes do not
 * wait) is all out when the run ends right after the guest wrote it. */
void virtio_console_flush(struct virtio_console *c);
/* Add hvc0 to kvm's device list ("virtio-console", stats kind "console"), on
 * --virtio-transport; at init it takes the terminal's input (term_set_input). 0 or -ENOMEM. */
int virtio_console_add(struct kvm *kvm) __must_check;
/* The same for a console of `run -- CMD` (in the order added): its output to out (NULL:
 * term_output), the terminal's input only when input is set; name as virtio_console_create
 * (a named port's device flushes its output at teardown: virtio_console_flush). */
int virtio_console_add_port(struct kvm *kvm, virtio_console_out_fn out, bool input,
			    const char *name) __must_check;

/* The control channel of a named port (virtio/console-ctl.c), pure: no queues. */
#define VCON_SEND_ADD 1u  /* PORT_ADD owed to the driver (it said DEVICE_READY 1) */
#define VCON_SEND_NAME 2u /* PORT_NAME and PORT_OPEN 1 owed (it said PORT_READY 1) */
#define VCON_SEND_OPEN 4u
#define VCON_SEND_ALL 7u
struct vcon_ctl {
	u8 pend;	 /* VCON_SEND_* */
	bool guest_open; /* the driver's last PORT_OPEN (a program has the port open) */
};
/* One message from the driver (the readable bytes of one control transmitq chain): exactly 8
 * bytes, port 0 (any id for DEVICE_READY), value 0 or 1, an event a driver sends. 0, or
 * -EINVAL with *why (the device is then broken). */
int vcon_ctl_recv(struct vcon_ctl *s, const u8 *msg, size_t len, const char **why);
/* The next message owed to the driver into buf (room bytes, a control receiveq buffer), and
 * its bit cleared: its length, 0 when none is owed, -ENOSPC when it does not fit. */
int vcon_ctl_next(struct vcon_ctl *s, const char *name, u8 *buf, size_t room);

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
