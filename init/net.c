/* Init's network set-up: lo up, each NIC lkvm named up, and by DHCP (passt answers it) its address, route and DNS. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <netpacket/packet.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dhcp.h"
#include "net.h"

#define ETH_P_IP_ 0x0800
/* How long each DHCP step waits for its answer: the first send may precede the link's, so
 * the wait starts short and doubles; passt answers at once when it runs at all. */
#define DHCP_FIRST_WAIT_MS 250
#define DHCP_MAX_WAIT_MS 2000
#define DHCP_DEADLINE_MS 8000

typedef void (*log_fn)(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int if_up(int s, const char *name)
{
	struct ifreq r = { 0 };

	snprintf(r.ifr_name, sizeof(r.ifr_name), "%s", name);
	if (ioctl(s, SIOCGIFFLAGS, &r))
		return -errno;
	r.ifr_flags |= IFF_UP;
	return ioctl(s, SIOCSIFFLAGS, &r) ? -errno : 0;
}

/* The interface whose MAC is mac: its name in name (IFNAMSIZ) and its index. */
static int find_nic(int s, const uint8_t mac[6], char *name)
{
	struct if_nameindex *all = if_nameindex(), *i;
	int idx = -ENODEV;

	if (!all)
		return -errno;
	for (i = all; i->if_index && idx < 0; i++) {
		struct ifreq r = { 0 };

		snprintf(r.ifr_name, sizeof(r.ifr_name), "%s", i->if_name);
		if (!ioctl(s, SIOCGIFHWADDR, &r) && !memcmp(r.ifr_hwaddr.sa_data, mac, 6)) {
			snprintf(name, IFNAMSIZ, "%s", i->if_name);
			idx = (int)i->if_index;
		}
	}
	if_freenameindex(all);
	return idx;
}

/* Sends a DISCOVER or REQUEST on the packet socket p and waits for the reply of type want
 * (or a NAK), resending with a doubling wait until DHCP_DEADLINE_MS from start. */
static int exchange(int p, int ifindex, const uint8_t mac[6], uint32_t xid, int type,
		    struct dhcp_lease *l, int want, long start)
{
	struct sockaddr_ll to = { .sll_family = AF_PACKET,
				  .sll_protocol = htons(ETH_P_IP_),
				  .sll_ifindex = ifindex,
				  .sll_halen = 6 };
	uint8_t out[DHCP_PKT_MAX], in[1600];
	size_t n = dhcp_build(out, type, mac, xid, l);
	int wait = DHCP_FIRST_WAIT_MS;

	memset(to.sll_addr, 0xff, 6);
	while (now_ms() - start < DHCP_DEADLINE_MS) {
		long end = now_ms() + wait;
		struct pollfd pf = { .fd = p, .events = POLLIN };

		if (sendto(p, out, n, 0, (struct sockaddr *)&to, sizeof(to)) < 0 &&
		    errno != ENETDOWN)
			return -errno;
		for (long left; (left = end - now_ms()) > 0;) {
			ssize_t r;

			if (poll(&pf, 1, (int)left) <= 0)
				continue;
			r = recv(p, in, sizeof(in), 0);
			/* Anything else on the wire (another protocol, another client) is skipped. */
			if (r > 0 && !dhcp_parse(in, (size_t)r, mac, xid, l) &&
			    (l->type == want || l->type == DHCP_NAK))
				return l->type == want ? 0 : -ECONNREFUSED;
		}
		wait = wait * 2 > DHCP_MAX_WAIT_MS ? DHCP_MAX_WAIT_MS : wait * 2;
	}
	return -ETIMEDOUT;
}

/* DISCOVER, OFFER, REQUEST, ACK: the lease in *l. */
static int dhcp(int ifindex, const uint8_t mac[6], struct dhcp_lease *l)
{
	struct sockaddr_ll me = { .sll_family = AF_PACKET,
				  .sll_protocol = htons(ETH_P_IP_),
				  .sll_ifindex = ifindex };
	uint32_t xid = (uint32_t)now_ms() ^ (uint32_t)mac[5] << 24 ^ (uint32_t)mac[4] << 16;
	long start = now_ms();
	int p = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_IP_)), ret;

	if (p < 0)
		return -errno;
	ret = bind(p, (struct sockaddr *)&me, sizeof(me)) ? -errno : 0;
	if (!ret)
		ret = exchange(p, ifindex, mac, xid, DHCP_DISCOVER, l, DHCP_OFFER, start);
	if (!ret && !l->addr)
		ret = -EPROTO;
	if (!ret)
		ret = exchange(p, ifindex, mac, xid, DHCP_REQUEST, l, DHCP_ACK, start);
	close(p);
	return ret;
}

