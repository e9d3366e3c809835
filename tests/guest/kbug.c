/* Kernel-bug lines on the console for --fail-on: kbug=warning|panic|hostile|none picks what is printed before the guest ends. */
#include "guest.h"

/* What Linux prints, as test-c-guests.sh's kbug cases expect it: a WARN_ON's line, a panic's
 * line followed by pvpanic (as Linux's notifier does), a WARNING line with control bytes and
 * 600 bytes long (the report escapes and bounds it), or nothing of a bug. The guest then ends
 * with its own status 0 (guest_done), or the panic. */
void guest_main(void)
{
	char what[16] = "none";

	cmdline_get("kbug", what, sizeof(what));
	gprintf("GUEST kbug: %s\n", what);
	if (!strcmp(what, "warning")) {
		gprintf("[    1.000000] WARNING: CPU: 0 PID: 1 at tests/guest/kbug.c:%d guest_main\n",
			__LINE__);
	} else if (!strcmp(what, "panic")) {
		gprintf("[    1.000000] Kernel panic - not syncing: kbug\n");
		guest_panic();
	} else if (!strcmp(what, "hostile")) {
		serial_puts("[    1.000000] WARNING: \x1b[2J\x07");
		for (int i = 0; i < 60; i++)
			serial_puts("0123456789");
		serial_puts("\r\n");
	}
	guest_done();
}
