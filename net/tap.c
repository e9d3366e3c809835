/* The tap backend: /dev/net/tun with IFF_VNET_HDR (12-byte header), multiqueue, host-side setup. */
#include <arpa/inet.h>
#include <cap-ng.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <linux/virtio_net.h>
#include <netinet/in.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lkvm/net.h"

_Static_assert(sizeof(struct virtio_net_hdr_v1) == NET_VNET_HDR_LEN, "virtio_net_hdr_v1 size");

extern char **environ;

static ssize_t tap_send(struct net_backend *be, const struct iovec *iov, int iovcnt)
{
	ssize_t n;

	do
		n = writev(be->tx_fd, iov, iovcnt);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return (errno == EAGAIN || errno == EWOULDBLOCK) ? -EAGAIN : -errno;
	return n;
}

static ssize_t tap_recv(struct net_backend *be, const struct iovec *iov, int iovcnt)
{
	ssize_t n;

	do
		n = readv(be->rx_fd, iov, iovcnt);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return (errno == EAGAIN || errno == EWOULDBLOCK) ? -EAGAIN : -errno;
	/* tun cuts a frame that does not fit and returns what it copied (tun_chr_read_iter
	 * clamps to the iov's size): the caller must offer room to spare to see a cut. */
	return n;
}

/* A tap fd has no way to ask the size of the next frame without reading it. */
static ssize_t tap_peek_len(struct net_backend *be)
{
	return -ENOTSUP;
}

static int tap_set_offloads(struct net_backend *be, const struct net_offloads *off)
{
	unsigned long flags = 0;

	if (off->csum) {
		flags |= TUN_F_CSUM;
		if (off->tso4)
			flags |= TUN_F_TSO4;
		if (off->tso6)
			flags |= TUN_F_TSO6;
		if (off->ecn && (off->tso4 || off->tso6))
			flags |= TUN_F_TSO_ECN;
		if (off->ufo)
			flags |= TUN_F_UFO;
	}
	if (ioctl(be->rx_fd, TUNSETOFFLOAD, flags) == 0)
		return 0;
	/* Some kernels refuse UFO; the guest then simply receives no UFO frames. */
	if (errno == EINVAL && (flags & TUN_F_UFO) &&
	    ioctl(be->rx_fd, TUNSETOFFLOAD, flags & ~(unsigned long)TUN_F_UFO) == 0)
		return 0;
	return -errno;
}

/*
 * One queue of a multiqueue tap in or out of the kernel's steering (tun_set_queue): a
 * detached queue is given no frames and its ring is purged; writes through it still reach
 * the host (tun keeps the file's tun while detached). TUNSETQUEUE asks for no capability
 * and does not compare the tap's owner or group (tun_not_capable guards TUNSETIFF only;
 * Linux 6.1's tun.c, and measured on 6.18 with every capability dropped and another uid),
 * only SELinux's tun_socket attach_queue: so the re-attach works after lkvm dropped its
 * capabilities and changed user (--user), and the tap needs no TUNSETOWNER/TUNSETGROUP,
 * which would change a tap the user made. The sandbox allows it to the threads that run
 * it (sandbox.c: vcpu, net-ctl).
 */
static int tap_set_enabled(struct net_backend *be, bool on)
{
	struct ifreq ifr;

	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_flags = on ? IFF_ATTACH_QUEUE : IFF_DETACH_QUEUE;
	return ioctl(be->rx_fd, TUNSETQUEUE, &ifr) < 0 ? -errno : 0;
}

static void tap_close(struct net_backend *be)
{
	if (!be)
		return;
	if (be->rx_fd >= 0)
		close(be->rx_fd);
	free(be);
}

static const struct net_backend_ops tap_ops = {
	.name = "tap",
	.send = tap_send,
	.recv = tap_recv,
	.peek_len = tap_peek_len,
	.set_offloads = tap_set_offloads,
	.set_enabled = tap_set_enabled,
	.close = tap_close,
};

/* batch=on: io_uring rings for every queue, or none (then the per-frame path, said once:
 * info when batching was the default, a warning when it was asked for). */
static void tap_batch(const struct net_opts *o, struct net_backend **be, int n)
{
	char why[128];
	int ret = 0, i;

	if (!o->batch)
		return;
	for (i = 0; i < n && !ret; i++)
		ret = net_tap_uring_attach(be[i], why, sizeof(why));
	if (!ret)
		return;
	/* All or none: undo the queues that got rings (closing a ring leaves the tap open). */
	for (int j = 0; j < i - 1; j++)
		net_tap_uring_detach(be[j]);
	lkvm_log(o->batch_set ? LOG_WARN : LOG_INFO,
		 "tap %s: batch=on unavailable (io_uring %s): one system call per frame",
		 be[0]->ifname, why);
}

