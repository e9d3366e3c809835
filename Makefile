# lkvm build: `make` builds ./lkvm, `make ASAN=1` a sanitizer build under build/asan
# (`make TSAN=1`: ThreadSanitizer, build/tsan; `make build/testhooks/lkvm`: lkvm with the
# integration tests' hooks compiled in),
# `make check` runs every test, `make run` builds the guest and boots it.

CC ?= gcc
ifeq ($(origin CC),default)
CC := gcc
endif

PKGS := libfdt libaio libcap-ng libseccomp liburing
WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
	-Wformat=2 -Wno-unused-parameter -Wvla
CFLAGS ?= -O2 -g
CFLAGS += -std=gnu11 $(WARN) -Iinclude -D_GNU_SOURCE -pthread -MMD -MP
# liburing: the tap's batch path (net/tap-uring.c), through pkg-config as Debian ships it.
URING_CFLAGS := $(shell pkg-config --cflags liburing 2>/dev/null)
URING_LIBS := $(shell pkg-config --libs liburing 2>/dev/null || echo -luring)
CFLAGS += $(URING_CFLAGS)
LDLIBS += -pthread -lfdt -laio -lcap-ng -lseccomp $(URING_LIBS)

ifeq ($(ASAN),1)
BUILD := build/asan
SAN := -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer
CFLAGS += $(SAN)
LDFLAGS += $(SAN)
LKVM := $(BUILD)/lkvm
else ifeq ($(TSAN),1)
# ThreadSanitizer: the unit tests and lkvm itself (tests/integration/test-tsan.sh); reports
# are errors (TSAN_OPTIONS in the test scripts), suppressions in tests/tsan.supp.
BUILD := build/tsan
SAN := -fsanitize=thread -fno-omit-frame-pointer
CFLAGS += $(SAN)
LDFLAGS += $(SAN)
LKVM := $(BUILD)/lkvm
# A report fails the test that caused it (exit 66); see tests/tsan.supp for the
# suppressions and why each is there.
UNIT_ENV := TSAN_OPTIONS="exitcode=66 halt_on_error=0 suppressions=$(CURDIR)/tests/tsan.supp"
else
BUILD := build/obj
LKVM := lkvm
endif

