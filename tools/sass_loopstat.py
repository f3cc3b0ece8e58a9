#!/usr/bin/env python3
"""Static SASS statistics of one kernel's main loop (no GPU needed).

Usage: python3 tools/sass_loopstat.py FILE.sass NAME_SUBSTRING [x]
  FILE.sass: `cuobjdump -sass` output of a cubin, e.g.
    nvcc -O3 -std=c++20 -Iinclude -Isrc -arch=sm_90 -cubin -o k4.cubin src/cuda/decode_h16_k4.cu
    cuobjdump -sass k4.cubin > k4.sass
  (cuobjdump is not in the CUDA image here: `pip download nvidia-cuda-cuobjdump` and unzip it.)
  NAME_SUBSTRING: part of the mangled kernel name, e.g. ILi128ELi4ELi4ELi8ELb0.
The main loop is the backward branch spanning the most HMMA instructions; prints its
instruction count and opcode histogram, and with a third argument the loop's listing.
"""
import re, sys, collections
txt = open(sys.argv[1]).read()
funcs = re.split(r'\n\s*Function : ', txt)
f = [x for x in funcs if x.startswith(sys.argv[2]) or sys.argv[2] in x.split('\n')[0]][0]
ins = []
for line in f.split('\n'):
    m = re.match(r'\s+/\*([0-9a-f]{4,})\*/\s+(.*?);', line)
    if m: ins.append((int(m.group(1), 16), m.group(2).strip()))
print('total', len(ins))
# main loop = the backward branch spanning the most HMMAs
best = None
for i, (a, s) in enumerate(ins):
    m = re.search(r'BRA (0x[0-9a-f]+)', s)
    if m:
        t = int(m.group(1), 16)
        if t < a:
            n = sum(1 for b, x in ins if t <= b <= a and 'HMMA' in x)
            if best is None or n > best[0] or (n == best[0] and a - t > best[2] - best[1]): best = (n, t, a)
n, lo, hi = best
body = [(a, s) for a, s in ins if lo <= a <= hi]
print('loop %x..%x: %d instructions, %d HMMA' % (lo, hi, len(body), n))
ops = collections.Counter(re.sub(r'^@!?U?P\w+ ', '', s).split()[0].split('.')[0] for a, s in body)
print(' '.join('%s:%d' % kv for kv in ops.most_common(40)))
if len(sys.argv) > 3:
    for a, s in body: print('%05x %s' % (a, s))
