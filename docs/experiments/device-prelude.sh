# Sourced first by the device scripts of docs/experiments (session 43 on) in the repository root: $OUT (the
# run's output folder), the carried Debian deps (bench/cuda/device_deps.sh), T0 (the start, seconds), the binary
# that carry-build.sh packed, unpacked to $T (/tmp/tkv_dev), and the summary file $S, which begins with the GPU's
# name. A script appends its lines to $S and ends with `cat $S` (a long output truncates the reply's tail).
set -uo pipefail
OUT=${OUT:-/tmp/tkv_out}; mkdir -p "$OUT"
. bench/cuda/device_deps.sh
T0=$(date +%s)
T=/tmp/tkv_dev
xz -dc build-carry/tkv_dev.xz > $T && chmod +x $T
S=$OUT/summary.txt
nvidia-smi --query-gpu=name --format=csv,noheader > $S
