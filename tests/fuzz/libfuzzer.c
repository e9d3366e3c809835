/* libFuzzer glue: the build defines FUZZ_ENTRY as one of the fuzz_* entry points of fuzz.h. */
#include "fuzz.h"
#include "lkvm/util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	/* Warnings for hostile input are expected by the million; keep errors only. */
	lkvm_set_log_level(LOG_ERR);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return FUZZ_ENTRY(data, size);
}
