/* Fuzz target: --fail-on's console matcher (failon.c) on the guest's console bytes. */
#include <string.h>

#include "fuzz.h"
#include "lkvm/failon.h"

/* Input: u8 L, L bytes of a pattern of the user's (1-64, beside the default set), then
 * records of u8 length N and N console bytes, fed as one write each. */
int fuzz_failon(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	struct failon f = { 0 };
	char pat[FAILON_PATTERN_MAX + 1];
	size_t plen = fuzz_take(&in, 1) % (FAILON_PATTERN_MAX + 1);
	bool seen = false;

	plen = plen < in.left ? plen : in.left;
	memcpy(pat, in.p, plen);
	pat[plen] = '\0';
	in.p += plen;
	in.left -= plen;
	FUZZ_ASSERT(failon_add(&f, "default") == 0);
	if (strlen(pat))
		FUZZ_ASSERT(failon_add(&f, pat) == 0);
	while (in.left) {
		size_t n = fuzz_take(&in, 1);
		bool first;

		n = n < in.left ? n : in.left;
		first = failon_feed(&f, in.p, n);
		in.p += n;
		in.left -= n;
		FUZZ_ASSERT(!(first && seen)); /* one first match */
		seen |= first;
		FUZZ_ASSERT(f.len < FAILON_LINE_MAX);
		FUZZ_ASSERT(seen == f.hit);
		FUZZ_ASSERT(strlen(f.text) < FAILON_TEXT_MAX && !strpbrk(f.text, "\n\r\x1b"));
	}
	return 0;
}