static bool have_net_admin(void)
{
	/* If the capability set cannot be read, assume yes and let the kernel decide. */
	if (capng_get_caps_process())
		return true;
	return capng_have_capability(CAPNG_EFFECTIVE, CAP_NET_ADMIN);
}

static int perm_error(int e, const char *what, char *err, size_t errlen)
{
	errfmt(err, errlen, "tap: %s needs CAP_NET_ADMIN (run as root)", what);
	return -e;
}

/* tunsetiff_error: -e, said for the tap name (empty: a new one) that TUNSETIFF refused with e. */
static int tunsetiff_error(int e, const char *name, char *err, size_t errlen)
{
	if (e == EPERM || e == EACCES)
		return perm_error(e, "creating or attaching a tap", err, errlen);
	if (e == EBUSY)
		errfmt(err, errlen,
		       "tap '%s': busy (attached elsewhere, or its "
		       "multiqueue flag differs)",
		       name);
	else if (e == EINVAL)
		errfmt(err, errlen,
		       "tap '%s': exists with other flags (not a tap, or "
		       "without vnet_hdr/multi_queue)",
		       name);
	else
		errfmt(err, errlen, "tap '%s': TUNSETIFF: %s", name[0] ? name : "(new)",
		       strerror(e));
	return -e;
}

/* Opens one queue of the tap named *name (empty: kernel picks, name filled in). */
static int tap_open_one(char name[IFNAMSIZ], bool multi, char *err, size_t errlen)
{
	struct ifreq ifr;
	unsigned int features = 0;
	int fd, hdrsz = NET_VNET_HDR_LEN, e;

	fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		e = errno;
		if (e == ENOENT || e == ENODEV || e == ENXIO)
			errfmt(err, errlen, "no /dev/net/tun: load the tun module");
		else if (e == EPERM || e == EACCES)
			return perm_error(e, "opening /dev/net/tun", err, errlen);
		else
			errfmt(err, errlen, "tap: open /dev/net/tun: %s", strerror(e));
		return -e;
	}
	if (ioctl(fd, TUNGETFEATURES, &features) == 0 &&
	    (!(features & IFF_VNET_HDR) || (multi && !(features & IFF_MULTI_QUEUE)))) {
		errfmt(err, errlen, "tap: the kernel's tun lacks %s",
		       !(features & IFF_VNET_HDR) ? "IFF_VNET_HDR" : "IFF_MULTI_QUEUE");
		close(fd);
		return -EOPNOTSUPP;
	}

	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR | (multi ? IFF_MULTI_QUEUE : 0);
	memcpy(ifr.ifr_name, name, IFNAMSIZ);
	if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
		e = errno;
		close(fd);
		return tunsetiff_error(e, name, err, errlen);
	}
	memcpy(name, ifr.ifr_name, IFNAMSIZ);
	name[IFNAMSIZ - 1] = '\0';

	/* The device always speaks virtio 1.x, whose header is 12 bytes (num_buffers
	 * included); no offloads until the guest has negotiated them. */
	if (ioctl(fd, TUNSETVNETHDRSZ, &hdrsz) < 0 || ioctl(fd, TUNSETOFFLOAD, 0UL) < 0) {
		e = errno;
		errfmt(err, errlen, "tap '%s': setting the vnet header size/offloads: %s", name,
		       strerror(e));
		close(fd);
		return -e;
	}
	return fd;
}

static int set_addr(int sock, const char *ifname, unsigned long req, u32 addr_be)
{
	struct ifreq ifr;
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = addr_be };

	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, ifname, IFNAMSIZ);
	memcpy(&ifr.ifr_addr, &sin, sizeof(sin));
	return ioctl(sock, req, &ifr) < 0 ? -errno : 0;
}

/* Brings the interface up (only if needed, so a pre-configured tap works without
 * CAP_NET_ADMIN) and assigns host_ip when given. */
