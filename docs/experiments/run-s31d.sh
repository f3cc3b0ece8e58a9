# Session 31 device run s31-4: why KIVI's d256 CUDA-core kernel got 14% slower with the step sums (run s31-1).
# Compiles only kivi.cu in A (this tree) and B (staged-step-sum-s31.patch reversed) and compares the SASS of the
# staged_decode_kernel instances with KC = 8 (head_dim 256): instruction counts, local-memory traffic, registers.
# Usage: export OUT && bash docs/experiments/run-s31d.sh   (everything lands in $OUT/s31d.tgz)
set -uo pipefail
R=/tmp/s31d; rm -rf $R; mkdir -p $R
exec > >(tee -a "$R/s31d.log") 2>&1
T0=$(date +%s)
rm -rf /tmp/treeB && mkdir -p /tmp/treeB && tar cf - --exclude=./build --exclude=./buildB --exclude=./.deps . | tar xf - -C /tmp/treeB
(cd /tmp/treeB && patch -R -p1 < docs/experiments/staged-step-sum-s31.patch) || echo "PATCH FAILED"
FLAGS="-std=c++20 -O3 -Iinclude -Isrc -gencode=arch=compute_90,code=sm_90 -lineinfo -Xptxas -v"
(nvcc $FLAGS -c -o $R/A.o src/cuda/kivi.cu > $R/ptxasA.log 2>&1; echo "A rc=$?") &
(cd /tmp/treeB && nvcc $FLAGS -c -o $R/B.o src/cuda/kivi.cu > $R/ptxasB.log 2>&1; echo "B rc=$?") &
wait %1 %2; echo "compiled $(( $(date +%s)-T0 )) s"
for V in A B; do cuobjdump -sass $R/$V.o > $R/$V.sass; done
python3 - $R <<'PY'
import re, sys
R = sys.argv[1]
def funcs(path):
    out, name, body = {}, None, []
    for line in open(path):
        m = re.search(r'Function : (\S+)', line)
        if m:
            if name: out[name] = body
            name, body = m.group(1), []
        elif name and re.search(r'/\*[0-9a-f]{4,}\*/', line):
            body.append(line)
    if name: out[name] = body
    return out
A, B = funcs(f'{R}/A.sass'), funcs(f'{R}/B.sass')
for n in sorted(A):
    if 'staged_decode_kernel' not in n or 'Li8EEEv' not in n: continue
    a, b = A[n], B.get(n, [])
    cnt = lambda body, pat: sum(1 for l in body if re.search(pat, l))
    print(n[-60:], f'A {len(a)} instr (LDL {cnt(a, "LDL")}, STL {cnt(a, "STL")}, FFMA {cnt(a, "FFMA")}, LDS {cnt(a, "LDS")}, BRA {cnt(a, "BRA")})',
          f'| B {len(b)} instr (LDL {cnt(b, "LDL")}, STL {cnt(b, "STL")}, FFMA {cnt(b, "FFMA")}, LDS {cnt(b, "LDS")}, BRA {cnt(b, "BRA")})')
PY
grep -A2 "Li8EEEv" $R/ptxasA.log | grep -E "registers|spill" | head -8
grep -A2 "Li8EEEv" $R/ptxasB.log | grep -E "registers|spill" | head -8
echo "done $(( $(date +%s)-T0 )) s"
tar czf $OUT/s31d.tgz -C /tmp s31d
