/* The -n option parser (kvmtool's key names, passt's socket) and the guest-feature to tap-offload mapping. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <linux/virtio_net.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/net.h"
#include "lkvm/virtio.h"

static const u8 default_mac[6] = { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 };

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
		int hi = hex_digit(p[0]), lo = hex_digit(p[1]);

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

const struct opt_choice net_tx_choices[NET_TX_NR + 1] = {
	[NET_TX_KICK] = { "kick", NET_TX_KICK },
	[NET_TX_TIMER] = { "timer", NET_TX_TIMER },
	[NET_TX_POLL] = { "poll", NET_TX_POLL },
};

const char *net_tx_mode_name(enum net_tx_mode m)
{
	return (unsigned)m < NET_TX_NR ? net_tx_choices[m].name : "?";
}

/* ---- the keys' own parsers (OPT_FN), each wording its errors ---- */

static const struct opt_choice net_modes[] = {
	{ "tap", NET_MODE_TAP }, { "user", NET_MODE_USER }, { "none", NET_MODE_NONE }, { NULL, 0 }
};

static int key_tapif(const struct opt *k, const char *v, void *base, char *err, size_t errlen)
{
	struct net_opts *o = base;
	size_t len = strlen(v);

	if (!ifname_ok(v, len)) {
		errfmt(err, errlen, "-n %s '%s': want 1-15 characters from [A-Za-z0-9_.-]", k->name,
		       v);
		return -EINVAL;
	}
	memcpy(o->tapif, v, len + 1);
	return 0;
}

static int key_mac(const struct opt *k, const char *v, void *base, char *err, size_t errlen)
{
	struct net_opts *o = base;

	if (net_parse_mac(v, o->guest_mac)) {
		errfmt(err, errlen, "-n %s '%s': want six hex pairs like 52:54:00:12:34:56",
		       k->name, v);
		return -EINVAL;
	}
	if (o->guest_mac[0] & 1) {
		errfmt(err, errlen, "-n %s '%s': multicast bit set in the first byte", k->name, v);
		return -EINVAL;
	}
	if (!memcmp(o->guest_mac, "\0\0\0\0\0\0", 6)) {
		errfmt(err, errlen, "-n %s '%s': the all-zero address is not valid", k->name, v);
		return -EINVAL;
	}
	return 0;
}

static int key_host_ip(const struct opt *k, const char *v, void *base, char *err, size_t errlen)
{
	struct net_opts *o = base;
	char ip[INET_ADDRSTRLEN];
	u32 addr;
	int pfx;

	if (net_parse_host_ip(v, &addr, &pfx)) {
		errfmt(err, errlen, "-n %s '%s': want an IPv4 address A.B.C.D[/0-32]", k->name, v);
		return -EINVAL;
	}
	/* Stored normalised ("/24" made explicit) so later users need not guess. */
	inet_ntop(AF_INET, &addr, ip, sizeof(ip));
	snprintf(o->host_ip, sizeof(o->host_ip), "%s/%d", ip, pfx);
	return 0;
}

static int key_script(const struct opt *k, const char *v, void *base, char *err, size_t errlen)
{
	struct net_opts *o = base;
	size_t len = strlen(v);

	if (len >= sizeof(o->script)) {
		errfmt(err, errlen, "-n %s: path longer than %zu bytes", k->name,
		       sizeof(o->script) - 1);
		return -EINVAL;
	}
	memcpy(o->script, v, len + 1);
	return 0;
}

static int key_socket(const struct opt *k, const char *v, void *base, char *err, size_t errlen)
{
	struct net_opts *o = base;
	size_t len = strlen(v);

	if (len == 0 || len >= sizeof(o->socket)) {
		errfmt(err, errlen, "-n %s: want a path of 1 to %zu bytes", k->name,
		       sizeof(o->socket) - 1);
		return -EINVAL;
	}
	memcpy(o->socket, v, len + 1);
	return 0;
}

static const struct opt_choice on_off[] = { { "on", true }, { "off", false }, { NULL, 0 } };
static const struct opt_choice vhost_modes[NET_VHOST_NR + 1] = {
	[NET_VHOST_OFF] = { "off", NET_VHOST_OFF },
	[NET_VHOST_ON] = { "on", NET_VHOST_ON },
	[NET_VHOST_AUTO] = { "auto", NET_VHOST_AUTO },
};

/* A port: 1-65535 in decimal digits only (no sign, no spaces, no hex). */
static bool parse_port(const char *s, size_t len, unsigned *port)
{
	unsigned v = 0;

	if (len == 0 || len > 5)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	*port = v;
	return v >= 1 && v <= 65535;
}

