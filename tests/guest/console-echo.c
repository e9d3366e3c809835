/* Guest console-echo: reads lines of terminal input from the UART or hvc0 (virtio-console) and reports each in hex, so the host sees exactly what arrived. */
#include "guest.h"

/*
 * Input comes from the virtio-console when lkvm has one (--console virtio sends terminal input
 * there and nowhere else), else from the UART. Once it reads, the guest prints
 *     GUEST console-echo: ready (hvc0|uart)
 * and then, for every line (the bytes before a '\n'):
 *     GUEST console-echo: line N len=L hex=HH...
 * with every byte as two hex digits, control bytes included (Ctrl-a arrives as 01). The line
 * "done" ends the run (exit 0), "panic" fails it through pvpanic (exit 2); any other line is
 * only reported. Everything runs at CPL0 with interrupts off: both devices are polled.
 */

#define LINE_MAX 2048

static bool hvc;

static u8 getc(void)
{
	int c;

	if (!hvc)
		return serial_getc();
	while ((c = hvc_poll()) < 0)
		cpu_relax();
	return (u8)c;
}

static void report(u64 n, const u8 *line, size_t len)
{
	static const char digits[] = "0123456789abcdef";
	char hex[2 * 64 + 1];

	gprintf("GUEST console-echo: line %llu len=%llu hex=", n, (u64)len);
	for (size_t at = 0; at < len; at += 64) {
		size_t k = 0;

		for (size_t i = at; i < len && i < at + 64; i++) {
			hex[k++] = digits[line[i] >> 4];
			hex[k++] = digits[line[i] & 15];
		}
		hex[k] = '\0';
		serial_puts(hex);
	}
	serial_puts("\n");
}

void guest_main(void)
{
	static u8 line[LINE_MAX];
	size_t len = 0;
	u64 n = 0;

	hvc = hvc_init();
	gprintf("GUEST console-echo: ready (%s)\n", hvc ? "hvc0" : "uart");
	for (;;) {
		u8 c = getc();

		if (c != '\n') {
			if (len == LINE_MAX)
				GUEST_FAIL("a line longer than %d bytes", LINE_MAX);
			line[len++] = c;
			continue;
		}
		report(++n, line, len);
		if (len == 4 && !memcmp(line, "done", 4))
			return;
		if (len == 5 && !memcmp(line, "panic", 5)) {
			/* A panic, not an assertion: test-console's restore-panic wants pvpanic's 2. */
			gprintf("GUEST FAIL %s:%d: panic requested from the console\n", __FILE__,
				__LINE__);
			guest_panic();
		}
		len = 0;
	}
}
