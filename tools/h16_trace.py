#!/usr/bin/env python3
"""Phases of decode_h16_kernel's blocks from a trace of the diagnostic build (no GPU needed).

Build with the stamps compiled in and let the CUDA bench write them (one traced call per timed case):
  cmake -S . -B build-trace -DTURBOKV_CUDA=ON -DCMAKE_CUDA_FLAGS=-DTURBOKV_H16_TRACE
  TURBOKV_H16_TRACE_FILE=trace.csv build-trace/turbokv_cuda_bench --configs 128:32:8 --batches 16 \\
      --contexts 32768 --bits 4 --methods tq-mse --no-check
  python3 tools/h16_trace.py trace.csv
Rows of trace.csv: call, median_us, block, then the block's words (src/cuda/common.cuh h16_trace_buf:
[0] smid, [1] entry, [2] set-up done, [3..19) each warp's main-loop end, [19] merge start, [20] end,
[21..23] thread 0's set-up stamps; %globaltimer ns). Prints per traced call min / median / max over
blocks (us): set-up, main loop (to the last warp's end), the spread of warp ends within a block, merge
and epilogue, and the block's end relative to the first block's entry.
"""
import collections
import statistics
import sys


def q(v):
    return "%6.1f /%6.1f /%6.1f" % (min(v), statistics.median(v), max(v))


for path in sys.argv[1:]:
    calls = collections.defaultdict(list)
    for line in open(path):
        f = line.strip().split(",")
        calls[(int(f[0]), f[1])].append([int(x) for x in f[3:]])
    print(path)
    for (call, med), rows in sorted(calls.items()):
        t0 = min(r[1] for r in rows)
        ends = [[x for x in r[3:19] if x] for r in rows]
        setup = [(r[2] - r[1]) / 1e3 for r in rows]
        loop = [(max(e) - r[2]) / 1e3 for r, e in zip(rows, ends)]
        spread = [(max(e) - min(e)) / 1e3 for e in ends]
        merge = [(r[20] - r[19]) / 1e3 for r in rows]
        end = [(r[20] - t0) / 1e3 for r in rows]
        print(f" call {call}: median {med} us, {len(rows)} blocks (min / median / max, us)")
        print(f"   set-up {q(setup)} | loop {q(loop)} | warp-end spread {q(spread)}")
        print(f"   merge + epilogue {q(merge)} | block end {q(end)}")
        if all(r[21] and r[22] and r[23] for r in rows):
            parts = [[(r[k] - r[k - 1 if k > 21 else 1]) / 1e3 for r in rows] for k in (21, 22, 23)]
            wait = [(r[2] - r[23]) / 1e3 for r in rows]
            print(f"   thread 0: to [21] {q(parts[0])} | [21]->[22] {q(parts[1])} | [22]->[23] {q(parts[2])}"
                  f" | [23]->barrier {q(wait)}")
