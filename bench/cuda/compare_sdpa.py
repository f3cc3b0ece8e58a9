#!/usr/bin/env python3
"""Compare turbokv's CUDA decode attention with PyTorch SDPA on the same GPU, in one run.

Runs build/turbokv_cuda_bench (CUDA-event medians, buffers rotated past L2) and,
in the same process run on the same GPU, times:
  * torch SDPA fp16 with the cuDNN and FlashAttention backends (enable_gqa=True),
  * dequantize-then-SDPA: 4-bit TurboQuant codes -> fp16 K/V (unpack, centroid
    lookup, norm, inverse Hadamard as a matmul) followed by SDPA (the path that
    existing TurboQuant GPU code takes), at every head_dim where its temporaries
    fit in memory,
  * a device-to-device copy (bytes read + written) as the bandwidth ceiling.
All with triton.testing.do_bench (median; it flushes L2 between calls).
Prints one table: us, effective GB/s of bytes actually read, percent of the
measured copy bandwidth, speedup over the best fp16 SDPA.

  python3 bench/cuda/compare_sdpa.py --bin build/turbokv_cuda_bench [--quick] [--csv out.csv]
"""
import argparse
import csv
import math
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench


def med(fn):
    return do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3  # us


def copy_bandwidth():
    n = 2 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    a.random_(0, 255)
    us = med(lambda: b.copy_(a))
    return 2 * n / (us * 1e-6) / 1e9  # GB/s, read + write


def hadamard(d, device):
    h = torch.ones(1, 1, dtype=torch.float32)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h.to(device)


