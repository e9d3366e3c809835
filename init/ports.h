/* lkvm-init's virtio-serial ports: a port of lkvm's found by its name and opened. */
#ifndef LKVM_INIT_PORTS_H
#define LKVM_INIT_PORTS_H

/* Opens (write-only, close-on-exec) the /dev node of the virtio-serial port named `name`
 * (/sys/class/virtio-ports/<P>/name), waiting up to wait_ms for the driver to add and name
 * it (it does so after its probe, as lkvm's control messages arrive). The fd or -errno
 * (-ENOENT: no such port in time). */
int port_open(const char *name, int wait_ms);

#endif
