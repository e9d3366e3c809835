/* Reset paths a PC guest uses: an i8042 controller with no keyboard or mouse attached, port 0x92, port 0xCF9. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/dev.h"
#include "lkvm/hw.h"
#include "lkvm/kvm.h"
#include "lkvm/snap.h"

#define I8042_DATA_PORT 0x60
#define I8042_CMD_PORT 0x64
#define SYSCTL_PORT_A 0x92
#define RESET_CONTROL_PORT 0xCF9

#define STR_OBF 0x01
#define STR_SYS 0x04	/* self-test passed */
#define STR_UNLOCK 0x10 /* keyboard not inhibited: Linux warns "Keylock active" otherwise */
#define STR_AUXDATA 0x20

#define CMD_READ_CTR 0x20
#define CMD_WRITE_CTR 0x60
#define CMD_AUX_DISABLE 0xa7
#define CMD_AUX_ENABLE 0xa8
#define CMD_AUX_TEST 0xa9
#define CMD_SELF_TEST 0xaa
#define CMD_KBD_TEST 0xab
#define CMD_KBD_DISABLE 0xad
#define CMD_KBD_ENABLE 0xae
#define CMD_READ_OUTPORT 0xd0
#define CMD_WRITE_OUTPORT 0xd1
#define CMD_AUX_LOOP 0xd3
#define CMD_AUX_WRITE 0xd4
#define CMD_PULSE_RESET 0xfe

#define CTR_KBDINT 0x01
#define CTR_SYS 0x04
#define CTR_KBDDIS 0x10
#define CTR_AUXDIS 0x20
#define CTR_XLATE 0x40

#define OUTPORT_RESET_N 0x01 /* output port bit 0 low = CPU reset */

struct i8042 {
	struct kvm *kvm;
	pthread_mutex_t lock;
	u8 ctr;	    /* controller configuration byte */
	u8 pending; /* command waiting for its parameter on the data port, or 0 */
	u8 out;	    /* output buffer */
	bool out_full;
	bool own_cf9; /* registered 0xCF9 itself (no PCI bus) */
};

void hw_reset_control_write(struct kvm *kvm, u8 val)
{
	/* Bit 2 starts the reset (bit 1 only picks hard/soft, bit 3 full reset). */
	if (val & 0x04)
		kvm_request_end(kvm, KVM_END_REBOOT, kvm->guest_end_status,
				"guest reset (port 0xcf9)");
}

static void reply_locked(struct i8042 *c, u8 v)
{
	c->out = v;
	c->out_full = true;
}

/*
 * Enough of the controller for Linux's probe to end with a keyboard port and no AUX
 * port, fast: self-test passes, CTR reads and writes, the AUX loopback answers with a
 * wrong byte and the AUX interface test reports "clock line stuck" (so no mouse).
 * Bytes sent to the keyboard get no answer: atkbd's probe times out quietly.
 */
static void command_locked(struct i8042 *c, u8 cmd)
{
	c->pending = 0;
	switch (cmd) {
	case CMD_READ_CTR:
		reply_locked(c, c->ctr);
		break;
	case CMD_WRITE_CTR:
	case CMD_WRITE_OUTPORT:
	case CMD_AUX_LOOP:
	case CMD_AUX_WRITE:
		c->pending = cmd;
		break;
	case CMD_AUX_DISABLE:
		c->ctr |= CTR_AUXDIS;
		break;
	case CMD_AUX_ENABLE:
		c->ctr &= (u8)~CTR_AUXDIS;
		break;
	case CMD_AUX_TEST:
		reply_locked(c, 0x01);
		break;
	case CMD_SELF_TEST:
		reply_locked(c, 0x55);
		break;
	case CMD_KBD_TEST:
		reply_locked(c, 0x00);
		break;
	case CMD_KBD_DISABLE:
		c->ctr |= CTR_KBDDIS;
		break;
	case CMD_KBD_ENABLE:
		c->ctr &= (u8)~CTR_KBDDIS;
		break;
	case CMD_READ_OUTPORT:
		reply_locked(c, OUTPORT_RESET_N | 0x02 /* A20 on */);
		break;
	case CMD_PULSE_RESET:
		kvm_request_end(c->kvm, KVM_END_REBOOT, c->kvm->guest_end_status,
				"guest reset (i8042)");
		break;
	default:
		/* 0xF0-0xFF pulse output lines: only bit 0 (reset) matters, 0xFE above. */
		break;
	}
}

static void data_write_locked(struct i8042 *c, u8 v)
{
	u8 cmd = c->pending;

	c->pending = 0;
	switch (cmd) {
	case CMD_WRITE_CTR:
		c->ctr = v;
		break;
	case CMD_WRITE_OUTPORT:
		if (!(v & OUTPORT_RESET_N))
			kvm_request_end(c->kvm, KVM_END_REBOOT, c->kvm->guest_end_status,
					"guest reset (i8042 output port)");
		break;
	case CMD_AUX_LOOP:
		/* A controller echoes this; answering something else tells Linux to go on
		 * to the AUX test, which then reports no mouse. */
		reply_locked(c, (u8)~v);
		break;
	default:
		/* To the (absent) keyboard or mouse. */
		break;
	}
}

static void i8042_io(struct kvm_cpu *vcpu, u64 port, u8 *data, u32 len, bool is_write, void *opaque)
{
	struct i8042 *c = opaque;

	pthread_mutex_lock(&c->lock);
	if (port == I8042_CMD_PORT) {
		if (is_write)
			command_locked(c, data[0]);
		else
			data[0] = (u8)(STR_SYS | STR_UNLOCK | (c->out_full ? STR_OBF : 0));
	} else if (is_write) {
		data_write_locked(c, data[0]);
	} else {
		data[0] = c->out;
		c->out_full = false;
	}
	pthread_mutex_unlock(&c->lock);
}

