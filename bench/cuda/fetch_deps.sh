#!/usr/bin/env bash
# Run HERE (not on the device) before a device call: the device image has no
# GoogleTest/fmt/nlohmann-json/CLI11/Eigen/Benchmark and no network, so their
# Debian packages travel in .deps/ (ignored by git: add "/.deps/" to
# .git/info/exclude) and run_device.sh unpacks them. Pass carry: [".deps"].
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.deps/' .git/info/exclude 2>/dev/null || echo '/.deps/' >> .git/info/exclude
mkdir -p .deps && cd .deps
apt-get download libgtest-dev libfmt-dev libfmt9 nlohmann-json3-dev libcli11-dev libeigen3-dev \
  libbenchmark-dev libbenchmark1debian
ls -1
