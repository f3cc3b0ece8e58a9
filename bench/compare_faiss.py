#!/usr/bin/env python3
"""turbokv vs faiss-cpu TurboQuant-MSE scalar quantizers at equal bits, one thread.

Measures, on the same machine in the same run:
  encode:  vectors/s and input GB/s (fp32 in) — turbokv: fused randomized Hadamard +
           quantize + pack (BM_Encode); faiss: IndexScalarQuantizer(QT_<b>bit_tqmse).add(),
           with and without a faiss RandomRotationMatrix in front (TurboQuant needs a
           rotation; turbokv's encode includes it).
  inner products: keys scored per second for one query against 65536 packed keys —
           turbokv: TqMse::scores (BM_Scores); faiss: index.search(q, 1) (IP metric),
           which computes the same 65536 inner products from the codes.

Usage:  pip install faiss-cpu==1.15.1
        python3 bench/compare_faiss.py [--build build] [--json out.json]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np


def turbokv_numbers(build):
    exe = os.path.join(build, "bench", "bench_cpu")
    out = subprocess.run([exe, "--benchmark_filter=BM_(Encode|Scores)/", "--benchmark_format=json",
                          "--benchmark_min_time=0.2"], check=True, capture_output=True, text=True,
                         env=dict(os.environ, TURBOKV_THREADS="1")).stdout
    res = {}
    for b in json.loads(out)["benchmarks"]:
        name, bits, d = b["name"].split("/")[:3]
        res[(name, int(bits), int(d))] = b["items_per_second"]
    return res


def best_time(fn, reps=3):
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def faiss_numbers(bits, d, n=65536):
    import faiss
    faiss.omp_set_num_threads(1)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, d), dtype=np.float32)
    q = rng.standard_normal((1, d), dtype=np.float32)
    qt = getattr(faiss.ScalarQuantizer, f"QT_{bits}bit_tqmse")

    def make(rotate):
        idx = faiss.IndexScalarQuantizer(d, qt, faiss.METRIC_INNER_PRODUCT)
        if rotate:
            idx = faiss.IndexPreTransform(faiss.RandomRotationMatrix(d, d), idx)
        if not idx.is_trained:
            idx.train(x[:4096])
        return idx

    out = {}
    for rotate in (False, True):
        idx = make(rotate)
        t = best_time(lambda: (idx.reset(), idx.add(x)))
        out[("encode", rotate)] = n / t
        t = best_time(lambda: idx.search(q, 1), reps=5)
        out[("ip", rotate)] = n / t
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    try:
        import faiss  # noqa: F401
    except ImportError:
        sys.exit("needs faiss-cpu: pip install faiss-cpu==1.15.1")
    tk = turbokv_numbers(args.build)
    rows = []
    print(f"{'d':>4} {'bits':>4} | {'encode vec/s: turbokv':>22} {'faiss':>10} {'faiss+rot':>10} {'ratio':>6} |"
          f" {'IP keys/s: turbokv':>19} {'faiss':>10} {'faiss+rot':>10} {'ratio':>6}")
    for d in (64, 128, 256):
        for bits in (1, 2, 3, 4):
            f = faiss_numbers(bits, d)
            te, ti = tk[("BM_Encode", bits, d)], tk[("BM_Scores", bits, d)]
            row = dict(d=d, bits=bits, turbokv_encode=te, faiss_encode=f[("encode", False)],
                       faiss_rot_encode=f[("encode", True)], turbokv_ip=ti, faiss_ip=f[("ip", False)],
                       faiss_rot_ip=f[("ip", True)])
            rows.append(row)
            print(f"{d:>4} {bits:>4} | {te:>22.3g} {row['faiss_encode']:>10.3g} {row['faiss_rot_encode']:>10.3g}"
                  f" {te / row['faiss_encode']:>6.2f} | {ti:>19.3g} {row['faiss_ip']:>10.3g}"
                  f" {row['faiss_rot_ip']:>10.3g} {ti / row['faiss_ip']:>6.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"results": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
