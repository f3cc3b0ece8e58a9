// turbokv — the CPU fast path (src/cpu): SIMD + threads for TurboQuant-MSE
// encode, decode, scoring and fused decode attention, plus the dense
// baselines that `turbokv bench` compares it with.
//
// Every function here produces what the scalar reference (src/ref, the
// specification) produces: encode writes exactly the bytes of make_codec()'s
// codec with the same CodecConfig; decode returns exactly its floats;
// scores and attention match Codec::scores and attention_compressed within
// 1e-5 relative (fp32 accumulation instead of fp64); the opt-in
// AttentionPrecision::kBf16 and kInt8 attentions trade that for speed (see there). The ISA is chosen at run
// time (turbokv/simd.h); work is spread over the process-wide pool
// (TURBOKV_THREADS or the hardware's cores; a call made from inside a pool task,
// or while another host thread uses the pool, runs on the calling thread). The
// fused decode attention splits each sequence into work items of at most 8,192
// tokens (TURBOKV_CHUNK_TOKENS overrides it, read at every call; a larger value
// lets the fp32 running sums grow longer and less accurate) whose partials
// (G x (head_dim + 2) floats each) merge by log-sum-exp.
//
// Arguments are validated once, here at the boundary: std::invalid_argument
// names the argument and its value. Sources: TurboQuant, Zandieh et al.,
// arXiv 2504.19874, Algorithm 1; online softmax and split-K merging as in
// FlashDecoding (Dao et al. 2023).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "turbokv/attention.h"
#include "turbokv/codec.h"

namespace turbokv::cpu {

/// Element type of an input tensor.
enum class DType {
  kF32,   ///< IEEE binary32
  kF16,   ///< IEEE binary16, as uint16_t bits
  kBf16,  ///< bfloat16, as uint16_t bits
};

namespace detail {
struct TqState;
}

/**
 * TurboQuant-MSE for one KV head at integer widths 1..4 (format: formats.h,
 * "tq-mse b in 1..4": codes packed(d, b) token-major, then one fp16 norm per token).
 * Rotation: randomized Hadamard for power-of-two head_dim, the dense Haar
 * matrix (Rotation::matrix()) otherwise, or none; codebook as cfg.codebook.
 * Immutable after construction; every method is thread-safe.
 */
class TqMse {
 public:
  /**
   * cfg: method must be Method::kTurboMse, bits 1, 2, 3 or 4, head_dim a
   * multiple of 16 in 16..512. Throws std::invalid_argument naming the field.
   */
  explicit TqMse(const CodecConfig& cfg);
  ~TqMse();
  TqMse(const TqMse&) = delete;
  TqMse& operator=(const TqMse&) = delete;

  const CodecConfig& config() const { return cfg_; }
  int head_dim() const { return cfg_.head_dim; }
  int bits() const { return static_cast<int>(cfg_.bits); }
  /// Code bytes per token: packed_bytes(head_dim, bits).
  std::size_t code_bytes() const;
  /// Bytes of n encoded tokens: n * (code_bytes() + 2).
  std::size_t encoded_bytes(std::size_t n) const;

  /**
   * Encodes x: [n, head_dim] fp32 row-major (any alignment) into
   * out[encoded_bytes(n)], byte-identical to make_codec(cfg)->encode().
   * threads: 0 = all pool threads. Throws std::invalid_argument on a
   * non-finite element (naming it) or a norm above the fp16 range.
   */
  void encode(const float* x, std::size_t n, std::uint8_t* out, int threads = 0) const;
  /**
   * Same from fp16 or bf16 input: x: [n, head_dim] uint16_t bits of `dtype`
   * (kF16 or kBf16). Identical to the reference fed the values converted to fp32.
   */
  void encode(const std::uint16_t* x, DType dtype, std::size_t n, std::uint8_t* out, int threads = 0) const;
  /// Unpack + dequantize: codes[encoded_bytes(n)] -> out: [n, head_dim] fp32,
  /// bit-identical to the reference Codec::decode.
  void decode(const std::uint8_t* codes, std::size_t n, float* out, int threads = 0) const;
  /**
   * Scores without decoding: out[t - t0] = <q, k_hat_t> for t in [t0, t1) of a
   * block of n encoded tokens. q: [head_dim] fp32 (rotated once here);
   * out: [t1 - t0]. Requires t0 <= t1 <= n.
   */
  void scores(const float* q, const std::uint8_t* codes, std::size_t n, std::size_t t0, std::size_t t1,
              float* out) const;

  const detail::TqState& state() const { return *state_; }

