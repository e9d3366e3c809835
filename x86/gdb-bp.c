/* The gdb target's pure parts: debug-register and int3 tables, the guest page walk, and the register mapping between KVM's structs and gdb's. */
#include <errno.h>
#include <string.h>

#include "lkvm/gdb-target.h"

/* DR7's fields for register n (Intel SDM vol. 3, 18.2.4): L<n> enables it, R/W<n> says on
 * what it fires (00 execute, 01 write, 11 read or write), LEN<n> how many bytes (00 1, 01 2,
 * 11 4, 10 8). Bit 10 reads as 1; GE (bit 9) as QEMU sets it, for exact data breakpoints. */
#define DR7_L(n) (1ull << (2 * (n)))
#define DR7_RW_SHIFT(n) (16 + 4 * (n))
#define DR7_LEN_SHIFT(n) (18 + 4 * (n))
#define DR7_FIXED 0x600ull

static int dr_len_bits(u64 len)
{
	switch (len) {
	case 1:
		return 0;
	case 2:
		return 1;
	case 4:
		return 3;
	case 8:
		return 2;
	}
	return -1;
}

int gdb_dr_set(struct gdb_dr *d, enum gdb_bp_kind kind, u64 addr, u64 len)
{
	if (kind == GDB_BP_SW || kind == GDB_WP_READ)
		return -EOPNOTSUPP;
	if (kind == GDB_BP_HW)
		len = 1; /* an instruction breakpoint's LEN must be 00 */
	else if (dr_len_bits(len) < 0 || (addr & (len - 1)))
		return -EINVAL;
	for (int i = 0; i < 4; i++) {
		if (d->used[i])
			continue;
		d->used[i] = true;
		d->kind[i] = kind;
		d->addr[i] = addr;
		d->len[i] = len;
		return 0;
	}
	return -ENOSPC;
}

int gdb_dr_clear(struct gdb_dr *d, enum gdb_bp_kind kind, u64 addr, u64 len)
{
	for (int i = 0; i < 4; i++) {
		if (!d->used[i] || d->kind[i] != kind || d->addr[i] != addr ||
		    (kind != GDB_BP_HW && d->len[i] != len))
			continue;
		d->used[i] = false;
		return 0;
	}
	return -ENOENT;
}

u64 gdb_dr7(const struct gdb_dr *d)
{
	u64 dr7 = 0;

	for (int i = 0; i < 4; i++) {
		u64 rw = d->kind[i] == GDB_WP_WRITE ? 1 : d->kind[i] == GDB_WP_ACCESS ? 3 : 0;

		if (!d->used[i])
			continue;
		dr7 |= DR7_L(i) | rw << DR7_RW_SHIFT(i) |
		       (u64)dr_len_bits(d->len[i]) << DR7_LEN_SHIFT(i);
	}
	return dr7 ? dr7 | DR7_FIXED : 0;
}

int gdb_dr_hit(u64 dr6)
{
	for (int i = 0; i < 4; i++)
		if (dr6 & (1ull << i))
			return i;
	return -1;
}

struct gdb_sw_bp *gdb_sw_find(struct gdb_sw_table *t, u64 gva)
{
	for (int i = 0; i < GDB_MAX_SW_BPS; i++)
		if (t->bp[i].used && t->bp[i].gva == gva)
			return &t->bp[i];
	return NULL;
}

void gdb_sw_unpatch(const struct gdb_sw_table *t, u64 gpa, u8 *buf, size_t len)
{
	for (int i = 0; i < GDB_MAX_SW_BPS; i++) {
		const struct gdb_sw_bp *b = &t->bp[i];

		if (b->used && b->gpa >= gpa && b->gpa - gpa < len)
			buf[b->gpa - gpa] = b->orig;
	}
}

#define CR0_PG (1ull << 31)
#define CR4_PSE (1ull << 4)
#define CR4_PAE (1ull << 5)
#define CR4_LA57 (1ull << 12)
#define EFER_LMA (1ull << 10)
#define PTE_P 1ull
#define PTE_PS (1ull << 7)
#define PTE_ADDR 0x000ffffffffff000ull

