/* The -n option parser (kvmtool's key names) and the guest-feature to tap-offload mapping. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <linux/virtio_net.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/net.h"

static const u8 default_mac[6] = { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 };

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

int net_parse_mac(const char *s, u8 mac[6])
{
	u8 tmp[6];

	/* Exactly "hh:hh:hh:hh:hh:hh": no shortened pairs, no other separators. */
	if (strlen(s) != 17)
		return -EINVAL;
	for (int i = 0; i < 6; i++) {
		const char *p = s + 3 * i;
		int hi = hexval(p[0]), lo = hexval(p[1]);

		if (hi < 0 || lo < 0 || (i < 5 && p[2] != ':'))
			return -EINVAL;
		tmp[i] = (u8)(hi << 4 | lo);
	}
	memcpy(mac, tmp, sizeof(tmp));
	return 0;
}

int net_parse_host_ip(const char *s, u32 *addr_be, int *prefix)
{
	char ip[INET_ADDRSTRLEN];
	const char *slash = strchr(s, '/');
	size_t iplen = slash ? (size_t)(slash - s) : strlen(s);
	struct in_addr a;
	int pfx = 24;

	if (iplen == 0 || iplen >= sizeof(ip))
		return -EINVAL;
	memcpy(ip, s, iplen);
	ip[iplen] = '\0';
	if (inet_pton(AF_INET, ip, &a) != 1)
		return -EINVAL;
	if (slash) {
		const char *p = slash + 1;

		/* One or two decimal digits only: no sign, spaces or leading junk. */
		if (!is_digit(p[0]) || (p[1] && (!is_digit(p[1]) || p[2])))
			return -EINVAL;
		pfx = atoi(p);
		if (pfx > 32)
			return -EINVAL;
	}
	*addr_be = a.s_addr;
	*prefix = pfx;
	return 0;
}

static bool ifname_ok(const char *v, size_t len)
{
	if (len < 1 || len > 15)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = v[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return false;
	}
	return true;
}

enum net_key { K_MODE, K_TAPIF, K_MAC, K_HOSTIP, K_SCRIPT, K_IOEVENTFD, K_QUEUES, K_TX, K_TX_TIMER,
	       K_POLL_US, K_TRANS, K_NR };

static const char *const key_names[] = {
	[K_MODE] = "mode",	   [K_TAPIF] = "tapif",		[K_MAC] = "guest_mac",
	[K_HOSTIP] = "host_ip",	   [K_SCRIPT] = "script",	[K_IOEVENTFD] = "ioeventfd",
	[K_QUEUES] = "queues",	   [K_TX] = "tx",		[K_TX_TIMER] = "tx_timer_us",
	[K_POLL_US] = "poll_us",   [K_TRANS] = "trans",
};
_Static_assert(ARRAY_SIZE(key_names) == K_NR, "key_names must name every key");

static const char *const tx_mode_names[] = {
	[NET_TX_KICK] = "kick",
	[NET_TX_TIMER] = "timer",
	[NET_TX_POLL] = "poll",
};
_Static_assert(ARRAY_SIZE(tx_mode_names) == NET_TX_NR, "tx_mode_names must name every mode");

const char *net_tx_mode_name(enum net_tx_mode m)
{
	return (unsigned)m < NET_TX_NR ? tx_mode_names[m] : "?";
}

/* A decimal number in lo..hi, nothing else. */
static bool parse_range(const char *v, long lo, long hi, long *out)
{
	char *end;
	long n;

	errno = 0;
	n = strtol(v, &end, 10);
	if (!is_digit(v[0]) || *end || errno || n < lo || n > hi)
		return false;
	*out = n;
	return true;
}

