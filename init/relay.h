/* lkvm-init's output relays: CMD's stdout or stderr as a pipe that a child of init empties into a virtio-serial port. */
#ifndef LKVM_INIT_RELAY_H
#define LKVM_INIT_RELAY_H

#include <sys/types.h>

/*
 * A virtio-serial port can be open only once (Linux's virtio_console refuses a second open
 * with EBUSY), so CMD could not reopen a port given as its stdout (`echo x > /dev/stdout`,
 * `> /dev/stderr`, /proc/self/fd/1). CMD gets a pipe instead, which reopens as on the host,
 * and a relay process copies it to the port in big blocks (the port's writes still do not
 * wait for lkvm). Forks the relay for `port`; returns the pipe's write end for CMD
 * (close-on-exec: CMD dup2s it) and the relay's pid in *pid, or -errno. `other` is a
 * descriptor the relay must not keep (another relay's write end), or -1.
 */
int relay_start(int port, int other, pid_t *pid);
/* After CMD ended: the relay copies what the pipe holds, without waiting for writers that
 * outlive CMD (a background job keeping the pipe open), and exits; reaped here. pid 0: none. */
void relay_finish(pid_t pid);

#endif
