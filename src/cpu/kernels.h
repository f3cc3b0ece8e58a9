// Internal interface between the CPU fast path's orchestration (baseline
// x86-64: src/cpu/tq_mse.cpp, attention.cpp) and its per-ISA kernels
// (kernels_scalar.cpp, kernels_avx2.cpp, kernels_avx512.cpp). Not public API.
//
// Rotated-domain layout of a value accumulator for a kernel with W lanes (W =
// 1 for scalar, 8 for AVX2, 16 for AVX-512): ng = head_dim / 8 code groups (8
// codes each), nv = ceil(ng / W) group vectors, P = nv * 8 * W floats. Float
// f = k * W + j (vector k = v * 8 + s, lane j) holds rotated coordinate
// 8 * (v * W + j) + s if v * W + j < ng, else padding. With this layout a
// group's packed bits sit in one 32-bit lane and code s of every group is one
// shift away, so a token's codes become W-wide codebook look-ups (vpermps)
// without shuffles across lanes. Keys are scored the other way round: a block
// of W tokens' groups is transposed so that lane i is token i, and the rotated
// query (natural order) is broadcast per coordinate, so scores need no
// horizontal sums. With W = 1 both are the natural order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "turbokv/codebook.h"
#include "turbokv/rotation.h"
#include "turbokv/simd.h"