/* Applies one key's value (NUL-terminated copy) to o; on error writes the reason. */
static int apply_value(enum net_key k, const char *v, struct net_opts *o, char *err, size_t errlen)
{
	const char *kn = key_names[k];
	size_t len = strlen(v);

	switch (k) {
	case K_MODE:
		if (!strcmp(v, "tap"))
			o->mode = NET_MODE_TAP;
		else if (!strcmp(v, "none"))
			o->mode = NET_MODE_NONE;
		else if (!strcmp(v, "user"))
			goto bad_user;
		else
			goto bad_mode;
		return 0;
	case K_TAPIF:
		if (!ifname_ok(v, len)) {
			errfmt(err, errlen, "-n %s '%s': want 1-15 characters from [A-Za-z0-9_.-]",
			       kn, v);
			return -EINVAL;
		}
		memcpy(o->tapif, v, len + 1);
		return 0;
	case K_MAC:
		if (net_parse_mac(v, o->guest_mac)) {
			errfmt(err, errlen, "-n %s '%s': want six hex pairs like 52:54:00:12:34:56",
			       kn, v);
			return -EINVAL;
		}
		if (o->guest_mac[0] & 1) {
			errfmt(err, errlen, "-n %s '%s': multicast bit set in the first byte", kn,
			       v);
			return -EINVAL;
		}
		if (!memcmp(o->guest_mac, "\0\0\0\0\0\0", 6)) {
			errfmt(err, errlen, "-n %s '%s': the all-zero address is not valid", kn, v);
			return -EINVAL;
		}
		o->mac_set = true;
		return 0;
	case K_HOSTIP: {
		u32 addr;
		int pfx;
		char ip[INET_ADDRSTRLEN];

		if (net_parse_host_ip(v, &addr, &pfx)) {
			errfmt(err, errlen, "-n %s '%s': want an IPv4 address A.B.C.D[/0-32]", kn,
			       v);
			return -EINVAL;
		}
		/* Stored normalised ("/24" made explicit) so later users need not guess. */
		inet_ntop(AF_INET, &addr, ip, sizeof(ip));
		snprintf(o->host_ip, sizeof(o->host_ip), "%s/%d", ip, pfx);
		return 0;
	}
	case K_SCRIPT:
		if (len >= sizeof(o->script)) {
			errfmt(err, errlen, "-n %s: path longer than %zu bytes", kn,
			       sizeof(o->script) - 1);
			return -EINVAL;
		}
		memcpy(o->script, v, len + 1);
		return 0;
	case K_IOEVENTFD:
		if (!strcmp(v, "on"))
			o->ioeventfd = true;
		else if (!strcmp(v, "off"))
			o->ioeventfd = false;
		else {
			errfmt(err, errlen, "-n %s '%s': want on or off", kn, v);
			return -EINVAL;
		}
		return 0;
	case K_QUEUES: {
		long n;

		if (!parse_range(v, 1, NET_MAX_QUEUE_PAIRS, &n)) {
			errfmt(err, errlen, "-n %s '%s': want a number from 1 to %d", kn, v,
			       NET_MAX_QUEUE_PAIRS);
			return -EINVAL;
		}
		o->queue_pairs = (int)n;
		return 0;
	}
	case K_TX:
		for (int m = 0; m < NET_TX_NR; m++) {
			if (!strcmp(v, tx_mode_names[m])) {
				o->tx_mode = (enum net_tx_mode)m;
				return 0;
			}
		}
		errfmt(err, errlen, "-n %s '%s': want kick, timer or poll", kn, v);
		return -EINVAL;
	case K_TX_TIMER:
	case K_POLL_US: {
		long n;

		if (!parse_range(v, 1, NET_TX_US_MAX, &n)) {
			errfmt(err, errlen, "-n %s '%s': want microseconds from 1 to %d", kn, v,
			       NET_TX_US_MAX);
			return -EINVAL;
		}
		if (k == K_TX_TIMER)
			o->tx_timer_us = (u32)n;
		else
			o->poll_us = (u32)n;
		return 0;
	}
	case K_TRANS:
		if (virtio_trans_parse(v, &o->trans)) {
			errfmt(err, errlen, "-n %s '%s': want pci or mmio", kn, v);
			return -EINVAL;
		}
		o->trans_set = true;
		return 0;
	case K_NR:
		break;
	}
	return -EINVAL;
bad_user:
	errfmt(err, errlen, "-n mode 'user': user-mode networking is not supported (use mode=tap)");
	return -EINVAL;
bad_mode:
	errfmt(err, errlen, "-n mode '%s': want tap or none", v);
	return -EINVAL;
}

