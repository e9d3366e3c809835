/* Fuzz target: virtio-console's control channel (virtio/console-ctl.c): the driver's messages checked, the device's answers made. */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "lkvm/virtio-console.h"

/* Input: records, each u8 length L (the message's, up to 32), u8 room (the control buffer
 * the answers go to, 0-63), then L bytes of message. After each message every answer owed
 * is made into a buffer of that room, until none is owed or it does not fit. */
#define VF_NAME "lkvm.stdout"

int fuzz_vcon(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	struct vcon_ctl s = { 0 };

	while (in.left >= 2) {
		size_t len = fuzz_take(&in, 1) % 33, room = fuzz_take(&in, 1) % 64;
		u8 msg[32], out[64];
		const char *why = NULL;
		int n;

		len = len < in.left ? len : in.left;
		memcpy(msg, in.p, len);
		in.p += len;
		in.left -= len;
		if (vcon_ctl_recv(&s, msg, len, &why) < 0)
			FUZZ_ASSERT(why && *why);
		else
			FUZZ_ASSERT(len == 8);
		FUZZ_ASSERT(!(s.pend & ~VCON_SEND_ALL));
		while ((n = vcon_ctl_next(&s, VF_NAME, out, room)) > 0)
			FUZZ_ASSERT((size_t)n <= room && n <= 8 + (int)strlen(VF_NAME));
		FUZZ_ASSERT(n == 0 || n == -ENOSPC);
	}
	return 0;
}
