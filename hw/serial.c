/* 16550A UART: the guest's serial console (TX to the terminal, RX FIFO fed by the input thread). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "lkvm/dev.h"
#include "lkvm/hw.h"
#include "lkvm/kvm.h"
#include "lkvm/snap.h"
#include "lkvm/term.h"

/* Register offsets; DLAB (LCR bit 7) turns 0/1 into the divisor latch. */
enum {
	UART_RBR_THR = 0,
	UART_IER = 1,
	UART_IIR_FCR = 2,
	UART_LCR = 3,
	UART_MCR = 4,
	UART_LSR = 5,
	UART_MSR = 6,
	UART_SCR = 7,
	UART_NR_PORTS = 8,
};

#define IER_ERBFI 0x01 /* RX data available */
#define IER_ETBEI 0x02 /* THR empty */
#define IER_MASK 0x0f  /* the 16550A has only these; Linux probes that the rest stay 0 */

#define IIR_NONE 0x01
#define IIR_THRE 0x02
#define IIR_RDA 0x04
#define IIR_FIFO 0xc0 /* FIFOs enabled: what tells Linux this is a 16550A */

#define FCR_ENABLE 0x01
#define FCR_CLEAR_RX 0x02
#define FCR_KEPT 0xc9 /* enable, DMA mode and the trigger level; the reset bits self-clear */

#define LCR_DLAB 0x80

#define MCR_DTR 0x01
#define MCR_RTS 0x02
#define MCR_OUT1 0x04
#define MCR_OUT2 0x08
#define MCR_LOOP 0x10
#define MCR_MASK 0x1f

#define LSR_DR 0x01
#define LSR_OE 0x02
#define LSR_THRE 0x20
#define LSR_TEMT 0x40

#define MSR_CTS 0x10
#define MSR_DSR 0x20
#define MSR_RI 0x40
#define MSR_DCD 0x80

struct serial8250 {
	struct kvm *kvm;
	u16 base;
	u32 irq;
	serial_irq_fn irq_fn;
	serial_out_fn out_fn;

	pthread_mutex_t lock; /* everything below: vCPU threads and the input thread */
	u8 ier, lcr, mcr, scr, dll, dlm, fcr;
	u8 lsr_err;	   /* overrun, sticky until LSR is read */
	bool thre_pending; /* THR-empty interrupt armed (see update_irq) */
	int irq_level;	   /* what we last told the irqchip, so we signal only edges */
	u8 rx[SERIAL_RX_FIFO_SIZE];
	unsigned rx_head, rx_count;
	bool frozen; /* paused: the receiver takes nothing (serial8250_freeze) */
};

static u8 iir_locked(const struct serial8250 *s)
{
	u8 fifo = (s->fcr & FCR_ENABLE) ? IIR_FIFO : 0;

	/* Priority: received data before THR empty (line/modem status never pend here). */
	if ((s->ier & IER_ERBFI) && s->rx_count)
		return fifo | IIR_RDA;
	if ((s->ier & IER_ETBEI) && s->thre_pending)
		return fifo | IIR_THRE;
	return fifo | IIR_NONE;
}

/* The line is a level: it follows "some enabled condition pends". Only changes reach
 * the irqchip, as a KVM_IRQ_LINE per edge. */
static void update_irq_locked(struct serial8250 *s)
{
	int level = !(iir_locked(s) & IIR_NONE);

	if (level == s->irq_level)
		return;
	s->irq_level = level;
	s->irq_fn(s->kvm, s->irq, level);
}

static bool rx_push_locked(struct serial8250 *s, u8 c)
{
	if (s->rx_count == SERIAL_RX_FIFO_SIZE)
		return false;
	s->rx[(s->rx_head + s->rx_count) % SERIAL_RX_FIFO_SIZE] = c;
	s->rx_count++;
	return true;
}

static u8 rx_pop_locked(struct serial8250 *s)
{
	u8 c;

	if (!s->rx_count)
		return 0;
	c = s->rx[s->rx_head];
	s->rx_head = (s->rx_head + 1) % SERIAL_RX_FIFO_SIZE;
	s->rx_count--;
	return c;
}

