#!/usr/bin/env python3
"""Which instructions of a cubin wait on the scoreboard of a source line's loads, with no nvdisasm.

A warp tracks its variable-latency results (global and local loads, shared-memory reads) on six
scoreboards, and an instruction that needs one of them waits until every load on that scoreboard
has landed: a scoreboard is a counter, not a per-load flag. ptxas shares the six under register
pressure, so in the megakernel a warp's preloaded weight chunks (`stream.cuh` `WarpStream::load`)
and later short loads (the task's wait head, the dependency poll) end up on one scoreboard, and the
poll and the input staging then wait for the weights (dev/perf_log.md section 44). This finds, for
each group of loads on one source line (FROM), the scoreboards they write, and lists the
instructions after them that wait on those scoreboards before another line (UNTIL) is reached.

Encoding (sm_90; the control bits are those of Volta to Hopper, not re-checked against nvdisasm,
which the machine this was written on lacked): each instruction is 16 bytes, two little-endian
uint64, w = lo | hi << 64. opcode = w & 0xfff; control = w >> 105, of which stall = control & 0xf,
yield = (control >> 4) & 1, write scoreboard = (control >> 5) & 7 and read scoreboard =
(control >> 8) & 7 (7 = none), wait mask = (control >> 11) & 0x3f (bit k: waits on scoreboard k).
Source lines come from the line table of `-lineinfo` (.debug_line), as in dev/sass_spills.py. The
scan is in address order, not along the control flow: a wait after a branch is listed although
the branch may not reach it. Other architectures are refused.

Each group reports its LDGs' scoreboards, the `waits` (instructions whose wait mask holds one of
them) and the `joins` (later instructions that write one of them: what waits on the scoreboard
then waits for those too, e.g. a local load of the task's wait head). JSON: {cubin, function,
instructions, from, until, until_op, window, groups: [{first, last (addresses), loads,
scoreboards, scanned, until (the instruction that ended the scan, or null at the window's end),
waits, joins}], dump (with --dump)}; each listed instruction is {address, at (FILE:LINE), file,
line, opcode (name or hex), stall, yield, wb, rb (null: none), wait_mask, wait (scoreboards)}.

usage: dev/sass_waits.py CUBIN [--function NAME] --from FILE:LINE --until FILE:LINE
                         [--until-op OP] [--window N] [--dump] [--json]
  --function  the .text section to read (default ms_megakernel)
  --from      the loads' line (file base name): each group of its LDGs (a maximal run with at most
              64 other instructions between successive ones) is one report entry
  --until     where a group's scan ends: the first LDG after the group on this line (included:
              its own wait mask counts), e.g. common.cuh:354, the poll's load; the line's
              address arithmetic is often scheduled a few instructions ahead of its load
  --until-op  the opcode that ends the scan on UNTIL: a name above, hex, or `any` (default LDG)
  --window    scan at most N instructions after a group's last LDG (default 400)
  --dump      also every instruction: address, file:line, opcode, stall, yield, scoreboards
exit 0, or 2 on a bad input (with a hint).

  dev/sass_waits.py mk.cubin --from stream.cuh:91 --until common.cuh:354
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
from sass_spills import read_function  # noqa: E402


def fail(msg):
    print(f"sass_waits: {msg}", file=sys.stderr)
    sys.exit(2)


sass_spills.fail = fail  # the reader's errors under this tool's name

OPCODES = {0x981: "LDG", 0x983: "LDL", 0x984: "LDS", 0x986: "STG", 0x387: "STL", 0x98F: "CCTL",
           0x992: "MEMBAR", 0x95D: "NANOSLEEP", 0x806: "VOTE", 0x947: "BRA", 0x94D: "EXIT",
           0xB1D: "BAR"}
LDG = 0x981
NO_SB = 7  # a write or read scoreboard field of 7: none
GROUP_GAP = 64  # most other instructions between two LDGs of one group


def decode(text, rows):
    """One dict per instruction of `text`: address, source line, opcode and control bits."""
    addrs = [r[0] for r in rows]
    out = []
    for at in range(0, len(text) - 15, 16):
        lo, hi = struct.unpack_from("<QQ", text, at)
        w = lo | hi << 64
        op, control = w & 0xFFF, w >> 105
        i = bisect.bisect_right(addrs, at) - 1
        file, line = (rows[i][1], rows[i][2]) if i >= 0 else ("?", 0)
        wb, rb, mask = (control >> 5) & 7, (control >> 8) & 7, (control >> 11) & 0x3F
        out.append({"address": at, "file": file, "line": line, "at": f"{file}:{line}", "op": op,
                    "opcode": OPCODES.get(op, f"0x{op:03x}"), "stall": control & 0xF,
                    "yield": (control >> 4) & 1, "wb": None if wb == NO_SB else wb,
                    "rb": None if rb == NO_SB else rb, "wait_mask": mask,
                    "wait": [k for k in range(6) if mask >> k & 1]})
    return out


def parse_at(flag, text):
    try:
        file, line = text.rsplit(":", 1)
        line = int(line)
    except ValueError:
        fail(f"{flag} {text!r}: expected FILE:LINE, e.g. stream.cuh:91")
    return file, line


def groups(insts, file, line):
    """[[index of an LDG on FILE:LINE, ...], ...]: runs with at most GROUP_GAP others between."""
    out = []
    for i, x in enumerate(insts):
        if x["op"] != LDG or x["file"] != file or x["line"] != line:
            continue
        if out and i - out[-1][-1] - 1 <= GROUP_GAP:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def entry(x):
    """The fields of a listed instruction (the JSON and the text report)."""
    keys = ("address", "at", "file", "line", "opcode", "stall", "yield", "wb", "rb", "wait_mask",
            "wait")
    return {k: x[k] for k in keys}


def parse_op(text):
    """The opcode of --until-op: a known name, hex, or None for `any`."""
    if text.lower() == "any":
        return None
    names = {v: k for k, v in OPCODES.items()}
    if text.upper() in names:
        return names[text.upper()]
    try:
        return int(text, 16)
    except ValueError:
        fail(f"--until-op {text!r}: expected any, hex (0x981) or one of {', '.join(names)}")


def ends(x, until, op):
    """Whether instruction x ends a scan: on UNTIL, with opcode op (None: any)."""
    return (x["file"], x["line"]) == until and (op is None or x["op"] == op)


def scan(insts, group, until, op, window):
    """A group's report: its scoreboards and what waits on (or is added to) them until UNTIL."""
    sbs = sorted({insts[i]["wb"] for i in group if insts[i]["wb"] is not None})
    mask = sum(1 << k for k in sbs)
    last = group[-1]
    waits, joins, stop = [], [], None
    end = min(len(insts), last + 1 + window)
    for i in range(last + 1, end):
        x = insts[i]
        if x["wait_mask"] & mask:
            waits.append(entry(x))
        if x["wb"] in sbs:  # a later load on the same counter: what waits on it waits for both
            joins.append(entry(x))
        if ends(x, until, op):
            stop = entry(x)
            end = i + 1
            break
    return {"first": insts[group[0]]["address"], "last": insts[last]["address"],
            "loads": len(group), "scoreboards": sbs, "scanned": end - last - 1, "until": stop,
            "waits": waits, "joins": joins}


