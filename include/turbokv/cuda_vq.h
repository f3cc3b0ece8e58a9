// turbokv — CUDA kernels (src/cuda/rvq.cu, src/cuda/pvq.cu) for the two
// vector-quantization codecs:
//   rvq  two-stage residual scalar quantization after a randomized Hadamard
//        rotation (src/ref/rvq.cpp): u = Pi x / ||x||, c1 = Q1(u_i), c2 = Q2(u_i - c1)
//        with Lloyd-Max codebooks of the coordinate density and of its stage-1
//        residual; x_hat = ||x|| Pi^T (c1 + c2).
//   pvq  product VQ with smoothing + Hadamard (VecInfer; src/ref/pvq.cpp):
//        z = Pi (x / lambda), code_s = argmin_k ||z_s - C_s[k]||^2 per sub-vector
//        of g coordinates; x_hat = lambda * Pi^T concat_s C_s[code_s].
//
// Encoders write exactly the bytes of the reference codec's encode (formats.h
// layouts, the reference's float operation order, each operation an explicitly
// rounded intrinsic), into one contiguous block (*_encode) or straight into pages
// (*_append: cuda.h's paged layout, a (page, KV head) block being the reference's
// encoding of page_size tokens). pvq_dequantize writes exactly the reference decode's floats.
// The fused decode-attention kernels (the staged split-K kernels of src/cuda/staged.cuh:
// keys and values decoded once per KV head and step into shared memory, every query head of
// the GQA group served from them): kernel 0 (default; VqDecodeArgs::kernel, DecodeArgs::kernel)
// stages fp16 tiles and computes scores and value sums with fp16 tensor-core MMAs (fp32
// accumulation), kernel 1 stages fp32 and runs on CUDA cores (fp32 throughout); product VQ's
// look-up-table keys always run kernel 1, except pvq_paged_decode's kernel 0 (one width, head_dim 64 / 128;
// 3 bits at 256),
// which is TurboQuant's fp16 tensor-core kernel with product-VQ tables, as is rvq_paged_decode's at 2 + 2,
// 3 + 3 and 4 + 4 bits. At a head_dim that is not a power of two (80, 96, 112, ...: multiples of 16 in 64..256, where the
// reference's "Hadamard" rotation is its dense Haar matrix, rotation.h) the encoders rotate by that matrix in
// the reference's order (bytes identical), the decodes rotate the query by Pi and the merged output by Pi^T
// (fp32) around either kernel; kernel 0 is there the staged fp16 tensor-core kernel for RVQ (but
// rvq_paged_decode's equal widths 2..4 at 80 / 96 / 112: TurboQuant's fp16 kernel) and PolarQuant
// (cuda_polar.h), the look-up-table kernel for product VQ. tests/cuda/test_cuda_vq.cpp
// and test_cuda_vq_paged.cpp check them against attention_compressed (fp64).
//
// Every function takes device pointers and a stream, validates its arguments on
// the host (std::invalid_argument naming the argument and value), launches
// asynchronously and checks the launch (std::runtime_error on a CUDA error).
// Inputs must be finite with norms < 32768 (the reference throws): the encoders do not check; the
// appends flag such vectors in an optional device int32 `bad` (rvq_append).
#pragma once

#include <cstddef>
#include <cstdint>

#include "turbokv/codec.h"
#include "turbokv/cuda.h"

namespace turbokv::cuda {

/**
 * Device copy of one RVQ codec's constants, built from the same reference
 * object as make_codec(cfg) (ref::Rvq): the Hadamard signs, the stage-1
 * Lloyd-Max codebook (lloyd_max_codebook(head_dim, bits)) and the stage-2
 * residual codebook (centroids and fp32 midpoints each).
 * Supported: method rvq, integer bits 1..4, head_dim a multiple of 16 in 64..256,
 * Hadamard rotation (which the reference takes as its dense Haar matrix where head_dim
 * is not a power of two: then dense() is true and rotation() / rotation_t() hold it),
 * center off. Throws std::invalid_argument naming the field otherwise.
 */
class RvqTables {
 public:
  explicit RvqTables(const CodecConfig& cfg);
  RvqTables(const RvqTables&) = delete;
  RvqTables& operator=(const RvqTables&) = delete;

