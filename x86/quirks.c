/* Host detection for the PVM flavour of KVM and the guest parameters that keep Linux runnable on it. */
#include <unistd.h>

#include "lkvm/x86.h"

/* Each of these names an instruction family the PVM host's emulator cannot execute at
 * guest CPL0 (HOST-KVM.md); Linux then takes its fallback paths. */
const char x86_pvm_kernel_params[] =
	"noxsave nordrand no_timer_check "
	"clearcpuid=popcnt,rdrand,smap,smep,fsgsbase,avx,avx2,avx512f,bmi1,bmi2,erms,fsrm,umip,pku";

bool x86_host_is_pvm(void)
{
	return access("/sys/module/kvm_pvm", F_OK) == 0;
}