# Every .c under these folders is part of the VMM library; main.c holds only main().
LIB_SRCS := $(wildcard builtin/*.c disk/*.c bench/*.c snap/*.c gdb/*.c virtio/*.c net/*.c hw/*.c x86/*.c ctl/*.c initrd/*.c) kvm.c kvm-cpu.c dev.c dev-snap.c vm-snap.c vm-dump.c elfcore.c host-root.c machine.c opt.c stats.c worker.c \
	util.c mem.c io.c iov.c term.c failon.c pause.c sandbox.c init/initcfg.c init/dhcp.c
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/init/blob.o
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
CHECK_CFLAGS = $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null || echo -lcheck)

# The version (one place: include/lkvm/version.h) and the commit built from: `git describe` when
# this is a git tree, else nothing (a tarball, a source package). builtin/version.c is compiled
# again when the commit changes: $(BUILD)/git-describe is rewritten only then.
VERSION := $(shell sed -n 's/^\#define LKVM_VERSION "\(.*\)"/\1/p' include/lkvm/version.h)
# Only a tree's own .git counts: a copy inside another checkout (tests/integration/test-deb.sh
# builds one under build/) is not that checkout's commit.
GIT_DESCRIBE := $(if $(wildcard $(CURDIR)/.git),$(shell git -C $(CURDIR) describe --always --dirty 2>/dev/null))
$(shell mkdir -p $(BUILD) && { echo '$(GIT_DESCRIBE)' | cmp -s - $(BUILD)/git-describe || \
	echo '$(GIT_DESCRIBE)' >$(BUILD)/git-describe; })
$(BUILD)/builtin/version.o: $(BUILD)/git-describe
$(BUILD)/builtin/version.o: CFLAGS += -DLKVM_GIT='"$(GIT_DESCRIBE)"'

.PHONY: all clean distclean check man install uninstall unit unit-build guests run deps tools bench fuzz fuzz-build fuzz-targets format
all: $(LKVM)

$(LKVM): $(BUILD)/main.o $(BUILD)/liblkvm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# lkvm with its test hooks (LKVM_TEST_SANDBOX_VIOLATE, sandbox.c), which the release build leaves
# out: the integration tests that use them run this binary (lib.sh's LKVM_TESTHOOKS). Only
# sandbox.c differs, so the release objects are linked again with that one file compiled with
# the hooks (given before the library, it is the one the linker takes).
build/testhooks/sandbox.o: sandbox.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DLKVM_TEST_HOOKS -c -o $@ $<
build/testhooks/lkvm: build/obj/main.o build/testhooks/sandbox.o build/obj/liblkvm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/liblkvm.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

# lkvm's guest init (init/): a static program for the guest (musl: 50 KB where glibc's static
# libc makes 700 KB), never sanitized, carried in lkvm through init/blob.S (.incbin).
INIT_CC := musl-gcc
INIT_BIN := build/init/lkvm-init
INIT_SRCS := init/lkvm-init.c init/initcfg.c init/user.c init/net.c init/dhcp.c init/ports.c init/relay.c
$(INIT_BIN): $(INIT_SRCS) include/lkvm/initcfg.h init/user.h init/net.h init/dhcp.h init/ports.h init/relay.h
	@mkdir -p $(dir $@)
	$(INIT_CC) -static -s -Os -std=gnu11 $(WARN) -Iinclude -D_GNU_SOURCE -o $@ $(INIT_SRCS)
$(BUILD)/init/blob.o: init/blob.S $(INIT_BIN)
	@mkdir -p $(dir $@)
	$(CC) -DLKVM_INIT_BIN='"$(INIT_BIN)"' -c -o $@ $<

$(BUILD)/tests/%.o: tests/unit/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(CHECK_CFLAGS) -Itests/unit -c -o $@ $<

# Objects before the library: the test's helpers (vdriver) use it too.
$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/liblkvm.a
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(filter %.a,$^) $(CHECK_LIBS) $(LDLIBS)
# The unit tests that drive a virtio device or transport through tests/unit/vdriver.c.
VNET_USERS := test_virtio_net test_virtio_net_rx test_virtio_net_tx test_virtio_net_ctrl test_virtio_net_snap
VDRIVER_USERS := $(VNET_USERS) test_virtio_blk test_virtio_console test_virtio_9p test_virtio_snap \
	test_virtio_mmio test_virtio_pci test_cmd_stdin test_virtio_fs
$(VDRIVER_USERS:%=$(BUILD)/tests/%): $(BUILD)/tests/vdriver.o
# The virtio-net tests' device, driver calls and waits (tests/unit/vnet.c).
$(VNET_USERS:%=$(BUILD)/tests/%): $(BUILD)/tests/vnet.o
# The blk tests make io_submit refuse requests (the device's synchronous fallback).
$(BUILD)/tests/test_virtio_blk: LDFLAGS += -Wl,--wrap=io_submit
# The CPUID tests answer lkvm's ioctls with a fake KVM (no /dev/kvm).
$(BUILD)/tests/test_cpuid: LDFLAGS += -Wl,--wrap=ioctl

# The gdb target's test boots tests/guest/gdb-target.c (built with the unit tests, order only).
$(BUILD)/tests/test_gdb_target: | build/guests/gdb-target.elf
# Small host-side programs the integration tests use.
TOOLS := build/tools/udp-sink build/tools/net-peer build/tools/mkinitrd build/tools/fs-posix
tools: $(TOOLS)
build/tools/%: tests/tools/%.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -std=gnu11 -Wall -Wextra -Werror -Iinclude -D_GNU_SOURCE -o $@ $<
build/tools/net-peer: include/lkvm/bench-frame.h
# lkvm's initramfs written to a file, for scripts/bench-run.sh (QEMU booting lkvm's init).
build/tools/mkinitrd: tests/tools/mkinitrd.c build/obj/liblkvm.a
	@mkdir -p $(dir $@)
	$(CC) -O2 -std=gnu11 $(WARN) -Iinclude -D_GNU_SOURCE -o $@ $< build/obj/liblkvm.a $(LDLIBS)

# Build and run the unit tests (without /dev/kvm the few that need it are reported skipped).
unit: $(UNIT_BINS)
	@$(UNIT_ENV) tests/run-unit.sh $(UNIT_BINS)
# Build them only (tests/check.sh builds everything first, then runs each stage).
unit-build: $(UNIT_BINS)

# Fuzz targets (tests/fuzz/): the entry points are plain C, so the unit test
# test_fuzz_regress links them too (built with $(CC)) and replays tests/fuzz/regress/ and
# the seed corpora through them; `make fuzz` builds each with clang's libFuzzer, ASan and
# UBSan against the library sources and runs it for FUZZ_SECONDS from its corpus.
FUZZ_TARGETS := virtqueue pci net boot opts p9 stream bench snap gdb dhcp vcon fuse qcow2 failon
FUZZ_SECONDS ?= 60
FUZZ_OBJS := $(FUZZ_TARGETS:%=$(BUILD)/tests/fuzz_%.o)
$(BUILD)/tests/fuzz_%.o: tests/fuzz/fuzz_%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/fuzz -c -o $@ $<
$(BUILD)/tests/test_fuzz_regress.o: CFLAGS += -Itests/fuzz
$(BUILD)/tests/test_fuzz_regress: $(BUILD)/tests/test_fuzz_regress.o $(FUZZ_OBJS) $(BUILD)/liblkvm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

FUZZ_DIR := build/fuzz
FUZZ_CC := clang
FUZZ_SAN := -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS := -O1 -g -std=gnu11 $(WARN) -Iinclude -Itests/fuzz -D_GNU_SOURCE -pthread $(FUZZ_SAN)
FUZZ_LIB_OBJS := $(LIB_SRCS:%.c=$(FUZZ_DIR)/obj/%.o) $(FUZZ_DIR)/obj/init/blob.o
FUZZ_BINS := $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz-%)
$(FUZZ_DIR)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -fsanitize=fuzzer-no-link -c -o $@ $<
$(FUZZ_DIR)/obj/init/blob.o: init/blob.S $(INIT_BIN)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -DLKVM_INIT_BIN='"$(INIT_BIN)"' -c -o $@ $<
$(FUZZ_DIR)/liblkvm.a: $(FUZZ_LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^
$(FUZZ_DIR)/fuzz-%: tests/fuzz/fuzz_%.c tests/fuzz/libfuzzer.c tests/fuzz/fuzz.h $(FUZZ_DIR)/liblkvm.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -DFUZZ_ENTRY=fuzz_$* -o $@ \
		tests/fuzz/fuzz_$*.c tests/fuzz/libfuzzer.c $(FUZZ_DIR)/liblkvm.a $(LDLIBS)
fuzz-build:
	@scripts/deps.sh fuzz
	@$(MAKE) -s $(FUZZ_BINS)
# Run every target for FUZZ_SECONDS from tests/fuzz/corpus/TARGET (new inputs go to
# build/fuzz/corpus/TARGET, crashes to build/fuzz/crashes/TARGET).
fuzz: fuzz-build
	@tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)
# The target list, for tests/check.sh (one list, here).
fuzz-targets:
	@echo $(FUZZ_TARGETS)

include tests/guest/guests.mk

deps:
	@scripts/deps.sh all

# The default `lkvm bench net` matrix (root, /dev/kvm): table, JSON and two SVG charts under build/bench/.
# BENCH_ARGS adds options, e.g. make bench BENCH_ARGS="--duration 2 --sizes 64".
bench: $(LKVM) guests tools
	@scripts/deps.sh bench
	@mkdir -p build/bench
	@./$(LKVM) bench net --json build/bench/net.json --svg build/bench/net.svg $(BENCH_ARGS) \
		>build/bench/net.txt; st=$$?; cat build/bench/net.txt; \
		[ $$st != 0 ] || echo "bench: wrote build/bench/net.txt, net.json, net.svg, net-cpu.svg"; exit $$st

check:
	@tests/check.sh

# Installing: lkvm (its guest init is inside it), the man pages made from its --help texts
# (scripts/mkman.sh) and the bash completion (completion/lkvm reads lkvm's help when it
# completes). Nothing is written outside $(DESTDIR). lkvm bench stays a checkout's tool: it runs
# build/guests/net-bench.elf and build/tools/net-peer (or --guest, --peer), not installed.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
COMPLETIONDIR ?= $(PREFIX)/share/bash-completion/completions
MAN_DIR := build/man
man: $(MAN_DIR)/lkvm.1
$(MAN_DIR)/lkvm.1: lkvm scripts/mkman.sh
	@rm -rf $(MAN_DIR)
	@scripts/mkman.sh ./lkvm $(MAN_DIR)
install: lkvm $(MAN_DIR)/lkvm.1
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(COMPLETIONDIR)
	install -m 0755 lkvm $(DESTDIR)$(BINDIR)/lkvm
	install -m 0644 $(MAN_DIR)/*.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 completion/lkvm $(DESTDIR)$(COMPLETIONDIR)/lkvm
# lkvm-*.1: every command's page, also after make clean (and of a command since removed).
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/lkvm $(DESTDIR)$(COMPLETIONDIR)/lkvm
	rm -f $(DESTDIR)$(MANDIR)/man1/lkvm.1 $(DESTDIR)$(MANDIR)/man1/lkvm-*.1

# Reformat every C file in the tree with .clang-format (the format stage of `make check` fails on
# any file this would change).
format:
	@git ls-files '*.c' '*.h' | xargs clang-format -i

run:
	@scripts/run.sh

clean:
	rm -rf build/obj build/asan build/tsan build/testhooks build/fuzz build/guests build/init build/man lkvm

# Also removes the cached guest kernel and initramfs (minutes to rebuild).
distclean: clean
	rm -rf build

-include $(LIB_OBJS:.o=.d) $(BUILD)/main.d $(UNIT_BINS:=.d) $(BUILD)/tests/vdriver.d $(BUILD)/tests/vnet.d $(FUZZ_OBJS:.o=.d) $(FUZZ_LIB_OBJS:.o=.d)