int net_parse_opts(const char *arg, struct net_opts *o, char *err, size_t errlen)
{
	unsigned seen = 0;
	const char *p = arg;

	memset(o, 0, sizeof(*o));
	o->mode = NET_MODE_TAP;
	o->ioeventfd = true;
	o->queue_pairs = 1;
	o->tx_mode = NET_TX_KICK;
	o->tx_timer_us = NET_TX_TIMER_US_DEFAULT;
	o->poll_us = NET_POLL_US_DEFAULT;
	memcpy(o->guest_mac, default_mac, sizeof(default_mac));
	if (err && errlen)
		err[0] = '\0';

	if (!arg || !*arg) {
		errfmt(err, errlen, "-n: empty option (want e.g. mode=tap,tapif=tap0)");
		return -EINVAL;
	}
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t tlen = comma ? (size_t)(comma - p) : strlen(p);
		const char *eq = memchr(p, '=', tlen);
		size_t klen, vlen;
		enum net_key k;
		char *val;
		int ret;

		if (tlen == 0) {
			errfmt(err, errlen, "-n: empty item in '%s' (stray comma?)", arg);
			return -EINVAL;
		}
		if (!eq) {
			errfmt(err, errlen, "-n: '%.*s' is not key=value", (int)tlen, p);
			return -EINVAL;
		}
		klen = (size_t)(eq - p);
		vlen = tlen - klen - 1;
		for (k = 0; k < K_NR; k++)
			if (strlen(key_names[k]) == klen && !memcmp(key_names[k], p, klen))
				break;
		if (k == K_NR) {
			errfmt(err, errlen, "-n: unknown key '%.*s'", (int)klen, p);
			return -EINVAL;
		}
		if (seen & (1u << k)) {
			errfmt(err, errlen, "-n: duplicate key '%s'", key_names[k]);
			return -EINVAL;
		}
		seen |= 1u << k;
		if (vlen == 0) {
			errfmt(err, errlen, "-n: empty value for '%s'", key_names[k]);
			return -EINVAL;
		}
		val = strndup(eq + 1, vlen);
		if (!val) {
			errfmt(err, errlen, "-n: out of memory");
			return -ENOMEM;
		}
		ret = apply_value(k, val, o, err, errlen);
		free(val);
		if (ret)
			return ret;
		if (!comma)
			break;
		p = comma + 1;
	}
	/* A tuning key for another strategy would be silently ignored: say so instead. */
	if ((seen & (1u << K_TX_TIMER)) && o->tx_mode != NET_TX_TIMER) {
		errfmt(err, errlen, "-n tx_timer_us: only with tx=timer (tx is %s)",
		       net_tx_mode_name(o->tx_mode));
		return -EINVAL;
	}
	if ((seen & (1u << K_POLL_US)) && o->tx_mode != NET_TX_POLL) {
		errfmt(err, errlen, "-n poll_us: only with tx=poll (tx is %s)", net_tx_mode_name(o->tx_mode));
		return -EINVAL;
	}
	return 0;
}

void net_offloads_from_features(u64 f, struct net_offloads *off)
{
#define FEAT(bit) (((f) >> (bit)) & 1)
	memset(off, 0, sizeof(*off));
	off->csum = FEAT(VIRTIO_NET_F_GUEST_CSUM);
	/* A guest that cannot take partial checksums cannot take segmentation either. */
	if (off->csum) {
		off->tso4 = FEAT(VIRTIO_NET_F_GUEST_TSO4);
		off->tso6 = FEAT(VIRTIO_NET_F_GUEST_TSO6);
		off->ufo = FEAT(VIRTIO_NET_F_GUEST_UFO);
	}
	off->ecn = (off->tso4 || off->tso6) && FEAT(VIRTIO_NET_F_GUEST_ECN);
#undef FEAT
}
