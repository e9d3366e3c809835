# Freestanding test guests: tests/guest/NAME.S (+ common.S) -> build/guests/NAME.elf (32-bit PVH ELF at 1 MiB).
GUEST_DIR := tests/guest
GUEST_OUT := build/guests
GUEST_COMMON := $(GUEST_DIR)/common.S
GUEST_SRCS := $(filter-out $(GUEST_COMMON),$(wildcard $(GUEST_DIR)/*.S))
GUEST_ELFS := $(GUEST_SRCS:$(GUEST_DIR)/%.S=$(GUEST_OUT)/%.elf)

GUEST_CC := gcc
GUEST_LD := ld
GUEST_ASFLAGS := -m32 -ffreestanding -nostdlib -fno-pic -Wall -Wextra -Werror \
	-Wa,--fatal-warnings -Wa,--noexecstack -I$(GUEST_DIR)
GUEST_LDFLAGS := -m elf_i386 -T $(GUEST_DIR)/guest.ld -nostdlib --fatal-warnings \
	--no-warn-rwx-segments -z noexecstack --build-id=none

guests: $(GUEST_ELFS)

$(GUEST_OUT)/%.o: $(GUEST_DIR)/%.S
	@mkdir -p $(GUEST_OUT)
	$(GUEST_CC) $(GUEST_ASFLAGS) -c -o $@ $<

$(GUEST_OUT)/%.elf: $(GUEST_OUT)/%.o $(GUEST_OUT)/common.o $(GUEST_DIR)/guest.ld
	$(GUEST_LD) $(GUEST_LDFLAGS) -o $@ $< $(GUEST_OUT)/common.o

.SECONDARY: $(GUEST_ELFS:.elf=.o) $(GUEST_OUT)/common.o
