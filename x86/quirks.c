/* Host detection for the PVM flavour of KVM and the guest parameters that keep Linux runnable on it. */
#include <cpuid.h>
#include <unistd.h>

#include "lkvm/x86.h"

/* Each of these names an instruction family the PVM host's emulator cannot execute at
 * guest CPL0 (HOST-KVM.md); Linux then takes its fallback paths. */
const char x86_pvm_kernel_params[] =
	"noxsave nordrand no_timer_check "
	"clearcpuid=popcnt,rdrand,smap,smep,fsgsbase,avx,avx2,avx512f,bmi1,bmi2,erms,fsrm,umip,pku";

/* VMX (CPUID 1 ECX bit 5) or SVM (0x80000001 ECX bit 2) offered to this machine. */
static bool cpu_has_hw_virt(void)
{
	unsigned int a, b, c, d;

	if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1U << 5)))
		return true;
	return __get_cpuid(0x80000001, &a, &b, &c, &d) && (c & (1U << 2));
}

/* "kvm_pvm is loaded" alone is not enough: on some machines it is loaded but did not bind
 * (no /dev/kvm), and a host with VMX or SVM serves /dev/kvm through kvm_intel or kvm_amd.
 * Called once /dev/kvm is open, so the module present and no VMX/SVM means kvm_pvm serves it. */
bool x86_host_is_pvm(void)
{
	return access("/sys/module/kvm_pvm", F_OK) == 0 && !cpu_has_hw_virt();
}