/* System control port A: bit 0 is the fast reset, bit 1 the A20 gate (always on). */
static void port92_io(struct kvm_cpu *vcpu, u64 port, u8 *data, u32 len, bool is_write,
		      void *opaque)
{
	struct i8042 *c = opaque;

	if (!is_write) {
		data[0] = 0x02;
		return;
	}
	if (data[0] & 0x01)
		kvm_request_end(c->kvm, KVM_END_REBOOT, c->kvm->guest_end_status,
				"guest reset (port 0x92)");
}

static void cf9_io(struct kvm_cpu *vcpu, u64 port, u8 *data, u32 len, bool is_write, void *opaque)
{
	struct i8042 *c = opaque;

	if (is_write)
		hw_reset_control_write(c->kvm, data[0]);
}

static int i8042_dev_init(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen)
{
	struct i8042 *c = calloc(1, sizeof(*c));
	int ret;

	if (!c)
		return -ENOMEM;
	c->kvm = kvm;
	/* What a BIOS leaves: keyboard interrupt on, translation on, no mouse. */
	c->ctr = CTR_KBDINT | CTR_SYS | CTR_AUXDIS | CTR_XLATE;
	pthread_mutex_init(&c->lock, NULL);
	ret = io_bus_register(&kvm->pio, I8042_DATA_PORT, 1, i8042_io, c, "i8042-data");
	if (ret)
		goto err;
	ret = io_bus_register(&kvm->pio, I8042_CMD_PORT, 1, i8042_io, c, "i8042-cmd");
	if (ret)
		goto err_data;
	ret = io_bus_register(&kvm->pio, SYSCTL_PORT_A, 1, port92_io, c, "port92");
	if (ret)
		goto err_cmd;
	/* With PCI, 0xCF9 lies inside the config address range and pci.c forwards it. */
	if (!kvm->pci) {
		ret = io_bus_register(&kvm->pio, RESET_CONTROL_PORT, 1, cf9_io, c, "reset-control");
		if (ret)
			goto err_92;
		c->own_cf9 = true;
	}
	d->priv = c;
	return 0;
err_92:
	io_bus_unregister(&kvm->pio, SYSCTL_PORT_A);
err_cmd:
	io_bus_unregister(&kvm->pio, I8042_CMD_PORT);
err_data:
	io_bus_unregister(&kvm->pio, I8042_DATA_PORT);
err:
	pthread_mutex_destroy(&c->lock);
	free(c);
	return ret;
}

static void i8042_dev_exit(struct kvm *kvm, struct kvm_dev *d)
{
	struct i8042 *c = d->priv;

	io_bus_unregister(&kvm->pio, I8042_DATA_PORT);
	io_bus_unregister(&kvm->pio, I8042_CMD_PORT);
	io_bus_unregister(&kvm->pio, SYSCTL_PORT_A);
	if (c->own_cf9)
		io_bus_unregister(&kvm->pio, RESET_CONTROL_PORT);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* Snapshot (issue 31): the controller's bytes as one record. Ports 0x92 and 0xCF9 keep no
 * state (they only ask for a reset); own_cf9 follows from the options. */
#define I8042_SNAP_TAG DEV_SNAP_TAG_MIN

struct i8042_snap {
	u8 ctr, pending, out, out_full;
	u8 reserved[4];
};
_Static_assert(sizeof(struct i8042_snap) == 8, "i8042_snap has no holes");

static int i8042_dev_save(struct kvm_dev *d, struct snap_rec_buf *b, char *err, size_t errlen)
{
	struct i8042 *c = d->priv;
	struct i8042_snap v = { 0 };

	pthread_mutex_lock(&c->lock);
	v.ctr = c->ctr;
	v.pending = c->pending;
	v.out = c->out;
	v.out_full = c->out_full;
	pthread_mutex_unlock(&c->lock);
	snap_rec_put(b, I8042_SNAP_TAG, &v, sizeof(v));
	return 0;
}

/* A command waiting for its parameter is one of those command_locked leaves pending. */
static bool pending_ok(u8 cmd)
{
	return cmd == 0 || cmd == CMD_WRITE_CTR || cmd == CMD_WRITE_OUTPORT ||
	       cmd == CMD_AUX_LOOP || cmd == CMD_AUX_WRITE;
}

static int i8042_dev_load(struct kvm_dev *d, const void *sec, size_t len, char *err, size_t errlen)
{
	struct i8042 *c = d->priv;
	struct i8042_snap v;

	if (snap_rec_get(sec, len, I8042_SNAP_TAG, &v, sizeof(v)) < 0) {
		errfmt(err, errlen, "the controller's record is missing or malformed");
		return -EINVAL;
	}
	if (!pending_ok(v.pending) || v.out_full > 1 ||
	    (v.reserved[0] | v.reserved[1] | v.reserved[2] | v.reserved[3])) {
		errfmt(err, errlen, "pending command %#x, output-full flag %u or reserved bytes",
		       v.pending, v.out_full);
		return -EINVAL;
	}
	pthread_mutex_lock(&c->lock);
	c->ctr = v.ctr;
	c->pending = v.pending;
	c->out = v.out;
	c->out_full = v.out_full;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* After the PCI bus (a bus comes first), which owns 0xCF8-0xCFB and forwards 0xCF9. */
static const struct kvm_dev_ops i8042_dev_ops = {
	.name = "i8042",
	.prio = DEV_PRIO_LEGACY,
	.init = i8042_dev_init,
	.save = i8042_dev_save,
	.load = i8042_dev_load,
	.exit = i8042_dev_exit,
};

int i8042_add(struct kvm *kvm)
{
	return kvm_dev_add(kvm, &i8042_dev_ops, NULL, 0);
}
