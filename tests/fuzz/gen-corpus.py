#!/usr/bin/env python3
"""Writes the fuzz seed corpora tests/fuzz/corpus/TARGET/ (small, deterministic): valid inputs
that reach deep into each parser, plus a few classic malformed ones. Formats: see the comment
at the top of each tests/fuzz/fuzz_TARGET.c. Usage: tests/fuzz/gen-corpus.py [OUTDIR]"""
import os
import struct
import sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
F_NEXT, F_WRITE, F_INDIRECT = 1, 2, 4


def write(target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(bytes(data))


class Ram:
    def __init__(self, size):
        self.b = bytearray(size)

    def put(self, off, data):
        self.b[off:off + len(data)] = data

    def desc(self, base, i, addr, length, flags, nxt):
        self.put(base + 16 * i, struct.pack("<QIHH", addr, length, flags, nxt))

    def avail(self, base, idx, heads):
        self.put(base, struct.pack("<HH", 0, idx))
        for i, h in enumerate(heads):
            self.put(base + 4 + 2 * i, struct.pack("<H", h))

    def trimmed(self):
        return self.b.rstrip(b"\0")


# ---- virtqueue: 16-byte header, then RAM (desc 0x100, avail 0x200, used 0x300, data 0x800) ----
def vq(name, size, flags, rounds, bumps, fill, desc=0x100, avail=0x200, used=0x300):
    r = Ram(0x1000)
    fill(r)
    hdr = struct.pack("<HBBIII", size, flags, rounds, desc, avail, used)
    hdr = hdr[:12] + bytes(bumps)  # the last 4 header bytes double as per-round bumps
    write("virtqueue", name, hdr + r.trimmed())


def chain2(r):
    r.desc(0x100, 0, 0x800, 64, F_NEXT, 1)
    r.desc(0x100, 1, 0x900, 128, F_WRITE, 0)
    r.avail(0x200, 1, [0])


def indirect(r):
    r.desc(0x100, 0, 0xa00, 48, F_INDIRECT, 0)
    for i in range(3):
        r.desc(0xa00, i, 0x800 + 0x40 * i, 32, (F_NEXT if i < 2 else 0) | (F_WRITE if i == 2 else 0), i + 1)
    r.avail(0x200, 1, [0])


def loop(r):
    r.desc(0x100, 0, 0x800, 8, F_NEXT, 1)
    r.desc(0x100, 1, 0x808, 8, F_NEXT, 0)
    r.avail(0x200, 1, [0])


def many(r):
    for i in range(8):
        r.desc(0x100, i, 0x800 + 0x20 * i, 16, F_WRITE if i % 2 else 0, 0)
    r.avail(0x200, 8, list(range(8)))


def across_hole(r):
    # RAM below the hole ends at 3 GiB; the ring sits at base 0x100.. (gpa 3 GiB - 16 KiB + ..).
    base = 0xC0000000 - 0x4000
    r.desc(0x100, 0, base + 0x800, 64, F_NEXT, 1)
    r.desc(0x100, 1, 0xC0000000 - 32, 64, F_WRITE, 2)  # crosses into the hole: rejected
    r.desc(0x100, 2, 0x100000000, 64, F_WRITE, 0)
    r.avail(0x200, 2, [0, 2])


vq("chain2", 8, 0, 1, [0, 0, 0, 0], chain2)
vq("chain2-eventidx", 8, 1, 3, [0, 1, 1, 0], chain2)
vq("indirect", 8, 0, 1, [0, 0, 0, 0], indirect)
vq("loop", 8, 0, 1, [0, 0, 0, 0], loop)
vq("many-unpop", 8, 3, 2, [0, 3, 0, 0], many)
vq("idx-jump", 8, 0, 2, [0, 200, 0, 0], chain2)
vq("two-regions", 8, 4, 1, [0, 0, 0, 0], chain2)
vq("across-hole", 8, 4, 2, [0, 1, 0, 0], across_hole)


# ---- net: 8-byte header, then RAM (desc 0x0, avail 0x400, used 0x600, data from 0x800) ----
def net(name, mode, qlog, fbits, bumps, chains):
    r = Ram(0x2000)
    d, heads, data = 0, [], 0x800
    for bufs in chains:
        heads.append(d)
        for j, (payload, wr) in enumerate(bufs):
            r.put(data, payload)
            r.desc(0, d, data, len(payload), (F_NEXT if j + 1 < len(bufs) else 0) | (F_WRITE if wr else 0), d + 1)
            data += (len(payload) + 15) & ~15
            d += 1
    r.avail(0x400, len(heads), heads)
    write("net", name, bytes([mode, qlog, fbits, 0] + bumps) + r.trimmed())


vnet_hdr = struct.pack("<BBHHHHH", 0, 0, 0, 0, 0, 0, 1)
eth = bytes.fromhex("ffffffffffff525400123456 0806".replace(" ", "")) + bytes(46)
gso = struct.pack("<BBHHHHH", 1, 1, 34, 1448, 34, 16, 1)  # NEEDS_CSUM, TCPV4
net("tx-one", 0, 3, 0, [0, 0, 0, 0], [[(vnet_hdr + eth, False)]])
net("tx-split", 0, 3, 1, [0, 0, 0, 0], [[(vnet_hdr[:5], False), (vnet_hdr[5:] + eth[:20], False), (eth[20:], False)]])
net("tx-gso", 0, 3, 16, [0, 0, 0, 0], [[(gso + eth, False)], [(vnet_hdr, False)]])
net("tx-mq", 6, 3, 0, [0, 0, 0, 0], [[(vnet_hdr + eth, False)]])


def bench_frame(seq):
    """An rr bench frame (include/lkvm/bench-frame.h) with the guest's three TSC stamps."""
    f = bytes.fromhex("ffffffffffff525400123456 88b5".replace(" ", ""))
    f += struct.pack("<IIQQQQ", 0x42564B4C, 2, seq, 1000 * seq, 1000 * seq + 100, 1000 * seq - 900)
    return f + bytes(64 - len(f))


# -n trace=on: two transactions' frames, the second bringing the first's "seen" stamp.
net("tx-trace", 0x40 | 0x10, 3, 0, [0, 0, 0, 0], [[(vnet_hdr + bench_frame(1), False)],
                                                  [(vnet_hdr[:6], False), (vnet_hdr[6:] + bench_frame(2), False)]])


def rx(name, fbits, frames, bufs, mode=8):
    """RX: `bufs` writable buffers of these sizes, one chain each; `frames` = the pad byte."""
    r = Ram(0x4000)
    data = 0x800
    for i, size in enumerate(bufs):
        r.desc(0, i, data, size, F_WRITE, 0)
        data += (size + 15) & ~15
    r.avail(0x400, len(bufs), list(range(len(bufs))))
    write("net", name, bytes([mode, 3, fbits, frames, 0, 0, 0, 0]) + r.trimmed())


rx("rx-one", 0, 1, [1526])
rx("rx-mergeable", 4, 2 | (1 << 3), [256] * 8)          # 1514-byte frame over 256-byte buffers
rx("rx-short", 4, 3 | (3 << 3), [64, 64])                # 65550 bytes, too few buffers
rx("rx-mq-eventidx", 1, 1, [2048], mode=8 | 6)


def ctrl(name, cls, cmd, payload, fbits=8, mode=1):
    net(name, mode, 3, fbits, [0, 0, 0, 0], [[(bytes([cls, cmd]), False), (payload, False), (b"\xff", True)]])


ctrl("ctrl-promisc", 0, 0, b"\x01")
ctrl("ctrl-allmulti", 0, 1, b"\x00")
ctrl("ctrl-mac-set", 1, 1, bytes.fromhex("525400aabbcc"))
ctrl("ctrl-mac-table", 1, 0, struct.pack("<I", 1) + bytes(6) + struct.pack("<I", 2) + bytes(12))
ctrl("ctrl-mq", 4, 0, struct.pack("<H", 2), fbits=8, mode=3)
ctrl("ctrl-bad-class", 9, 0, b"")

# ---- pci: u8 setup, then operations (see fuzz_pci.c) ----
CF8, CFC = 0, 4


def cfgw(off, length, val, slot=1):
    return bytes([1, slot, off, {1: 0, 2: 1, 4: 2}[length]]) + struct.pack("<I", val)


def cfgr(off, length, slot=1):
    return bytes([0, slot, off, {1: 0, 2: 1, 4: 2}[length]])


def bar(n, off, length, wr, val=0):
    return bytes([2 if n == 0 else 3]) + struct.pack("<HBB", off, {1: 0, 2: 1, 4: 2, 8: 3}[length], 1 if wr else 0) + struct.pack("<Q", val)


def ram(gpa, val):
    return bytes([5]) + struct.pack("<HQ", gpa, val)


def port(p, length, wr, val=0):
    return bytes([4, p, {1: 0, 2: 1, 4: 2}[length], 1 if wr else 0]) + struct.pack("<I", val)


def cc(off, length, val):  # common config write
    return bar(0, off, length, True, val)


def driver_init(queues=3, msix=True):
    s = cc(0x14, 1, 0) + cc(0x14, 1, 1) + cc(0x14, 1, 3)
    s += cc(0x00, 4, 0) + bar(0, 0x04, 4, False) + cc(0x00, 4, 1) + bar(0, 0x04, 4, False)
    s += cc(0x08, 4, 0) + cc(0x0c, 4, (1 << 5) | (1 << 17) | (1 << 16) | (1 << 18))
    s += cc(0x08, 4, 1) + cc(0x0c, 4, 1) + cc(0x14, 1, 11) + bar(0, 0x14, 1, False)
    if msix:
        s += cfgw(0x98 + 2, 2, 0x8000) + cc(0x10, 2, 0)
    for q in range(queues):
        base = 0x1000 + 0x1000 * q
        s += cc(0x16, 2, q) + cc(0x18, 2, 8)
        if msix:
            s += cc(0x1a, 2, q + 1) + bar(2, 16 * (q + 1), 4, True, 0xfee00000) + bar(2, 16 * (q + 1) + 8, 4, True, 0x40 + q)
        s += cc(0x20, 4, base) + cc(0x24, 4, 0) + cc(0x28, 4, base + 0x400) + cc(0x2c, 4, 0)
        s += cc(0x30, 4, base + 0x800) + cc(0x34, 4, 0) + cc(0x1c, 2, 1)
    s += cc(0x14, 1, 15)
    return s


write("pci", "enumerate", bytes([0]) + b"".join(cfgr(o, 4, s) for s in (0, 1, 2) for o in range(0, 0x100, 4)))
write("pci", "bar-size", bytes([0]) + cfgw(0x10, 4, 0xffffffff) + cfgr(0x10, 4) + cfgw(0x10, 4, 0xd0000000) + cfgw(0x04, 2, 0) + cfgw(0x04, 2, 6))
write("pci", "port-cf8", bytes([0]) + port(CF8, 4, True, 0x80000800) + port(CFC, 4, False) + port(CF8, 4, True, 0x80000810) + port(CFC, 4, True, 0xffffffff) + port(CFC + 2, 2, False))
write("pci", "driver-ok", bytes([0]) + driver_init() + ram(0x1400 + 2, 1) + bar(0, 0x3000 + 4, 2, True, 1) + bar(0, 0x1000, 1, False) + cc(0x14, 1, 0))
write("pci", "driver-ok-mq-intx", bytes([3]) + driver_init(5, msix=False) + bar(0, 0x1000, 1, False) + bar(0, 0x2000, 4, False) + bar(0, 0x2000 + 8, 2, False))
pcicfg = cfgw(0x84 + 4, 1, 0) + cfgw(0x84 + 8, 4, 0x14) + cfgw(0x84 + 12, 4, 1) + cfgw(0x84 + 16, 1, 1) + cfgr(0x84 + 16, 1)
pcicfg += cfgw(0x84 + 8, 4, 0) + cfgw(0x84 + 12, 4, 4) + cfgr(0x84 + 16, 4)
write("pci", "pci-cfg-window", bytes([0]) + pcicfg)
msix = cfgw(0x98 + 2, 2, 0xc000) + bar(2, 0, 8, True, 0xfee00000) + bar(2, 12, 4, True, 0) + bar(2, 0x800, 8, False) + cfgw(0x98 + 2, 2, 0) + bar(2, 0x1000 - 4, 4, True, 1)
write("pci", "msix-pba", bytes([0]) + msix)

# ---- boot: image, then u8 flags, u16 initrd length ----
SETUP_SECTS, PAYLOAD = 4, 0x1000


def bzimage(version=0x020F, xload=0x3):
    b = bytearray((SETUP_SECTS + 1) * 512 + PAYLOAD)
    b[0:2] = b"MZ"
    b[0x1F1] = SETUP_SECTS
    struct.pack_into("<I", b, 0x1F4, PAYLOAD // 16)
    struct.pack_into("<H", b, 0x1FE, 0xAA55)
    struct.pack_into("<HIH", b, 0x200, 0x66EB, 0x53726448, version)
    b[0x211] = 0x01  # LOADED_HIGH
    struct.pack_into("<IIB", b, 0x22C, 0x7FFFFFFF, 0x200000, 1)
    struct.pack_into("<HI", b, 0x236, xload, 2047)
    struct.pack_into("<I", b, 0x260, 4 << 20)
    for i in range(PAYLOAD):
        b[(SETUP_SECTS + 1) * 512 + i] = (i * 7 + 1) & 0xFF
    return bytes(b)


def elf_pvh(is64=True, paddr=0x200000):
    b = bytearray(0x300)
    note = struct.pack("<III", 4, 6, 3) + b"GNU\0" + b"abcdef\0\0"
    note += struct.pack("<III", 4, 8 if is64 else 4, 18) + b"Xen\0" + struct.pack("<Q" if is64 else "<I", paddr + 0x40)
    b[0x100:0x100 + len(note)] = note
    for i in range(0x100):
        b[0x200 + i] = 0x80 + i & 0xFF
    ident = b"\x7fELF" + bytes([2 if is64 else 1, 1, 1]) + bytes(9)
    if is64:
        b[0:64] = ident + struct.pack("<HHIQQQIHHHHHH", 2, 62, 1, paddr, 64, 0, 0, 64, 56, 2, 0, 0, 0)
        ph = struct.pack("<IIQQQQQQ", 1, 0, 0x200, 0xFFFFFFFF81000000, paddr, 0x100, 0x2000, 0)
        ph += struct.pack("<IIQQQQQQ", 4, 0, 0x100, 0, 0, len(note), 0, 0)
        b[64:64 + len(ph)] = ph
    else:
        b[0:52] = ident + struct.pack("<HHIIIIIHHHHHH", 2, 3, 1, paddr, 52, 0, 0, 52, 32, 2, 0, 0, 0)
        ph = struct.pack("<IIIIIIII", 1, 0x200, paddr, paddr, 0x100, 0x2000, 0, 0)
        ph += struct.pack("<IIIIIIII", 4, 0x100, 0, 0, len(note), 0, 0, 0)
        b[52:52 + len(ph)] = ph
    return bytes(b)


def trailer(flags, ilen):
    return bytes([flags]) + struct.pack("<H", ilen)


initrd = bytes(range(256)) * 4
write("boot", "bzimage", bzimage() + trailer(0, 0))
write("boot", "bzimage-initrd", bzimage() + initrd + trailer(1, len(initrd)))
write("boot", "bzimage-old-proto", bzimage(version=0x0204, xload=0) + trailer(2, 0))
write("boot", "pvh64", elf_pvh() + trailer(8, 0))
write("boot", "pvh32-initrd", elf_pvh(False) + initrd + trailer(1, len(initrd)))
write("boot", "pvh64-long-cmdline", elf_pvh() + trailer(4, 0))

# ---- opts: NUL-separated arguments, or 0x01 then a -n value ----
def args(*a):
    return b"\0".join(x.encode() for x in a)


write("opts", "basic", args("-k", "bzImage", "-m", "512", "-c", "2", "-p", "quiet"))
write("opts", "long", args("--kernel=vmlinux", "--mem=4G", "--cpus=64", "--timeout", "120", "--exit-on", "Run /init",
                          "--quirks", "none", "--name", "ci", "--stats=json", "--no-ioeventfd", "--debug", "--console", "serial"))
write("opts", "net", args("-k", "k", "-n", "mode=tap,tapif=tap0,guest_mac=52:54:00:12:34:56,host_ip=10.0.2.1/24,script=none",
                          "-n", "mode=none,queues=8,tx=poll,poll_us=100,ioeventfd=off", "-n", "tx=timer,tx_timer_us=10000"))
write("opts", "bad", args("-k", "k", "-m", "99999999999G", "-c", "0", "--stats=xml", "-x"))
write("opts", "help", args("--help"))
write("opts", "netopt-direct", b"\x01" + b"mode=tap,tapif=averyveryverylongname,host_ip=300.1.2.3/33,guest_mac=01:00:5e:00:00:01")
write("opts", "netopt-ip", b"\x01" + b"10.0.0.1/24")

# ---- bench: u8 selector (& 7, mod 5: 0 BENCH line, bit 3 QEMU, bits 4-5 tx/rx/rr/notify; 1 stats; 2 task
# stat; 3 schedstat; 4 /proc/stat), then the text ----
write("bench", "line-tx", b"\x00" + b"BENCH tx size=64 secs=3.0 frames=2121000 pps=707000.0 mbps=362.0\n")
write("bench", "line-rr-qemu", bytes([0x28]) + b"BENCH rr size=64 secs=3.0 transactions=90000 lost=0 tps=30000.0 "
      b"lat_median_ns=30200 lat_p99_ns=61000 kicks=90000\n")
write("bench", "line-notify-qemu", bytes([0x38]) + b"BENCH notify secs=1 notifies=38100 rate=38100.0\n")
write("bench", "line-hostile", bytes([0x20]) + b"BENCH rr transactions=1e300 lost=-5 tps=nan lat_median_ns=inf\n")
write("bench", "stats", b"\x01" + b'{"exits":{"total":1234},"queues":[{"name":"tx0","packets":10,"drops":0,"kicks":3,'
      b'"trapped":0,"irqs":1,"polls":2,"poll_hits":1,"poll_us":5},{"name":"rx0","packets":9,"drops":1}]}')
# lkvm's -n trace=on: the "trace" group as a named queue row and as an object of its own, and one
# with values no parse should trust (inf, nan, out of range, no closing brace)
write("bench", "stats-trace", b"\x01" + b'{"vcpu_exits":{"total":575},"nets":[{"nic":0,"queues":[{"name":"rx0",'
      b'"packets":9,"drops":0},{"name":"tx0","packets":10,"kicks":3},{"name":"trace","transactions":9,"bad":0,'
      b'"clock_err_ns":4,"tsc_khz":2596136,'
      b'"write_p50_ns":100,"write_p99_ns":300,"kick_p50_ns":200,"kick_p99_ns":600,"tx_p50_ns":300,"tx_p99_ns":900,"wire_p50_ns":400,"wire_p99_ns":1200,"rx_p50_ns":500,"rx_p99_ns":1500,"publish_p50_ns":600,"publish_p99_ns":1800,"notice_p50_ns":700,"notice_p99_ns":2100}]}]}')
write("bench", "stats-trace-group", b"\x01" + b'{"vcpu_exits":{"total":5},"trace":{"transactions":3,"kick_p50_ns":800},'
      b'"wire_p50_ns":1}')
write("bench", "stats-trace-hostile", b"\x01" + b'{"name":"trace","transactions":1e400,"clock_err_ns":-inf,'
      b'"write_p50_ns":nan,"kick_p50_ns":0x1p99,"tx_p50_ns":"12","wire_p99_ns":')
write("bench", "task-stat", b"\x02" + b"4242 (lkvm-net-tx0) S 1 2 3 0 -1 4194368 0 0 0 0 17 5 0 0 20 0 1 0 100 0 0\n")
write("bench", "task-stat-paren", b"\x02" + b"4242 (a) b) (c) R 1 2 3 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 100 0 0\n")
write("bench", "schedstat", b"\x03" + b"79227242 50487885 252\n")
write("bench", "proc-stat", b"\x04" + b"cpu  10132153 290696 3084719 46828483 16683 0 25195 0 0 0\n")

# ---- p9: u8 flags, then (u16 length, message) pairs; fid 0 is the attached root ----
T = dict(statfs=8, lopen=12, lcreate=14, symlink=16, mknod=18, rename=20, readlink=22, getattr=24,
         setattr=26, xattrwalk=30, xattrcreate=32, readdir=40, fsync=50, lock=52, getlock=54, link=70,
         mkdir=72, renameat=74, unlinkat=76, version=100, attach=104, flush=108, walk=110, read=116,
         write=118, clunk=120, remove=122)
RO, RAW, SPLIT_REQ, SPLIT_REP, SMALL_REP, TINY_REP = 1, 2, 4 | 8, 16, 64, 128


def s9(x):
    x = x.encode() if isinstance(x, str) else x
    return struct.pack("<H", len(x)) + x


def m9(kind, *fields, tag=1, size=None):
    """A T-message: fields are (struct format, value) pairs or bytes (a 9p string when str)."""
    body = b""
    for f in fields:
        body += s9(f) if isinstance(f, str) else f if isinstance(f, bytes) else struct.pack("<" + f[0], f[1])
    size = 7 + len(body) if size is None else size
    return struct.pack("<IBH", size, T[kind], tag) + body


def u32(v): return ("I", v)
def u64(v): return ("Q", v)
def u16(v): return ("H", v)
def u8(v): return ("B", v)


def walk(fid, newfid, *names):
    return m9("walk", u32(fid), u32(newfid), u16(len(names)), *names)


def p9(name, flags, *msgs):
    write("p9", name, bytes([flags]) + b"".join(struct.pack("<H", len(m)) + m for m in msgs))


version = m9("version", u32(16384), "9P2000.L", tag=0xffff)
attach = m9("attach", u32(0), u32(0xffffffff), "root", "", u32(0))
p9("walk-read", 0, walk(0, 1, "file"), m9("lopen", u32(1), u32(0)), m9("read", u32(1), u64(0), u32(100)),
   m9("read", u32(1), u64(7), u32(0xffffffff)), m9("getattr", u32(1), u64(0x7ff)), m9("clunk", u32(1)))
p9("readdir", 0, walk(0, 1), m9("lopen", u32(1), u32(0o200000)), m9("readdir", u32(1), u64(0), u32(4096)),
   m9("readdir", u32(1), u64(0), u32(40)), walk(0, 2, "dir"), m9("lopen", u32(2), u32(0)),
   m9("readdir", u32(2), u64(0), u32(200)))
p9("create-write", 0, walk(0, 1), m9("lcreate", u32(1), "new", u32(2), u32(0o644), u32(0)),
   m9("write", u32(1), u64(0), u32(5), b"hello"), m9("read", u32(1), u64(0), u32(64)),
   m9("fsync", u32(1), u32(1)), m9("setattr", u32(1), u32(0x8 | 0x1 | 0x20 | 0x100), u32(0o600), u32(0), u32(0),
                                   u64(2), u64(0), u64(0), u64(12345), u64(0)),
   m9("getattr", u32(1), u64(0x7ff)), m9("statfs", u32(1)))
p9("namespace", 0, m9("mkdir", u32(0), "d", u32(0o755), u32(0)), walk(0, 1, "d"),
   m9("symlink", u32(1), "sl", "../file", u32(0)), walk(1, 2, "sl"), m9("readlink", u32(2)),
   walk(0, 3, "file"), m9("link", u32(1), u32(3), "hard"), m9("mknod", u32(1), "p", u32(0o10644), u32(0), u32(0), u32(0)),
   m9("renameat", u32(1), "hard", u32(0), "moved"), m9("unlinkat", u32(0), "moved", u32(0)),
   m9("unlinkat", u32(1), "p", u32(0)), m9("rename", u32(3), u32(0), "x"), m9("remove", u32(3)))
p9("escape", 0, walk(0, 1, "..", ".."), walk(0, 2, "dir", "..", ".."), walk(0, 3, "dirout", "secret"),
   walk(0, 4, "abs"), m9("lopen", u32(4), u32(0)), m9("readlink", u32(4)), walk(0, 5, "rel"),
   m9("lcreate", u32(5), "x", u32(0), u32(0o644), u32(0)), walk(0, 6), m9("lcreate", u32(6), "abs", u32(1), u32(0o644), u32(0)),
   walk(0, 7, "fifo"), m9("lopen", u32(7), u32(0)), walk(0, 8, "dir", "sub"), walk(8, 9, "..", "..", "..", "dirout"),
   m9("link", u32(0), u32(4), "hl"), m9("setattr", u32(4), u32(1), u32(0o777), u32(0), u32(0), u64(0), u64(0), u64(0), u64(0), u64(0)))
p9("names", 0, walk(0, 1, "a/b"), walk(0, 1, "."), walk(0, 1, ""), walk(0, 1, "x" * 256),
   m9("mkdir", u32(0), "..", u32(0o755), u32(0)), m9("mkdir", u32(0), b"\x02\x00a\x00", size=None))
p9("xattr-lock", 0, m9("xattrwalk", u32(0), u32(1), ""), m9("read", u32(1), u64(0), u32(10)), m9("clunk", u32(1)),
   m9("xattrwalk", u32(0), u32(1), "security.capability"), m9("xattrcreate", u32(0), "user.a", u64(4), u32(0)),
   m9("lock", u32(0), u8(1), u32(0), u64(0), u64(10), u32(7), "guest"),
   m9("getlock", u32(0), u8(0), u64(0), u64(10), u32(7), "guest"), m9("flush", u16(3)))
p9("readonly", RO, walk(0, 1, "file"), m9("lopen", u32(1), u32(2)), m9("lopen", u32(1), u32(0o1000)),
   m9("lopen", u32(1), u32(0)), m9("write", u32(1), u64(0), u32(1), b"x"),
   m9("mkdir", u32(0), "d", u32(0o755), u32(0)), m9("unlinkat", u32(0), "file", u32(0)),
   m9("setattr", u32(1), u32(8), u32(0), u32(0), u32(0), u64(0), u64(0), u64(0), u64(0), u64(0)), m9("remove", u32(1)))
p9("raw-version", RAW, m9("walk", u32(0), u32(1), u16(0)), version, m9("version", u32(100), "9P2000.L"),
   m9("version", u32(0xffffffff), "9P2000.u"), version, attach, walk(0, 1, "dir", "inner"))
p9("malformed", 0, m9("clunk", u32(0), size=6), m9("clunk", u32(0), size=200), m9("walk", u32(0), u32(1), u16(1), u16(300), b"ab"),
   m9("walk", u32(0), u32(1), u16(17)), m9("read", u32(0), u64(1 << 63), u32(10)), m9("getattr", u32(0)),
   m9("write", u32(0), u64(0), u32(1000), b"x"), b"\x07\x00\x00\x00\xc8\x01\x00", b"")
p9("split", SPLIT_REQ | SPLIT_REP, walk(0, 1), m9("lcreate", u32(1), "s", u32(2), u32(0o644), u32(0)),
   m9("write", u32(1), u64(0), u32(300), bytes(range(256)) + bytes(44)), m9("read", u32(1), u64(0), u32(400)),
   walk(0, 2), m9("lopen", u32(2), u32(0)), m9("readdir", u32(2), u64(0), u32(1000)))
p9("small-reply", SMALL_REP, walk(0, 1, "file"), m9("lopen", u32(1), u32(0)), m9("read", u32(1), u64(0), u32(1000)),
   m9("getattr", u32(1), u64(0x7ff)), walk(0, 2), m9("lopen", u32(2), u32(0)), m9("readdir", u32(2), u64(0), u32(1000)))
p9("fid-exhaust", 0, *[walk(0, 100 + i, "dir") for i in range(40)], m9("clunk", u32(100)), walk(0, 1, "file"))
p9("tiny-reply", TINY_REP, walk(0, 1, "file"), m9("clunk", u32(0)))
p9("setid", 0, walk(0, 1), m9("lcreate", u32(1), "x", u32(1), u32(0o6755), u32(0)),
   m9("setattr", u32(1), u32(1), u32(0o4755), u32(0), u32(0), u64(0), u64(0), u64(0), u64(0), u64(0)),
   m9("mkdir", u32(0), "d", u32(0o6775), u32(0)), m9("mknod", u32(0), "p", u32(0o14644), u32(0), u32(0), u32(0)),
   m9("mknod", u32(0), "blk", u32(0o60600), u32(8), u32(0), u32(0)))

# ---- fuse: u8 flags, then (u16 length, request) pairs; node ids and fhs of the form
# 0xffffffffffffffNN name the NN-th one the server gave in this input (node 0: the root) ----
FO = dict(lookup=1, forget=2, getattr=3, setattr=4, readlink=5, symlink=6, mknod=8, mkdir=9, unlink=10,
          rmdir=11, rename=12, link=13, open=14, read=15, write=16, statfs=17, release=18, fsync=20,
          setxattr=21, getxattr=22, listxattr=23, removexattr=24, flush=25, init=26, opendir=27,
          readdir=28, releasedir=29, fsyncdir=30, getlk=31, access=34, create=35, interrupt=36,
          destroy=38, batch_forget=42, fallocate=43, readdirplus=44, rename2=45, lseek=46,
          copy_file_range=47)


def N(k): return 0xffffffffffffff00 | k
def FH(k): return 0xffffffffffffff00 | k


def fm(op, node, *fields, length=None):
    """A FUSE request: fields are (struct format, value) pairs, bytes, or str (a NUL-terminated name)."""
    body = b""
    for f in fields:
        body += f.encode() + b"\0" if isinstance(f, str) else f if isinstance(f, bytes) else struct.pack("<" + f[0], f[1])
    n = 40 + len(body) if length is None else length
    return struct.pack("<IIQQIIIHH", n, FO[op] if isinstance(op, str) else op, 7, node, 0, 0, 0, 0, 0) + body


def fuse(name, flags, *msgs):
    write("fuse", name, bytes([flags]) + b"".join(struct.pack("<H", len(m)) + m for m in msgs))


def rd(op, fh, off, size): return fm(op, 1, u64(fh), u64(off), u32(size), u32(0), u64(0), u32(0), u32(0))
def rel(op, fh): return fm(op, 1, u64(fh), u32(0), u32(0), u64(0))
def opn(op, node, flags): return fm(op, node, u32(flags), u32(0))
def setattr(node, valid, fh=0, size=0, mode=0, atime=0, mtime=0):
    return fm("setattr", node, u32(valid), u32(0), u64(fh), u64(size), u64(0), u64(atime), u64(mtime), u64(0),
              u32(0), u32(0), u32(0), u32(mode), u32(0), u32(0), u32(0), u32(0))


fuse("lookup-read", 0, fm("lookup", 1, "file"), opn("open", N(1), 0), rd("read", FH(0), 0, 100),
     rd("read", FH(0), 7, 0xffffffff), fm("getattr", N(1), u32(1), u32(0), u64(FH(0))), rel("release", FH(0)),
     fm("forget", N(1), u64(1)), fm("getattr", N(1), u32(0), u32(0), u64(0)))
fuse("readdir", 0, opn("opendir", 1, 0o200000), rd("readdirplus", FH(0), 0, 4096), rd("readdir", FH(0), 0, 4096),
     rd("readdirplus", FH(0), 0, 200), rd("readdirplus", FH(0), 3, 40), fm("lookup", 1, "dir"), opn("opendir", N(1), 0),
     rd("readdirplus", FH(1), 0, 4096), rel("releasedir", FH(0)), rel("releasedir", FH(1)))
fuse("create-write", 0, fm("create", 1, u32(0o102), u32(0o100644), u32(0o22), u32(0), "new"),
     fm("write", 1, u64(FH(0)), u64(0), u32(5), u32(0), u64(0), u32(0), u32(0), b"hello"), rd("read", FH(0), 0, 64),
     fm("fsync", 1, u64(FH(0)), u32(1), u32(0)), setattr(N(1), 0x1 | 0x8 | 0x40 | 0x20, fh=FH(0), size=2, mode=0o600, mtime=99),
     fm("fallocate", 1, u64(FH(0)), u64(0), u64(8192), u32(0), u32(0)),
     fm("lseek", 1, u64(FH(0)), u64(0), u32(4), u32(0)),
     fm("create", 1, u32(0o2), u32(0o100644), u32(0), u32(0), "copy"),
     fm("copy_file_range", 1, u64(FH(0)), u64(0), u64(N(2)), u64(FH(1)), u64(0), u64(100), u64(0)),
     fm("flush", 1, u64(FH(0)), u32(0), u32(0), u64(0)), rel("release", FH(0)))
fuse("namespace", 0, fm("mkdir", 1, u32(0o2755), u32(0o22), "d"), fm("symlink", N(1), "sl", "../file"),
     fm("readlink", N(2)), fm("lookup", 1, "file"), fm("link", N(1), u64(N(3)), "hard"),
     fm("mknod", N(1), u32(0o10644), u32(0), u32(0), u32(0), "p"), fm("mknod", N(1), u32(0o20644), u32(0x103), u32(0), u32(0), "c"),
     fm("rename2", N(1), u64(1), u32(0), u32(0), "hard", "moved"), fm("rename2", 1, u64(N(1)), u32(2), u32(0), "moved", "p"),
     fm("rename", 1, u64(1), "dir", "file"), fm("unlink", 1, "moved"), fm("rmdir", 1, "d"), fm("statfs", 1),
     fm("access", N(3), u32(4), u32(0)), fm("unlink", N(1), "p"), fm("unlink", N(1), "sl"), fm("rmdir", 1, "d"))
fuse("escape", 0, fm("lookup", 1, "abs"), opn("open", N(1), 0), fm("readlink", N(1)), fm("lookup", 1, ".."),
     fm("lookup", 1, "dirout"), fm("lookup", N(2), "secret"), fm("lookup", 1, "fifo"), opn("open", N(3), 0),
     fm("lookup", 1, "dir"), fm("lookup", N(4), ".."), fm("link", 1, u64(N(1)), "hl"), setattr(N(1), 1, mode=0o777),
     fm("create", N(1), u32(0o2), u32(0o100644), u32(0), u32(0), "x"), opn("opendir", N(2), 0))
fuse("names", 0, fm("lookup", 1, "a/b"), fm("lookup", 1, "."), fm("lookup", 1, ""), fm("lookup", 1, "x" * 256),
     fm("mkdir", 1, u32(0o755), u32(0), ".."), fm("mkdir", 1, u32(0o755), u32(0), b"abc"),
     fm("mkdir", 1, u32(0o755), u32(0), b"ok\0../x\0"), fm("symlink", 1, "s", b"unterminated"))
fuse("xattr", 0, fm("getxattr", 1, u32(100), u32(0), "security.capability"), fm("listxattr", 1, u32(0), u32(0)),
     fm("listxattr", 1, u32(100), u32(0)), fm("setxattr", 1, u32(1), u32(0), "user.a", b"v"),
     fm("removexattr", 1, "user.a"), fm("getlk", 1, bytes(48)), fm("interrupt", 0, u64(7)))
fuse("readonly", RO, fm("lookup", 1, "file"), opn("open", N(1), 2), opn("open", N(1), 0o1000), opn("open", N(1), 0),
     fm("write", 1, u64(FH(0)), u64(0), u32(1), u32(0), u64(0), u32(0), u32(0), b"x"),
     fm("mkdir", 1, u32(0o755), u32(0), "d"), fm("unlink", 1, "file"), setattr(N(1), 8),
     fm("create", 1, u32(0), u32(0o100644), u32(0), u32(0), "c"))
fuse("raw-init", RAW, fm("lookup", 1, "file"), fm("init", 0, u32(7), u32(30), u32(0), u32(0)),
     fm("init", 0, u32(8), u32(0), u32(0), u32(0)), fm("init", 0, u32(7), u32(31), u32(65536), u32(0xffffffff)),
     fm("lookup", 1, "dir"), fm("destroy", 0), fm("lookup", 1, "dir"))
fuse("malformed", 0, fm("getattr", 1, u64(0), length=39), fm("getattr", 1, u64(0), length=200), fm("getattr", 1, length=40),
     fm("write", 1, u64(FH(0)), u64(0), u32(1000), u32(0), u64(0), u32(0), u32(0), b"x"), rd("read", FH(0), 1 << 63, 10),
     fm("batch_forget", 0, u32(1000), u32(0), u64(N(1)), u64(5)), fm(0xffffffff, 1), fm(4096, 1), b"")
fuse("forget", 0, fm("lookup", 1, "dir"), fm("lookup", N(1), "inner"), fm("forget", N(1), u64(99)),
     fm("getattr", N(1), bytes(16)), fm("batch_forget", 0, u32(2), u32(0), u64(N(2)), u64(1), u64(1), u64(1)),
     fm("forget", 1, u64(1)), fm("getattr", 1, bytes(16)))
fuse("split", SPLIT_REQ | SPLIT_REP, fm("create", 1, u32(0o2), u32(0o100644), u32(0), u32(0), "s"),
     fm("write", 1, u64(FH(0)), u64(0), u32(300), u32(0), u64(0), u32(0), u32(0), bytes(range(256)) + bytes(44)),
     rd("read", FH(0), 0, 400), opn("opendir", 1, 0), rd("readdirplus", FH(1), 0, 1000))
fuse("small-reply", SMALL_REP, fm("lookup", 1, "file"), opn("open", N(1), 0), rd("read", FH(0), 0, 1000),
     fm("mkdir", 1, u32(0o755), u32(0), "d"), opn("opendir", 1, 0), rd("readdirplus", FH(1), 0, 1000))
fuse("handle-exhaust", 0, fm("lookup", 1, "file"), *[opn("open", N(1), 0) for i in range(20)], rel("release", FH(3)),
     opn("opendir", 1, 0))
fuse("snapshot", 0, fm("lookup", 1, "file"), fm("lookup", 1, "dir"), fm("lookup", N(2), "inner"), opn("open", N(1), 2),
     opn("opendir", N(2), 0), rel("release", FH(0)), opn("open", N(3), 0), fm("forget", N(2), u64(1)), b"",
     rd("read", FH(2), 0, 10), rd("readdirplus", FH(1), 0, 4096), fm("getattr", N(3), bytes(16)),
     fm("lookup", 1, "fifo"), b"", fm("getattr", N(4), bytes(16)))
fuse("tiny-reply", TINY_REP, fm("lookup", 1, "file"), fm("forget", N(1), u64(1)))

# ---- stream: u16 chunk seed, then the bytes passt sends (4-byte big-endian length, frame) ----
def rec(payload, length=None):
    return struct.pack(">I", len(payload) if length is None else length) + payload


eth = bytes(range(60))
write("stream", "one", struct.pack("<H", 1) + rec(eth))
write("stream", "many", struct.pack("<H", 7) + b"".join(rec(bytes([i]) * (14 + i)) for i in range(20)))
write("stream", "zero-len", struct.pack("<H", 3) + rec(b"") + rec(eth) + rec(b""))
write("stream", "max", struct.pack("<H", 9) + rec(bytes(65550)))
write("stream", "too-long", struct.pack("<H", 2) + rec(eth) + rec(eth, 65551))
write("stream", "cut-mid-frame", struct.pack("<H", 5) + rec(eth)[:30])
write("stream", "cut-mid-length", struct.pack("<H", 5) + rec(eth) + b"\0\0")
write("stream", "garbage", struct.pack("<H", 11) + bytes((i * 37 + 11) & 0xff for i in range(300)))


# ---- snap: a whole snapshot file (docs/snapshot.md has the layout) ----
def crc32c(data, crc=0):
    crc ^= 0xffffffff
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82f63b78 & -(crc & 1))
    return crc ^ 0xffffffff


def tlv(tag, payload):
    return struct.pack("<HI", tag, len(payload)) + payload


def snap(sections, ram_pages=0, present=(), version=1, vcpus=2, fix=None):
    """sections: (type, instance, bytes); present: page numbers of RAM holding a pattern."""
    body, table, off = bytearray(), [], 128
    def add(t, inst, data, align=8):
        nonlocal off
        pad = -off % align
        body.extend(bytes(pad))
        off += pad
        table.append([t, inst, off, len(data), crc32c(data), 0])
        body.extend(data)
        off += len(data)
    for t, inst, data in sections:
        add(t, inst, data)
    if ram_pages:
        runs = []
        for p in sorted(present):
            if runs and p - (runs[-1][0] + runs[-1][1]) < 8:
                runs[-1][1] = p + 1 - runs[-1][0]
            else:
                runs.append([p, 1])
        data = b"".join(bytes([(p + i) & 0xff or 1]) * 4096 for r in runs for p in [r[0]] for i in range(r[1]))
        add(2, 0, data, 4096)
        add(1, 0, struct.pack("<IIQ", 4096, 0, len(runs)) + b"".join(struct.pack("<QQ", *r) for r in runs))
    if fix:
        fix(table, body)
    pad = -off % 8
    body.extend(bytes(pad))
    off += pad
    tbl = b"".join(struct.pack("<IIQQII", *e) for e in table)
    hdr = struct.pack("<8sIIIIQQQII", b"LKVMSNAP", version, 128, 0, vcpus, max(ram_pages, 1) * 4096,
                      off + len(tbl), off, len(table), 4096)
    hdr += bytes(range(32)) + b"lkvm seed".ljust(32, b"\0") + struct.pack("<I", crc32c(tbl))
    hdr += struct.pack("<I", crc32c(hdr))
    return hdr + bytes(body) + tbl


# The VM section as vm-snap.c writes it: the x86 records, then tag 64, the run's options as
# NUL-terminated words.
vm_sec = (3, 0, tlv(1, b"irqchip") + tlv(2, struct.pack("<Q", 1 << 20)) + tlv(3, b"")
          + tlv(64, b"-k\0guest.elf\0-m\064\0--name\0x\0"))
cpu_secs = [(4, i, tlv(1, struct.pack("<16Q", *range(i, i + 16)))) for i in range(2)]
# The first byte is the target's mode: 1 makes the target reseal every checksum before reading.
def wsnap(name, data, mode=1):
    write("snap", name, bytes([mode]) + bytes(data))


wsnap("valid-nomem", snap([vm_sec] + cpu_secs))
wsnap("valid-nomem-raw", snap([vm_sec] + cpu_secs), 0)
wsnap("valid-mem", snap([vm_sec] + cpu_secs + [(5, 3, b"device")], 32, (0, 1, 20)))
wsnap("version-3", snap([vm_sec], version=3))
wsnap("truncated", snap([vm_sec] + cpu_secs, 16, (0, 3))[:5000])
wsnap("bad-records", snap([(3, 0, tlv(1, b"ok") + b"\x02\x00\xff\xff\x00\x00ab")]))
bad_crc = bytearray(snap([vm_sec] + cpu_secs))
bad_crc[140] ^= 1
wsnap("bad-crc", bad_crc, 0)


def overlap(table, body):
    table[1][2] -= 8


def run_past_ram(table, body):
    m = table[-1]
    struct.pack_into("<Q", body, m[2] - 128 + 16, 15)  # run 0 starts at the last page, 4 long
    m[4] = crc32c(body[m[2] - 128:m[2] - 128 + m[3]])


wsnap("overlap", snap([vm_sec] + cpu_secs, fix=overlap))
wsnap("run-past-ram", snap([vm_sec], 16, (0, 1, 2, 3), fix=run_past_ram))
# ---- gdb: u8 chunk seed, then the bytes gdb sends (packets as gdb 13 sent them to lkvm) ----
def pkt(payload):
    if isinstance(payload, str):
        payload = payload.encode()
    esc = b"".join(bytes([0x7d, c ^ 0x20]) if c in b"$#}*" else bytes([c]) for c in payload)
    return b"$" + esc + b"#%02x" % (sum(esc) & 0xff)


def gdb(name, seed, *items):
    write("gdb", name, bytes([seed]) + b"".join(i if isinstance(i, bytes) else b"+" + pkt(i) for i in items))


gdb("attach", 1, "qSupported:multiprocess+;swbreak+;hwbreak+;qRelocInsn+;fork-events+;vfork-events+;"
    "exec-events+;vContSupported+;QThreadEvents+;no-resumed+;memory-tagging+;xmlRegisters=i386",
    "vMustReplyEmpty", "QStartNoAckMode", "Hg0", "qXfer:features:read:target.xml:0,ffb",
    "qXfer:features:read:target.xml:ffb,ffb", "qTStatus", "?", "qfThreadInfo", "qsThreadInfo",
    "qAttached", "Hc-1", "g", "m100000,40", "D")
gdb("break-continue", 7, "vCont?", "Z0,1010,1", "vCont;c", "g", "z0,1010,1", "vCont;s:2", "qC",
    "Hg2", "p10", "P10=0010000000000000", "T2", "T3", "c", b"\x03", "s1000", "C05;1000", "S05")
gdb("memory", 13, "m1000,4", "M1000,4:01020304", "X1000,0:", b"+" + pkt(b"X1004,4:$#}*"), b"+" + pkt(b"X1008,2:\x00\x03"),
    "X1ffc,4:abcd", "m1ffc,8", "m0,1", "mffffffffffffffff,10", "M2000,1:zz")
gdb("watch", 3, "Z2,1800,4", "Z3,1800,4", "Z4,1800,8", "Z1,1000,1", "vCont;c", "z2,1800,4", "z4,1800,8",
    "z1,1000,1", "k")
gdb("regs", 5, "G" + "00" * 600, "g", "p0", "p11", "p39", "p48", "P11=46020000", "Pff=00", "G0")
gdb("garbage", 9, b"\x00\xff$g#00$", b"}" * 40, pkt("m" + "f" * 40 + ",1"), b"-", b"+",
    b"$" + b"a" * 5000 + b"#00", pkt("vCont;s:1;c;t"), pkt("qXfer:features:read:target.xml:fffffffffffffff0,ffffff"))


# ---- dhcp: an IPv4 packet from its header (init/dhcp.c), for 52:54:00:12:34:56, xid 0x12345678 ----
def dhcp_reply(opts, op=2, xid=0x12345678, frag=0):
    b = bytes([op, 1, 6, 0]) + struct.pack(">IHH", xid, 0, 0x8000) + bytes(4) + bytes([192, 0, 2, 2]) + bytes(8)
    b += bytes([0x52, 0x54, 0, 0x12, 0x34, 0x56]) + bytes(10 + 64 + 128) + bytes([0x63, 0x82, 0x53, 0x63]) + bytes(opts)
    udp = struct.pack(">HHHH", 67, 68, 8 + len(b), 0) + b
    return struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, frag, 64, 17, 0, bytes([192, 0, 2, 1]), bytes([255] * 4)) + udp