static u8 msr_locked(const struct serial8250 *s)
{
	u8 m = s->mcr;

	if (!(s->mcr & MCR_LOOP))
		return MSR_DCD | MSR_DSR | MSR_CTS; /* a host console that is always there */
	/* Loopback wires the modem outputs to the inputs: RTS->CTS, DTR->DSR,
	 * OUT1->RI, OUT2->DCD. Linux's probe checks exactly this. */
	return (u8)(((m & MCR_RTS) ? MSR_CTS : 0) | ((m & MCR_DTR) ? MSR_DSR : 0) |
		    ((m & MCR_OUT1) ? MSR_RI : 0) | ((m & MCR_OUT2) ? MSR_DCD : 0));
}

/* Returns true when `*tx` holds a byte to send once the lock is dropped. */
static bool write_locked(struct serial8250 *s, unsigned reg, u8 v, u8 *tx)
{
	bool dlab = s->lcr & LCR_DLAB;

	switch (reg) {
	case UART_RBR_THR:
		if (dlab) {
			s->dll = v;
			return false;
		}
		if (s->mcr & MCR_LOOP) {
			if (!rx_push_locked(s, v))
				s->lsr_err |= LSR_OE;
		} else {
			*tx = v;
		}
		/* The byte leaves at once, so THR is empty again right away. */
		s->thre_pending = true;
		update_irq_locked(s);
		return !(s->mcr & MCR_LOOP);
	case UART_IER:
		if (dlab) {
			s->dlm = v;
			return false;
		}
		/* Enabling ETBEI with THR empty interrupts at once (16550 behaviour that
		 * Linux's serial core relies on to start transmitting). */
		if ((v & IER_ETBEI) && !(s->ier & IER_ETBEI))
			s->thre_pending = true;
		s->ier = v & IER_MASK;
		break;
	case UART_IIR_FCR:
		if (v & FCR_CLEAR_RX)
			s->rx_head = s->rx_count = 0;
		/* Keep enable and the trigger level; the reset bits are self-clearing. */
		s->fcr = v & FCR_KEPT;
		break;
	case UART_LCR:
		s->lcr = v;
		break;
	case UART_MCR:
		s->mcr = v & MCR_MASK;
		break;
	case UART_SCR:
		s->scr = v;
		break;
	default: /* LSR and MSR are read-only */
		break;
	}
	update_irq_locked(s);
	return false;
}

static u8 read_locked(struct serial8250 *s, unsigned reg)
{
	bool dlab = s->lcr & LCR_DLAB;
	u8 v = 0;

	switch (reg) {
	case UART_RBR_THR:
		if (dlab)
			return s->dll;
		v = rx_pop_locked(s);
		break;
	case UART_IER:
		return dlab ? s->dlm : s->ier;
	case UART_IIR_FCR:
		v = iir_locked(s);
		/* Reading IIR while it reports THRE acknowledges that interrupt. */
		if ((v & 0x0f) == IIR_THRE)
			s->thre_pending = false;
		break;
	case UART_LCR:
		return s->lcr;
	case UART_MCR:
		return s->mcr;
	case UART_LSR:
		v = LSR_THRE | LSR_TEMT | (s->rx_count ? LSR_DR : 0) | s->lsr_err;
		s->lsr_err = 0;
		return v;
	case UART_MSR:
		return msr_locked(s);
	case UART_SCR:
		return s->scr;
	}
	update_irq_locked(s);
	return v;
}

static void serial_io(struct kvm_cpu *vcpu, u64 port, u8 *data, u32 len, bool is_write,
		      void *opaque)
{
	struct serial8250 *s = opaque;
	unsigned reg = (unsigned)(port - s->base);
	serial_out_fn out;
	bool send = false;
	u8 tx = 0;

	/* The registers are bytes; a wider access is a guest bug: use its low byte. */
	pthread_mutex_lock(&s->lock);
	if (is_write)
		send = write_locked(s, reg, data[0], &tx);
	else
		data[0] = read_locked(s, reg);
	out = s->out_fn;
	pthread_mutex_unlock(&s->lock);
	/* Outside the lock: the terminal may block briefly or take its own lock while its
	 * input thread is calling serial8250_receive. */
	if (send)
		out(s->kvm, &tx, 1);
}

