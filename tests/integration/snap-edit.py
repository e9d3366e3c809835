#!/usr/bin/env python3
# snap-edit.py IN OUT [--sub OLD NEW] [--rec TAG HEX] WORD...: a copy of snapshot IN whose saved run options have OLD replaced by NEW and WORDs appended, and whose VM record TAG (65: the -- CMD machine's mark) holds HEX's bytes, its checksums resealed (as a hostile sender would): the VM section rewritten at the end of the sections, the table and header after it (docs/snapshot.md's format).
import struct
import sys

HEADER_LEN, ENTRY_LEN = 128, 32
SEC_VM = 3
REC_ARGV = 64  # vm-snap.c's VM_REC_ARGV


def crc32c(data, crc=0):
    table = crc32c.table
    if table is None:
        table = crc32c.table = []
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
            table.append(c)
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


crc32c.table = None


def records(sec):
    """(tag, bytes) of each (tag u16, length u32, bytes) record."""
    at, out = 0, []
    while at < len(sec):
        tag, n = struct.unpack_from("<HI", sec, at)
        out.append((tag, sec[at + 6:at + 6 + n]))
        at += 6 + n
    return out


def main():
    src, dst, words, sub, rec = sys.argv[1], sys.argv[2], sys.argv[3:], None, {}
    while words[:1] in (["--sub"], ["--rec"]):
        if words[0] == "--sub":
            sub = (words[1].encode(), words[2].encode())
        else:
            rec[int(words[1])] = bytes.fromhex(words[2])
        words = words[3:]
    f = bytearray(open(src, "rb").read())
    table_off, nsec = struct.unpack_from("<QI", f, 40)
    entries = [list(struct.unpack_from("<IIQQII", f, table_off + i * ENTRY_LEN)) for i in range(nsec)]
    vm = next(e for e in entries if e[0] == SEC_VM)
    recs = records(bytes(f[vm[2]:vm[2] + vm[3]]))
    sec = b""
    for tag, data in recs:
        if tag == REC_ARGV:
            data = data.replace(*sub) if sub else data
            data += b"".join(w.encode() + b"\0" for w in words)
        data = rec.get(tag, data)
        sec += struct.pack("<HI", tag, len(data)) + data
    # The old VM section stays where it was, unreferenced; the new one goes before the table.
    body = f[:table_off] + b"\0" * (-table_off % 8)
    vm[2], vm[3], vm[4] = len(body), len(sec), crc32c(sec)
    body += sec + b"\0" * (-len(sec) % 8)
    table = b"".join(struct.pack("<IIQQII", *e) for e in entries)
    new_table_off = len(body)
    out = bytearray(body + table)
    struct.pack_into("<QQ", out, 32, len(out), new_table_off)
    struct.pack_into("<I", out, 120, crc32c(table))
    struct.pack_into("<I", out, 124, crc32c(bytes(out[:124])))
    open(dst, "wb").write(out)


main()
