/* Unit tests: bounded waits for what a device thread does, looking every millisecond (never a fixed sleep). */
#ifndef LKVM_TEST_WAIT_H
#define LKVM_TEST_WAIT_H

#include <poll.h>
#include <stdbool.h>

/* Evaluates cond until it holds, at most about ms milliseconds; its last value. */
#define WAIT_UNTIL(ms, cond)                           \
	({                                             \
		int left_ = (ms);                      \
		bool ok_;                              \
		while (!(ok_ = (cond)) && left_-- > 0) \
			poll(NULL, 0, 1);              \
		ok_;                                   \
	})

/* Absence, which no event can show (a paused device that must not move): cond keeps holding
 * for about ms milliseconds, looked at every millisecond. */
#define HOLDS_FOR(ms, cond) (!WAIT_UNTIL(ms, !(cond)))

#endif