full = [53, 1, 2, 1, 4, 255, 255, 255, 0, 3, 4, 192, 0, 2, 1, 6, 8, 10, 0, 0, 53, 10, 0, 0, 54, 54, 4, 192, 0, 2, 1, 255]
write("dhcp", "offer", dhcp_reply(full))
write("dhcp", "ack", dhcp_reply([53, 1, 5] + full[3:]))
write("dhcp", "nak", dhcp_reply([53, 1, 6, 255]))
write("dhcp", "many-dns", dhcp_reply([53, 1, 5, 6, 24] + list(range(24)) + [255]))
write("dhcp", "pad-no-end", dhcp_reply([0, 0, 53, 1, 2, 0, 3, 4, 1, 2, 3, 4]))
write("dhcp", "option-past-end", dhcp_reply([53, 1, 2, 3, 200, 1, 2]))
write("dhcp", "fragment", dhcp_reply(full, frag=0x2000))


# ---- vcon: records of u8 message length, u8 answer room, the message ----
def vmsg(ident, event, value, room=63):
    return struct.pack("<BBIHH", 8, room, ident, event, value)


write("vcon", "linux", vmsg(0xffffffff, 0, 1) + vmsg(0, 3, 1) + vmsg(0, 6, 1) + vmsg(0, 6, 0))
write("vcon", "small-room", vmsg(0xffffffff, 0, 1, 7) + vmsg(0, 3, 1, 12) + vmsg(0, 3, 1, 19))
write("vcon", "bad", vmsg(1, 3, 1) + vmsg(0, 3, 2) + vmsg(0, 5, 1) + bytes([7, 63]) + b"\0" * 7 + bytes([32, 63]) + b"\xff" * 32)


