#!/usr/bin/env python3
"""Innermost loops of x86-64 object code that spill vector registers or call functions (no run needed).

Usage: python3 tools/x86_loopstat.py FILE.o [NAME_SUBSTRING] [--all]
  FILE.o: an object compiled with the build's flags, e.g. the command `ninja -C build -t commands |
  grep kernels_avx2.cpp` prints, with `-o /tmp/k.o` in place of its output and its -MD/-MT/-MF
  options dropped (run it from build/).
  NAME_SUBSTRING: only functions whose demangled name contains it.
For every innermost loop (a backward jump with no other backward jump inside its range) that holds at
least 4 FMAs, counts vector stores to the stack (`vmov* %ymm/%zmm, off(%rsp|%rbp)`), FMAs with a stack
operand and calls, and prints the loops where any of them is non-zero (worst first), as
(stores, stack FMAs, calls, FMAs, instructions) and the function. `--all` prints every such loop.
Session 23 found with it, on AVX2, an accumulator of the 4-head TurboQuant value loop kept on the
stack (a load-FMA-store chain per token) and a per-token out-of-line call in the KIVI / RVQ value
loops, which saves and restores every live vector register (docs/RESULTS.md, CPU "Session 23").
A flagged loop may be harmless (a block-level loop whose body calls the per-block kernels): read the
listing (`objdump -d --no-show-raw-insn -C FILE.o`) before changing code.
"""
import re
import subprocess
import sys


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if not args:
        print(__doc__)
        return 2
    show_all = "--all" in sys.argv
    obj, name_filter = args[0], (args[1] if len(args) > 1 else "")
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", obj], capture_output=True, text=True,
                         check=True).stdout
    funcs, cur = [], None
    for line in out.splitlines():
        m = re.match(r"^([0-9a-f]+) <(.*)>:$", line)
        if m:
            cur = (m.group(2), [])
            funcs.append(cur)
            continue
        m = re.match(r"^\s+([0-9a-f]+):\s+(.*)$", line)
        if m and cur:
            cur[1].append((int(m.group(1), 16), m.group(2)))
    store = re.compile(r"vmov\w+\s+%[yz]mm\d+,-?0x[0-9a-f]*\(%r[sb]p\)")
    rows = []
    for name, ins in funcs:
        if name_filter not in name:
            continue
        loops = []
        for addr, text in ins:
            m = re.match(r"j\w+\s+([0-9a-f]+)", text)
            if m and int(m.group(1), 16) < addr:
                loops.append((int(m.group(1), 16), addr))
        for s, e in loops:
            if any(s <= s2 and e2 <= e and (s2, e2) != (s, e) for s2, e2 in loops):
                continue  # not innermost
            body = [t for a, t in ins if s <= a <= e]
            fmas = sum(1 for t in body if t.startswith("vfmadd"))
            if fmas < 4:
                continue
            st = sum(1 for t in body if store.match(t))
            sfma = sum(1 for t in body if t.startswith("vfmadd") and re.search(r"\(%r[sb]p\)", t))
            calls = sum(1 for t in body if t.startswith("call"))
            if show_all or st or sfma or calls:
                rows.append(((st, sfma, calls, fmas, len(body)), name))
    rows.sort(key=lambda r: -(r[0][0] + r[0][1] + r[0][2]))
    for stats, name in rows:
        print(stats, name[:160])
    print(f"{len(rows)} loops listed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