static int tap_configure(const struct net_opts *o, const char *ifname, char *err, size_t errlen)
{
	struct ifreq ifr;
	int sock, ret = 0;

	sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sock < 0) {
		ret = -errno;
		errfmt(err, errlen, "tap '%s': socket: %s", ifname, strerror(-ret));
		return ret;
	}
	if (o->host_ip[0]) {
		u32 addr, mask;
		int pfx;

		if (net_parse_host_ip(o->host_ip, &addr, &pfx)) {
			errfmt(err, errlen, "tap '%s': bad host_ip '%s'", ifname, o->host_ip);
			ret = -EINVAL;
			goto out;
		}
		mask = pfx ? htonl(~0u << (32 - pfx)) : 0;
		ret = set_addr(sock, ifname, SIOCSIFADDR, addr);
		if (!ret)
			ret = set_addr(sock, ifname, SIOCSIFNETMASK, mask);
		if (ret) {
			if (ret == -EPERM || ret == -EACCES)
				ret = perm_error(-ret, "assigning host_ip", err, errlen);
			else
				errfmt(err, errlen, "tap '%s': assigning %s: %s", ifname,
				       o->host_ip, strerror(-ret));
			goto out;
		}
	}
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, ifname, IFNAMSIZ);
	if (ioctl(sock, SIOCGIFFLAGS, &ifr) < 0) {
		ret = -errno;
		errfmt(err, errlen, "tap '%s': SIOCGIFFLAGS: %s", ifname, strerror(-ret));
		goto out;
	}
	if (!(ifr.ifr_flags & IFF_UP)) {
		ifr.ifr_flags |= IFF_UP;
		if (ioctl(sock, SIOCSIFFLAGS, &ifr) < 0) {
			ret = -errno;
			if (ret == -EPERM || ret == -EACCES)
				ret = perm_error(-ret, "bringing the interface up", err, errlen);
			else
				errfmt(err, errlen, "tap '%s': bringing it up: %s", ifname,
				       strerror(-ret));
		}
	}
out:
	close(sock);
	return ret;
}

static int run_script(const char *script, const char *ifname, char *err, size_t errlen)
{
	char *argv[] = { (char *)script, (char *)ifname, NULL };
	pid_t pid;
	int status, e;

	e = posix_spawn(&pid, script, NULL, NULL, argv, environ);
	if (e) {
		errfmt(err, errlen, "tap script '%s': %s", script, strerror(e));
		return -e;
	}
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			e = errno;
			errfmt(err, errlen, "tap script '%s': waitpid: %s", script, strerror(e));
			return -e;
		}
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	if (WIFEXITED(status))
		errfmt(err, errlen, "tap script '%s %s' exited with status %d", script, ifname,
		       WEXITSTATUS(status));
	else
		errfmt(err, errlen, "tap script '%s %s' killed by signal %d", script, ifname,
		       WTERMSIG(status));
	return -EIO;
}

/* tap_backends: be[0..n), one per queue fd of the tap name; -ENOMEM with those made left in be. */
static int tap_backends(struct net_backend **be, int n, const int *fds, const char *name, char *err,
			size_t errlen)
{
	for (int i = 0; i < n; i++) {
		be[i] = calloc(1, sizeof(*be[i]));
		if (!be[i]) {
			errfmt(err, errlen, "tap: out of memory");
			return -ENOMEM;
		}
		be[i]->ops = &tap_ops;
		be[i]->rx_fd = be[i]->tx_fd = fds[i];
		memcpy(be[i]->ifname, name, sizeof(be[i]->ifname));
	}
	return 0;
}

int net_tap_open(const struct net_opts *o, struct net_backend **be, int n, char *err, size_t errlen)
{
	char name[IFNAMSIZ];
	int fds[NET_MAX_QUEUE_PAIRS];
	int i, opened = 0, ret;

	if (err && errlen)
		err[0] = '\0';
	if (o->mode != NET_MODE_TAP || n < 1 || n > NET_MAX_QUEUE_PAIRS) {
		errfmt(err, errlen, "tap: bad request (mode %d, %d queue pairs)", o->mode, n);
		return -EINVAL;
	}
	for (i = 0; i < n; i++)
		be[i] = NULL;
	/* Without CAP_NET_ADMIN only an existing tap owned by us can be attached, and only
	 * if it needs no address; say so plainly rather than surface a bare EPERM. */
	if (!have_net_admin() && (!o->tapif[0] || o->host_ip[0]))
		return perm_error(EPERM, o->tapif[0] ? "assigning host_ip" : "creating a tap", err,
				  errlen);

	memset(name, 0, sizeof(name));
	memcpy(name, o->tapif, IFNAMSIZ - 1);
	for (; opened < n; opened++) {
		/* Later queues attach by the name the first one got. */
		ret = tap_open_one(name, n > 1, err, errlen);
		if (ret < 0)
			goto fail;
		fds[opened] = ret;
	}
	ret = tap_configure(o, name, err, errlen);
	if (ret)
		goto fail;
	if (o->script[0] && strcmp(o->script, "none")) {
		ret = run_script(o->script, name, err, errlen);
		if (ret)
			goto fail;
	}
	ret = tap_backends(be, n, fds, name, err, errlen);
	if (ret)
		goto fail;
	tap_batch(o, be, n);
	return 0;

fail:
	/* Closing every queue fd also deletes a tap we created (it is not persistent). */
	for (i = 0; i < n; i++) {
		free(be[i]);
		be[i] = NULL;
	}
	for (i = 0; i < opened; i++)
		close(fds[i]);
	return ret;
}
