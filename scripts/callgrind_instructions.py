"""Instruction by instruction: where one function's executed instructions go, from a
callgrind profile, beside its disassembly. For a count that rose between builds with no
change to the function's source (scripts/count_against.py says how much; this says
which instructions): run the workload's driver under callgrind for each build, then
compare what this prints.

    valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file=OUT \\
        python -P scripts/count_against.py --drive sample 220
    python scripts/callgrind_instructions.py OUT path/to/_gearjax*.so GatherRows

Prints how often the function was entered, its self cost, then each instruction's
address in the library, cost and disassembly (objdump), and a summary by execution
count: instructions that ran equally often form a loop body or a straight run, so a
class that gained an instruction shows where the code generation changed. Callgrind
counts at run-time addresses; the function's entry, which every call executes, ties
them to the library's. Needs objdump (binutils) and a profile made with
--dump-instr=yes.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess


def self_costs(profile: str, needle: str) -> dict[int, int]:
    """Self cost by run-time address of the functions whose name contains
    `needle` (callgrind's format: names compressed as (id), positions
    "instr line" given absolutely or relative to the previous line, a
    call's cost on the line after its calls= line)."""
    names: dict[str, str] = {}
    costs: collections.Counter[int] = collections.Counter()
    function = ""
    address = 0
    after_call = False
    positions = 1
    for line in open(profile, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        if line.startswith("positions:"):
            positions = len(line.split()) - 1
            continue
        named = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?", line)
        if named:
            kind, ident, name = named.groups()
            if name:
                names[ident] = name
            if kind == "fn":
                function = names.get(ident, "")
            continue
        if line.startswith("calls="):
            after_call = True
            continue
        if not line or line[0] not in "0123456789+-*":
            continue
        fields = line.split()
        address = _position(fields[0], address)
        if after_call:
            after_call = False
            continue
        if needle in function and len(fields) > positions:
            costs[address] += int(fields[positions])
    return dict(costs)


def _position(field: str, previous: int) -> int:
    if field == "*":
        return previous
    if field[0] in "+-":
        step = int(field[1:], 0)
        return previous + step if field[0] == "+" else previous - step
    return int(field, 0)


def disassembly(library: str, needle: str) -> tuple[int, dict[int, str]]:
    """The function's entry address in `library` and every instruction's text."""
    text = subprocess.check_output(["objdump", "-d", "--no-show-raw-insn", "-C", library],
                                   text=True)
    entry = None
    instructions = {}
    for line in text.splitlines():
        symbol = re.match(r"^([0-9a-f]+) <(.*)>:$", line)
        if symbol and entry is None and needle in symbol.group(2) and \
                "@plt" not in symbol.group(2):
            entry = int(symbol.group(1), 16)
        instruction = re.match(r"^\s+([0-9a-f]+):\s+(.*)$", line)
        if instruction:
            instructions[int(instruction.group(1), 16)] = instruction.group(2)
    if entry is None:
        raise SystemExit(f"no function matching {needle!r} in {library}")
    return entry, instructions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", help="callgrind out file (made with --dump-instr=yes)")
    parser.add_argument("library", help="the shared library the function is in")
    parser.add_argument("function", help="a substring of the function's demangled name")
    args = parser.parse_args()
    costs = self_costs(args.profile, args.function)
    if not costs:
        raise SystemExit(f"no cost for {args.function!r} in {args.profile}")
    entry, instructions = disassembly(args.library, args.function)
    base = min(costs) - entry  # the entry is the lowest address every call runs
    entries = costs.get(entry + base, 0)
    print(f"{args.function}: entered {entries} times, {sum(costs.values())} instructions")
    for address, cost in sorted(costs.items()):
        print(f"  {address - base:x} {cost:>11} {instructions.get(address - base, '?')}")
    by_count: collections.Counter[int] = collections.Counter(costs.values())
    print("by execution count (count: instructions, their cost):")
    for count, n in sorted(by_count.items(), key=lambda kv: -kv[0] * kv[1])[:12]:
        print(f"  {count:>11}: {n:>4} instructions, {count * n}")


if __name__ == "__main__":
    main()
