#!/usr/bin/env python3
"""Where a cubin's register spills land, by source line, on a machine without nvdisasm.

ptxas -v reports spill bytes per function, counted once per instruction in the code: it cannot
tell a spill in a hot loop from a save around a call. This reads the cubin itself: every
local-memory store (STL) and load (LDL) of a function's SASS, attributed to its source line through
the line table that `-lineinfo` writes (.debug_line). Counts are instructions in the code, not
executions. (dev/perf_log.md section 26.)

The opcodes are the low 12 bits of each 16-byte sm_90 instruction: STL 0x387, LDL 0x983 (checked
against nvdisasm 13.0 on the same cubin). Other architectures are refused.

usage: dev/sass_spills.py CUBIN [--function NAME] [--lines FILE:LO-HI ...] [--json]
  --function  the .text section to read (default ms_megakernel, which holds every non-entry
              function of a whole-program build too)
  --lines     also total the spills of these source lines (file base name, inclusive range)
exit 0, or 2 on a bad input (with a hint).
"""
import argparse
import bisect
import collections
import json
import signal
import struct
import sys

STL, LDL = 0x387, 0x983
EM_CUDA = 190


def fail(msg):
    print(f"sass_spills: {msg}", file=sys.stderr)
    sys.exit(2)


def sections(data):
    """{name: bytes} of an ELF64 little-endian file."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        fail("not a 64-bit ELF file (build one with nvcc -cubin -lineinfo)")
    machine = struct.unpack_from("<H", data, 0x12)[0]
    if machine != EM_CUDA:
        fail(f"ELF machine {machine} is not a CUDA cubin")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    out = {}
    for h in headers:
        name = data[names_at + h[0]:data.index(b"\0", names_at + h[0])].decode()
        out[name] = data[h[4]:h[4] + h[5]]
    return out


def cubin_arch(data):
    """The sm_XX of a cubin (e_flags bits 8..15 for CUDA 12+ ELF ABI v8, low byte before)."""
    flags = struct.unpack_from("<I", data, 0x30)[0]
    return (flags >> 8) & 0xFF if data[7] >= 0x41 else flags & 0xFF


def leb(data, i, signed=False):
    value, shift = 0, 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            if signed and b & 0x40:
                value -= 1 << shift
            return value, i


def line_rows(data):
    """(address, file, line) rows of a DWARF 2-4 .debug_line section, sorted by address."""
    rows, off = [], 0
    while off < len(data):
        unit_len = struct.unpack_from("<I", data, off)[0]
        end = off + 4 + unit_len
        version = struct.unpack_from("<H", data, off + 4)[0]
        header_len = struct.unpack_from("<I", data, off + 6)[0]
        p = off + 10
        min_inst = data[p]
        p += 2 if version >= 4 else 1
        line_base = struct.unpack_from("<b", data, p + 1)[0]
        line_range, opcode_base = data[p + 2], data[p + 3]
        std_len = list(data[p + 4:p + 3 + opcode_base])
        p += 3 + opcode_base
        while data[p] != 0:  # include directories
            p = data.index(b"\0", p) + 1
        p += 1
        files = []
        while data[p] != 0:
            e = data.index(b"\0", p)
            files.append(data[p:e].decode().split("/")[-1])
            p = e + 1
            for _ in range(3):
                _, p = leb(data, p)
        p = off + 10 + header_len
        addr, file, line = 0, 1, 1
        name = lambda: files[file - 1] if 0 < file <= len(files) else "?"
        while p < end:
            op = data[p]
            p += 1
            if op >= opcode_base:
                adj = op - opcode_base
                addr += adj // line_range * min_inst
                line += line_base + adj % line_range
                rows.append((addr, name(), line))
            elif op == 0:  # extended
                n, p = leb(data, p)
                sub = data[p]
                if sub == 1:
                    addr, file, line = 0, 1, 1
                elif sub == 2:
                    addr = struct.unpack_from("<Q" if n == 9 else "<I", data, p + 1)[0]
                p += n
            elif op == 1:
                rows.append((addr, name(), line))
            elif op == 2:
                v, p = leb(data, p)
                addr += v * min_inst
            elif op == 3:
                v, p = leb(data, p, signed=True)
                line += v
            elif op == 4:
                file, p = leb(data, p)
            elif op == 5:
                _, p = leb(data, p)
            elif op == 8:
                addr += (255 - opcode_base) // line_range * min_inst
            elif op == 9:
                addr += struct.unpack_from("<H", data, p)[0]
                p += 2
            elif op not in (6, 7):
                for _ in range(std_len[op - 1]):
                    _, p = leb(data, p)
        off = end
    return sorted(rows)


def read_function(path, function):
    """(the .text bytes of `function`, its line table rows) of the sm_90 cubin at `path`; fail()s with
    a hint when the file, the architecture, the function or the line table is not there."""
    try:
        data = open(path, "rb").read()
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    secs = sections(data)
    arch = cubin_arch(data)
    if arch != 90:
        fail(f"{path}: an sm_{arch} cubin; only the sm_90 encoding is known (build with -arch=sm_90a)")
    text = secs.get(".text." + function)
    if text is None:
        have = sorted(k[6:] for k in secs if k.startswith(".text."))
        fail(f"{path}: no function {function!r} in the cubin (it has: {', '.join(have)})")
    if ".debug_line" not in secs:
        fail(f"{path}: the cubin has no line table: build it with -lineinfo")
    return text, line_rows(secs[".debug_line"])


def parse_range(text):
    try:
        file, span = text.rsplit(":", 1)
        lo, hi = (int(x) for x in span.split("-"))
    except ValueError:
        fail(f"--lines {text!r}: expected FILE:LO-HI, e.g. stream.cuh:40-130")
    return file, lo, hi


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cubin")
    ap.add_argument("--function", default="ms_megakernel")
    ap.add_argument("--lines", action="append", default=[], metavar="FILE:LO-HI")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = ap.parse_args()
    text, rows = read_function(args.cubin, args.function)
    addrs = [r[0] for r in rows]
    by_line = collections.Counter()
    for at in range(0, len(text) - 15, 16):
        op = struct.unpack_from("<Q", text, at)[0] & 0xFFF
        kind = "STL" if op == STL else "LDL" if op == LDL else None
        if kind is None:
            continue
        i = bisect.bisect_right(addrs, at) - 1
        file, line = (rows[i][1], rows[i][2]) if i >= 0 else ("?", 0)
        by_line[(file, line, kind)] += 1
    total = collections.Counter()
    for (_, _, kind), n in by_line.items():
        total[kind] += n
    ranges = []
    for spec in args.lines:
        file, lo, hi = parse_range(spec)
        c = collections.Counter()
        for (f, line, kind), n in by_line.items():
            if f == file and lo <= line <= hi:
                c[kind] += n
        ranges.append({"lines": spec, "stl": c["STL"], "ldl": c["LDL"]})
    doc = {"cubin": args.cubin, "function": args.function, "instructions": len(text) // 16,
           "stl": total["STL"], "ldl": total["LDL"], "ranges": ranges,
           "by_line": [{"file": f, "line": l, "kind": k, "count": n}
                       for (f, l, k), n in sorted(by_line.items())]}
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        print()
        return
    print(f"{args.function}: {doc['instructions']} instructions, STL {doc['stl']}, LDL {doc['ldl']}")
    for r in ranges:
        print(f"  {r['lines']}: STL {r['stl']}, LDL {r['ldl']}")
    for e in doc["by_line"]:
        print(f"  {e['file']}:{e['line']} {e['kind']} {e['count']}")


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the listing quietly
    main()
