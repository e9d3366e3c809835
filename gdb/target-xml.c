/* The x86-64 registers gdb sees: one table that writes target.xml and (de)serialises struct gdb_x86_regs in its order. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "lkvm/gdb-rsp.h"

/* The wire is little endian, and so is the struct on the only host lkvm runs on: a register is
 * its bytes in the struct, copied. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "gdb registers are copied as bytes");

enum feature { F_CORE, F_SSE, F_SYSTEM, F_COUNT };

/*
 * A feature's name and the types its registers use (gdb scopes types to their feature). The
 * first two are the ones gdb's amd64 support checks by name; the segment bases and control
 * registers are a feature of lkvm's own, as QEMU gives them one of its own: gdb shows them by
 * name (`info registers`, $cr3) without giving them a meaning.
 */
static const struct {
	const char *name;
	const char *types;
} features[F_COUNT] = {
	[F_CORE] = { "org.gnu.gdb.i386.core",
		     "<flags id=\"x86_eflags\" size=\"4\">"
		     "<field name=\"CF\" start=\"0\" end=\"0\"/><field name=\"PF\" start=\"2\" end=\"2\"/>"
		     "<field name=\"AF\" start=\"4\" end=\"4\"/><field name=\"ZF\" start=\"6\" end=\"6\"/>"
		     "<field name=\"SF\" start=\"7\" end=\"7\"/><field name=\"TF\" start=\"8\" end=\"8\"/>"
		     "<field name=\"IF\" start=\"9\" end=\"9\"/><field name=\"DF\" start=\"10\" end=\"10\"/>"
		     "<field name=\"OF\" start=\"11\" end=\"11\"/><field name=\"RF\" start=\"16\" end=\"16\"/>"
		     "<field name=\"VM\" start=\"17\" end=\"17\"/><field name=\"AC\" start=\"18\" end=\"18\"/>"
		     "<field name=\"ID\" start=\"21\" end=\"21\"/></flags>\n" },
	[F_SSE] = { "org.gnu.gdb.i386.sse",
		    "<vector id=\"v4f\" type=\"ieee_single\" count=\"4\"/>"
		    "<vector id=\"v2d\" type=\"ieee_double\" count=\"2\"/>"
		    "<vector id=\"v16i8\" type=\"int8\" count=\"16\"/>"
		    "<vector id=\"v8i16\" type=\"int16\" count=\"8\"/>"
		    "<vector id=\"v4i32\" type=\"int32\" count=\"4\"/>"
		    "<vector id=\"v2i64\" type=\"int64\" count=\"2\"/>\n"
		    "<union id=\"vec128\"><field name=\"v4_float\" type=\"v4f\"/>"
		    "<field name=\"v2_double\" type=\"v2d\"/><field name=\"v16_int8\" type=\"v16i8\"/>"
		    "<field name=\"v8_int16\" type=\"v8i16\"/><field name=\"v4_int32\" type=\"v4i32\"/>"
		    "<field name=\"v2_int64\" type=\"v2i64\"/><field name=\"uint128\" type=\"uint128\"/>"
		    "</union>\n" },
	[F_SYSTEM] = { "org.lkvm.x86.system", "" },
};

struct reg_desc {
	const char *name;
	size_t off;	   /* in struct gdb_x86_regs */
	unsigned bytes;	   /* on the wire and in the struct */
	const char *type;  /* gdb's type name */
	const char *group; /* gdb's register group, or NULL: its default for the type */
	enum feature feat;
};

#define R(n, field, t, g, f)                                               \
	{                                                                  \
		n, offsetof(struct gdb_x86_regs, field),                   \
			sizeof(((struct gdb_x86_regs *)0)->field), t, g, f \
	}
#define GPR(n, i, t) R(n, gpr[i], t, NULL, F_CORE)
#define ST(i) R("st" #i, st[i], "i387_ext", NULL, F_CORE)
#define FPU(n) R(#n, n, "int", "float", F_CORE)
#define XMM(i) R("xmm" #i, xmm[i], "vec128", NULL, F_SSE)
#define SYS(n) R(#n, n, "int64", "system", F_SYSTEM)

/*
 * gdb's register N is entry N, on the wire in this order (target.xml lists them so, features
 * in order). core and sse first, as gdb's own amd64 description orders them, so a gdb that
 * read no target.xml still finds its registers where it expects them; lkvm's system registers
 * after.
 */