static void set_in(struct sockaddr *sa, uint32_t addr)
{
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_addr.s_addr = addr };

	memcpy(sa, &in, sizeof(in));
}

/* The lease's address, netmask and default route on name. */
static int configure(int s, const char *name, const struct dhcp_lease *l)
{
	struct ifreq r = { 0 };
	struct rtentry rt = { 0 };

	snprintf(r.ifr_name, sizeof(r.ifr_name), "%s", name);
	set_in(&r.ifr_addr, l->addr);
	if (ioctl(s, SIOCSIFADDR, &r))
		return -errno;
	if (l->mask) {
		set_in(&r.ifr_netmask, l->mask);
		if (ioctl(s, SIOCSIFNETMASK, &r))
			return -errno;
	}
	if (!l->router)
		return 0;
	set_in(&rt.rt_dst, 0);
	set_in(&rt.rt_genmask, 0);
	set_in(&rt.rt_gateway, l->router);
	rt.rt_flags = RTF_UP | RTF_GATEWAY;
	rt.rt_dev = (char *)name;
	return ioctl(s, SIOCADDRT, &rt) && errno != EEXIST ? -errno : 0;
}

/* The lease's name servers in the guest's /etc/resolv.conf: the overlay's own file (the host's
 * may be a symlink into /run, a tmpfs of the guest's here, so it is replaced, not written
 * through). */
static int write_resolv(const struct dhcp_lease *l)
{
	char line[64], a[INET_ADDRSTRLEN];
	int fd, ret = 0;

	if (!l->nr_dns)
		return 0;
	mkdir("/etc", 0755);
	if (unlink("/etc/resolv.conf") && errno != ENOENT)
		return -errno;
	fd = open("/etc/resolv.conf", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	for (unsigned i = 0; i < l->nr_dns && !ret; i++) {
		int n = snprintf(line, sizeof(line), "nameserver %s\n",
				 inet_ntop(AF_INET, &l->dns[i], a, sizeof(a)));

		if (write(fd, line, (size_t)n) != n)
			ret = -EIO;
	}
	close(fd);
	return ret;
}

static void nic_dhcp(int s, int idx, const char *name, const uint8_t mac[6], log_fn log)
{
	struct dhcp_lease l;
	char a[INET_ADDRSTRLEN];
	int ret = dhcp(idx, mac, &l);

	if (ret) {
		log("%s: no DHCP lease (%s): it stays up without an address", name,
		    ret == -ETIMEDOUT ? "no answer in 8 s" : strerror(-ret));
		return;
	}
	ret = configure(s, name, &l);
	if (ret) {
		log("%s: configuring %s from DHCP: %s", name,
		    inet_ntop(AF_INET, &l.addr, a, sizeof(a)), strerror(-ret));
		return;
	}
	ret = write_resolv(&l);
	if (ret)
		log("/etc/resolv.conf: %s", strerror(-ret));
}

void init_net(const struct initcfg *c, log_fn log)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), ret;

	if (s < 0) {
		log("no IPv4 socket (%s): no network set up", strerror(errno));
		return;
	}
	/* The kernel gives lo 127.0.0.1 when it comes up. */
	ret = if_up(s, "lo");
	if (ret)
		log("lo: %s", strerror(-ret));
	for (size_t i = 0; i < c->nr_nics; i++) {
		const uint8_t *mac = c->nics[i].mac;
		char name[IFNAMSIZ];
		int idx = find_nic(s, mac, name);

		if (idx < 0) {
			log("no interface with MAC %02x:%02x:%02x:%02x:%02x:%02x (%s)", mac[0],
			    mac[1], mac[2], mac[3], mac[4], mac[5], strerror(-idx));
			continue;
		}
		ret = if_up(s, name);
		if (ret)
			log("%s: %s", name, strerror(-ret));
		else if (c->nics[i].how == INITCFG_NIC_DHCP)
			nic_dhcp(s, idx, name, mac, log);
	}
	close(s);
}