 private:
  CodecConfig cfg_;
  std::unique_ptr<detail::TqState> state_;
};

/// One KV head's encoded block: its codec and its bytes (codec->encoded_bytes(num_tokens)).
struct TqHead {
  const TqMse* codec;
  const std::uint8_t* codes;
};

/**
 * Fused decode attention on TurboQuant-MSE keys and values (any widths 1..4,
 * keys and values may differ). Same semantics as attention_compressed
 * (turbokv/attention.h): keys, values: num_kv_heads heads of num_tokens tokens
 * (same head_dim everywhere); q: [num_heads, head_dim] fp32;
 * out: [num_heads, head_dim] fp32; context: the query sees tokens [0, context)
 * (0 = all); p: softmax scale, sliding window, soft-capping.
 * Keys are scored from the codes (no decoded keys); values are accumulated in
 * the rotated domain (acc += p_t * norm_t * c[code]) and rotated back once per
 * head; all query heads of a GQA group share one pass over the group's
 * codes; the sequence is split into chunks of at most 8,192 tokens (on any
 * number of threads: each chunk's running sums are fp32; TURBOKV_CHUNK_TOKENS,
 * above) spread over threads and merged by log-sum-exp; within a chunk the
 * fp32 AVX2 / AVX-512 kernels sum each block's (8 / 16 tokens) value terms
 * before they join the running sum (the kBf16 kernel adds token pairs, the
 * scalar level token by token). On one 131,072-token sequence with a peaked
 * softmax and values of mean 4 (tests/test_cpu_codec.cpp) TurboQuant 4-bit
 * stays within 3.6e-7 of the fp64 reference at every SIMD level.
 * p.precision = AttentionPrecision::kBf16 opts into bf16 dot products with
 * fp32 accumulation (AVX512-BF16; turbokv/attention.h says what is rounded and
 * the measured error, ~4e-3 relative on average, 1.1e-2 worst seen, instead of
 * 1e-5; ~1.5x faster at 32k tokens); without AVX512-BF16 or
 * below the AVX-512 level it returns exactly the kFp32 result.
 * p.precision = AttentionPrecision::kInt8 opts into int8 dot products with
 * int32 sums (AVX-512 VNNI; turbokv/attention.h says what is rounded: ~1.2e-2
 * relative on average, 3.4e-2 worst seen at softmax scale 1/sqrt(head_dim),
 * more for peakier softmaxes; 1.1-1.3x faster than kBf16 at 32k tokens,
 * docs/RESULTS.md); below the AVX-512 level it returns exactly the kFp32
 * result. The batched call and attention_codec's fused path honour both the
 * same way.
 * Throws std::invalid_argument on bad shapes or parameters.
 */
void attention_tq_mse(const std::vector<TqHead>& keys, const std::vector<TqHead>& values, std::size_t num_tokens,
                      const float* q, int num_heads, const AttentionParams& p, float* out, std::size_t context = 0,
                      int threads = 0);

/// One sequence of a batched call (see attention_tq_mse for the fields).
struct TqSequence {
  std::vector<TqHead> keys, values;  ///< num_kv_heads each
  std::size_t num_tokens = 0;        ///< tokens in each head's block
  std::size_t context = 0;           ///< 0 = num_tokens
  const float* q = nullptr;          ///< [num_heads, head_dim]
  float* out = nullptr;              ///< [num_heads, head_dim]
};

/**
 * Decode attention for many sequences of different lengths in one call (one
 * pool job, balanced over (sequence, KV head, token chunk)). All sequences share
 * num_heads, num_kv_heads, head_dim and p. Throws std::invalid_argument
 * naming the sequence index on bad input.
 */
void attention_tq_mse_batched(const std::vector<TqSequence>& seqs, int num_heads, const AttentionParams& p,
                              int threads = 0);

/**
 * Dense decode attention baseline, fp32 accumulation, same threading and
 * online softmax as the compressed path. k, v: [num_tokens, num_kv_heads,
 * head_dim] of dtype kF32 (float) or kF16 (uint16_t bits); q: [num_heads,
 * head_dim] fp32; out: [num_heads, head_dim] fp32. head_dim: multiple of 16,
 * at most 512. Throws std::invalid_argument on bad shapes.
 */
void attention_dense(const void* k, const void* v, DType dtype, std::size_t num_tokens, int num_kv_heads,
                     int head_dim, const float* q, int num_heads, const AttentionParams& p, float* out,
                     int threads = 0);

/**
 * Memory-stream baseline: reads data[0, bytes) once with wide loads, split over
 * threads like the attention, and returns a checksum (XOR of 64-bit words) so
 * the read cannot be elided.
 */
std::uint64_t stream_bytes(const std::uint8_t* data, std::size_t bytes, int threads = 0);

/**
 * Multiply-add baseline (the arithmetic counterpart of stream_bytes): `macs` fp32 multiply-adds run as
 * independent fused multiply-add chains in registers at the dispatched SIMD level (12 chains of 16 lanes
 * at AVX-512, 8 at AVX2, 1 at the scalar level, which has no FMA: a multiply and an add), one piece per
 * thread, no memory traffic. Its time is the machine's multiply-add bound for that much work in this
 * run: the fused decode attention does 2 * num_tokens * num_heads * head_dim multiply-adds per call.
 * Returns the multiply-adds done, read back from the chains' results (macs rounded up to whole steps of
 * 12 x lanes per thread), so the work cannot be elided. Throws std::invalid_argument when a thread's
 * chains would exceed 2^24 steps (macs above about 2^24 * 12 * lanes * threads).
 */
std::uint64_t fma_peak(std::uint64_t macs, int threads = 0);

}  // namespace turbokv::cpu
