/* Init's network set-up (init/net.c): the loopback, and each NIC lkvm named up, by DHCP where asked. */
#ifndef LKVM_INIT_NET_H
#define LKVM_INIT_NET_H

#include "lkvm/initcfg.h"

/* Brings lo up, then each of c's NICs (found by MAC): only up, or configured from a DHCP
 * lease (address, netmask, default route, /etc/resolv.conf). Nothing here is fatal: CMD runs
 * without the network it could not have, after one line through log saying why. */
void init_net(const struct initcfg *c,
	      void (*log)(const char *fmt, ...) __attribute__((format(printf, 1, 2))));

#endif