/* One table entry of `size` bytes, read through the checked accessor (never outside RAM). */
static int read_pte(const struct guest_mem *m, u64 gpa, unsigned size, u64 *pte)
{
	u32 e32;

	*pte = 0;
	if (size == 4) {
		if (gmem_read(m, gpa, &e32, 4) < 0)
			return -EFAULT;
		*pte = e32;
		return 0;
	}
	return gmem_read(m, gpa, pte, 8) < 0 ? -EFAULT : 0;
}

/* A walk: `levels` tables of entries `size` bytes wide, index bits from `shift` down by `bits`
 * per level; from level ps_from on (0: the top) a PS entry maps the rest at once. */
struct walk_shape {
	int levels, ps_from;
	unsigned shift, bits, size;
};

static int walk(const struct guest_mem *m, u64 table, struct walk_shape w, u64 gva, u64 *gpa)
{
	unsigned shift = w.shift, bits = w.bits, size = w.size;
	int levels = w.levels;

	for (int l = 0; l < levels; l++, shift -= bits) {
		u64 idx = (gva >> shift) & ((1ull << bits) - 1), pte;

		if (read_pte(m, table + idx * size, size, &pte) < 0 || !(pte & PTE_P))
			return -EFAULT;
		if (l == levels - 1 || (l >= w.ps_from && (pte & PTE_PS))) {
			u64 mask = (1ull << shift) - 1;

			*gpa = ((size == 4 ? pte & 0xfffff000ull : pte & PTE_ADDR) & ~mask) |
			       (gva & mask);
			return 0;
		}
		table = size == 4 ? pte & 0xfffff000ull : pte & PTE_ADDR;
	}
	return -EFAULT;
}

int gdb_walk(const struct guest_mem *m, const struct gdb_paging *p, u64 gva, u64 *gpa)
{
	u64 pdpte;

	if (!(p->cr0 & CR0_PG)) {
		*gpa = gva;
		return 0;
	}
	if (p->efer & EFER_LMA)
		return p->cr4 & CR4_LA57 ? walk(m, p->cr3 & PTE_ADDR,
						(struct walk_shape){ 5, 2, 48, 9, 8 }, gva, gpa)
					 : walk(m, p->cr3 & PTE_ADDR,
						(struct walk_shape){ 4, 1, 39, 9, 8 }, gva, gpa);
	gva &= 0xffffffffull;
	if (p->cr4 & CR4_PAE) {
		/* PAE: four PDPTEs at CR3 (32-byte aligned), then a PD and a PT as in long mode. */
		if (read_pte(m, (p->cr3 & 0xffffffe0ull) + (gva >> 30) * 8, 8, &pdpte) < 0 ||
		    !(pdpte & PTE_P))
			return -EFAULT;
		return walk(m, pdpte & PTE_ADDR, (struct walk_shape){ 2, 0, 21, 9, 8 }, gva, gpa);
	}
	if (!(p->cr4 & CR4_PSE)) {
		u64 pde;

		/* Without PSE a PDE's bit 7 means nothing: always two levels of 4 KiB. */
		if (read_pte(m, (p->cr3 & 0xfffff000ull) + (gva >> 22) * 4, 4, &pde) < 0 ||
		    !(pde & PTE_P))
			return -EFAULT;
		return walk(m, pde & 0xfffff000ull, (struct walk_shape){ 1, 1, 12, 10, 4 }, gva,
			    gpa);
	}
	return walk(m, p->cr3 & 0xfffff000ull, (struct walk_shape){ 2, 0, 22, 10, 4 }, gva, gpa);
}

/* x87 tags: FXSAVE (and so kvm_fpu) keeps one "valid" bit per register, gdb the full 2-bit
 * word; a valid register is shown as 00 (the finer zero/special kinds are not kept). */
static u32 ftag_full(u8 abridged)
{
	u32 tag = 0;

	for (int i = 0; i < 8; i++)
		tag |= (abridged & (1u << i) ? 0u : 3u) << (2 * i);
	return tag;
}

static u8 ftag_abridged(u32 full)
{
	u8 t = 0;

	for (int i = 0; i < 8; i++)
		t |= (((full >> (2 * i)) & 3) != 3) << i;
	return t;
}