def sdpa_times(b, h, kv, d, ctx):
    q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.float16)
    k = torch.randn(b, kv, ctx, d, device="cuda", dtype=torch.float16)
    v = torch.randn(b, kv, ctx, d, device="cuda", dtype=torch.float16)
    out = {}
    for name, be in (("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa-flash", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel(be):
                F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                torch.cuda.synchronize()
                out[name] = med(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
        except Exception as e:  # backend not available for this shape
            out[name] = None
            print(f"  {name} unavailable for b={b} ctx={ctx} d={d}: {str(e).splitlines()[0][:120]}", file=sys.stderr)
    del k, v
    return out, 2 * b * kv * ctx * d * 2 + b * h * d * 2


def dequant_sdpa_time(b, h, kv, d, ctx):
    """4-bit codes + fp16 norms -> fp16 K, V -> SDPA (best backend available)."""
    cb = d // 2
    codes_k = torch.randint(0, 256, (b, kv, ctx, cb), dtype=torch.uint8, device="cuda")
    codes_v = torch.randint(0, 256, (b, kv, ctx, cb), dtype=torch.uint8, device="cuda")
    norms_k = torch.rand(b, kv, ctx, 1, device="cuda", dtype=torch.float16) + 0.5
    norms_v = torch.rand(b, kv, ctx, 1, device="cuda", dtype=torch.float16) + 0.5
    cent = torch.linspace(-0.2, 0.2, 16, device="cuda", dtype=torch.float16)
    rot = (hadamard(d, "cuda") / math.sqrt(d)).to(torch.float16)  # Pi^T up to the sign diagonal
    q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.float16)

    def deq(c, n):
        idx = torch.stack((c & 15, c >> 4), dim=-1).reshape(b, kv, ctx, d)
        return (cent[idx.long()] @ rot) * n

    def run():
        k = deq(codes_k, norms_k)
        v = deq(codes_v, norms_v)
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    run()
    torch.cuda.synchronize()
    us = med(run)
    return us, 2 * b * kv * ctx * (cb + 2) + b * h * d * 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/turbokv_cuda_bench")
    ap.add_argument("--quick", action="store_true", help="head_dim 128 only, batch 1 and 16, 32k and 64k")
    ap.add_argument("--csv", default="")
    ap.add_argument("--ours-csv", default="", help="reuse an existing turbokv_cuda_bench CSV instead of running it")
    args = ap.parse_args()

    configs = "128:32:8" if args.quick else "128:32:8,64:9:3,256:4:1"
    batches = "1,16" if args.quick else "1,8,16,64"
    contexts = "32768,65536" if args.quick else "4096,32768,65536,131072"
    ours_csv = args.ours_csv or "/tmp/turbokv_cuda_bench.csv"
    if not args.ours_csv:
        cmd = [args.bin, "--csv", ours_csv, "--configs", configs, "--batches", batches, "--contexts", contexts,
               "--bits", "2,3,4"]
        print("+", " ".join(cmd), flush=True)
        rc = subprocess.run(cmd).returncode
        if rc:
            print(f"turbokv_cuda_bench exited {rc}; comparing the rows it wrote", flush=True)
    ours = list(csv.DictReader(open(ours_csv)))

    gpu = torch.cuda.get_device_name()
    bw = copy_bandwidth()
    print(f"\nGPU: {gpu}; device-to-device copy: {bw:.0f} GB/s (read + write), torch {torch.__version__}")

    table = []
    shapes = sorted({(int(r["head_dim"]), int(r["num_heads"]), int(r["num_kv_heads"]), int(r["batch"]),
                      int(r["context"])) for r in ours if r["op"] == "decode_attention"})
    free = torch.cuda.mem_get_info()[0]
    for d, h, kv, b, ctx in shapes:
        rows = []
        fp16_bytes = 2 * b * kv * ctx * d * 2
        if fp16_bytes < free / 3:
            t, nbytes = sdpa_times(b, h, kv, d, ctx)
            for name, us in t.items():
                if us:
                    rows.append((name, 16, us, nbytes, ""))
        # the dequantize step's temporaries: int64 indices, the gathered centroids and the rotated fp16 K (then
        # V), ~20 bytes per element of one side at their peak
        if d in (64, 128, 256) and 20 * b * kv * ctx * d < 0.8 * free:
            try:
                us, nbytes = dequant_sdpa_time(b, h, kv, d, ctx)
                rows.append(("dequant+sdpa (4-bit)", 4, us, nbytes, ""))
            except torch.OutOfMemoryError:
                pass
        torch.cuda.empty_cache()
        for r in ours:
            if r["op"] != "decode_attention":
                continue
            if (int(r["head_dim"]), int(r["num_heads"]), int(r["num_kv_heads"]), int(r["batch"]),
                    int(r["context"])) != (d, h, kv, b, ctx):
                continue
            us = float(r["time_us"])
            if r["method"].startswith("fp16"):
                name = "turbokv fp16 (ours)"
            elif r["method"] in ("tq-prod keys", "tq-prod keys (8 warps)"):
                name = f"turbokv tq-prod K{r['bits']} V{r['bits']}" + (" 8warps" if "8 warps" in r["method"] else "")
            elif r["method"].startswith("tq-prod"):
                name = f"turbokv tq-prod K{r['bits']} V{r['bits']} cc"
            elif r["method"].startswith("qjl keys"):
                name = f"turbokv qjl K1 V{r['bits']}" + (" cc" if "cuda cores" in r["method"] else "")
            elif r["method"].startswith("fp8"):
                name = "turbokv fp8" + (" cc" if "cuda cores" in r["method"] else " 12warps" if "12 warps" in r["method"]
                                        else "")
            elif r["method"].startswith(("kivi", "rvq", "pvq", "polar")):
                name = f"turbokv {r['method'].split()[0]} K{r['bits']}V{r['bits']}" + (
                    " cc" if "cuda cores" in r["method"] else " 8warps" if "8 warps" in r["method"]
                    else " 12warps" if "12 warps" in r["method"] else "")
            else:
                name = f"turbokv tq-mse K{r['bits']}V{r['bits']}" + (
                    " cc" if "cuda cores" in r["method"] else " 3xtf32" if "3xtf32" in r["method"]
                    else " 1seq" if "1 seq/block" in r["method"]
                    else " pairs8w" if "pairs; 8 warps" in r["method"] else " pairs" if "pairs" in r["method"]
                    else " 8warps" if "8 warps" in r["method"] else "")
            # the bench's check of this row against the CPU reference (absent in CSVs from before session 20)
            rel = r.get("rel_err", "")
            rel = "" if rel in ("", None) or float(rel) < 0 else f"{float(rel):.2g}"
            rows.append((name, float(r["bits"]), us, float(r["gbps"]) * us * 1e3, rel))
        best = min([us for name, _, us, _, _ in rows if name.startswith("sdpa")], default=None)
        for name, bits, us, nbytes, rel in rows:
            gbps = nbytes / (us * 1e3)
            table.append(dict(head_dim=d, heads=f"{h}/{kv}", batch=b, context=ctx, method=name, bits=bits,
                              time_us=round(us, 1), gbps=round(gbps), pct_copy=round(100 * gbps / bw, 1),
                              speedup_vs_best_sdpa=round(best / us, 2) if best else "", rel_err=rel))

    hdr = (f"{'d':>4} {'heads':>6} {'batch':>5} {'ctx':>7} {'method':<26} {'us':>10} {'GB/s':>7} {'%copy':>6} "
           f"{'x best SDPA':>11} {'rel_err':>8}")
    print(hdr)
    for r in table:
        print(f"{r['head_dim']:>4} {r['heads']:>6} {r['batch']:>5} {r['context']:>7} {r['method']:<26} "
              f"{r['time_us']:>10.1f} {r['gbps']:>7} {r['pct_copy']:>6} {str(r['speedup_vs_best_sdpa']):>11} "
              f"{r['rel_err']:>8}")
    checked = [r for r in ours if float(r.get("check_tol", -1) or -1) >= 0]
    failed = [r for r in checked if not float(r["rel_err"]) <= float(r["check_tol"])]
    if checked:
        print(f"\nturbokv rows checked against the CPU reference: {len(checked)}, out of bounds: {len(failed)}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(table[0].keys()))
            w.writeheader()
            w.writerows(table)


if __name__ == "__main__":
    main()