namespace turbokv::cpu::detail {

enum class Rot { kNone, kHadamard, kDense };

/// Everything a kernel needs about one TqMse codec, prepared once.
struct TqState {
  int dim = 0, bits = 0, ng = 0;
  std::size_t code_bytes = 0;
  Rot rot = Rot::kNone;
  std::vector<float> signs;       ///< Hadamard: D, size dim
  std::vector<float> inv_scale;   ///< Hadamard: scale * D[i] (the reference inverse's factor), size dim
  float scale = 1;                ///< Hadamard: float(1/sqrt(dim))
  std::vector<float> mat;         ///< dense: Pi row-major, dim x dim
  std::vector<float> mat_t;       ///< dense: Pi transposed (mat_t[j*dim+i] = Pi[i][j])
  alignas(64) float cb16[16] = {};   ///< centroids replicated to 16 entries: cb16[i] = c[i mod 2^bits]
  alignas(64) float cbx[16] = {};    ///< centroids, exact (entries >= 2^bits = 0)
  alignas(64) float bnd16[16] = {};  ///< boundaries, padded with +inf
  int nbnd = 0;
  const ScalarCodebook* codebook = nullptr;
  const Rotation* rotation = nullptr;
  std::unique_ptr<Rotation> rotation_storage;
  /// layout[w]: for lanes = 1 << w (w = 0, 3, 4), the coordinate at each float of the layout (-1 = padding).
  std::vector<int> layout[5];
  const std::vector<int>& layout_for(int lanes) const { return layout[lanes == 1 ? 0 : lanes == 8 ? 3 : 4]; }
};

/// What every fused attention job holds: one (KV head, token range) piece of decode attention for G
/// query heads over n-token key and value blocks (attention.cpp's run_fused fills it; each method's job
/// adds its codec states and prepared queries).
struct AttnPiece {
  const std::uint8_t* kcodes = nullptr;  ///< key block of n tokens
  const std::uint8_t* vcodes = nullptr;  ///< value block of n tokens
  std::size_t n = 0, t0 = 0, t1 = 0;     ///< block tokens; this piece's range [t0, t1)
  int G = 1;                             ///< query heads
  float scale = 1, softcap = 0;          ///< softmax scale; logit soft-cap (0 = off)
  float* m = nullptr;    ///< [G] running max of logits (out)
  float* l = nullptr;    ///< [G] sum of exp(logit - m) (out)
  float* acc = nullptr;  ///< [G][P] sum of exp(logit - m) * x_hat (out; the method's layout)
};

/// TurboQuant-MSE keys and values (acc: sum of exp(logit - m) * norm * c[code] in the value layout).
struct AttnJob : AttnPiece {
  const TqState* ks = nullptr;
  const TqState* vs = nullptr;
  const float* qp = nullptr;  ///< [G][dim] rotated queries, natural order
  bool int8_amx = false;      ///< kInt8: AMX tiles (int8_uses_amx, decided on the calling thread)
};

/// Dense baseline job: rows of [tokens, kv_heads, dim] from kv head 0 of the job; the
/// kernel walks tokens in order and serves every kv head of the job per block.
struct DenseJob {
  int kv_heads = 1;  ///< consecutive kv heads (G query heads each): q, m, l, acc hold kv_heads * G heads
  const void* k = nullptr;
  const void* v = nullptr;
  bool f16 = false;
  std::size_t stride = 0;  ///< elements between consecutive tokens
  int dim = 0;
  std::size_t t0 = 0, t1 = 0;
  const float* q = nullptr;  ///< [G][dim] natural order
  int G = 1;
  float scale = 1, softcap = 0;
  float* m = nullptr;
  float* l = nullptr;
  float* acc = nullptr;  ///< [G][dim]
};

/**
 * A TurboQuant-Prod key codec (src/cpu/tq_prod.cpp) seen by the fused attention
 * kernel: token t of an n-token block holds code_bytes bytes at t * code_bytes
 * ([packed(dim, mse_bits) MSE codes][packed(m, 1) sign bits], formats.h), then
 * fp16 (||x||, gamma) at n * code_bytes + 4 t. The two code fields are read as
 * two TurboQuant-MSE-like code streams with the same token stride: `mse`
 * (mse_bits-wide codes, codebook cb16, ng = dim / 8) and `sgn` (1-bit codes of the
 * "codebook" {-1, +1}, ng = m / 8, starting mse_bytes into each token). Only
 * code_bytes, ng and cb16 of the two TqStates are set.
 */
struct ProdKeyState {
  int dim = 0;       ///< head_dim, multiple of 16, <= 512
  int m = 0;         ///< sketch rows, multiple of 8, <= 512
  int mse_bits = 0;  ///< b - 1, 0..3
  std::size_t mse_bytes = 0, code_bytes = 0;
  float kappa = 0;   ///< float(sqrt(pi/2) / m) (the reference's Sketch::kappa)
  TqState mse, sgn;
};

/// One (KV head, token range) piece of decode attention with TurboQuant-Prod keys and
/// TurboQuant-MSE values for G query heads (fields as AttnJob).
struct ProdAttnJob : AttnPiece {  // acc: [G][P] in the value layout (P = layout_floats(dim / 8, lanes))
  const ProdKeyState* ks = nullptr;
  const TqState* vs = nullptr;
  const float* qs = nullptr;  ///< [G][qstride] prepared queries: Pi q (dim floats), then S Pi q (m floats)
  int qstride = 0;
};

/**
 * An RVQ codec (two-stage residual scalar VQ after a rotation; src/cpu/rvq.cpp, formats.h) seen by
 * the fused attention kernel: token t of an n-token block holds code_bytes = 2 stage_bytes code bytes
 * at t * code_bytes ([packed(dim, bits) stage 1][packed(dim, bits) stage 2]), then its fp16 ||x|| at
 * n * code_bytes + 2 t, like a TurboQuant-MSE block. stage[s] views stage s as a TurboQuant-MSE code
 * stream with that token stride (dim, bits, ng, code_bytes, cb16 = the stage's centroids), starting
 * s * stage_bytes into each token; stage[0] also holds the rotation and layouts (prepare_query and
 * finalize_output of cpu_internal.h). A token decodes to ||x|| Pi^T (c1[code1] + c2[code2]), so its
 * score is ||x|| (<Pi q, c1[code1]> + <Pi q, c2[code2]>) and its value is accumulated from both
 * streams with the same weight in the rotated domain.
 */
struct RvqHeadState {
  int dim = 0;   ///< head_dim, multiple of 16, <= 512
  int bits = 0;  ///< bits per stage and coordinate, 1..4
  std::size_t stage_bytes = 0, code_bytes = 0;
  TqState stage[2];
};

/// One (KV head, token range) piece of decode attention with RVQ keys and values for G query heads
/// (fields as AttnJob; qp: [G][dim] rotated queries Pi q, natural order).
struct RvqAttnJob : AttnPiece {  // acc: [G][P] in the value layout (P = layout_floats(dim / 8, lanes))
  const RvqHeadState* ks = nullptr;
  const RvqHeadState* vs = nullptr;
  const float* qp = nullptr;
};

/**
 * A KIVI codec (Liu et al., arXiv 2402.02750; src/cpu/kivi.cpp, formats.h) at 1..4 bits seen by the
 * fused attention kernel: token t of an n-token block holds row_bytes = packed(dim, bits) code bytes
 * at t * row_bytes, then the fp16 (min, scale) pairs at n * row_bytes: keys per channel for each
 * group of `group` tokens ([group][channel][min, scale]), values per token for each group of `group`
 * channels ([token][channel group][min, scale]); x_hat = min + scale * code. `codes` views the codes
 * as a TurboQuant-MSE code stream with the identity codebook (cb16[i] = i mod 2^bits, no rotation;
 * layouts set for the value output). Keys score <q, x_hat> = <q * scale_g, code> + <q, min_g> for the
 * token's group g; values accumulate sum_t p_t x_hat_t in the value layout (unrotated), each lane's
 * (min, scale) from its channel group. Covered: head_dim a multiple of 16 up to 512; keys need
 * group >= 8, values group a multiple of 8 with head_dim / group <= 8.
 */
struct KiviHeadState {
  int dim = 0, bits = 0, group = 1;  ///< bits 1..4 (codes as a TurboQuant-MSE stream) or 8 (bytes)
  bool key = false;
  std::size_t row_bytes = 0;
  ScalarCodebook identity;  ///< centroids 0 .. 2^bits - 1 (codes.codebook points here); bits 1..4 only
  TqState codes;            ///< bits 1..4 only
};

/// One (KV head, token range) piece of decode attention with KIVI keys and values for G query heads
/// (fields as AttnJob; q: [G][dim] natural order, unrotated).
struct KiviAttnJob : AttnPiece {  // acc: [G][P], P = kivi_value_floats(*vs, lanes)
  const KiviHeadState* ks = nullptr;
  const KiviHeadState* vs = nullptr;
  const float* q = nullptr;
};

/**
 * One (KV head, token range) piece of decode attention on fp8 or fp16 codec blocks (formats.h:
 * token t's d bytes of OCP e4m3 codes at t * d and its fp16 scale at n * d + 2 t, x_hat = e4m3 * scale;
 * or token t's d fp16 values at 2 t d) for G query heads: the dense kernels' structure (coordinates
 * in lanes, scores reduced per block, values accumulated in natural order) on per-head blocks.
 */
struct FloatAttnJob : AttnPiece {  // acc: [G][dim] natural order
  int kbits = 8, vbits = 8;  ///< 8: fp8 codec, 16: fp16 codec
  int dim = 0;               ///< head_dim, multiple of 16
  const float* q = nullptr;  ///< [G][dim] natural order
};

/**
 * Sets st up as the TurboQuant-MSE code stream of `bits`-wide codes of a dim-dimensional vector with
 * token stride code_bytes, centroids and boundaries from cb (which must outlive st), the layouts, and
 * (rotation not null) the rotation fields. TqMse's state, the RVQ stages and KIVI's code streams are
 * made this way (tq_mse.cpp).
 */
void init_tq_state(TqState& st, int dim, int bits, std::size_t code_bytes, const ScalarCodebook& cb,
                   const Rotation* rotation);

/**
 * A fractional TurboQuant-MSE codec (width b + 0.5, the outlier split; src/cpu/tq_mse_split.cpp,
 * formats.h) seen by the fused attention kernel: token t of an n-token block holds row_bytes code
 * bytes at t * row_bytes ([packed(d_o, b + 1) outlier part][packed(d - d_o, b) rest]), then fp16
 * (||x_o||, ||x_r||) at n * row_bytes + 4 t. part[p] views part p as a TurboQuant-MSE code stream
 * whose token stride is the whole row (dim, bits, ng, cb16 set; code_bytes = row_bytes), starting
 * code_offset[p] bytes into each row. A prepared query is [Pi_o q_o | Pi_r q_r] (part[0].dim then
 * part[1].dim floats, natural order: the split codec's query state); a value accumulator holds
 * part 0 in the layout of `lanes` (top of this file) at 0 and part 1 at split_acc_offset(lanes), or
 * both parts packed in one layout (packed(lanes)).
 * own[p] (the part's full TqState: rotation, layouts) and channels[p] (the part's channels,
 * ascending) serve finalize_split_output (cpu_internal.h).
 */
struct SplitHeadState {
  int dim = 0;  ///< head_dim = part[0].dim + part[1].dim; each part a multiple of 16, <= 512
  std::size_t row_bytes = 0;
  std::size_t code_offset[2] = {0, 0};
  TqState part[2];
  const TqState* own[2] = {nullptr, nullptr};
  std::vector<int> channels[2];
  /// True when both parts' code groups fit one register of a `lanes`-lane kernel (2 ng <= lanes,
  /// lanes > 1): the kernel then holds them packed (part 0 in lanes [0, ng), part 1 in [ng, 2 ng)), and
  /// so does the value accumulator: float s * lanes + j = part 0 coordinate 8 j + s for j < ng, part 1
  /// coordinate 8 (j - ng) + s for ng <= j < 2 ng, padding beyond (8 * lanes floats).
  bool packed(int lanes) const { return lanes > 1 && 2 * part[0].ng <= lanes && part[0].ng == part[1].ng; }
  /// Offset of part 1 in a value accumulator of a `lanes`-lane kernel (not packed).
  int split_acc_offset(int lanes) const;
  /// Floats of a value accumulator of a `lanes`-lane kernel (both parts).
  int split_acc_floats(int lanes) const;
};

/**
 * One (KV head, token range) piece of decode attention for G query heads where keys, values or
 * both are fractional TurboQuant-MSE (SplitHeadState) and the rest TurboQuant-MSE at an integer
 * width (TqState): exactly one of kx / ks and one of vx / vs is set (ks with vs: the integer-width
 * sources of AttnJob, with this job's accumulator stride P). Fields as AttnJob; qs: [G][qstride] prepared queries (a split key's query
 * state, or Pi q for integer keys); acc: [G][P] with P >= the value accumulator's floats
 * (layout_floats(vs->ng, lanes) or vx->split_acc_floats(lanes)).
 */
struct SplitAttnJob : AttnPiece {
  const SplitHeadState* kx = nullptr;
  const TqState* ks = nullptr;
  const SplitHeadState* vx = nullptr;
  const TqState* vs = nullptr;
  const float* qs = nullptr;
  int qstride = 0;
  int P = 0;
  bool int8_amx = false;  ///< kInt8: AMX tiles (int8_uses_amx, decided on the calling thread)
};

struct Kernels {
  int lanes = 1;
  /// x: [count, dim] fp32 rows; writes codes (token-major, code_bytes each, every byte) and fp32 norms.
  void (*encode)(const TqState& st, const float* x, std::size_t count, std::uint8_t* codes, float* norms);
  /// Converts count fp16 (bf16 = false) or bf16 values to fp32 (exact).
  void (*convert)(const std::uint16_t* x, bool bf16, std::size_t count, float* out);
  /// codes: count tokens (code_bytes each); norms16: count little-endian fp16; out: [count, dim].
  void (*decode)(const TqState& st, const std::uint8_t* codes, const std::uint8_t* norms16, std::size_t count,
                 float* out);
  /// out[t - t0] = norm_t * <qp, c[codes_t]> for t in [t0, t1) of a block of n tokens; qp: [dim] natural order.
  void (*scores)(const TqState& st, const std::uint8_t* block, std::size_t n, std::size_t t0, std::size_t t1,
                 const float* qp, float* out);
  void (*attend)(const AttnJob& job);
  void (*attend_dense)(const DenseJob& job);
  std::uint64_t (*stream)(const std::uint8_t* data, std::size_t bytes);
  /// out[h * cnt + t] = <q + h * qstride, y + t * dim> for h < G, t < cnt (fp32, any alignment).
  void (*dots)(const float* q, std::size_t qstride, int G, const float* y, int cnt, int dim, float* out);
  /// acc[h * astride + i] += sum_t w[h * cnt + t] * y[t * dim + i] for h < G, i < dim.
  void (*gemm_acc)(const float* w, int G, const float* y, int cnt, int dim, float* acc, std::size_t astride);
  /// One block's online-softmax step of the codec-domain path (attention.cpp), per head h < G: the logits
  /// x = scale * s[h * cnt + t] (t < cnt; fp32 products) move m[h] to max(m[h], max_t x), rescale l[h] and
  /// acc[h * astride + i] (i < accn) by exp(m_old - m_new) (0 when m_old is -inf), and become
  /// p = exp(x - m[h]) in place, added to l[h]. exp: the ISA's vector exp (kernels_simd.h T::exp, the fused
  /// kernels' Cephes polynomial: within a few ulp of std::exp above -87.3, clamped to ~1.2e-38 below, and a
  /// NaN logit there becomes a tiny weight instead of a NaN output, as in the fused kernels); std::exp at the
  /// scalar level and for the tail past the last whole vector.
  void (*softmax_block)(float* s, int G, int cnt, float scale, float* m, float* l, float* acc, std::size_t accn,
                        std::size_t astride);
  /// Fused attention, TurboQuant-Prod keys + TurboQuant-MSE values (nullptr at the scalar level).
  void (*attend_prod)(const ProdAttnJob& job);
  /// Fused attention with fractional TurboQuant-MSE keys and / or values (nullptr at the scalar level).
  void (*attend_split)(const SplitAttnJob& job);
  /// Fused attention, RVQ keys and values (nullptr at the scalar level).
  void (*attend_rvq)(const RvqAttnJob& job);
  /// Fused attention, KIVI keys and values at 1..4 bits (nullptr at the scalar level).
  void (*attend_kivi)(const KiviAttnJob& job);
  /// Fused attention, fp8 / fp16 codec keys and values (nullptr at the scalar level).
  void (*attend_float)(const FloatAttnJob& job);
  /// kFmaChains independent chains of `lanes` fp32 lanes, each lane a = a * x + y iters times from 0 (one
  /// fused multiply-add per step where the ISA has them); returns the sum of the lanes in fp64 (the
  /// multiply-add baseline of cpu::fma_peak: with x = y = 1 every lane ends at iters, exactly up to 2^24).
  double (*fma_chains)(std::uint64_t iters, float x, float y);
};

/// Chains of Kernels::fma_chains: enough independent multiply-adds to cover the FMA latency of every
/// ISA here (4 cycles x 2 pipes on Zen 4 / Intel cores) in 16 (AVX2) or 32 (AVX-512) vector registers.
inline constexpr int kFmaChains = 12;

/**
 * AttentionPrecision::kBf16 version of Kernels::attend at the AVX-512 level
 * (tq_mse_bf16_avx512.cpp, AVX512-BF16): same job, same outputs m, l and acc in
 * the 16-lane layout, computed with bf16 dot products (turbokv/attention.h says
 * what is rounded). Call only when simd_level() is kAvx512 and cpu_has_avx512_bf16().
 */
void avx512_bf16_attend(const AttnJob& job);

/**
 * AttentionPrecision::kBf16 version of Kernels::attend_split at the AVX-512 level (same file): same
 * job, same outputs m, l and acc (16-lane layouts, packed split values included), every code stream
 * (each part of a fractional head) scored and accumulated with bf16 dot products as in
 * avx512_bf16_attend. Call only when simd_level() is kAvx512 and cpu_has_avx512_bf16().
 */
void avx512_bf16_attend_split(const SplitAttnJob& job);

/**
 * AttentionPrecision::kInt8 version of Kernels::attend at the AVX-512 level
 * (tq_mse_int8_avx512.cpp; VNNI and VBMI, part of that level): same job, same
 * outputs m, l and acc in the 16-lane layout, computed with int8 dot products
 * (turbokv/attention.h says what is rounded). Integer widths (TqState);
 * call only when simd_level() is kAvx512.
 */
void avx512_int8_attend(const AttnJob& job);

/**
 * AttentionPrecision::kInt8 version of Kernels::attend_split at the AVX-512 level (same file): same job,
 * same outputs m, l and acc (16-lane layouts), every code stream (each part of a fractional head) scored
 * and accumulated with int8 dot products as in avx512_int8_attend. A job with a packed fractional head
 * (SplitHeadState::packed(16)) runs avx512_bf16_attend_split instead where the CPU has AVX512-BF16, else
 * the fp32 AVX-512 kernel. Call only when simd_level() is kAvx512.
 */
void avx512_int8_attend_split(const SplitAttnJob& job);

/// Whether avx512_int8_attend_kivi takes a KIVI key / value head pair: keys and values at 1..4 bits and value
/// groups of a multiple of 32 channels (each 128-bit lane of the value accumulator, 32 channels, then lies in
/// one group).
inline bool kivi_int8_fits(const KiviHeadState& k, const KiviHeadState& v) {
  return k.bits <= 4 && v.bits <= 4 && v.group % 32 == 0;
}

/**
 * AttentionPrecision::kInt8 version of Kernels::attend_kivi at the AVX-512 level (kivi_int8_avx512.cpp; VNNI
 * and VBMI): same job, same outputs m, l and acc (the 16-lane layout of the value codes), computed with int8
 * dot products on the integer codes (turbokv/attention.h says what is rounded). Call only when simd_level() is
 * kAvx512 and kivi_int8_fits(*job.ks, *job.vs).
 */
void avx512_int8_attend_kivi(const KiviAttnJob& job);

/// Whether avx512_int8_attend_rvq takes an RVQ key / value head pair: both at 1..3 bits a stage. At 4 + 4 bits
/// (8 bits a coordinate) int8's rounding is as large as the quantization itself (`turbokv eval --precision
/// int8`: relative error 0.0215 -> 0.0275 on Gemma 3) and the fp32 kernel was as fast.
inline bool rvq_int8_fits(const RvqHeadState& k, const RvqHeadState& v) { return k.bits <= 3 && v.bits <= 3; }

/**
 * AttentionPrecision::kInt8 version of Kernels::attend_rvq at the AVX-512 level (rvq_int8_avx512.cpp; VNNI
 * and VBMI): same job, same outputs m, l and acc (the 16-lane layout of stage 1), computed with int8 dot
 * products, both stages' centroids summed on one integer grid (turbokv/attention.h says what is rounded).
 * Call only when simd_level() is kAvx512 and rvq_int8_fits(*job.ks, *job.vs).
 */
void avx512_int8_attend_rvq(const RvqAttnJob& job);

const Kernels& scalar_kernels();
const Kernels& avx2_kernels();
const Kernels& avx512_kernels();
/// The kernels of simd_level().
const Kernels& kernels();

/// P for a kernel of `lanes` lanes.
inline int layout_floats(int ng, int lanes) { return ((ng + lanes - 1) / lanes) * 8 * lanes; }
/// Accumulator floats of a KIVI value head: 1..4 bits the TurboQuant value layout (layout_for), 8 bits
/// natural order (head_dim floats).
inline int kivi_value_floats(const KiviHeadState& v, int lanes) {
  return v.bits == 8 ? v.dim : layout_floats(v.codes.ng, lanes);
}
inline int SplitHeadState::split_acc_offset(int lanes) const { return layout_floats(part[0].ng, lanes); }
inline int SplitHeadState::split_acc_floats(int lanes) const {
  return packed(lanes) ? 8 * lanes : layout_floats(part[0].ng, lanes) + layout_floats(part[1].ng, lanes);
}
/// Rotated coordinate held at float f of the layout, or -1 for padding.
inline int layout_coord(int f, int ng, int lanes) {
  const int k = f / lanes, j = f % lanes, v = k / 8, s = k % 8;
  const int g = v * lanes + j;
  return g < ng ? 8 * g + s : -1;
}

}  // namespace turbokv::cpu::detail