/* The forward's words split at ':': PROTO, [ADDR,] HOSTPORT, GUESTPORT. */
static int split_fwd(const char *v, const char *w[4], size_t wl[4])
{
	int n = 0;

	for (const char *p = v;; p++) {
		size_t len = strcspn(p, ":");

		if (n == 4)
			return -EINVAL;
		w[n] = p;
		wl[n++] = len;
		p += len;
		if (!*p)
			break;
	}
	return n;
}

/* fwd's value into passt's spec "ADDR/HOSTPORT:GUESTPORT" (ADDR normalised, default
 * 127.0.0.1: this host's own users only). False when any part does not parse. */
static bool parse_fwd(const char *v, struct net_fwd *f, unsigned *hp)
{
	const char *w[4];
	size_t wl[4];
	int n = split_fwd(v, w, wl);
	char addr[INET_ADDRSTRLEN];
	struct in_addr a = { htonl(INADDR_LOOPBACK) };
	unsigned gp;

	if (n < 3 || wl[0] != 3 || (memcmp(w[0], "tcp", 3) && memcmp(w[0], "udp", 3)))
		return false;
	if (n == 4) {
		if (wl[1] >= sizeof(addr))
			return false;
		memcpy(addr, w[1], wl[1]);
		addr[wl[1]] = '\0';
		if (inet_pton(AF_INET, addr, &a) != 1)
			return false;
	}
	if (!parse_port(w[n - 2], wl[n - 2], hp) || !parse_port(w[n - 1], wl[n - 1], &gp))
		return false;
	f->udp = w[0][0] == 'u';
	inet_ntop(AF_INET, &a, addr, sizeof(addr));
	snprintf(f->spec, sizeof(f->spec), "%s/%u:%u", addr, *hp, gp);
	return true;
}

/* fwd=tcp|udp:[ADDR:]HOSTPORT:GUESTPORT, repeatable: a host port forwarded by passt to the
 * guest's port; the same host port and address twice is refused here, not by passt later. */
static int key_fwd(const struct opt *k, const char *v, void *base, char *err, size_t errlen)
{
	struct net_opts *o = base;
	struct net_fwd f = { 0 };
	unsigned hp;

	if (!parse_fwd(v, &f, &hp)) {
		errfmt(err, errlen,
		       "-n %s '%.80s': want tcp|udp:[ADDR:]HOSTPORT:GUESTPORT (ports 1-65535, ADDR IPv4)",
		       k->name, v);
		return -EINVAL;
	}
	if (o->nr_fwds >= NET_MAX_FWDS) {
		errfmt(err, errlen, "-n %s: at most %d forwards per NIC", k->name, NET_MAX_FWDS);
		return -EINVAL;
	}
	for (int i = 0; i < o->nr_fwds; i++) {
		if (o->fwd[i].udp == f.udp &&
		    !strncmp(o->fwd[i].spec, f.spec, strcspn(f.spec, ":") + 1)) {
			errfmt(err, errlen, "-n %s '%.80s': that %s host port is forwarded twice",
			       k->name, v, f.udp ? "udp" : "tcp");
			return -EINVAL;
		}
	}
	o->fwd[o->nr_fwds++] = f;
	return 0;
}

#define NET(member) OPT_AT(struct net_opts, member)
#define STR_(x) #x
#define STR(x) STR_(x) /* a number in the help text */

/* The keys (kvmtool's names, plus the TX strategy and passt's socket); an index is a bit of
 * net_parse_opts's `seen`. */