  int head_dim() const { return head_dim_; }
  int bits() const { return bits_; }  ///< bits per stage b (2b bits per coordinate)
  /// Bytes of one stage's packed codes: head_dim * bits / 8.
  std::size_t stage_bytes() const { return static_cast<std::size_t>(head_dim_) * bits_ / 8; }
  /// Code bytes per token: [stage 1][stage 2] = 2 * stage_bytes().
  std::size_t code_bytes() const { return 2 * stage_bytes(); }
  /// Bytes of a block of n tokens (= the reference's encoded_bytes(n)): codes, then n fp16 norms.
  std::size_t block_bytes(std::size_t n) const { return n * (code_bytes() + 2); }
  /// Bytes of one (page, KV head) block of the paged layout: block_bytes(page_size) rounded up to 32.
  /// Throws std::invalid_argument unless page_size is a power of two in 1..4096.
  std::size_t page_stride(int page_size) const;
  /// 1 / sqrt(head_dim); 1 when dense().
  float hadamard_scale() const { return scale_; }
  const float* signs() const { return signs_.get(); }          ///< device, size head_dim (dense(): nullptr)
  /// True where head_dim is not a power of two (80, 96, 112, ...): the rotation is the reference's dense
  /// Haar matrix (rotation.h).
  bool dense() const { return rotation_ != nullptr; }
  /// dense(): Pi, device fp32 [head_dim][head_dim] row-major (Rotation::matrix()); nullptr otherwise.
  const float* rotation() const { return rotation_.get(); }
  /// dense(): Pi^T, device fp32 [head_dim][head_dim] row-major; nullptr otherwise.
  const float* rotation_t() const { return rotation_t_.get(); }
  const float* centroids1() const { return c1_.get(); }        ///< device, size 2^bits
  const float* boundaries1() const { return b1_.get(); }       ///< device, size 2^bits - 1
  const float* centroids2() const { return c2_.get(); }        ///< device, size 2^bits
  const float* boundaries2() const { return b2_.get(); }       ///< device, size 2^bits - 1
  /// device, size 4^bits: entry i | j << bits = c1[i] + c2[j] (fp32, the reference's sum), the decoded
  /// rotated unit coordinate of stage codes (i, j) (rvq_paged_decode's tensor-core tables at 2 bits).
  const float* sum_centroids() const { return cs_.get(); }

 private:
  int head_dim_ = 0, bits_ = 0;
  float scale_ = 0;
  DeviceArray<float> signs_, c1_, b1_, c2_, b2_, cs_, rotation_, rotation_t_;
};

/**
 * Device copy of one calibrated product-VQ codec's parameters: the fp16-rounded
 * smoothing factors lambda [head_dim], the Hadamard signs and the k-means
 * codebooks C [num_sub][K][g] (and the same values as [num_sub][g][K]),
 * copied from the reference object.
 * codec: the object make_codec(cfg) returned for method pvq (center off),
 * after calibrate(); head_dim a multiple of 16 in 64..256 (where it is not a power of two the reference
 * rotates by its dense Haar matrix: dense() is true, rotation() / rotation_t() hold it, signs() is
 * nullptr and hadamard_scale() 1). The tables do not refer to codec
 * after construction. Throws std::invalid_argument (naming "codec") if codec
 * is not a reference pvq codec, is not calibrated, or has another head_dim.
 */
class PvqTables {
 public:
  explicit PvqTables(const Codec& codec);
  PvqTables(const PvqTables&) = delete;
  PvqTables& operator=(const PvqTables&) = delete;