def sb(k):
    return "-" if k is None else f"SB{k}"


def show(x):
    wait = ",".join(f"SB{k}" for k in x["wait"]) or "-"
    return (f"0x{x['address']:05x} {x['at']:<22} {x['opcode']:<9} stall {x['stall']:>2}"
            f" y{x['yield']} wb {sb(x['wb']):<3} rb {sb(x['rb']):<3} wait {wait}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cubin")
    ap.add_argument("--function", default="ms_megakernel")
    ap.add_argument("--from", dest="from_", metavar="FILE:LINE", help="the loads' line")
    ap.add_argument("--until", metavar="FILE:LINE", help="where a group's scan ends")
    ap.add_argument("--until-op", default="LDG", metavar="OP", help="default LDG; any")
    ap.add_argument("--window", type=int, default=400, metavar="N")
    ap.add_argument("--dump", action="store_true", help="also every instruction")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = ap.parse_args()
    if (args.from_ is None) != (args.until is None) or (args.from_ is None and not args.dump):
        fail("give --from FILE:LINE and --until FILE:LINE (or --dump alone), e.g. "
             "--from stream.cuh:91 --until common.cuh:354")
    if args.window < 1:
        fail(f"--window {args.window}: expected a positive instruction count")
    until_op = parse_op(args.until_op)
    stop_op = "instruction" if until_op is None else args.until_op
    where = [parse_at(f, t) for f, t in (("--from", args.from_), ("--until", args.until)) if t]
    insts = decode(*read_function(args.cubin, args.function))
    if where and not any((x["file"], x["line"]) == where[0] for x in insts):
        fail(f"no instruction of {args.function} is on {args.from_} (a file's base name and a "
             "line of its source; --dump lists them)")
    if where and not any(ends(x, where[1], until_op) for x in insts):
        fail(f"no {stop_op} of {args.function} is on {args.until} (--dump lists the lines; "
             "--until-op any ends on any instruction)")
    doc = {"cubin": args.cubin, "function": args.function, "instructions": len(insts)}
    if where:
        doc.update({"from": args.from_, "until": args.until, "until_op": args.until_op,
                    "window": args.window,
                    "groups": [scan(insts, g, where[1], until_op, args.window)
                               for g in groups(insts, *where[0])]})
    if args.dump:
        doc["dump"] = [entry(x) for x in insts]
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        print()
        return
    print(f"{args.function}: {len(insts)} instructions")
    for x in doc.get("dump", []):
        print(f"  {show(x)}")
    if not where:
        return
    print(f"{len(doc['groups'])} group(s) of LDG on {args.from_}, scanned to the first {stop_op} "
          f"on {args.until} or {args.window} instructions")
    for n, g in enumerate(doc["groups"]):
        stop = (f"{args.until} at 0x{g['until']['address']:05x}" if g["until"]
                else "no UNTIL in the window")
        print(f"group {n}: {g['loads']} LDG 0x{g['first']:05x}-0x{g['last']:05x} on "
              f"{','.join(map(sb, g['scoreboards'])) or 'no scoreboard'}; {g['scanned']} "
              f"instructions to {stop}: {len(g['waits'])} wait(s), {len(g['joins'])} join(s)")
        for x in g["waits"]:
            print(f"  wait {show(x)}")
        joined = collections.Counter((x["opcode"], x["at"]) for x in g["joins"])
        if joined:  # by line in the text (the JSON lists each)
            print("  joined by " + ", ".join(f"{n} {op} {at}" for (op, at), n in joined.items()))


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the listing quietly
    main()
