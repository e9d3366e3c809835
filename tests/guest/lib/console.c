/* C guest console: the 8250 UART at COM1 (0x3f8) and a small printf (gprintf) with the formats tests need. */
#include "guest.h"

#define COM1 0x3f8
#define COM1_IIR (COM1 + 2) /* read */
#define COM1_FCR (COM1 + 2) /* write */
#define COM1_LSR (COM1 + 5)
#define LSR_DR 0x01
#define LSR_THRE 0x20
#define FCR_ENABLE_CLEAR 0x07
#define IIR_FIFO_ON 0xc0
#define FIFO_DEPTH 16

static unsigned tx_burst; /* bytes the UART takes after THRE: 1, or 16 with the FIFO on */

/* Turns the 16550 FIFO on if there is one: one THRE poll then covers 16 bytes. At CPL3 every
 * port access is an exit (a #GP round trip on PVM hosts), so this halves what a line costs. */
void serial_init(void)
{
	outb(COM1_FCR, FCR_ENABLE_CLEAR);
	tx_burst = (inb(COM1_IIR) & IIR_FIFO_ON) == IIR_FIFO_ON ? FIFO_DEPTH : 1;
}

static void wait_thre(void)
{
	while (!(inb(COM1_LSR) & LSR_THRE))
		cpu_relax();
}

void serial_putc(char c)
{
	wait_thre();
	outb(COM1, (u8)c);
}

/* One string at a time on the wire: with several CPUs printing, lines stay whole. */
static u32 puts_lock;

void serial_puts(const char *s)
{
	unsigned burst = tx_burst ? tx_burst : 1;

	while (__atomic_exchange_n(&puts_lock, 1, __ATOMIC_ACQUIRE))
		cpu_relax();
	while (*s) {
		wait_thre();
		for (unsigned n = 0; n < burst && *s; n++)
			outb(COM1, (u8)*s++);
	}
	__atomic_store_n(&puts_lock, 0, __ATOMIC_RELEASE);
}

void serial_break_lock(void)
{
	__atomic_store_n(&puts_lock, 0, __ATOMIC_RELEASE);
}

bool serial_can_read(void)
{
	return inb(COM1_LSR) & LSR_DR;
}

u8 serial_getc(void)
{
	while (!serial_can_read())
		cpu_relax();
	return inb(COM1);
}

struct out {
	char *buf;
	size_t size, n;
};

static void emit(struct out *o, char c)
{
	if (o->n + 1 < o->size)
		o->buf[o->n] = c;
	o->n++;
}

static void emit_num(struct out *o, u64 v, unsigned base, bool neg, bool upper, int width,
		     bool zero, bool left)
{
	const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
	char tmp[24];
	int n = 0, len;

	do {
		tmp[n++] = digits[v % base];
		v /= base;
	} while (v);
	len = n + neg;
	if (neg && zero)
		emit(o, '-');
	if (!left)
		for (; width > len; width--)
			emit(o, zero ? '0' : ' ');
	if (neg && !zero)
		emit(o, '-');
	while (n)
		emit(o, tmp[--n]);
	if (left)
		for (; width > len; width--)
			emit(o, ' ');
}

int gvsnprintf(char *buf, size_t size, const char *fmt, va_list ap)
{
	struct out o = { buf, size, 0 };

	for (; *fmt; fmt++) {
		bool zero = false, left = false;
		int width = 0, longs = 0;

		if (*fmt != '%') {
			emit(&o, *fmt);
			continue;
		}
		for (fmt++; *fmt == '0' || *fmt == '-'; fmt++) {
			if (*fmt == '0')
				zero = true;
			else
				left = true;
		}
		if (left)
			zero = false;
		for (; *fmt >= '0' && *fmt <= '9'; fmt++)
			width = width * 10 + (*fmt - '0');
		for (; *fmt == 'l'; fmt++)
			longs++;
		switch (*fmt) {
		case 'd':
		case 'i': {
			s64 v = longs ? va_arg(ap, s64) : va_arg(ap, int);

			emit_num(&o, v < 0 ? -(u64)v : (u64)v, 10, v < 0, false, width, zero, left);
			break;
		}
		case 'u':
		case 'x':
		case 'X': {
			u64 v = longs ? va_arg(ap, u64) : va_arg(ap, unsigned);

			emit_num(&o, v, *fmt == 'u' ? 10 : 16, false, *fmt == 'X', width, zero,
				 left);
			break;
		}
		case 'p':
			emit(&o, '0');
			emit(&o, 'x');
			emit_num(&o, (u64)(uintptr_t)va_arg(ap, void *), 16, false, false, width,
				 zero, left);
			break;
		case 's': {
			const char *s = va_arg(ap, const char *);
			int len;

			if (!s)
				s = "(null)";
			len = (int)strlen(s);
			if (!left)
				for (; width > len; width--)
					emit(&o, ' ');
			while (*s)
				emit(&o, *s++);
			for (; width > len; width--)
				emit(&o, ' ');
			break;
		}
		case 'c':
			emit(&o, (char)va_arg(ap, int));
			break;
		case '%':
			emit(&o, '%');
			break;
		case '\0':
			fmt--;
			break;
		default: /* unknown conversion: show it as written */
			emit(&o, '%');
			emit(&o, *fmt);
			break;
		}
	}
	if (size)
		buf[o.n < size ? o.n : size - 1] = '\0';
	return (int)o.n;
}

int gsnprintf(char *buf, size_t size, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = gvsnprintf(buf, size, fmt, ap);
	va_end(ap);
	return n;
}

int gprintf(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = gvsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	serial_puts(buf);
	return n;
}
