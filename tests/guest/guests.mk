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

# C test guests: tests/guest/NAME.c + the library in tests/guest/lib/ -> build/guests/NAME.elf
# (64-bit ELF with a PVH note at 1 MiB; lib/entry.S switches to long mode). Freestanding, no
# libc, no SSE (CR4.OSFXSR stays off), no red zone (exceptions at CPL0 use the same stack).
CGUEST_LIB := $(GUEST_DIR)/lib
CGUEST_SRCS := $(wildcard $(GUEST_DIR)/*.c)
CGUEST_ELFS := $(CGUEST_SRCS:$(GUEST_DIR)/%.c=$(GUEST_OUT)/%.elf)
CGUEST_OBJS := $(CGUEST_ELFS:.elf=.o)
CGUEST_BZHDR := $(CGUEST_LIB)/bzimage.S
CGUEST_LIB_SRCS := $(filter-out $(CGUEST_BZHDR),$(wildcard $(CGUEST_LIB)/*.c $(CGUEST_LIB)/*.S))
CGUEST_LIB_OBJS := $(patsubst $(CGUEST_LIB)/%,$(GUEST_OUT)/lib/%,$(addsuffix .o,$(basename $(CGUEST_LIB_SRCS))))
CGUEST_CFLAGS := -m64 -std=gnu11 -O2 -g -ffreestanding -nostdlib -fno-pic -fno-pie -mcmodel=small \
	-mno-red-zone -mgeneral-regs-only -fno-stack-protector -fno-asynchronous-unwind-tables \
	-fno-omit-frame-pointer -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
	-Wmissing-prototypes -Wno-unused-parameter -Wa,--fatal-warnings -Wa,--noexecstack \
	-I$(CGUEST_LIB) -MMD -MP
CGUEST_LDFLAGS := -m elf_x86_64 -T $(CGUEST_LIB)/guest.ld -nostdlib --fatal-warnings \
	--no-warn-rwx-segments -z noexecstack --build-id=none -z max-page-size=4096

guests: $(CGUEST_ELFS)

$(GUEST_OUT)/lib/%.o: $(CGUEST_LIB)/%.c
	@mkdir -p $(dir $@)
	$(GUEST_CC) $(CGUEST_CFLAGS) -c -o $@ $<

$(GUEST_OUT)/lib/%.o: $(CGUEST_LIB)/%.S
	@mkdir -p $(dir $@)
	$(GUEST_CC) $(CGUEST_CFLAGS) -c -o $@ $<

$(CGUEST_OBJS): $(GUEST_OUT)/%.o: $(GUEST_DIR)/%.c
	@mkdir -p $(dir $@)
	$(GUEST_CC) $(CGUEST_CFLAGS) -c -o $@ $<

$(CGUEST_ELFS): $(GUEST_OUT)/%.elf: $(GUEST_OUT)/%.o $(CGUEST_LIB_OBJS) $(CGUEST_LIB)/guest.ld
	$(GUEST_LD) $(CGUEST_LDFLAGS) -o $@ $< $(CGUEST_LIB_OBJS)

# The C guests that also boot as a bzImage (Linux boot protocol, 64-bit entry; zero page and
# setup_data): lib/bzimage.S's header, sized from NAME.elf's symbols, then NAME.elf's image.
CGUEST_BZIMAGES := $(GUEST_OUT)/machine.bzImage

guests: $(CGUEST_BZIMAGES)

$(CGUEST_BZIMAGES): $(GUEST_OUT)/%.bzImage: $(GUEST_OUT)/%.elf $(GUEST_OUT)/lib/bzimage.o
	$(GUEST_LD) -m elf_x86_64 --fatal-warnings -R $< -o $@.hdr.o $(GUEST_OUT)/lib/bzimage.o
	objcopy -O binary -j .bzhdr $@.hdr.o $@.hdr
	objcopy -O binary $< $@.img
	test "$$(stat -c %s $@.hdr)" = 1024
	cat $@.hdr $@.img > $@
	rm -f $@.hdr.o $@.hdr $@.img

.SECONDARY: $(CGUEST_OBJS) $(CGUEST_LIB_OBJS) $(GUEST_OUT)/lib/bzimage.o
-include $(CGUEST_OBJS:.o=.d) $(CGUEST_LIB_OBJS:.o=.d)
