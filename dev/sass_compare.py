#!/usr/bin/env python3
"""How far two builds of the megakernel differ in the machine code of some source lines.

Reads two sm_90 cubins built with -lineinfo (as dev/sass_spills.py does, no nvdisasm needed) and,
for a range of source lines in each (FILE:LO-HI; the ranges may differ when one tree inserted
lines above), compares the instructions the line table attributes to it: their count, how many are
the same 16-byte word at the same index, the opcodes (low 12 bits) whose counts differ, and where
the range starts relative to a 128-byte line. Also whether the whole function is byte for byte the
same. Used for dev/perf_log.md section 31: an untaken path changed the streamed GEMV's own loop.

usage: dev/sass_compare.py A.cubin B.cubin --lines-a FILE:LO-HI [--lines-b FILE:LO-HI] [--json]
exit 0, or 2 on a bad input (with a hint).
"""
import argparse
import bisect
import collections
import json
import os
import signal
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sass_spills  # noqa: E402  (the ELF and line-table reader)


def fail(msg):
    print(f"sass_compare: {msg}", file=sys.stderr)
    sys.exit(2)


sass_spills.fail = fail  # the reader's errors under this tool's name


def attributed(path, function, file, lo, hi):
    """(whole .text, [(offset, 16-byte word)] of the instructions of FILE:LO-HI in address order)."""
    text, rows = sass_spills.read_function(path, function)
    addrs = [r[0] for r in rows]
    out = []
    for at in range(0, len(text) - 15, 16):
        i = bisect.bisect_right(addrs, at) - 1
        if i >= 0 and rows[i][1] == file and lo <= rows[i][2] <= hi:
            out.append((at, text[at:at + 16]))
    return text, out


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends it quietly
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--function", default="ms_megakernel")
    ap.add_argument("--lines-a", required=True, metavar="FILE:LO-HI")
    ap.add_argument("--lines-b", metavar="FILE:LO-HI", help="default: --lines-a")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    fa, la, ha = sass_spills.parse_range(args.lines_a)
    fb, lb, hb = sass_spills.parse_range(args.lines_b or args.lines_a)
    text_a, a = attributed(args.a, args.function, fa, la, ha)
    text_b, b = attributed(args.b, args.function, fb, lb, hb)
    if not a or not b:
        fail("no instruction is attributed to the range in "
                         f"{args.a if not a else args.b}: check FILE:LO-HI against its sources")
    op = lambda w: struct.unpack_from("<Q", w)[0] & 0xFFF
    ca = collections.Counter(op(w) for _, w in a)
    cb = collections.Counter(op(w) for _, w in b)
    doc = {
        "function_identical": text_a == text_b,
        "instructions": [len(text_a) // 16, len(text_b) // 16],
        "range_instructions": [len(a), len(b)],
        "same_word_same_index": sum(1 for x, y in zip(a, b) if x[1] == y[1]),
        "same_opcode_sequence": [op(w) for _, w in a] == [op(w) for _, w in b],
        "opcode_counts_differ": {hex(k): [ca[k], cb[k]] for k in sorted(set(ca) | set(cb))
                                 if ca[k] != cb[k]},
        "range_start_mod_128": [a[0][0] % 128, b[0][0] % 128],
    }
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        print()
        return
    for k, v in doc.items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    main()