  int head_dim() const { return head_dim_; }
  int bits() const { return bits_; }             ///< nominal bits 1..4
  int sub_dim() const { return g_; }             ///< g: coordinates per sub-vector (8, 4, 2, 2)
  int code_bits() const { return c_; }           ///< c: bits per sub-vector code (8, 8, 6, 8)
  int num_centroids() const { return 1 << c_; }  ///< K = 2^c
  int num_sub() const { return head_dim_ / g_; } ///< head_dim / g
  /// Code bytes per token: packed_bytes(num_sub, c) (no per-token scalars).
  std::size_t code_bytes() const { return (static_cast<std::size_t>(num_sub()) * c_ + 7) / 8; }
  /// Bytes of a block of n tokens (= the reference's encoded_bytes(n)).
  std::size_t block_bytes(std::size_t n) const { return n * code_bytes(); }
  /// Bytes of one (page, KV head) block of the paged layout: block_bytes(page_size) rounded up to 32.
  /// Throws std::invalid_argument unless page_size is a power of two in 1..4096.
  std::size_t page_stride(int page_size) const;
  /// Floats of one query's look-up table: num_sub * K.
  std::size_t lut_size() const { return static_cast<std::size_t>(num_sub()) * num_centroids(); }
  float hadamard_scale() const { return scale_; }
  const float* lambda() const { return lambda_.get(); }        ///< device, size head_dim
  const float* signs() const { return signs_.get(); }          ///< device, size head_dim (dense(): nullptr)
  /// True where head_dim is not a power of two: the reference's dense Haar rotation (rotation.h).
  bool dense() const { return rotation_ != nullptr; }
  /// dense(): Pi, device fp32 [head_dim][head_dim] row-major (Rotation::matrix()); nullptr otherwise.
  const float* rotation() const { return rotation_.get(); }
  /// dense(): Pi^T, device fp32 [head_dim][head_dim] row-major; nullptr otherwise.
  const float* rotation_t() const { return rotation_t_.get(); }
  const float* centroids() const { return cent_.get(); }       ///< device, [num_sub][K][g]
  const float* centroids_soa() const { return cent_t_.get(); } ///< device, [num_sub][g][K]