# ---- qcow2: 32 control bytes (4 operations: flags, u32 offset, u16 length - 1, pad), then an
# image qemu-img makes (small clusters keep the files a few KiB); without qemu-img (qemu-utils)
# the committed seeds stay as they are ----
def qcow2_seeds():
    import shutil
    import subprocess
    import tempfile
    if not shutil.which("qemu-img"):
        print("gen-corpus: no qemu-img: qcow2 seeds left as they are", file=sys.stderr)
        return
    ops = b"".join(struct.pack("<BIHB", f, o, l, 0) for f, o, l in
                   [(0x81, 1000, 3000), (0, 0, 8191), (1, 40000, 700), (0, 39000, 4000)])
    with tempfile.TemporaryDirectory() as t:
        with open(os.path.join(t, "raw"), "wb") as f:
            f.write(bytes((i * 7 + i // 512 * 13 + 1) & 0xff for i in range(16384)))
        for name, cmd in [
            ("v3-empty", "create -f qcow2 -o cluster_size=512 img 64K"),
            ("v3-data", "convert -O qcow2 -o cluster_size=512 raw img"),
            ("v2-data", "convert -O qcow2 -o cluster_size=512,compat=0.10 raw img"),
            ("refcount8", "convert -O qcow2 -o cluster_size=512,refcount_bits=8 raw img"),
            ("refcount64", "create -f qcow2 -o cluster_size=1024,refcount_bits=64 img 64K"),
            ("backing", "create -f qcow2 -o cluster_size=512 -b raw -F raw img 64K"),
            ("c4k", "create -f qcow2 -o cluster_size=4096 img 64K"),
        ]:
            subprocess.run(["qemu-img"] + cmd.split(), cwd=t, check=True, stdout=subprocess.DEVNULL)
            with open(os.path.join(t, "img"), "rb") as f:
                write("qcow2", name, ops + f.read())
            os.unlink(os.path.join(t, "img"))


qcow2_seeds()


# ---- failon: u8 pattern length, the pattern, then records of u8 length and console bytes ----
def cons(*writes):
    return b"".join(bytes([len(w)]) + w for w in writes)


write("failon", "warning", bytes([4]) + b"oops" + cons(b"[ 0.1] boot\r\n[ 0.2] WARN", b"ING: CPU: 0\r\n"))
write("failon", "long", bytes([0]) + cons(*([b"a" * 255] * 4), b"KASAN: x", b"\n", b"BUG: y\n"))
write("failon", "hostile", bytes([6]) + b"\x1b[2J\\\xff" + cons(b"\x1b[2J\\\xff\r", b"Kernel panic\x00\n"))
