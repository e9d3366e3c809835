# The test guests: tests/guest/NAME.c + the library in tests/guest/lib/ -> build/guests/NAME.elf
# (64-bit ELF with a PVH note at 1 MiB; lib/entry.S switches to long mode). Freestanding, no
# libc, no SSE (CR4.OSFXSR stays off), no red zone (exceptions at CPL0 use the same stack).
GUEST_DIR := tests/guest
GUEST_OUT := build/guests
GUEST_CC := gcc
GUEST_LD := ld
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
	-I$(CGUEST_LIB) -Iinclude -MMD -MP
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
