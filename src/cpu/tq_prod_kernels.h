// Internal interface between the TurboQuant-Prod fast path (baseline x86-64:
// src/cpu/tq_prod.cpp) and its per-ISA kernels (src/cpu/tq_prod_avx2.cpp,
// tq_prod_avx512.cpp). Not public API.
//
// TurboQuant-Prod (Zandieh et al., arXiv 2504.19874, Algorithm 2): the unit
// vector u = x / ||x|| is rotated (Pi) and coded by TurboQuant-MSE at b-1 bits
// (Algorithm 1); the residual r = Pi u - c[code] is coded by a 1-bit QJL sketch
// (qjl_kernels.h) with gamma = ||r||. Stored per token (formats.h):
// [packed(d, b-1) codes][packed(m, 1) signs], scalars [||x||, gamma] (fp16).
//   <q, x> ~= ||x|| * (<Pi q, c[code]> + kappa * gamma * <S Pi q, signs>)
// The encode keeps the reference's fp32 order (src/ref/common.cpp,
// RotatedScalar::encode; src/ref/tq_prod.cpp): y = Pi x (rotation.h order),
// u_i = y_i * (1.0f / ||x||), code_i = #(boundaries < u_i), r_i = u_i - c_i,
// gamma = sqrtf(sumsq_spec(r)). Decode: fp64 from c[code] + (+-kappa*gamma) S^T
// signs, Pi^T in fp64, times ||x||, rounded to fp32 (as the reference).
//
// Query state: [d] float(Pi q) then [mp] float(S Pi q) (zero beyond m).
// Accumulator: [d] rotated-domain MSE part then [mp] sketch-domain sign part.
// Codec domain (CpuCodec::decode_domain), laid out like both: y_t = [||x|| c[code]
// (d) | ||x|| kappa gamma (+-1 signs) (m), zeros (mp - m)], so the score is
// <state, y_t> and the accumulator sum_t w_t y_t.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels.h"
#include "qjl_kernels.h"

namespace turbokv::cpu::detail {

/// Everything the Prod kernels need about one codec, prepared once.
struct ProdState {
  int d = 0;     ///< head_dim, multiple of 16, <= 512
  int bits = 0;  ///< MSE bits b - 1, 0..3
  std::size_t mse_bytes = 0;   ///< packed_bytes(d, bits)
  std::size_t code_bytes = 0;  ///< mse_bytes + sk.sign_bytes
  Rot rot = Rot::kNone;
  std::vector<float> signs;        ///< Hadamard: D, size d
  float scale = 1;                 ///< Hadamard: float(1/sqrt(d))
  std::vector<double> inv_scale;   ///< Hadamard: double(scale) * D[i] (the reference inverse's factor)
  std::vector<float> mat;          ///< dense: Pi row-major, d x d
  std::vector<float> mat_t;        ///< dense: Pi transposed, mat_t[j * d + i] = Pi[i][j]
  alignas(64) float cb16[16] = {};   ///< centroids replicated: cb16[i] = c[i mod 2^bits] (bits 0: zeros)
  alignas(64) float bnd[8] = {};     ///< boundaries, padded with +inf
  int nbnd = 0;                      ///< 2^bits - 1 (0 for bits 0)
  SketchState sk;
};

constexpr int kProdMaxDim = 512;

struct ProdKernels {
  const QjlKernels* qjl;
  /// x: [count, d] -> codes (code_bytes per token, every byte) and scal[2 * count] = (||x||, gamma) in fp32.
  void (*encode)(const ProdState& ps, const float* x, std::size_t count, std::uint8_t* codes, float* scal);
  /// codes + scal16 (2 fp16 per token) of count tokens -> out: [count, d], identical to the reference.
  void (*decode)(const ProdState& ps, const std::uint8_t* codes, const std::uint8_t* scal16, std::size_t count,
                 float* out);
  /// out[t - t0] = ||x_t|| (<qr, c[code_t]> + kappa gamma_t <sq, signs_t>); state = [qr (d), sq (mp)].
  void (*scores)(const ProdState& ps, const float* state, const std::uint8_t* block, std::size_t n, std::size_t t0,
                 std::size_t t1, float* out);
  /// acc[0, d) += sum_t w_t ||x_t|| c[code_t]; acc[d + i] += sum_t w_t ||x_t|| kappa gamma_t (+-1).
  void (*accumulate)(const ProdState& ps, const std::uint8_t* block, std::size_t n, std::size_t t0, std::size_t t1,
                     const float* w, float* acc);
  /// x[d] = Pi^T y in fp64 in the reference's order (rotation.h).
  void (*inverse)(const ProdState& ps, const double* y, double* x);
  /// The codec domain, rows of d + mp floats: y[(t - t0) * (d + mp) + j] = ||x_t|| c[code_{t,j}] (j < d),
  /// then ||x_t|| kappa gamma_t (+-1) for the m sketch rows and 0 for rows m..mp-1.
  void (*decode_domain)(const ProdState& ps, const std::uint8_t* block, std::size_t n, std::size_t t0,
                        std::size_t t1, float* y);
};

const ProdKernels& tq_prod_avx2_kernels();
const ProdKernels& tq_prod_avx512_kernels();

}  // namespace turbokv::cpu::detail
