// Product VQ with smoothing and Hadamard (VecInfer-style).
//
// Calibration (on x[n, d]): smoothing lambda_j = sqrt(max_t |x_tj|) per channel
// (1 where the channel is all zero), z_t = Pi (x_t / lambda) with the
// randomized Hadamard Pi, then for each sub-vector s (g consecutive rotated
// coordinates) a k-means codebook C_s of K = 2^c centroids (k-means++ seeding
// from Rng(seed + 1000003 * (s + 1)), `kmeans_iters` Lloyd iterations, empty clusters keep
// their centroid). lambda and C are stored in fp16 and counted in side_bytes().
//
//   encode: code_s = argmin_k ||z_s - C_s[k]||^2 (ties -> lowest k)
//   decode: x_hat = lambda * Pi^T concat_s C_s[code_s]
//   score:  q' = Pi (lambda * q), LUT_s[k] = <q'_s, C_s[k]>, <q, x_hat> = sum_s LUT_s[code_s]
//
// bits -> (g, c): 1 -> (8, 8), 2 -> (4, 8), 3 -> (2, 6), 4 -> (2, 8): c/g bits per coordinate.
#include <algorithm>
#include <cmath>
#include <limits>

#include "pvq.h"
#include "turbokv/error.h"
#include "turbokv/rng.h"

namespace turbokv::ref {
std::unique_ptr<Codec> make_pvq(const CodecConfig& cfg) {
  check_bits(cfg, {1, 2, 3, 4});
  return std::make_unique<Pvq>(cfg);
}

}  // namespace turbokv::ref
