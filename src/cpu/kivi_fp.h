// Internal interface (not public API) between the baseline orchestration of
// the KIVI, fp8, fp16 and fractional TurboQuant-MSE fast paths (src/cpu/kivi.cpp,
// fp8.cpp, fp16.cpp, tq_mse_split.cpp) and their per-ISA kernels
// (src/cpu/<method>_avx2.cpp / <method>_avx512.cpp, which stamp out the
// templates of kivi_fp_simd.h). Safe to include from baseline files: it
// declares plain structs and functions only (no inline code, so nothing
// compiled with ISA flags can be picked by the linker for baseline callers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "turbokv/codec.h"
#include "turbokv/cpu_codec.h"

namespace turbokv::cpu::detail {

/// Largest head_dim the kernels handle (make_codec's limit).
constexpr int kLowbitMaxDim = 1024;

/// One KIVI / fp8 / fp16 codec as its kernels see it (prepared once).
struct LowbitParams {
  Method method = Method::kKivi;  ///< kKivi, kFp8 or kFp16
  int d = 0;                  ///< head_dim (multiple of 8, <= kLowbitMaxDim)
  int bits = 0;               ///< KIVI: 1, 2, 3, 4 or 8; fp8: 8; fp16: 16
  int group = 1;              ///< KIVI group size G (tokens per key group, channels per value group)
  bool key = false;           ///< KIVI role: keys are grouped per channel over G tokens
  std::size_t row_bytes = 0;  ///< code bytes per token (formats.h)
};

/**
 * Kernels of one method at one ISA, on a block of n encoded tokens of one head
 * (formats.h layout). Token ranges [t0, t1) satisfy t0 <= t1 <= n; for KIVI
 * keys, encode/decode ranges start at multiples of G.
 *   encode:     x: [n, d] fp32 (row 0 = token 0, finite, validated) -> the bytes of
 *               rows [t0, t1) and their scalars in block (encoded_bytes(n) bytes),
 *               identical to the reference codec.
 *   decode:     block -> out rows [t0, t1) (out row 0 = token 0), identical floats.
 *   scores:     out[t - t0] = <q, x_hat_t>, q: [d] fp32 (fp32 accumulation).
 *   accumulate: acc[d] += sum_t w[t - t0] * x_hat_t (original domain).
 *   decode_domain: y rows [0, t1 - t0) = x_hat_t (the codec domain is the original one).
 */
struct LowbitKernels {
  void (*encode)(const LowbitParams& p, const float* x, std::size_t n, std::size_t t0, std::size_t t1,
                 std::uint8_t* block);
  void (*decode)(const LowbitParams& p, const std::uint8_t* block, std::size_t n, std::size_t t0, std::size_t t1,
                 float* out);
  void (*scores)(const LowbitParams& p, const float* q, const std::uint8_t* block, std::size_t n, std::size_t t0,
                 std::size_t t1, float* out);
  void (*accumulate)(const LowbitParams& p, const std::uint8_t* block, std::size_t n, std::size_t t0,
                     std::size_t t1, const float* w, float* acc);
  /// The codec domain (the original domain): y[(t - t0) * d + j] = x_hat_t[j] for t in [t0, t1),
  /// the decoded floats (identical to decode's), so scores = <q, y_t> and accumulate adds w_t y_t.
  void (*decode_domain)(const LowbitParams& p, const std::uint8_t* block, std::size_t n, std::size_t t0,
                        std::size_t t1, float* y);
};

/// KIVI kernels for bits 1, 2, 3, 4 or 8.
const LowbitKernels& kivi_avx2_kernels(int bits);
const LowbitKernels& kivi_avx512_kernels(int bits);
const LowbitKernels& fp8_avx2_kernels();
const LowbitKernels& fp8_avx512_kernels();
const LowbitKernels& fp16_avx2_kernels();
const LowbitKernels& fp16_avx512_kernels();

/// One part of a fractional TurboQuant-MSE token (formats.h: tq-mse b + 0.5).
struct SplitPart {
  int dim = 0;                   ///< channels in the part (multiple of 16)
  int bits = 0;                  ///< code width (1..4)
  std::size_t code_offset = 0;   ///< byte offset of the part's codes in a token's code bytes
  std::size_t state_offset = 0;  ///< offset of the part in the query state / accumulator
  alignas(64) float cb[16] = {}; ///< centroids, entries >= 2^bits are 0
};

/// Both parts (outliers with b+1 bits, then the rest with b bits); row_bytes: code bytes per token.
struct SplitParams {
  SplitPart part[2];
  std::size_t row_bytes = 0;
};

/**
 * Scores and value accumulation of a fractional TurboQuant-MSE block, in the
 * rotated domain of each part (Zandieh et al., arXiv 2504.19874, Algorithm 1,
 * per part): qp: [d] = the parts' rotated queries, concatenated;
 * scores: out[t - t0] = sum_p norm_{t,p} * <qp_p, c_p[codes_{t,p}]>;
 * accumulate: acc_p += w[t - t0] * norm_{t,p} * c_p[codes_{t,p}], acc: [d].
 */
struct SplitKernels {
  void (*scores)(const SplitParams& p, const float* qp, const std::uint8_t* block, std::size_t n, std::size_t t0,
                 std::size_t t1, float* out);
  void (*accumulate)(const SplitParams& p, const std::uint8_t* block, std::size_t n, std::size_t t0,
                     std::size_t t1, const float* w, float* acc);
};

const SplitKernels& tq_split_avx2_kernels();
const SplitKernels& tq_split_avx512_kernels();

/// A CpuCodec running kernels k (query state: q itself; accumulator: the
/// original domain, [head_dim]); row_granule: encode/decode range alignment.
/// isa: "avx2" or "avx512". Defined in kivi.cpp.
std::unique_ptr<CpuCodec> make_lowbit_codec(const Codec& ref, const LowbitParams& p, const LowbitKernels& k,
                                            std::size_t row_granule, const char* isa);

}  // namespace turbokv::cpu::detail
