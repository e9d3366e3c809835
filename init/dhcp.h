/* The DHCP client's packets (init/dhcp.c): built and parsed on plain memory, fuzzed on the host. */
#ifndef LKVM_INIT_DHCP_H
#define LKVM_INIT_DHCP_H

#include <stddef.h>
#include <stdint.h>

/* Message types (RFC 2132 option 53) the client sends or reads. */
enum { DHCP_DISCOVER = 1, DHCP_OFFER = 2, DHCP_REQUEST = 3, DHCP_ACK = 5, DHCP_NAK = 6 };

#define DHCP_MAX_DNS 3
/* Room for a packet dhcp_build makes: IPv4 + UDP headers, BOOTP's 300 bytes. */
#define DHCP_PKT_MAX 328

/* What a reply offers. Addresses in network byte order, 0 when the reply had none. */
struct dhcp_lease {
	uint8_t type; /* DHCP_OFFER, DHCP_ACK or DHCP_NAK */
	uint32_t addr, mask, router, server;
	uint32_t dns[DHCP_MAX_DNS];
	unsigned nr_dns;
};

/* A DISCOVER, or a REQUEST for offer's address from offer's server, from mac with transaction
 * id xid: the IPv4 packet (from its header; 0.0.0.0:68 to 255.255.255.255:67, broadcast
 * replies asked for) in buf (DHCP_PKT_MAX bytes). Returns its length. */
size_t dhcp_build(uint8_t *buf, int type, const uint8_t mac[6], uint32_t xid,
		  const struct dhcp_lease *offer);

/* Reads len bytes of an IPv4 packet (from its header, as a packet socket gives it): 0 and *l
 * when it is a server's OFFER, ACK or NAK for mac and xid; -EINVAL for anything else (not
 * UDP 67 -> 68, another client's, truncated, malformed options). Every length is checked
 * against len. */
int dhcp_parse(const uint8_t *pkt, size_t len, const uint8_t mac[6], uint32_t xid,
	       struct dhcp_lease *l);

#endif
