/* lkvm's version string: what `lkvm version`, the control socket and a snapshot's header carry. */
#ifndef LKVM_VERSION_H
#define LKVM_VERSION_H

#ifndef LKVM_VERSION
#define LKVM_VERSION "0.1.0"
#endif

#endif
