/* Fuzz target: what `lkvm bench net` reads from others (bench/parse.c, bench/cpu.c): the guest's BENCH line, lkvm's --stats=json line, and /proc's stat, schedstat and /proc/stat lines. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "lkvm/bench.h"

/* Input: u8 selector, then the text (NUL-terminated here). Selector & 7 (mod 5): 0 the guest's BENCH
 * line (bit 3: under QEMU; bits 4-5: the row's test), 1 the stats line, 2 a task's stat line,
 * 3 a schedstat line, 4 /proc/stat's first line. bench_last_line runs on every text. Checked:
 * no crash, no undefined behaviour (UBSan: a guest's "frames=1e300" once converted a double out
 * of range), a name that is NUL-terminated within its buffer, counts that are what a parse can
 * give, no trace stage without a transaction. */
static const char *const tests[] = { "tx", "rx", "rr", "notify" };

static void bench_line(const char *text, unsigned sel)
{
	struct bench_row r;

	memset(&r, 0, sizeof(r));
	strcpy(r.test, tests[(sel >> 4) & 3]);
	r.size = 64;
	bench_parse_bench_line(&r, text, sel & 8);
	FUZZ_ASSERT(r.guest_frames < (1ULL << 63) && r.lost < (1ULL << 63));
	FUZZ_ASSERT(!(sel & 8) || strcmp(r.test, "notify") || r.kicks == r.guest_frames);
}

int fuzz_bench(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1), comm[16];
	unsigned sel = size ? data[0] : 0;
	const char *last;
	struct bench_row r;
	u64 v;

	FUZZ_ASSERT(text);
	if (size)
		memcpy(text, data + 1, size - 1);
	text[size ? size - 1 : 0] = '\0';
	last = bench_last_line(text, "BENCH ");
	FUZZ_ASSERT(!last || (last >= text && !strncmp(last, "BENCH ", 6)));
	switch ((sel & 7) % 5) {
	case 0:
		bench_line(text, sel);
		break;
	case 1:
		memset(&r, 0, sizeof(r));
		bench_parse_stats(&r, text);
		FUZZ_ASSERT(r.packets == r.tx_pkts + r.rx_pkts);
		/* No stage without a transaction lkvm aggregated. */
		for (int i = 0; i < BENCH_NSTAGES; i++)
			FUZZ_ASSERT(r.trace_transactions > 0 ||
				    (isnan(r.stage_p50[i]) && isnan(r.stage_p99[i])));
		break;
	case 2:
		memset(comm, 'x', sizeof(comm));
		if (bench_parse_task_stat(text, comm, sizeof(comm), &v) == 0)
			FUZZ_ASSERT(memchr(comm, '\0', sizeof(comm)));
		break;
	case 3:
		(void)!bench_parse_schedstat(text, &v);
		break;
	default:
		(void)!bench_parse_proc_stat(text, &v);
		break;
	}
	free(text);
	return 0;
}
