/* Unit tests of init's DHCP packets (init/dhcp.c): requests built, replies parsed, hostile replies refused. */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "../../init/dhcp.h"
#include "check_main.h"
#include "lkvm/util.h"

static const uint8_t mac[6] = { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 };
#define XID 0x12345678u

static uint32_t ip(const char *s)
{
	struct in_addr a;

	ck_assert_int_eq(inet_pton(AF_INET, s, &a), 1);
	return a.s_addr;
}

static void put16(uint8_t *p, unsigned v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

/* A server's reply as passt sends it: type, mask, router, two name servers, server id. Its
 * length; opt_len bytes of options from opts (NULL: the default set). */
static size_t reply(uint8_t *p, const uint8_t *opts, size_t opt_len)
{
	static const uint8_t def[] = {
		53, 1,	2, 1, 4,  255, 255, 255, 0,  3,	 4, 192, 0, 2, 1, 6,
		8,  10, 0, 0, 53, 10,  0,   0,	 54, 54, 4, 192, 0, 2, 1, 255
	};
	uint8_t *b = p + 28;
	size_t len;

	if (!opts) {
		opts = def;
		opt_len = sizeof(def);
	}
	len = 28 + 240 + opt_len;
	memset(p, 0, len);
	p[0] = 0x45;
	put16(p + 2, (unsigned)len);
	p[9] = 17;
	put16(p + 20, 67);
	put16(p + 22, 68);
	put16(p + 24, (unsigned)len - 20);
	b[0] = 2;
	put16(b + 4, XID >> 16);
	put16(b + 6, XID & 0xffff);
	memcpy(b + 16, (uint8_t[]){ 192, 0, 2, 2 }, 4);
	memcpy(b + 28, mac, 6);
	memcpy(b + 236, (uint8_t[]){ 0x63, 0x82, 0x53, 0x63 }, 4);
	memcpy(b + 240, opts, opt_len);
	return len;
}

START_TEST(test_build_discover_request)
{
	uint8_t p[DHCP_PKT_MAX];
	struct dhcp_lease offer = { .addr = ip("192.0.2.2"), .server = ip("192.0.2.1") };
	size_t n = dhcp_build(p, DHCP_DISCOVER, mac, XID, NULL);
	uint32_t sum = 0;

	ck_assert_uint_eq(n, 20 + 8 + 300);
	ck_assert_uint_eq(p[0], 0x45);
	ck_assert_uint_eq((size_t)(p[2] << 8 | p[3]), n);
	for (int i = 0; i < 20; i += 2)
		sum += (uint32_t)(p[i] << 8 | p[i + 1]);
	ck_assert_uint_eq((sum & 0xffff) + (sum >> 16), 0xffff); /* the header checksum holds */
	ck_assert_mem_eq(p + 16, "\xff\xff\xff\xff", 4);
	ck_assert_mem_eq(p + 20, "\0\x44\0\x43", 4); /* 68 -> 67 */
	ck_assert_mem_eq(p + 28 + 28, mac, 6);
	ck_assert_mem_eq(p + 28 + 236, "\x63\x82\x53\x63\x35\x01\x01", 7);
	n = dhcp_build(p, DHCP_REQUEST, mac, XID, &offer);
	ck_assert_mem_eq(p + 28 + 240,
			 "\x35\x01\x03\x32\x04\xc0\x00\x02\x02\x36\x04\xc0\x00\x02\x01", 15);
	ck_assert_uint_eq(n, 20 + 8 + 300);
}
END_TEST

START_TEST(test_parse_offer)
{
	uint8_t p[600];
	struct dhcp_lease l;
	size_t n = reply(p, NULL, 0);

	ck_assert_int_eq(dhcp_parse(p, n, mac, XID, &l), 0);
	ck_assert_uint_eq(l.type, DHCP_OFFER);
	ck_assert_uint_eq(l.addr, ip("192.0.2.2"));
	ck_assert_uint_eq(l.mask, ip("255.255.255.0"));
	ck_assert_uint_eq(l.router, ip("192.0.2.1"));
	ck_assert_uint_eq(l.server, ip("192.0.2.1"));
	ck_assert_uint_eq(l.nr_dns, 2);
	ck_assert_uint_eq(l.dns[0], ip("10.0.0.53"));
	ck_assert_uint_eq(l.dns[1], ip("10.0.0.54"));
	/* A longer packet than its IP length (Ethernet padding) is fine. */
	ck_assert_int_eq(dhcp_parse(p, n + 20, mac, XID, &l), 0);
}
END_TEST

START_TEST(test_parse_refuses)
{
	uint8_t p[600], q[600];
	struct dhcp_lease l;
	size_t n = reply(p, NULL, 0);
	static const uint8_t dns_5[] = { 53, 1, 5, 6, 5, 1, 2, 3, 4, 5, 255 };
	static const uint8_t over[] = { 53, 1, 5, 3, 200, 1, 2, 3, 4 };
	static const uint8_t no_len[] = { 53, 1, 5, 3 };
	static const uint8_t short_router[] = { 53, 1, 5, 3, 2, 1, 2, 255 };
	static const uint8_t no_type[] = { 1, 4, 255, 255, 255, 0, 255 };
	static const uint8_t request[] = { 53, 1, 3, 255 };

	/* Every cut of the packet: refused (its IP length says more), never read past. */
	for (size_t cut = 0; cut < n; cut++)
		ck_assert_int_eq(dhcp_parse(p, cut, mac, XID, &l), -EINVAL);
	ck_assert_int_eq(dhcp_parse(p, n, mac, XID + 1, &l), -EINVAL);
	ck_assert_int_eq(dhcp_parse(p, n, (const uint8_t *)"\x52\x54\0\x12\x34\x57", XID, &l),
			 -EINVAL);
	/* One byte changed at a time where it matters: version, protocol, fragment, ports,
	 * UDP length, op, cookie. */
	static const struct {
		size_t at;
		uint8_t v;
	} flip[] = { { 0, 0x65 }, { 0, 0x44 },	{ 9, 6 },  { 6, 0x20 }, { 7, 1 },	{ 21, 68 },
		     { 23, 67 },  { 24, 0xff }, { 24, 0 }, { 28, 1 },	{ 28 + 236, 0 } };
	for (size_t i = 0; i < ARRAY_SIZE(flip); i++) {
		memcpy(q, p, n);
		q[flip[i].at] = flip[i].v;
		ck_assert_msg(dhcp_parse(q, n, mac, XID, &l) == -EINVAL, "flip %zu accepted", i);
	}
	n = reply(p, dns_5, sizeof(dns_5));
	ck_assert_int_eq(dhcp_parse(p, n, mac, XID, &l), -EINVAL);
	n = reply(p, over, sizeof(over));
	ck_assert_int_eq(dhcp_parse(p, n, mac, XID, &l), -EINVAL);
	n = reply(p, no_len, sizeof(no_len));
	ck_assert_int_eq(dhcp_parse(p, n, mac, XID, &l), -EINVAL);
	n = reply(p, short_router, sizeof(short_router));
	ck_assert_int_eq(dhcp_parse(p, n, mac, XID, &l), -EINVAL);
	n = reply(p, no_type, sizeof(no_type));
	ck_assert_int_eq(dhcp_parse(p, n, mac, XID, &l), -EINVAL);
	n = reply(p, request, sizeof(request));
	ck_assert_int_eq(dhcp_parse(p, n, mac, XID, &l), -EINVAL);
}
END_TEST

START_TEST(test_parse_many_dns)
{
	uint8_t p[600], o[64] = { 53, 1, 5, 6, 20 };
	struct dhcp_lease l;
	size_t n;

	for (int i = 0; i < 20; i++)
		o[5 + i] = (uint8_t)i;
	o[25] = 255;
	n = reply(p, o, 26);
	ck_assert_int_eq(dhcp_parse(p, n, mac, XID, &l), 0);
	ck_assert_uint_eq(l.type, DHCP_ACK);
	ck_assert_uint_eq(l.nr_dns, DHCP_MAX_DNS); /* the rest dropped */
	ck_assert_mem_eq(&l.dns[2], "\x08\x09\x0a\x0b", 4);
}
END_TEST

static Suite *dhcp_suite(void)
{
	Suite *s = suite_create("dhcp");
	TCase *tc = tcase_create("packets");

	tcase_add_test(tc, test_build_discover_request);
	tcase_add_test(tc, test_parse_offer);
	tcase_add_test(tc, test_parse_refuses);
	tcase_add_test(tc, test_parse_many_dns);
	suite_add_tcase(s, tc);
	return s;
}

LKVM_CHECK_MAIN(dhcp_suite)
