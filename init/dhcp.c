/* The DHCP client's packets: a DISCOVER or REQUEST built, a server's reply parsed (bounds-checked: guest input from passt). */
#include <errno.h>
#include <string.h>

#include "dhcp.h"

#define IP_HDR 20
#define UDP_HDR 8
#define BOOTP_FIXED 236 /* op .. file, before the magic cookie */
#define BOOTP_MIN 300	/* RFC 1542: some servers drop shorter requests */
#define COOKIE 0x63825363u
#define PORT_SERVER 67
#define PORT_CLIENT 68

/* BOOTP field offsets (RFC 2131 figure 1). */
enum { B_OP = 0, B_HTYPE = 1, B_HLEN = 2, B_XID = 4, B_FLAGS = 10, B_YIADDR = 16, B_CHADDR = 28 };

/* Options read and written (RFC 2132). */
enum {
	OPT_PAD = 0,
	OPT_MASK = 1,
	OPT_ROUTER = 3,
	OPT_DNS = 6,
	OPT_REQ_ADDR = 50,
	OPT_TYPE = 53,
	OPT_SERVER = 54,
	OPT_PARAMS = 55,
	OPT_END = 255,
};

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)get16(p) << 16 | get16(p + 2);
}

/* The IPv4 header checksum (RFC 791). */
static uint16_t ip_csum(const uint8_t *p, size_t n)
{
	uint32_t s = 0;

	for (size_t i = 0; i + 1 < n; i += 2)
		s += get16(p + i);
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)~s;
}

size_t dhcp_build(uint8_t *buf, int type, const uint8_t mac[6], uint32_t xid,
		  const struct dhcp_lease *offer)
{
	uint8_t *b = buf + IP_HDR + UDP_HDR, *o = b + BOOTP_FIXED;
	size_t blen, len;

	memset(buf, 0, DHCP_PKT_MAX);
	b[B_OP] = 1; /* BOOTREQUEST */
	b[B_HTYPE] = 1;
	b[B_HLEN] = 6;
	put32(b + B_XID, xid);
	/* Broadcast replies: the interface has no address to take a unicast one yet. */
	put16(b + B_FLAGS, 0x8000);
	memcpy(b + B_CHADDR, mac, 6);
	put32(o, COOKIE);
	o += 4;
	*o++ = OPT_TYPE;
	*o++ = 1;
	*o++ = (uint8_t)type;
	if (type == DHCP_REQUEST && offer) {
		/* Addresses are kept in network byte order: copied, not converted. */
		*o++ = OPT_REQ_ADDR;
		*o++ = 4;
		memcpy(o, &offer->addr, 4);
		o += 4;
		*o++ = OPT_SERVER;
		*o++ = 4;
		memcpy(o, &offer->server, 4);
		o += 4;
	}
	*o++ = OPT_PARAMS;
	*o++ = 3;
	*o++ = OPT_MASK;
	*o++ = OPT_ROUTER;
	*o++ = OPT_DNS;
	*o++ = OPT_END;
	blen = (size_t)(o - b) < BOOTP_MIN ? BOOTP_MIN : (size_t)(o - b);
	len = IP_HDR + UDP_HDR + blen;
	/* UDP from 0.0.0.0:68 to 255.255.255.255:67, checksum 0 (none: allowed over IPv4). */
	put16(buf + IP_HDR, PORT_CLIENT);
	put16(buf + IP_HDR + 2, PORT_SERVER);
	put16(buf + IP_HDR + 4, (uint16_t)(UDP_HDR + blen));
	buf[0] = 0x45;
	put16(buf + 2, (uint16_t)len);
	buf[8] = 64; /* TTL */
	buf[9] = 17; /* UDP */
	put32(buf + 16, 0xffffffffu);
	put16(buf + 10, ip_csum(buf, IP_HDR));
	return len;
}

/* An address option's first 4 bytes (network byte order) into *out; -EINVAL when shorter. */
static int opt_addr(const uint8_t *v, size_t n, uint32_t *out)
{
	if (n < 4)
		return -EINVAL;
	memcpy(out, v, 4);
	return 0;
}

/* The options from o[0..n): each code, length and value inside them. */
static int parse_opts(const uint8_t *o, size_t n, struct dhcp_lease *l)
{
	size_t i = 0;

	while (i < n) {
		uint8_t code = o[i++], len;

		if (code == OPT_PAD)
			continue;
		if (code == OPT_END)
			return 0;
		if (i >= n)
			return -EINVAL;
		len = o[i++];
		if (len > n - i)
			return -EINVAL;
		switch (code) {
		case OPT_TYPE:
			if (len != 1)
				return -EINVAL;
			l->type = o[i];
			break;
		case OPT_MASK:
			if (opt_addr(o + i, len, &l->mask))
				return -EINVAL;
			break;
		case OPT_ROUTER: /* the first of the list */
			if (opt_addr(o + i, len, &l->router))
				return -EINVAL;
			break;
		case OPT_SERVER:
			if (opt_addr(o + i, len, &l->server))
				return -EINVAL;
			break;
		case OPT_DNS:
			if (len % 4)
				return -EINVAL;
			for (size_t k = 0; k < len / 4u && l->nr_dns < DHCP_MAX_DNS; k++)
				memcpy(&l->dns[l->nr_dns++], o + i + 4 * k, 4);
			break;
		}
		i += len;
	}
	return 0; /* no end option: what there is counts */
}

/* The UDP payload of an IPv4 packet from 67 to 68, in *p and *n. */
static int udp_payload(const uint8_t *pkt, size_t len, const uint8_t **p, size_t *n)
{
	size_t ihl, tot, ulen;

	if (len < IP_HDR || pkt[0] >> 4 != 4 || pkt[9] != 17)
		return -EINVAL;
	ihl = (size_t)(pkt[0] & 0xf) * 4;
	tot = get16(pkt + 2);
	/* A fragment (MF set or an offset) is not reassembled: DHCP replies fit one frame. */
	if (ihl < IP_HDR || tot > len || tot < ihl + UDP_HDR || (get16(pkt + 6) & 0x3fff))
		return -EINVAL;
	pkt += ihl;
	ulen = get16(pkt + 4);
	if (get16(pkt) != PORT_SERVER || get16(pkt + 2) != PORT_CLIENT || ulen < UDP_HDR ||
	    ulen > tot - ihl)
		return -EINVAL;
	*p = pkt + UDP_HDR;
	*n = ulen - UDP_HDR;
	return 0;
}

int dhcp_parse(const uint8_t *pkt, size_t len, const uint8_t mac[6], uint32_t xid,
	       struct dhcp_lease *l)
{
	const uint8_t *b;
	size_t n;

	memset(l, 0, sizeof(*l));
	if (udp_payload(pkt, len, &b, &n) || n < BOOTP_FIXED + 4 || b[B_OP] != 2 ||
	    get32(b + B_XID) != xid || memcmp(b + B_CHADDR, mac, 6) ||
	    get32(b + BOOTP_FIXED) != COOKIE)
		return -EINVAL;
	memcpy(&l->addr, b + B_YIADDR, 4);
	if (parse_opts(b + BOOTP_FIXED + 4, n - BOOTP_FIXED - 4, l))
		return -EINVAL;
	if (l->type != DHCP_OFFER && l->type != DHCP_ACK && l->type != DHCP_NAK)
		return -EINVAL;
	return 0;
}