size_t serial8250_receive(struct serial8250 *s, const u8 *buf, size_t n)
{
	size_t done = 0;

	pthread_mutex_lock(&s->lock);
	/* In loopback the receiver is disconnected from the line; while the VM is paused
	 * input waits on the host side, so no byte and no interrupt reaches the guest. */
	if (!(s->mcr & MCR_LOOP) && !s->frozen) {
		while (done < n && rx_push_locked(s, buf[done]))
			done++;
		update_irq_locked(s);
	}
	pthread_mutex_unlock(&s->lock);
	return done;
}

void serial8250_freeze(struct serial8250 *s, bool frozen)
{
	pthread_mutex_lock(&s->lock);
	s->frozen = frozen;
	pthread_mutex_unlock(&s->lock);
}

void serial8250_set_hooks(struct serial8250 *s, serial_irq_fn irq, serial_out_fn out)
{
	pthread_mutex_lock(&s->lock);
	s->irq_fn = irq ? irq : kvm_irq_line;
	s->out_fn = out ? out : term_output;
	pthread_mutex_unlock(&s->lock);
}

struct serial8250 *serial8250_create(struct kvm *kvm, u16 base, u32 irq)
{
	struct serial8250 *s = calloc(1, sizeof(*s));
	int ret;

	if (!s)
		return NULL;
	s->kvm = kvm;
	s->base = base;
	s->irq = irq;
	s->irq_fn = kvm_irq_line;
	s->out_fn = term_output;
	s->dll = 12;   /* 9600 baud, what firmware would leave behind */
	s->lcr = 0x03; /* 8N1 */
	pthread_mutex_init(&s->lock, NULL);
	ret = io_bus_register(&kvm->pio, base, UART_NR_PORTS, serial_io, s, "serial8250");
	if (ret) {
		pr_err("serial8250 at %#x: %s", base, strerror(-ret));
		pthread_mutex_destroy(&s->lock);
		free(s);
		return NULL;
	}
	return s;
}

