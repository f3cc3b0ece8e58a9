#!/usr/bin/env python3
"""A/B of two turbokv_cuda_bench CSV sets for the staged decode (KIVI, RVQ, product VQ, PolarQuant).

usage: staged_ab.py A_RAW0[,more] A_RAW1[,more] B_RAW0[,more] B_RAW1[,more]

Each argument is a comma-separated list of CSVs of one setting (TURBOKV_STAGED_RAW=0 or 1); per shape
the minimum over a list is taken. Prints per shape A, B and A / B (> 1: B faster) for both settings,
B's best time against the in-run fp16 flash-decode of B_RAW1's first file, and the geometric means.
"""
import csv
import math
import sys


def load(f):
    d = {}
    for r in csv.DictReader(open(f)):
        d[(r['method'].split(' ')[0], r['bits'], r['context'], r['head_dim'], r['batch'])] = float(r['time_us'])
    return d


def mn(fs):
    ds = [load(f) for f in fs]
    return {k: min(d[k] for d in ds) for k in ds[0]}


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    a0, a1, b0, b1 = (mn(x.split(',')) for x in sys.argv[1:])
    print("method bits context head_dim batch | raw0 A B A/B | raw1 A B A/B | fp16 fp16/best(B)")
    g0, g1 = [], []
    for k in b1:
        if k[0].startswith('fp16'):
            continue
        fp = b1[('fp16-flash-decode', '16', k[2], k[3], k[4])]
        g0.append(a0[k] / b0[k])
        g1.append(a1[k] / b1[k])
        print(*k, f"| {a0[k]:8.1f} {b0[k]:8.1f} {a0[k] / b0[k]:.2f} | {a1[k]:8.1f} {b1[k]:8.1f} {a1[k] / b1[k]:.2f} "
              f"| {fp:7.1f} {fp / min(b0[k], b1[k]):.2f}")
    gm = lambda g: math.exp(sum(map(math.log, g)) / len(g))
    print(f"geomean A/B raw0 {gm(g0):.3f} raw1 {gm(g1):.3f} ({len(g0)} shapes)")


if __name__ == '__main__':
    main()
