/* lkvm-exit: the port through which lkvm's guest init reports how the command ended. */
#ifndef LKVM_EXITPORT_H
#define LKVM_EXITPORT_H

#include "lkvm/util.h"

struct kvm;

/*
 * Adds the "lkvm-exit" device to kvm's device list (a legacy device: ports LKVM_EXIT_PORT..+3,
 * no interrupt, no thread); every VM has it (a test guest reports through it, run -- CMD's
 * init too), and adding it again adds nothing. A complete report ends the run through
 * kvm_request_exit with
 *   CMD (or a test guest) exited with N -> N (0-255)
 *   CMD killed by signal N     -> 128 + N (the shell's convention)
 *   init could not run CMD     -> EXIT_GUEST_NO_STATUS, the reason naming init's stage and errno
 *   a guest assertion failed   -> EXIT_GUEST_ASSERT, the reason naming its line (a number: no
 *                                 guest text reaches lkvm's messages)
 * Anything else is ignored (one rate-limited warning). Reads return 0. 0 or -ENOMEM.
 */
int exitport_add(struct kvm *kvm) __must_check;
/* The kind (enum lkvm_exit_kind) of the first valid report: whether the run's status is the
 * command's or init's failure. 0 before one, or without the device. */
unsigned exitport_report_kind(struct kvm *kvm);
/* fn(arg) runs (on a vCPU thread) when init reports LKVM_EXIT_STDIN_READY. Set at device init,
 * after the exit port's own (before any vCPU runs). 0, or -ENODEV without the device. */
int exitport_on_stdin_ready(struct kvm *kvm, void (*fn)(void *arg), void *arg) __must_check;

#endif