 private:
  int head_dim_ = 0, bits_ = 0, g_ = 0, c_ = 0;
  float scale_ = 0;
  DeviceArray<float> lambda_, signs_, cent_, cent_t_, rotation_, rotation_t_;
};

/**
 * RVQ encode of n vectors into one block, byte-identical to the reference:
 * stage-1 and stage-2 codes of the rotated unit vector, fp16 ||x||.
 * x: device fp32 [n, head_dim]; out: device, tab.block_bytes(n) bytes (every
 * byte is written). Throws std::invalid_argument if a pointer is null while n > 0
 * or n > 2^36.
 */
void rvq_encode(const RvqTables& tab, const float* x, std::size_t n, std::uint8_t* out, Stream stream);

/**
 * RVQ append: encodes num_new new tokens of every sequence straight into pages, byte-identical to
 * the reference codec's encode of each token (codes at the token's slot, its fp16 norm at slot
 * `off` of the block's norms: the reference's block of page_size tokens).
 * x: device [batch][num_new][num_kv_heads][head_dim] of type x_type (fp16 / bf16 widened exactly);
 * start: device int32 [batch], each sequence's first new position (the pages covering
 * [start, start + num_new) must be in the table); pool.page_stride must equal tab.page_stride(page_size).
 * bad: optional device int32 (nullptr = no check): every vector the reference rejects (a NaN or Inf, a
 * norm >= 32768) sets *bad to 1, as tq_mse_append's flag (cuda.h: never cleared by the call; a flagged
 * call's tokens must not be counted); a separate check kernel reads x once more (fp64 norms).
 * Throws std::invalid_argument naming the argument (shapes, page size, stride, null pointers, x_type).
 */
void rvq_append(const RvqTables& tab, const void* x, int batch, int num_new, int num_kv_heads,
                const std::int32_t* start, const PageTable& table, PagedPool pool, Stream stream,
                IoType x_type = IoType::kF32, std::int32_t* bad = nullptr);

/**
 * Product-VQ encode of n vectors into one block, byte-identical to the
 * reference (nearest centroid per sub-vector, distances summed in ascending
 * coordinate order, ties to the lowest index).
 * x: device fp32 [n, head_dim]; out: device, tab.block_bytes(n) bytes.
 */
void pvq_encode(const PvqTables& tab, const float* x, std::size_t n, std::uint8_t* out, Stream stream);

/// Product-VQ append into pages (as rvq_append, `bad` included; a token's bytes are its codes only: no scalars).
void pvq_append(const PvqTables& tab, const void* x, int batch, int num_new, int num_kv_heads,
                const std::int32_t* start, const PageTable& table, PagedPool pool, Stream stream,
                IoType x_type = IoType::kF32, std::int32_t* bad = nullptr);

/**
 * Product-VQ dequantize: out = lambda * Pi^T concat_s C_s[code_s], floats
 * identical to the reference decode (the same fp32 operations: FWHT, scale *
 * sign, lambda). block: device, tab.block_bytes(n) bytes; out: device fp32 [n, head_dim].
 */
void pvq_dequantize(const PvqTables& tab, const std::uint8_t* block, std::size_t n, float* out, Stream stream);

/// Shapes and options of one fused decode-attention call on VQ keys and values
/// in contiguous (non-paged) blocks, one query token per sequence.
struct VqDecodeArgs {
  int batch = 0, num_heads = 0, num_kv_heads = 0;  ///< num_heads a multiple of num_kv_heads (any GQA ratio)
  const float* q = nullptr;            ///< device fp32 [batch][num_heads][head_dim]
  float* out = nullptr;                ///< device fp32 [batch][num_heads][head_dim]
  /// device: [batch][num_kv_heads] key blocks, each a formats.h block of `capacity`
  /// tokens (ktab.block_bytes(capacity) bytes, e.g. written by *_encode with n = capacity)
  const std::uint8_t* keys = nullptr;
  /// device: [batch][num_kv_heads] value blocks of `capacity` tokens (vtab.block_bytes(capacity) bytes each)
  const std::uint8_t* values = nullptr;
  int capacity = 0;                    ///< tokens per block, >= max_seq_len
  const std::int32_t* seq_lens = nullptr;  ///< device int32 [batch], each in 1..max_seq_len (tokens [0, len) attended)
  int max_seq_len = 0;                 ///< host-side bound on seq_lens (chooses the split count)
  float softmax_scale = 0;             ///< > 0
  int num_splits = 0;                  ///< split-K count 1..256; 0 = chosen by the cost model of DecodeArgs::num_splits (cuda.h)
  void* workspace = nullptr;           ///< device, 16-byte aligned, *_decode_workspace_bytes bytes
  /// The decode kernel, as DecodeArgs::kernel of the staged decodes (cuda.h): 0 = fp16 tensor cores
  /// (default; RVQ and PolarQuant at head_dim 64, 128, 256; product VQ's look-up-table keys, and every method at
  /// head_dims that are not powers of two, run the CUDA-core kernel in these contiguous blocks: only
  /// pvq_paged_decode has product VQ's tensor-core path), 1 = CUDA cores (fp32). Other values throw.
  int kernel = 0;
};

/// Workspace bytes of rvq_decode: decode_workspace_bytes (cuda.h) of the same shapes, 0 when batch is 0.
/// Throws std::invalid_argument naming a negative shape, num_splits outside 0..256, or (batch > 0) any
/// field decode_workspace_bytes validates: head_dim, num_heads / num_kv_heads, max_seq_len >= 1,
/// softmax_scale (the error then names cuda::decode_workspace_bytes).
std::size_t rvq_decode_workspace_bytes(const VqDecodeArgs& args, int head_dim);

/**
 * Split-K decode attention on RVQ keys (ktab) and RVQ values (vtab, same
 * head_dim; bit widths may differ) in contiguous blocks. Pi_k q once per query head (fp32),
 * logit_t = softmax_scale * ||k_t|| <Pi_k q, c1[code1_t] + c2[code2_t]>, online softmax, values
 * accumulated in the value rotation's domain (weight * ||v_t|| * (c1 + c2)); the splits merge by
 * log-sum-exp and the result is rotated back once (Pi_v^T). The staged kernels: per step the keys and
 * values of a KV head are decoded once into shared memory and every query head of its GQA group (any
 * ratio) reads them. args.kernel 0 (default): 64-token steps staged as fp16, scores and value sums by
 * fp16 tensor-core MMAs with fp32 accumulation (Pi_k q, the staged elements and the softmax weights
 * rounded to fp16): relative L2 error <= 3e-3 per sequence (kVqDecodeH16RelTol); 1: 32-token steps on
 * CUDA cores, fp32 throughout: <= 1e-4 (kVqDecodeRelTol), both against attention_compressed (fp64,
 * context = seq_len; tests/cuda/test_cuda_vq.cpp). Not tuned (docs/RESULTS.md).
 * Throws std::invalid_argument naming the argument (shapes, scale, splits,
 * capacity < max_seq_len, null or misaligned pointers, head_dim mismatch, kernel not 0 or 1).
 */
void rvq_decode(const RvqTables& ktab, const RvqTables& vtab, const VqDecodeArgs& args, Stream stream);

/**
 * rvq_decode on paged pools (rvq_append's layout): kpool / vpool page strides ktab.page_stride(page_size)
 * and vtab.page_stride(page_size); shapes, GQA, sliding window, soft-cap, fp32 / fp16 / bf16 io,
 * splits and workspace (decode_workspace_bytes) as tq_mse_decode (cuda.h); args.head_dim must equal
 * the tables', args.kernel 0 or 1 as rvq_decode. Tolerance as rvq_decode (plus the 16-bit output rounding).
 * Kernel 0 with 2 bits per stage for keys and values: TurboQuant-MSE's fp16 tensor-core kernel
 * (decode_h16.cuh; a coordinate's two 2-bit stage codes index a pair table of fp16 sums c1 + c2, no
 * staging; 16-token warp steps with bulk copies), same tolerance; H200, batch 16 x 65,536 tokens, 32/8
 * heads, head_dim 128: docs/RESULTS.md "Session 18". Kernel 0 with 3 or 4 bits per stage on both sides at
 * head_dim 64 or 128: the same kernel with one set of pair tables per stage (fp16 c1 pairs and c2 pairs),
 * the two stages accumulated into the same fragments in fp32, same tolerance; H200 at the shape above:
 * 650 us (3 + 3) and 705 us (4 + 4) against 2,725 / 2,467 us staged (docs/RESULTS.md "Session 19").
 * Both also at head_dim 80, 96, 112 (2 + 2, 3 + 3, 4 + 4; dense rotations: Pi q before the kernel's steps,
 * Pi_v^T in the merge): H100, batch 16 x 32,768, 32/8 heads, 1.85-3.44x cuDNN SDPA (docs/RESULTS.md
 * "Session 43"). Other widths (1 + 1, unequal), head_dim 256 at 3 or 4 bits and 144..240: the staged kernel.
 * Throws std::invalid_argument naming the argument.
 */
void rvq_paged_decode(const RvqTables& ktab, const RvqTables& vtab, PagedPool kpool, PagedPool vpool,
                      const PageTable& table, const DecodeArgs& args, Stream stream);

/// Workspace bytes of pvq_decode: rvq_decode_workspace_bytes(args, ktab.head_dim()) rounded up to 16,
/// plus one look-up table per query head (batch * num_heads * ktab.lut_size() floats).
std::size_t pvq_decode_workspace_bytes(const VqDecodeArgs& args, const PvqTables& ktab);

/**
 * Look-up-table decode attention (VecInfer) on product-VQ keys (ktab) and values (vtab, same
 * head_dim) in contiguous blocks. Once per query head: q' = Pi_k (lambda_k * q) and the table
 * LUT[s][k] = <q'_s, C_s[k]> (fp64 as the reference's prepare_query, stored fp32, in the workspace).
 * Split-K on the staged kernel: lane t of each query head's warp scores token t as
 * logit_t = softmax_scale * sum_s LUT[s][code_ts] (no decoded keys), online softmax; per 32-token
 * step the values of a KV head are decoded once into shared memory as centroid coordinates in their
 * codec's rotated, smoothed domain and every query head of the GQA group accumulates them;
 * log-sum-exp merge, then Pi_v^T and lambda_v once. fp32 accumulation; tested against
 * attention_compressed: relative L2 error <= 1e-4 per sequence. args.kernel 0 or 1: both run this
 * CUDA-core kernel (the tensor-core staged kernel has no table-scored keys). Throws
 * std::invalid_argument like rvq_decode.
 */
void pvq_decode(const PvqTables& ktab, const PvqTables& vtab, const VqDecodeArgs& args, Stream stream);

/// Workspace bytes of pvq_paged_decode: decode_workspace_bytes(args) (cuda.h) rounded up to 16, plus
/// one look-up table per query head (batch * num_heads * ktab.lut_size() floats; ktab: the key
/// tables). Throws std::invalid_argument naming an invalid shape (as decode_workspace_bytes) or a
/// ktab head_dim other than args.head_dim.
std::size_t pvq_paged_decode_workspace_bytes(const DecodeArgs& args, const PvqTables& ktab);

/// pvq_decode on paged pools (pvq_append's layout; page strides ktab / vtab.page_stride(page_size)),
/// DecodeArgs as rvq_paged_decode except the workspace: args.workspace must hold
/// pvq_paged_decode_workspace_bytes(args, ktab) bytes (16-byte aligned).
/// args.kernel 0 with keys and values of the same width (1..4 bits) at head_dim 64 or 128, or at 3 bits at
/// head_dim 256: TurboQuant-MSE's
/// fp16 tensor-core kernel (decode_h16.cuh) instead of the look-up tables: q' = Pi_k (lambda_k q) once per
/// query head, each code's centroid C_s[code] (g fp16 values, from per-sub-vector tables in shared memory:
/// 2 x head_dim / 2 KB, 2 x head_dim / 8 KB at 3 bits, one side when ktab and vtab are the same object)
/// is g / 2 mma operand registers of the scores and of the value sums directly, fp32 accumulation, then
/// Pi_v^T and lambda_v once after the merge; relative L2 error <= 3e-3 per sequence against
/// attention_compressed (kStagedH16RelTol of tests/cuda/test_cuda_vq_paged.cpp; plus the 16-bit output
/// rounding). H200, batch 16 x 65,536 tokens, 32/8 heads, head_dim 128, 1 / 2 / 3 / 4 bits: 469 / 531 /
/// 605 / 608 us against 3,159 / 5,408 / 6,382 / 9,337 us for the look-up-table kernel (docs/RESULTS.md
/// "Session 19"). At head_dim 256 only 3 bits take it (2 x 32 KB of tables; session 20). Mixed widths,
/// head_dim 256 at 1, 2 and 4 bits (whose tables would not fit) and args.kernel 1: the look-up-table kernel
/// (fp32, within 1e-4).
/// Throws std::invalid_argument naming the argument.
void pvq_paged_decode(const PvqTables& ktab, const PvqTables& vtab, PagedPool kpool, PagedPool vpool,
                      const PageTable& table, const DecodeArgs& args, Stream stream);

}  // namespace turbokv::cuda
