// turbokv — the CPU fast path for every method: one interface (CpuCodec) over
// the per-method SIMD implementations in src/cpu/<method>.cpp, and one fused,
// threaded decode attention (attention_codec) that runs on any of them.
//
// A CpuCodec is built from a reference codec (turbokv/codec.h, make_codec),
// after that codec's calibration when the method needs one, and reproduces it:
//   - encode():     exactly the reference's bytes (formats.h fixes the float
//                   operation order, so SIMD and scalar round identically);
//   - decode():     exactly the reference's floats;
//   - scores(), accumulate(), finalize(): the reference's values within 1e-5
//                   relative (fp32 accumulation instead of the reference's fp64).
// Methods without a SIMD path (or at SimdLevel::kScalar) get a wrapper around
// the reference codec itself, so every method works at every level.
//
// Shapes: x, out: [n, head_dim] fp32 row-major (any alignment); codes:
// encoded_bytes(n) bytes in the method's layout (formats.h); q: [head_dim];
// state: [query_state_size()] fp32; acc: [accumulator_size()] fp32.
// Errors: std::invalid_argument naming the argument and its value (NaN/Inf
// input, norms above the fp16 range, bad ranges); nothing is written then.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "turbokv/attention.h"
#include "turbokv/codec.h"
#include "turbokv/cpu.h"

namespace turbokv::cpu {

/// One KV head's quantizer on the CPU fast path. Immutable; const methods are thread-safe.
class CpuCodec {
 public:
  virtual ~CpuCodec() = default;
  CpuCodec(const CpuCodec&) = delete;
  CpuCodec& operator=(const CpuCodec&) = delete;

  const CodecConfig& config() const { return ref_->config(); }
  int head_dim() const { return ref_->head_dim(); }
  /// The reference codec this one reproduces.
  const Codec& reference() const { return *ref_; }
  /// "avx512", "avx2" or "scalar": the ISA whose kernels this codec runs
  /// ("scalar" = the reference wrapped).
  virtual const char* isa() const = 0;

  std::size_t encoded_bytes(std::size_t n) const { return ref_->encoded_bytes(n); }

  /// Encodes x: [n, head_dim] fp32 into out[encoded_bytes(n)], byte-identical to
  /// reference().encode(). threads: 0 = all pool threads. Validates like the
  /// reference (NaN/Inf, norm >= 32768) before writing anything.
  void encode(const float* x, std::size_t n, std::uint8_t* out, int threads = 0) const;
  /// Same from fp16 or bf16 input (uint16_t bits of `dtype`): identical to the
  /// reference fed the values converted to fp32.
  void encode(const std::uint16_t* x, DType dtype, std::size_t n, std::uint8_t* out, int threads = 0) const;
  /// codes[encoded_bytes(n)] -> out: [n, head_dim] fp32, identical to reference().decode().
  void decode(const std::uint8_t* codes, std::size_t n, float* out, int threads = 0) const;

  /// Floats of a prepared query.
  virtual std::size_t query_state_size() const = 0;
  /// Prepares q: [head_dim] fp32 (rotated / sketched once) into state. Throws on NaN/Inf in q.
  void prepare_query(const float* q, float* state) const;
  /// out[t - t0] = estimate of <q, x_t> for t in [t0, t1) of a block of n encoded
  /// tokens, from the codes alone (reference: Codec::scores). Requires t0 <= t1 <= n.
  virtual void scores(const float* state, const std::uint8_t* codes, std::size_t n, std::size_t t0,
                      std::size_t t1, float* out) const = 0;
  /// Floats of the value accumulator (codec domain).
  virtual std::size_t accumulator_size() const = 0;
  /// acc += sum_{t in [t0, t1)} w[t - t0] * x_hat_t in the codec domain (reference: Codec::accumulate).
  virtual void accumulate(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1, const float* w,
                          float* acc) const = 0;
  /// out[head_dim] = scale * (the original-domain vector acc represents).
  virtual void finalize(const float* acc, double scale, float* out) const = 0;

  /// Size of the codec domain (0 = the method has none; the default). When it is
  /// positive, tokens have a codec-domain form y_t[domain_size()] (e.g. norm *
  /// centroids in the rotated domain, or the signed sketch scaled by kappa * norm)
  /// with, for every prepared query state and weights w:
  ///   scores(state)[t] = <state[0, domain_size()), y_t>, accumulator_size() ==
  ///   domain_size() and accumulate(w) adds sum_t w_t y_t.
  /// attention_codec then decodes each block once for all query heads of a GQA
  /// group (one pass over the codes) instead of scoring / accumulating per head.
  virtual std::size_t domain_size() const { return 0; }
  /// y[(t - t0) * domain_size() + i] = y_t[i] for t in [t0, t1) of a block of n
  /// tokens (fp32; the same values scores/accumulate use, within 1e-5 relative).
  /// Only called when domain_size() > 0.
  virtual void decode_domain(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                             float* y) const {
    (void)codes, (void)n, (void)t0, (void)t1, (void)y;
  }