enum {
	K_MODE,
	K_TAPIF,
	K_MAC,
	K_HOST_IP,
	K_SCRIPT,
	K_SOCKET,
	K_IOEVENTFD,
	K_QUEUES,
	K_TX,
	K_TX_TIMER,
	K_POLL_US,
	K_BATCH,
	K_TRANS,
	K_VHOST,
	K_TRACE,
	K_FWD,
};
static const struct opt net_keys[] = {
	[K_MODE] = { "mode", 0, OPT_CHOICE, NET(mode), .choices = net_modes,
		     .help = "tap (default); user: through passt, no root\n"
			     "needed (one queue pair, no offloads); or\n"
			     "none: no NIC" },
	[K_TAPIF] = { "tapif", 0, OPT_FN, .fn = key_tapif, .arg = "NAME",
		      .help = "the tap to open or make (default: a new tapN)" },
	[K_MAC] = { "guest_mac", 0, OPT_FN, .fn = key_mac, OPT_GIVEN(struct net_opts, mac_set),
		    .arg = "MAC", .help = "the NIC's address (default 52:54:00:12:34:56)" },
	[K_HOST_IP] = { "host_ip", 0, OPT_FN, .fn = key_host_ip, .arg = "IP/PREFIX",
			.help = "the tap's IPv4 address (/24 without PREFIX)" },
	[K_SCRIPT] = { "script", 0, OPT_FN, .fn = key_script, .arg = "PATH|none",
		       .help = "run PATH IFNAME once the tap is set up" },
	[K_SOCKET] = { "socket", 0, OPT_FN, .fn = key_socket, .arg = "PATH",
		       .help = "mode=user: connect to the passt listening\n"
			       "at PATH (passt --socket PATH) instead of\n"
			       "starting one" },
	[K_IOEVENTFD] = { "ioeventfd", 0, OPT_CHOICE, NET(ioeventfd), .choices = on_off,
			  .help = "off: every notify traps to the vCPU thread" },
	[K_QUEUES] = { "queues", 0, OPT_UINT, NET(queue_pairs),
		       OPT_GIVEN(struct net_opts, queues_set), .min = 1, .max = NET_MAX_QUEUE_PAIRS,
		       .bad = "want a number from",
		       .help = "queue pairs, 1 to " STR(NET_MAX_QUEUE_PAIRS) " (default 1)" },
	[K_TX] = { "tx", 0, OPT_CHOICE, NET(tx_mode), .choices = net_tx_choices,
		   .help = "TX wake-ups: kick drains on every notify\n"
			   "(default); timer keeps notifies off for\n"
			   "tx_timer_us after one, then drains; poll\n"
			   "keeps polling the ring after draining, for an\n"
			   "adaptive window of at most poll_us, yielding\n"
			   "the CPU between looks" },
	[K_TX_TIMER] = { "tx_timer_us", 0, OPT_UINT, NET(tx_timer_us), .min = 1,
			 .max = NET_TX_US_MAX, .bad = "want microseconds from",
			 .help = "tx=timer's hold, 1 to " STR(NET_TX_US_MAX) " (default " STR(
				 NET_TX_TIMER_US_DEFAULT) ")" },
	[K_POLL_US] = { "poll_us", 0, OPT_UINT, NET(poll_us), .min = 1, .max = NET_TX_US_MAX,
			.bad = "want microseconds from",
			.help = "tx=poll's longest window, 1 to " STR(
				NET_TX_US_MAX) " (default " STR(NET_POLL_US_DEFAULT) ")" },
	[K_BATCH] = { "batch", 0, OPT_CHOICE, NET(batch), OPT_GIVEN(struct net_opts, batch_set),
		      .choices = on_off,
		      .help = "on: many frames per system call (tap:\n"
			      "io_uring, TX and RX); off (default): one per\n"
			      "frame. Where io_uring is unavailable the\n"
			      "per-frame path is used, with a warning" },
	[K_TRANS] = { "trans", 0, OPT_CHOICE, NET(trans), OPT_GIVEN(struct net_opts, trans_set),
		      .choices = virtio_trans_choices,
		      .help = "the transport (default: --virtio-transport)" },
	[K_VHOST] = { "vhost", 0, OPT_CHOICE, NET(vhost), .choices = vhost_modes,
		      .help = "mode=tap: on: the data rings served by\n"
			      "/dev/vhost-net in the kernel (an error\n"
			      "without it); auto: vhost where it opens,\n"
			      "else lkvm's threads; off (default): lkvm's" },
	[K_TRACE] = { "trace", 0, OPT_CHOICE, NET(trace), .choices = on_off,
		      .help = "on: time each stage of a bench rr round\n"
			      "trip from the stamps in its frames (group\n"
			      "trace of --stats; pair 0); off (default)" },
	[K_FWD] = { "fwd", 0, OPT_FN, .fn = key_fwd, .repeat = true, .arg = "SPEC",
		    .help = "mode=user: SPEC tcp|udp:[ADDR:]HOSTPORT:GUESTPORT,\n"
			    "passt forwards the host's port (on ADDR, an\n"
			    "IPv4 address; default 127.0.0.1) to the\n"
			    "guest's; repeatable, up to " STR(NET_MAX_FWDS) " per NIC" },
	{ .kind = OPT_END },
};
_Static_assert(ARRAY_SIZE(net_keys) <= 32, "net_parse_opts's seen bits hold every key");

const struct opt_set net_opt_set = {
	.opts = net_keys,
	.prefix = "-n ",
	.verb = "want",
	.name = "-n",
	.help_col = 20,
};