void serial8250_destroy(struct serial8250 *s)
{
	if (!s)
		return;
	io_bus_unregister(&s->kvm->pio, s->base);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* ---- Snapshot (issue 31): one record, the registers and the receive FIFO ---- */

#define UART_SNAP_TAG DEV_SNAP_TAG_MIN

/* Bytes only, so no padding can carry garbage; the FIFO oldest byte first, zeros after
 * rx_count. The interrupt line is not saved: it follows from the rest (update_irq_locked).
 * The terminal's input not yet in the FIFO is the host's and stays behind. */
struct uart_snap {
	u8 ier, lcr, mcr, scr, dll, dlm, fcr, lsr_err;
	u8 thre_pending, rx_count, reserved[6];
	u8 rx[SERIAL_RX_FIFO_SIZE];
};
_Static_assert(sizeof(struct uart_snap) == 16 + SERIAL_RX_FIFO_SIZE, "uart_snap has no holes");

void serial8250_save(struct serial8250 *s, struct snap_rec_buf *b)
{
	struct uart_snap v;

	pthread_mutex_lock(&s->lock);
	/* The members not named here (reserved, the FIFO) start as zeros. */
	v = (struct uart_snap){ .ier = s->ier,
				.lcr = s->lcr,
				.mcr = s->mcr,
				.scr = s->scr,
				.dll = s->dll,
				.dlm = s->dlm,
				.fcr = s->fcr,
				.lsr_err = s->lsr_err,
				.thre_pending = s->thre_pending,
				.rx_count = (u8)s->rx_count };
	for (unsigned i = 0; i < s->rx_count; i++)
		v.rx[i] = s->rx[(s->rx_head + i) % SERIAL_RX_FIFO_SIZE];
	pthread_mutex_unlock(&s->lock);
	snap_rec_put(b, UART_SNAP_TAG, &v, sizeof(v));
}

/* What the register writes can leave behind, and nothing else. */
static const char *uart_snap_check(const struct uart_snap *v)
{
	static const u8 zero[sizeof(v->reserved)];

	if (v->ier & ~IER_MASK)
		return "IER has bits a 16550A does not keep";
	if (v->mcr & ~MCR_MASK)
		return "MCR has bits a 16550A does not keep";
	if (v->fcr & ~FCR_KEPT)
		return "FCR has self-clearing bits set";
	if (v->lsr_err & ~LSR_OE)
		return "LSR error bits other than overrun";
	if (v->thre_pending > 1)
		return "THR-empty pending is neither 0 nor 1";
	if (v->rx_count > SERIAL_RX_FIFO_SIZE)
		return "the receive FIFO holds more than 64 bytes";
	if (memcmp(v->reserved, zero, sizeof(zero)))
		return "reserved bytes are not zero";
	return NULL;
}

int serial8250_load(struct serial8250 *s, const void *sec, size_t len, char *err, size_t errlen)
{
	struct uart_snap v;
	const char *why;

	if (snap_rec_get(sec, len, UART_SNAP_TAG, &v, sizeof(v)) < 0) {
		errfmt(err, errlen, "the UART's register record is missing or malformed");
		return -EINVAL;
	}
	why = uart_snap_check(&v);
	if (why) {
		errfmt(err, errlen, "%s", why);
		return -EINVAL;
	}
	pthread_mutex_lock(&s->lock);
	s->ier = v.ier, s->lcr = v.lcr, s->mcr = v.mcr, s->scr = v.scr;
	s->dll = v.dll, s->dlm = v.dlm, s->fcr = v.fcr, s->lsr_err = v.lsr_err;
	s->thre_pending = v.thre_pending;
	s->rx_head = 0;
	s->rx_count = v.rx_count;
	memcpy(s->rx, v.rx, sizeof(s->rx));
	/* The line as the live code drives it: an edge to the irqchip when the restored
	 * conditions pend (the new process's source starts low), so the IOAPIC and PIC
	 * see the level the saved VM held. */
	update_irq_locked(s);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* ---- COM1 as an entry of the VM's device list ---- */

static size_t uart_input(void *dev, const u8 *buf, size_t n)
{
	return serial8250_receive(dev, buf, n);
}

static int uart_dev_init(struct kvm *kvm, struct kvm_dev *d, char *err, size_t errlen)
{
	d->priv = serial8250_create(kvm, SERIAL_COM1_BASE, SERIAL_COM1_IRQ);
	if (!d->priv)
		return -ENOMEM;
	term_set_input(kvm, uart_input, d->priv);
	return 0;
}

static void uart_dev_exit(struct kvm *kvm, struct kvm_dev *d)
{
	term_clear_input(kvm, d->priv);
	serial8250_destroy(d->priv);
}

static void uart_dev_quiesce(struct kvm_dev *d)
{
	serial8250_freeze(d->priv, true);
}

static void uart_dev_resume(struct kvm_dev *d)
{
	serial8250_freeze(d->priv, false);
}

static int uart_dev_save(struct kvm_dev *d, struct snap_rec_buf *b, char *err, size_t errlen)
{
	serial8250_save(d->priv, b);
	return 0;
}

static int uart_dev_load(struct kvm_dev *d, const void *sec, size_t len, char *err, size_t errlen)
{
	return serial8250_load(d->priv, sec, len, err, errlen);
}

static const struct kvm_dev_ops uart_dev_ops = {
	.name = "uart",
	.prio = DEV_PRIO_LEGACY,
	.init = uart_dev_init,
	.quiesce = uart_dev_quiesce,
	.resume = uart_dev_resume,
	.save = uart_dev_save,
	.load = uart_dev_load,
	.exit = uart_dev_exit,
};

int serial8250_add(struct kvm *kvm)
{
	return kvm_dev_add(kvm, &uart_dev_ops, NULL, 0);
}