 protected:
  explicit CpuCodec(const Codec& ref) : ref_(&ref) {}
  /// The checks of Codec::validate, with the same errors (default: one scan for Inf / NaN and the
  /// largest |x| that settles most blocks; reference().validate(x, n) when it cannot, for centered
  /// codecs and for a missing calibration). A method may override it.
  virtual void validate(const float* x, std::size_t n) const;
  /// Encodes rows [t0, t1) of an n-token block x (x points at row 0) into the
  /// block buffer out (encoded_bytes(n) bytes, zeroed before the first call).
  /// Input already validated. Called concurrently for disjoint row ranges whose
  /// bounds are multiples of row_granule() (or n).
  virtual void do_encode(const float* x, std::size_t n, std::size_t t0, std::size_t t1, std::uint8_t* out) const = 0;
  /// Decodes rows [t0, t1) of an n-token block into out (row 0 of out = token 0).
  virtual void do_decode(const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
                         float* out) const = 0;
  /// q already checked finite.
  virtual void do_prepare_query(const float* q, float* state) const = 0;
  /// Row ranges handed to do_encode/do_decode start at multiples of this (e.g. KIVI key groups).
  virtual std::size_t row_granule() const { return 1; }

 private:
  const Codec* ref_;
};

/**
 * The fast codec for ref (which must outlive it, and be calibrated if its
 * method needs calibration): the method's SIMD implementation for the current
 * simd_level() when there is one, else a wrapper around ref.
 * Throws std::invalid_argument if ref needs calibration and is not calibrated.
 */
std::unique_ptr<CpuCodec> make_cpu_codec(const Codec& ref);

/// One KV head's encoded block: its fast codec and its bytes (codec->encoded_bytes(num_tokens)).
struct CodecHead {
  const CpuCodec* codec;
  const std::uint8_t* codes;
};

/**
 * Fused decode attention on any codecs (keys and values may use different
 * methods): same semantics as attention_compressed (turbokv/attention.h) —
 * keys, values: num_kv_heads heads of num_tokens tokens each; q: [num_heads,
 * head_dim] fp32; out: [num_heads, head_dim] fp32; context: the query sees
 * tokens [0, context) (0 = all); p: softmax scale, sliding window, soft-cap.
 * Keys are scored from their codes; values are accumulated in the codec domain
 * and finalized once per head; online softmax over blocks of tokens; the
 * sequence is split into chunks of at most 8,192 tokens spread over threads
 * and merged by log-sum-exp (FlashDecoding; as attention_tq_mse, turbokv/cpu.h).
 * p.precision: honoured when every head is TurboQuant-MSE (the fused kernels:
 * kTqMseFused, those of cpu::attention_tq_mse, turbokv/cpu.h, and
 * kTqMseSplitFused for fractional widths); the other paths compute in fp32
 * whatever it says.
 * Which path runs: attention_codec_path.
 * Throws std::invalid_argument on bad shapes or parameters.
 */
/// The kernel family attention_codec / attention_codec_batched run (the batched call takes a
/// fused path only when every sequence qualifies).
enum class CodecAttentionPath {
  /// Every key and value head TurboQuant-MSE at an integer width (1..4 bits): the fused
  /// kernels of cpu::attention_tq_mse (tokens in lanes, a GQA group per pass).
  kTqMseFused,
  /// Keys TurboQuant-Prod (bits 1..4, head_dim a multiple of 16 up to 512, sketch rows m a
  /// multiple of 8 up to 512) and values TurboQuant-MSE at an integer width, at the AVX2 or
  /// AVX-512 level: one fused fp32 kernel scoring ||x|| (<Pi q, c[code]> + kappa gamma
  /// <S Pi q, signs>) (arXiv 2504.19874, Algorithm 2; the signs as a 1-bit codebook {-1, +1})
  /// for a whole GQA group per pass, values as in kTqMseFused.
  kTqProdFused,
  /// Every key and value head TurboQuant-MSE, at least one at a fractional width (1.5, 2.5, 3.5: the
  /// outlier split of formats.h, both parts' dims multiples of 16 up to 512, i.e. head_dim a multiple of
  /// 32 up to 1024, from make_cpu_codec on a calibrated reference), the others at integer widths, at the
  /// AVX2 or AVX-512 level: one fused fp32 kernel per GQA group and pass over the codes (keys and values
  /// may mix fractional and integer widths). A fractional key scores
  /// ||x_o|| <Pi_o q_o, c_o[codes_o]> + ||x_r|| <Pi_r q_r, c_r[codes_r]> (arXiv 2504.19874, Algorithm 1
  /// per part, split after Sec. 4.3), each part token-in-lane like kTqMseFused; a fractional value is
  /// accumulated in each part's rotated domain (weights times the part's norm) and rotated back once
  /// per output head. p.precision = kBf16 at the AVX-512 level on a CPU with AVX512-BF16: bf16 dot
  /// products with fp32 accumulation for every code stream (each part of a fractional head, and the
  /// integer-width heads of the call), as kTqMseFused's bf16 kernel (AttentionPrecision::kBf16,
  /// turbokv/attention.h); kInt8 at the AVX-512 level: int8 dot products the same way (kTqMseFused's
  /// int8 kernel, AttentionPrecision::kInt8) except for heads packed in one register (head_dim <= 128,
  /// equal parts), which run the kBf16 kernel; elsewhere exactly the fp32 result.
  kTqMseSplitFused,
  /// Every key and value head RVQ (two-stage residual scalar VQ after a rotation, bits 1..4 per
  /// stage, head_dim a multiple of 16 up to 512) at the AVX2 or AVX-512 level: one fused fp32 kernel
  /// per GQA group and pass over the codes. A key scores ||x|| (<Pi q, c1[codes1]> + <Pi q,
  /// c2[codes2]>), each stage token-in-lane like kTqMseFused; a value's two stages are accumulated
  /// with the same weight in the rotated domain and rotated back once per output head.
  kRvqFused,
  /// Every key head a KIVI key codec and every value head a KIVI value codec at 1..4 or 8 bits (Liu
  /// et al., arXiv 2402.02750; head_dim a multiple of 16 up to 512; keys with group_size >= 8, values
  /// with group_size a multiple of 8 and head_dim / group_size <= 8; the value heads of one call all
  /// 8-bit or all narrower) at the AVX2 or AVX-512 level: one fused fp32 kernel per GQA group and pass
  /// over the codes. A key scores <q * scale_g, code> + <q, min_g> with its token group g's
  /// per-channel (min, scale) (1..4 bits token-in-lane like kTqMseFused; 8 bits coordinates in lanes
  /// like kFp8Fp16Fused); a value is decoded per coordinate (min + scale * code of its channel group,
  /// fp32) and accumulated like kTqMseFused's (8 bits: like kFp8Fp16Fused's, in natural order).
  kKiviFused,
  /// Every key and value head an fp8 (OCP e4m3 with a per-token scale) or fp16 codec (head_dim a
  /// multiple of 16), at the AVX2 or AVX-512 level: one fused fp32 kernel per GQA group and pass over
  /// the codes, the structure of the dense baselines (attention_dense): each token's codes converted
  /// once (e4m3 exactly through fp16) for all heads of the group, scores reduced per block, values
  /// accumulated in natural order.
  kFp8Fp16Fused,
  /// Anything else: the codec-domain path (a block decoded once per GQA group) where both
  /// codecs have a codec domain, per-head scores / accumulation otherwise.
  kGeneric,
};

/**
 * The path attention_codec takes for these heads at the current simd_level() (the
 * same decision, without running it; for tests and tools). Never throws: heads that
 * attention_codec would reject (null codecs, keys.size() != values.size()) give
 * kGeneric.
 */
CodecAttentionPath attention_codec_path(const std::vector<CodecHead>& keys, const std::vector<CodecHead>& values);

void attention_codec(const std::vector<CodecHead>& keys, const std::vector<CodecHead>& values,
                     std::size_t num_tokens, const float* q, int num_heads, const AttentionParams& p, float* out,
                     std::size_t context = 0, int threads = 0);

/// One sequence of attention_codec_batched (see attention_codec for the fields).
struct CodecSequence {
  std::vector<CodecHead> keys, values;  ///< num_kv_heads each
  std::size_t num_tokens = 0;           ///< tokens in each head's block
  std::size_t context = 0;              ///< 0 = num_tokens
  const float* q = nullptr;             ///< [num_heads, head_dim] fp32
  float* out = nullptr;                 ///< [num_heads, head_dim] fp32
};

/**
 * attention_codec for many sequences of different lengths in one call: one pool
 * job balanced over (sequence, KV head, token chunk). All sequences share
 * num_heads, num_kv_heads, head_dim and p (codecs may differ per sequence).
 * Throws std::invalid_argument naming the sequence index on bad input; nothing
 * is written then.
 */
void attention_codec_batched(const std::vector<CodecSequence>& seqs, int num_heads, const AttentionParams& p,
                             int threads = 0);

}  // namespace turbokv::cpu