/* net_opts_defaults: what -n gives without keys. */
static void net_opts_defaults(struct net_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->mode = NET_MODE_TAP;
	o->ioeventfd = true;
	o->queue_pairs = 1;
	o->tx_mode = NET_TX_KICK;
	o->tx_timer_us = NET_TX_TIMER_US_DEFAULT;
	o->poll_us = NET_POLL_US_DEFAULT;
	/* Off until batch=on loses nothing batch=off keeps (a mergeable frame longer than the
	 * buffers posted at that moment is dropped, not held) and rr is not slower (docs/devices.md). */
	o->batch = false;
	memcpy(o->guest_mac, default_mac, sizeof(default_mac));
}

/* check_tuning: the data path's keys (seen) agree with the TX strategy and vhost. */
static int check_tuning(const struct net_opts *o, unsigned seen, char *err, size_t errlen)
{
	/* A tuning key for another strategy would be silently ignored: say so instead. */
	if ((seen & (1u << K_TX_TIMER)) && o->tx_mode != NET_TX_TIMER) {
		errfmt(err, errlen, "-n tx_timer_us: only with tx=timer (tx is %s)",
		       net_tx_mode_name(o->tx_mode));
		return -EINVAL;
	}
	if ((seen & (1u << K_POLL_US)) && o->tx_mode != NET_TX_POLL) {
		errfmt(err, errlen, "-n poll_us: only with tx=poll (tx is %s)",
		       net_tx_mode_name(o->tx_mode));
		return -EINVAL;
	}
	/* vhost-net takes a tap's fd; passt's frames go through lkvm's threads. */
	if ((seen & (1u << K_VHOST)) && o->vhost != NET_VHOST_OFF && o->mode != NET_MODE_TAP) {
		errfmt(err, errlen, "-n vhost=%s: only with mode=tap (vhost-net serves a tap)",
		       vhost_modes[o->vhost].name);
		return -EINVAL;
	}
	/* With vhost=on lkvm's TX and RX threads never run: their tuning would be ignored. */
	if (o->vhost == NET_VHOST_ON) {
		static const int lkvm_paths[] = { K_TX, K_TX_TIMER, K_POLL_US, K_BATCH, K_TRACE };

		for (size_t i = 0; i < ARRAY_SIZE(lkvm_paths); i++) {
			if (seen & (1u << lkvm_paths[i])) {
				errfmt(err, errlen,
				       "-n %s: tunes lkvm's data path, which vhost=on does not use",
				       net_keys[lkvm_paths[i]].name);
				return -EINVAL;
			}
		}
	}
	return 0;
}

/* check_backend_keys: no key (seen) of the backend mode does not use. */
static int check_backend_keys(const struct net_opts *o, unsigned seen, char *err, size_t errlen)
{
	/* The keys of the other backend would be ignored: refuse them. */
	if (o->mode == NET_MODE_USER) {
		static const int tap_only[] = { K_TAPIF, K_HOST_IP, K_SCRIPT };

		if ((seen & (1u << K_FWD)) && (seen & (1u << K_SOCKET))) {
			errfmt(err, errlen,
			       "-n fwd: only with the passt lkvm starts (a passt at socket= has its own -t/-u)");
			return -EINVAL;
		}

		for (size_t i = 0; i < ARRAY_SIZE(tap_only); i++) {
			if (seen & (1u << tap_only[i])) {
				errfmt(err, errlen,
				       "-n %s: only with mode=tap (passt's addresses are the host's)",
				       net_keys[tap_only[i]].name);
				return -EINVAL;
			}
		}
		if (o->queue_pairs > 1) {
			errfmt(err, errlen,
			       "-n queues=%d: mode=user has one queue pair (passt serves one stream)",
			       o->queue_pairs);
			return -EINVAL;
		}
	} else if (seen & (1u << K_SOCKET)) {
		errfmt(err, errlen, "-n socket: only with mode=user");
		return -EINVAL;
	} else if (seen & (1u << K_FWD)) {
		errfmt(err, errlen, "-n fwd: only with mode=user (passt forwards the ports)");
		return -EINVAL;
	}
	return 0;
}

int net_parse_opts(const char *arg, struct net_opts *o, char *err, size_t errlen)
{
	unsigned seen;
	int ret;

	net_opts_defaults(o);
	if (err && errlen)
		err[0] = '\0';

	if (!arg || !*arg) {
		errfmt(err, errlen, "-n: empty option (want e.g. mode=tap,tapif=tap0)");
		return -EINVAL;
	}
	ret = opt_parse_kv(&net_opt_set, arg, arg, o, &seen, err, errlen);
	if (ret)
		return ret;
	ret = check_tuning(o, seen, err, errlen);
	if (ret)
		return ret;
	return check_backend_keys(o, seen, err, errlen);
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
