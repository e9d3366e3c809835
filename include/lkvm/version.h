/* lkvm's version string: what `lkvm version`, the control socket and a snapshot's header carry. */
#ifndef LKVM_VERSION_H
#define LKVM_VERSION_H

/* The one place the version is set: the Makefile reads it (make install, the man pages), and
 * debian/changelog's first entry must match it (tests/integration/test-deb.sh). */
#ifndef LKVM_VERSION
#define LKVM_VERSION "0.1.0"
#endif

#endif
