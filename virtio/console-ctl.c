/* virtio-console's control channel for one named port (virtio 1.2 §5.3.6.2, VIRTIO_CONSOLE_F_MULTIPORT): the driver's messages checked, the device's answers made. */
#include <errno.h>
#include <string.h>

#include "lkvm/virtio-console.h"

/* struct virtio_console_control's events (virtio 1.2 §5.3.6.2). */
enum {
	EV_DEVICE_READY = 0,
	EV_PORT_ADD = 1,
	EV_PORT_READY = 3,
	EV_PORT_OPEN = 6,
	EV_PORT_NAME = 7,
};

/* The header of every control message, both ways: little-endian id, event, value. */
#define CTL_HDR 8

static void put_hdr(u8 *b, u16 event, u16 value)
{
	memset(b, 0, 4); /* port 0, the device's only one */
	b[4] = (u8)event;
	b[5] = (u8)(event >> 8);
	b[6] = (u8)value;
	b[7] = (u8)(value >> 8);
}

int vcon_ctl_recv(struct vcon_ctl *s, const u8 *msg, size_t len, const char **why)
{
	u32 id;
	u16 event, value;

	if (len != CTL_HDR) {
		*why = "a control message is not 8 bytes";
		return -EINVAL;
	}
	id = (u32)msg[0] | (u32)msg[1] << 8 | (u32)msg[2] << 16 | (u32)msg[3] << 24;
	event = (u16)(msg[4] | msg[5] << 8);
	value = (u16)(msg[6] | msg[7] << 8);
	if (value > 1) {
		*why = "a control message's value is not 0 or 1";
		return -EINVAL;
	}
	/* DEVICE_READY is the device's, whatever its id (Linux sends ~0). */
	if (event != EV_DEVICE_READY && id != 0) {
		*why = "a control message names a port the device does not have";
		return -EINVAL;
	}
	switch (event) {
	case EV_DEVICE_READY:
		/* 0: the driver failed to set up; it gets nothing. */
		if (value)
			s->pend |= VCON_SEND_ADD;
		return 0;
	case EV_PORT_READY:
		if (value)
			s->pend |= VCON_SEND_NAME | VCON_SEND_OPEN;
		return 0;
	case EV_PORT_OPEN:
		s->guest_open = value;
		return 0;
	}
	*why = "a control message's event is not one a driver sends";
	return -EINVAL;
}

int vcon_ctl_next(struct vcon_ctl *s, const char *name, u8 *buf, size_t room)
{
	size_t nlen = strlen(name);

	/* In bit order: the port, its name, then the host side open (its writes may go). */
	if (s->pend & VCON_SEND_ADD) {
		if (room < CTL_HDR)
			return -ENOSPC;
		put_hdr(buf, EV_PORT_ADD, 0);
		s->pend &= (u8)~VCON_SEND_ADD;
		return CTL_HDR;
	}
	if (s->pend & VCON_SEND_NAME) {
		if (room < CTL_HDR + nlen)
			return -ENOSPC;
		put_hdr(buf, EV_PORT_NAME, 1);
		memcpy(buf + CTL_HDR, name, nlen);
		s->pend &= (u8)~VCON_SEND_NAME;
		return (int)(CTL_HDR + nlen);
	}
	if (s->pend & VCON_SEND_OPEN) {
		if (room < CTL_HDR)
			return -ENOSPC;
		put_hdr(buf, EV_PORT_OPEN, 1);
		s->pend &= (u8)~VCON_SEND_OPEN;
		return CTL_HDR;
	}
	return 0;
}
