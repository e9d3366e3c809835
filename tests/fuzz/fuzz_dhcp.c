/* Fuzz target: a DHCP reply as init's client reads it (init/dhcp.c), from passt or anyone on the link. */
#include <string.h>

#include "../../init/dhcp.h"
#include "fuzz.h"

/* Input: the IPv4 packet as a packet socket gives it (from its header), for the client
 * 52:54:00:12:34:56 with transaction id 0x12345678 (the seeds' ids). Checked: never a read
 * outside the input (ASan), a lease only of a reply type, never more than DHCP_MAX_DNS
 * servers, and the same answer twice (no state). */
int fuzz_dhcp(const uint8_t *data, size_t size)
{
	static const uint8_t mac[6] = { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 };
	struct dhcp_lease a, b;
	int r = dhcp_parse(data, size, mac, 0x12345678u, &a);

	FUZZ_ASSERT(r == dhcp_parse(data, size, mac, 0x12345678u, &b));
	if (r == 0) {
		FUZZ_ASSERT(a.type == DHCP_OFFER || a.type == DHCP_ACK || a.type == DHCP_NAK);
		FUZZ_ASSERT(a.nr_dns <= DHCP_MAX_DNS);
		FUZZ_ASSERT(!memcmp(&a, &b, sizeof(a)));
	}
	return 0;
}
