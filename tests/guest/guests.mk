# The test guests: tests/guest/NAME.c + the library in tests/guest/lib/ -> build/guests/NAME.elf
# (64-bit ELF with a PVH note at 1 MiB; lib/entry.S switches to long mode). Freestanding, no
# libc, no SSE (CR4.OSFXSR stays off), no red zone (exceptions at CPL0 use the same stack).
GUEST_DIR := tests/guest
GUEST_OUT := build/guests
GUEST_CC := gcc
GUEST_LD := ld
GUEST_LIB := $(GUEST_DIR)/lib
GUEST_SRCS := $(wildcard $(GUEST_DIR)/*.c)
GUEST_ELFS := $(GUEST_SRCS:$(GUEST_DIR)/%.c=$(GUEST_OUT)/%.elf)
GUEST_OBJS := $(GUEST_ELFS:.elf=.o)
GUEST_BZHDR := $(GUEST_LIB)/bzimage.S
GUEST_LIB_SRCS := $(filter-out $(GUEST_BZHDR),$(wildcard $(GUEST_LIB)/*.c $(GUEST_LIB)/*.S))
GUEST_LIB_OBJS := $(patsubst $(GUEST_LIB)/%,$(GUEST_OUT)/lib/%,$(addsuffix .o,$(basename $(GUEST_LIB_SRCS))))
GUEST_CFLAGS := -m64 -std=gnu11 -O2 -g -ffreestanding -nostdlib -fno-pic -fno-pie -mcmodel=small \
	-mno-red-zone -mgeneral-regs-only -fno-stack-protector -fno-asynchronous-unwind-tables \
	-fno-omit-frame-pointer -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
	-Wmissing-prototypes -Wno-unused-parameter -Wa,--fatal-warnings -Wa,--noexecstack \
	-I$(GUEST_LIB) -MMD -MP
GUEST_LDFLAGS := -m elf_x86_64 -T $(GUEST_LIB)/guest.ld -nostdlib --fatal-warnings \
	--no-warn-rwx-segments -z noexecstack --build-id=none -z max-page-size=4096

guests: $(GUEST_ELFS)

$(GUEST_OUT)/lib/%.o: $(GUEST_LIB)/%.c
	@mkdir -p $(dir $@)
	$(GUEST_CC) $(GUEST_CFLAGS) -c -o $@ $<

$(GUEST_OUT)/lib/%.o: $(GUEST_LIB)/%.S
	@mkdir -p $(dir $@)
	$(GUEST_CC) $(GUEST_CFLAGS) -c -o $@ $<

$(GUEST_OBJS): $(GUEST_OUT)/%.o: $(GUEST_DIR)/%.c
	@mkdir -p $(dir $@)
	$(GUEST_CC) $(GUEST_CFLAGS) -c -o $@ $<

$(GUEST_ELFS): $(GUEST_OUT)/%.elf: $(GUEST_OUT)/%.o $(GUEST_LIB_OBJS) $(GUEST_LIB)/guest.ld
	$(GUEST_LD) $(GUEST_LDFLAGS) -o $@ $< $(GUEST_LIB_OBJS)

# The C guests that also boot as a bzImage (Linux boot protocol, 64-bit entry; zero page and
# setup_data): lib/bzimage.S's header, sized from NAME.elf's symbols, then NAME.elf's image.
GUEST_BZIMAGES := $(GUEST_OUT)/machine.bzImage

guests: $(GUEST_BZIMAGES)

$(GUEST_BZIMAGES): $(GUEST_OUT)/%.bzImage: $(GUEST_OUT)/%.elf $(GUEST_OUT)/lib/bzimage.o
	$(GUEST_LD) -m elf_x86_64 --fatal-warnings -R $< -o $@.hdr.o $(GUEST_OUT)/lib/bzimage.o
	objcopy -O binary -j .bzhdr $@.hdr.o $@.hdr
	objcopy -O binary $< $@.img
	test "$$(stat -c %s $@.hdr)" = 1024
	cat $@.hdr $@.img > $@
	rm -f $@.hdr.o $@.hdr $@.img

.SECONDARY: $(GUEST_OBJS) $(GUEST_LIB_OBJS) $(GUEST_OUT)/lib/bzimage.o
-include $(GUEST_OBJS:.o=.d) $(GUEST_LIB_OBJS:.o=.d)
