#!/usr/bin/env python3
"""Static SASS statistics of one kernel's main loop (no GPU needed).

Usage: python3 tools/sass_loopstat.py FILE.sass NAME_SUBSTRING [x | hot[=ADDR,ADDR,...]]
  FILE.sass: `cuobjdump -sass` output of a cubin, e.g.
    nvcc -O3 -std=c++20 -Iinclude -Isrc -arch=sm_90 -cubin -o k4.cubin src/cuda/decode_h16_k4.cu
    cuobjdump -sass k4.cubin > k4.sass
  (cuobjdump is not in the CUDA image here: `pip download nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`,
  unzip both and put their nvidia/cu13/bin on PATH: cuobjdump -sass runs nvdisasm.)
  NAME_SUBSTRING: part of the mangled kernel name, e.g. ILi128ELi4ELi4ELi8ELb0.
The main loop is the backward branch spanning the most HMMA instructions; prints its
instruction count and opcode histogram, and with a third argument the loop's listing.
`hot=ADDR,...` instead walks the loop once from its head, as one warp step of the common
case would: conditional branches at the listed addresses (hex) are taken, every other
conditional branch falls through (BRA.DIV never taken), unconditional forward branches are
followed; prints the walk's instruction count and histogram (`hot` alone lists the loop's
conditional branches, to choose from). Session 7 used it to rank variants of decode_h16
without the GPU: e.g. for decode_h16_kernel<128,4,4,16> the branches to take are the
page-16 bulk path, no soft-cap, and no new running max.
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
hot = len(sys.argv) > 3 and sys.argv[3].startswith('hot')
# main loop = the backward branch spanning the most HMMAs
best = None
for i, (a, s) in enumerate(ins):
    m = re.search(r'BRA (0x[0-9a-f]+)', s)
    if m:
        t = int(m.group(1), 16)
        if t < a:
            n = sum(1 for b, x in ins if t <= b <= a and 'HMMA' in x)
            # ties: the longest span (the listing/histogram modes), or for `hot` the shortest
            # (the innermost loop: the one whose head waits for the step's data)
            longer = (a - t < best[2] - best[1]) if (best and hot) else (best is None or a - t > best[2] - best[1])
            if best is None or n > best[0] or (n == best[0] and longer): best = (n, t, a)
n, lo, hi = best
body = [(a, s) for a, s in ins if lo <= a <= hi]
print('loop %x..%x: %d instructions, %d HMMA' % (lo, hi, len(body), n))
ops = collections.Counter(re.sub(r'^@!?U?P\w+ ', '', s).split()[0].split('.')[0] for a, s in body)
print(' '.join('%s:%d' % kv for kv in ops.most_common(40)))
if hot:
    arg = sys.argv[3]
    if '=' not in arg:
        for a, s in body:
            if s.startswith('@') and 'BRA' in s: print('%05x %s' % (a, s))
        sys.exit(0)
    taken = {int(x, 16) for x in arg.split('=', 1)[1].split(',') if x}
    where = {a: i for i, (a, s) in enumerate(body)}
    i, walk = 0, []
    while i < len(body):
        a, s = body[i]
        walk.append(s)
        if a == hi: break
        m = re.search(r'BRA(?:\.U\.ANY)?\s+(?:!?U?P\d,\s*)?0x([0-9a-f]+)', s)
        if m and 'BRA.DIV' not in s:
            t = int(m.group(1), 16)
            if (not s.startswith('@') or a in taken) and t in where and t > a:
                i = where[t]
                continue
        i += 1
    print('hot walk: %d instructions' % len(walk))
    hops = collections.Counter(re.sub(r'^@!?U?P\w+ ', '', s).split()[0] for s in walk)
    print(' '.join('%s:%d' % kv for kv in hops.most_common(60)))
elif len(sys.argv) > 3:
    for a, s in body: print('%05x %s' % (a, s))
