/* Emulated legacy devices: 8250 UART, i8042 and reset ports, RTC/CMOS, pvpanic. */
#ifndef LKVM_HW_H
#define LKVM_HW_H

#include "lkvm/util.h"

struct kvm;
struct serial8250;
struct snap_rec_buf;

/* Standard PC COM1. */
#define SERIAL_COM1_BASE 0x3f8
#define SERIAL_COM1_IRQ 4
#define SERIAL_RX_FIFO_SIZE 64

/*
 * 8250/16550A UART on 8 ports from `base`, interrupting on GSI `irq` (level semantics:
 * the line follows IER & pending conditions). Returns NULL on error. Destroy before
 * kvm->pio is destroyed.
 */
struct serial8250 *serial8250_create(struct kvm *kvm, u16 base, u32 irq);
void serial8250_destroy(struct serial8250 *s);
/* Add COM1 (SERIAL_COM1_BASE, SERIAL_COM1_IRQ) to kvm's device list ("uart"); at init it
 * takes the terminal's input (term_set_input). 0 or -ENOMEM. */
int serial8250_add(struct kvm *kvm) __must_check;

/* Host console input (any thread): queues up to the free RX FIFO space and returns how
 * many bytes were taken (0 when full, while frozen, or while the guest has the UART in
 * loopback). */
size_t serial8250_receive(struct serial8250 *s, const u8 *buf, size_t n);
/* A paused VM's UART takes no input (the terminal keeps it and tries again), so it raises
 * no interrupt; unfrozen, it takes input again. */
void serial8250_freeze(struct serial8250 *s, bool frozen);

/* Snapshot (issue 31): the registers and the receive FIFO as one record (the device list's
 * "uart" save/load ops call these). Load checks every field (-EINVAL and a one-line reason
 * in err) and then raises the interrupt line if the restored state asks for it. */
void serial8250_save(struct serial8250 *s, struct snap_rec_buf *b);
int serial8250_load(struct serial8250 *s, const void *sec, size_t len, char *err,
		    size_t errlen) __must_check;

/* Where the UART sends its interrupt and its transmitted bytes. Defaults: kvm_irq_line
 * and term_output; tests swap them to observe the device without a VM. NULL restores
 * the default. The output hook is called without the UART lock held. */
typedef int (*serial_irq_fn)(struct kvm *kvm, u32 irq, int level);
typedef void (*serial_out_fn)(struct kvm *kvm, const u8 *buf, size_t len);
void serial8250_set_hooks(struct serial8250 *s, serial_irq_fn irq, serial_out_fn out);

/* Adds to kvm's device list ("i8042"): the i8042 keyboard controller without keyboard or
 * mouse (ports 0x60/0x64; command 0xFE resets), fast reset port 0x92 and, without PCI, the
 * reset control port 0xCF9 (the PCI bus, a bus and so built first, owns 0xCF8-0xCFB and
 * forwards 0xCF9). 0 or -ENOMEM. */
int i8042_add(struct kvm *kvm) __must_check;
/* Reset control register (0xCF9) write: bit 2 set requests a reset (run ends with
 * EXIT_GUEST_OK). Shared with pci.c, which owns the port range when PCI exists. */
void hw_reset_control_write(struct kvm *kvm, u8 val);

/* Adds to kvm's device list ("rtc"): the MC146818 RTC and CMOS RAM on ports 0x70/0x71,
 * time from the host's UTC clock. 0 or -ENOMEM. */
int rtc_add(struct kvm *kvm) __must_check;

/* Adds to kvm's device list ("pvpanic"): ISA port PVPANIC_PORT and, when kvm->pci exists
 * at its init, a PCI device 1b36:0011 whose BAR 0 byte 0 behaves like the port. A guest
 * write of PANICKED ends the run with EXIT_GUEST_PANIC. 0 or -ENOMEM. */
#define PVPANIC_PANICKED (1u << 0)
#define PVPANIC_CRASH_LOADED (1u << 1)
int pvpanic_add(struct kvm *kvm) __must_check;

#endif