static const struct reg_desc regs[] = {
	GPR("rax", 0, "int64"),
	GPR("rbx", 1, "int64"),
	GPR("rcx", 2, "int64"),
	GPR("rdx", 3, "int64"),
	GPR("rsi", 4, "int64"),
	GPR("rdi", 5, "int64"),
	GPR("rbp", 6, "data_ptr"),
	GPR("rsp", 7, "data_ptr"),
	GPR("r8", 8, "int64"),
	GPR("r9", 9, "int64"),
	GPR("r10", 10, "int64"),
	GPR("r11", 11, "int64"),
	GPR("r12", 12, "int64"),
	GPR("r13", 13, "int64"),
	GPR("r14", 14, "int64"),
	GPR("r15", 15, "int64"),
	R("rip", rip, "code_ptr", NULL, F_CORE),
	R("eflags", eflags, "x86_eflags", NULL, F_CORE),
	R("cs", seg[0], "int32", NULL, F_CORE),
	R("ss", seg[1], "int32", NULL, F_CORE),
	R("ds", seg[2], "int32", NULL, F_CORE),
	R("es", seg[3], "int32", NULL, F_CORE),
	R("fs", seg[4], "int32", NULL, F_CORE),
	R("gs", seg[5], "int32", NULL, F_CORE),
	ST(0),
	ST(1),
	ST(2),
	ST(3),
	ST(4),
	ST(5),
	ST(6),
	ST(7),
	FPU(fctrl),
	FPU(fstat),
	FPU(ftag),
	FPU(fiseg),
	FPU(fioff),
	FPU(foseg),
	FPU(fooff),
	FPU(fop),
	XMM(0),
	XMM(1),
	XMM(2),
	XMM(3),
	XMM(4),
	XMM(5),
	XMM(6),
	XMM(7),
	XMM(8),
	XMM(9),
	XMM(10),
	XMM(11),
	XMM(12),
	XMM(13),
	XMM(14),
	XMM(15),
	R("mxcsr", mxcsr, "int", "vector", F_SSE),
	SYS(fs_base),
	SYS(gs_base),
	SYS(k_gs_base),
	SYS(cr0),
	SYS(cr2),
	SYS(cr3),
	SYS(cr4),
	SYS(cr8),
	SYS(efer),
};

unsigned gdb_regs_count(void)
{
	return ARRAY_SIZE(regs);
}

size_t gdb_reg_size(unsigned n)
{
	return n < ARRAY_SIZE(regs) ? regs[n].bytes : 0;
}

size_t gdb_regs_size(void)
{
	size_t total = 0;

	for (size_t i = 0; i < ARRAY_SIZE(regs); i++)
		total += regs[i].bytes;
	return total;
}

const char *gdb_reg_name(unsigned n)
{
	return n < ARRAY_SIZE(regs) ? regs[n].name : NULL;
}

void gdb_regs_to_hex(const struct gdb_x86_regs *r, char *out)
{
	for (size_t i = 0; i < ARRAY_SIZE(regs); i++) {
		gdb_hex_encode((const u8 *)r + regs[i].off, regs[i].bytes, out);
		out += 2 * regs[i].bytes;
	}
}

int gdb_regs_from_hex(struct gdb_x86_regs *r, const char *hex, size_t len)
{
	struct gdb_x86_regs tmp = *r;
	size_t i;

	/* Decoded into a copy: a bad digit half-way changes nothing. */
	if (len % 2 || len > 2 * gdb_regs_size())
		return -EINVAL;
	for (i = 0; i < ARRAY_SIZE(regs) && len; i++) {
		size_t n = MIN(len / 2, regs[i].bytes);

		if (!gdb_hex_decode(hex, n, (u8 *)&tmp + regs[i].off))
			return -EINVAL;
		hex += 2 * n;
		len -= 2 * n;
	}
	*r = tmp;
	return 0;
}

int gdb_reg_to_hex(const struct gdb_x86_regs *r, unsigned n, char *out)
{
	if (n >= ARRAY_SIZE(regs))
		return -EINVAL;
	gdb_hex_encode((const u8 *)r + regs[n].off, regs[n].bytes, out);
	return 0;
}

int gdb_reg_from_hex(struct gdb_x86_regs *r, unsigned n, const char *hex, size_t len)
{
	u8 v[16];

	_Static_assert(sizeof(v) >= sizeof(r->xmm[0]), "the widest register fits");
	if (n >= ARRAY_SIZE(regs) || len != 2 * regs[n].bytes ||
	    !gdb_hex_decode(hex, regs[n].bytes, v))
		return -EINVAL;
	memcpy((u8 *)r + regs[n].off, v, regs[n].bytes);
	return 0;
}

/* snprintf into a buffer that may be too small, counting what would have been written. */
struct sbuf {
	char *buf;
	size_t cap, len;
};

static void __printf(2, 3) put(struct sbuf *sb, const char *fmt, ...)
{
	va_list ap;
	size_t room = sb->len < sb->cap ? sb->cap - sb->len : 0;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(room ? sb->buf + sb->len : NULL, room, fmt, ap);
	va_end(ap);
	if (n > 0)
		sb->len += (size_t)n;
}

size_t gdb_target_xml(char *buf, size_t cap)
{
	struct sbuf sb = { buf, cap, 0 };

	put(&sb, "<?xml version=\"1.0\"?>\n<!DOCTYPE target SYSTEM \"gdb-target.dtd\">\n"
		 "<target version=\"1.0\">\n<architecture>i386:x86-64</architecture>\n");
	for (int f = 0; f < F_COUNT; f++) {
		put(&sb, "<feature name=\"%s\">\n%s", features[f].name, features[f].types);
		for (size_t i = 0; i < ARRAY_SIZE(regs); i++) {
			if (regs[i].feat != (enum feature)f)
				continue;
			/* regnum pins the wire order to the table's, whatever order features take. */
			put(&sb, "<reg name=\"%s\" bitsize=\"%u\" type=\"%s\" regnum=\"%zu\"",
			    regs[i].name, regs[i].bytes * 8, regs[i].type, i);
			if (regs[i].group)
				put(&sb, " group=\"%s\"", regs[i].group);
			put(&sb, "/>\n");
		}
		put(&sb, "</feature>\n");
	}
	put(&sb, "</target>\n");
	if (cap)
		buf[MIN(sb.len, cap - 1)] = '\0';
	return sb.len;
}