void gdb_regs_from_kvm(const struct kvm_regs *r, const struct kvm_sregs *s, const struct kvm_fpu *f,
		       u64 kernel_gs_base, struct gdb_x86_regs *g)
{
	const u64 gpr[16] = { r->rax, r->rbx, r->rcx, r->rdx, r->rsi, r->rdi, r->rbp, r->rsp,
			      r->r8,  r->r9,  r->r10, r->r11, r->r12, r->r13, r->r14, r->r15 };

	memset(g, 0, sizeof(*g));
	memcpy(g->gpr, gpr, sizeof(gpr));
	g->rip = r->rip;
	g->eflags = (u32)r->rflags;
	g->seg[0] = s->cs.selector;
	g->seg[1] = s->ss.selector;
	g->seg[2] = s->ds.selector;
	g->seg[3] = s->es.selector;
	g->seg[4] = s->fs.selector;
	g->seg[5] = s->gs.selector;
	g->fs_base = s->fs.base;
	g->gs_base = s->gs.base;
	g->k_gs_base = kernel_gs_base;
	g->cr0 = s->cr0;
	g->cr2 = s->cr2;
	g->cr3 = s->cr3;
	g->cr4 = s->cr4;
	g->cr8 = s->cr8;
	g->efer = s->efer;
	for (int i = 0; i < 8; i++)
		memcpy(g->st[i], f->fpr[i], 10);
	g->fctrl = f->fcw;
	g->fstat = f->fsw;
	g->ftag = ftag_full(f->ftwx);
	g->fioff = (u32)f->last_ip;
	g->fiseg = (u32)(f->last_ip >> 32);
	g->fooff = (u32)f->last_dp;
	g->foseg = (u32)(f->last_dp >> 32);
	g->fop = f->last_opcode;
	memcpy(g->xmm, f->xmm, sizeof(g->xmm));
	g->mxcsr = f->mxcsr;
}

void gdb_regs_to_kvm(const struct gdb_x86_regs *g, struct kvm_regs *r, struct kvm_sregs *s,
		     struct kvm_fpu *f, u64 *kernel_gs_base)
{
	__u64 *gpr[16] = { &r->rax, &r->rbx, &r->rcx, &r->rdx, &r->rsi, &r->rdi, &r->rbp, &r->rsp,
			   &r->r8,  &r->r9,  &r->r10, &r->r11, &r->r12, &r->r13, &r->r14, &r->r15 };

	for (int i = 0; i < 16; i++)
		*gpr[i] = g->gpr[i];
	r->rip = g->rip;
	/* gdb's eflags is 32 bits wide; RFLAGS' upper half is reserved (zero). */
	r->rflags = g->eflags;
	/* Selectors alone: their descriptors (base, limit, attributes) stay as KVM has them,
	 * as gdb cannot send them. */
	s->cs.selector = (u16)g->seg[0];
	s->ss.selector = (u16)g->seg[1];
	s->ds.selector = (u16)g->seg[2];
	s->es.selector = (u16)g->seg[3];
	s->fs.selector = (u16)g->seg[4];
	s->gs.selector = (u16)g->seg[5];
	s->fs.base = g->fs_base;
	s->gs.base = g->gs_base;
	*kernel_gs_base = g->k_gs_base;
	s->cr0 = g->cr0;
	s->cr2 = g->cr2;
	s->cr3 = g->cr3;
	s->cr4 = g->cr4;
	s->cr8 = g->cr8;
	s->efer = g->efer;
	for (int i = 0; i < 8; i++)
		memcpy(f->fpr[i], g->st[i], 10);
	f->fcw = (u16)g->fctrl;
	f->fsw = (u16)g->fstat;
	f->ftwx = ftag_abridged(g->ftag);
	f->last_ip = (u64)g->fiseg << 32 | g->fioff;
	f->last_dp = (u64)g->foseg << 32 | g->fooff;
	f->last_opcode = (u16)g->fop;
	memcpy(f->xmm, g->xmm, sizeof(f->xmm));
	f->mxcsr = g->mxcsr;
}
