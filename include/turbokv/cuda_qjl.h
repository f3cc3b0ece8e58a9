// turbokv — CUDA kernels (src/cuda/qjl.cu, src/cuda/tq_prod.cu) for the two
// sketch-based key codecs:
//   qjl      QJL 1-bit sketch, Zandieh, Daliri, Han, arXiv 2406.03482:
//            signs = sign(S k) (m bits), ||k|| (fp16);
//            <q, k> ~= kappa * ||k|| * <S q, signs>.
//   tq-prod  TurboQuant-Prod, Zandieh et al., arXiv 2504.19874, Algorithm 2:
//            u = x / ||x||, TurboQuant-MSE codes of Pi u at b-1 bits, residual
//            r = Pi u - c[code], signs = sign(S r), ||x|| and gamma = ||r|| (fp16);
//            <q, x> ~= ||x|| * (<Pi q, c[code]> + kappa * gamma * <S Pi q, signs>).
//
// Both have an append into pages (qjl_append, tq_prod_append) and a fused paged decode with
// TurboQuant-MSE values (qjl_paged_decode, tq_prod_paged_decode: the fp16 tensor-core kernel at head_dim
// 64 / 80 / 96 / 112 / 128 / 256, the CUDA-core kernel with kernel 1 and at the other multiples of 16 in 64..256).
//
// Encoders write exactly the bytes of the reference codec (make_codec(cfg)->encode):
// one formats.h block of n tokens, [codes: n * code_bytes][n * num_scalars fp16],
// with the reference's float operation order (formats.h: sketch rows accumulate
// S[i][j] * r[j] in ascending j, multiply then add, each rounded in fp32).
// Scores are fp32 on the GPU (the reference accumulates in fp64); the prepared
// query (S q, Pi q, S Pi q) is computed in fp64 and stored in fp32.
//
// Every function takes device pointers and a stream, validates its arguments on
// the host (std::invalid_argument naming the argument and value), launches
// asynchronously and checks the launch (std::runtime_error on a CUDA error).
// Inputs must be finite with norms < 32768 (the reference throws; not checked here).
#pragma once

#include <cstddef>
#include <cstdint>

#include "turbokv/codec.h"
#include "turbokv/cuda.h"

namespace turbokv::cuda {

/**
 * Device copy of one QJL or TurboQuant-Prod codec's constants, built from the
 * same reference objects as make_codec(cfg): the sketch S (m x head_dim,
 * i.i.d. Gaussian or orthogonalised rows, seed cfg.seed ^ 0x51) and, for
 * tq-prod, the Hadamard signs and the (b-1)-bit Lloyd-Max codebook.
 * Supported: method qjl (bits 1, head_dim a multiple of 8 in 8..1024) or tq-prod
 * (integer bits 1..4, head_dim a multiple of 16 in 64..256, Hadamard rotation); qjl_rows
 * (0 = head_dim) a multiple of 8 in 8..8192; center off. tq-prod at a head_dim that is not a
 * power of two (80, 96, 112, 160, ...) rotates by the reference's dense Haar matrix (rotation.h: what a
 * Hadamard rotation is at such sizes): dense() is true, rotation() / rotation_t() hold Pi / Pi^T,
 * signs() is null and hadamard_scale() is 1.
 * Throws std::invalid_argument naming the field for other configurations.
 */
class QjlTables {
 public:
  explicit QjlTables(const CodecConfig& cfg);
  QjlTables(const QjlTables&) = delete;
  QjlTables& operator=(const QjlTables&) = delete;

  Method method() const { return method_; }
  int head_dim() const { return head_dim_; }
  int rows() const { return rows_; }          ///< sketch rows m
  int bits() const { return bits_; }          ///< nominal bits (1 for qjl)
  int mse_bits() const { return mse_bits_; }  ///< tq-prod: bits - 1; qjl: 0
  std::size_t mse_bytes() const { return static_cast<std::size_t>(head_dim_) * mse_bits_ / 8; }
  std::size_t sign_bytes() const { return static_cast<std::size_t>(rows_) / 8; }
  /// Code bytes per token: mse_bytes() + sign_bytes().
  std::size_t code_bytes() const { return mse_bytes() + sign_bytes(); }
  /// fp16 scalars per token: 1 (qjl: ||x||) or 2 (tq-prod: ||x||, gamma).
  std::size_t num_scalars() const { return method_ == Method::kQjl ? 1 : 2; }
  /// Bytes of a block of n tokens (= the reference codec's encoded_bytes(n)).
  std::size_t block_bytes(std::size_t n) const { return n * (code_bytes() + 2 * num_scalars()); }
  /// Bytes of one (page, KV head) block of a paged pool: block_bytes(page_size) rounded up to 32 (the
  /// reference's block of page_size tokens: codes, then the fp16 scalars). qjl: tq_page_stride(page_size,
  /// code_bytes()); tq-prod: tq_prod_page_stride(page_size, code_bytes()). Throws std::invalid_argument
  /// naming page_size unless it is a power of two in 1..4096.
  std::size_t page_stride(int page_size) const;
  /// Floats of one prepared query: m (qjl: S q) or head_dim + m (tq-prod: Pi q, then S Pi q).
  std::size_t query_state_size() const {
    return static_cast<std::size_t>(rows_) + (method_ == Method::kQjl ? 0 : static_cast<std::size_t>(head_dim_));
  }
  double kappa() const { return kappa_; }
  float hadamard_scale() const { return scale_; }
  const float* sketch() const { return sketch_.get(); }      ///< device, [m][head_dim]
  const float* sketch_t() const { return sketch_t_.get(); }  ///< device, [head_dim][m]
  const float* signs() const { return signs_.get(); }        ///< tq-prod, !dense(): device, size head_dim; else null
  /// tq-prod at a head_dim that is not a power of two: the rotation is the reference's dense Haar matrix.
  bool dense() const { return rotation_.get() != nullptr; }
  /// dense(): Pi, device fp32 [head_dim][head_dim] row-major (Rotation::matrix()); nullptr otherwise.
  const float* rotation() const { return rotation_.get(); }
  /// dense(): Pi^T, device fp32 [head_dim][head_dim] row-major; nullptr otherwise.
  const float* rotation_t() const { return rotation_t_.get(); }
  /// tq-prod, bits >= 2: device, size 2^(bits-1); else null
  const float* centroids() const { return centroids_.get(); }
  /// tq-prod, bits >= 2: device, size 2^(bits-1) - 1
  const float* boundaries() const { return boundaries_.get(); }

 private:
  Method method_ = Method::kQjl;
  int head_dim_ = 0, rows_ = 0, bits_ = 0, mse_bits_ = 0;
  double kappa_ = 0;
  float scale_ = 0;
  DeviceArray<float> sketch_, sketch_t_;
  DeviceArray<float> signs_, centroids_, boundaries_;  // tq-prod only (centroids_, boundaries_: bits >= 2)
  DeviceArray<float> rotation_, rotation_t_;           // tq-prod at a dense head_dim only
};

/**
 * QJL encode of n vectors into one block, byte-identical to the reference.
 * tab: a qjl QjlTables; x: device fp32 [n, head_dim]; out: device, tab.block_bytes(n) bytes
 * (every byte is written). Throws std::invalid_argument if tab is not qjl or a
 * pointer is null while n > 0.
 */
void qjl_encode(const QjlTables& tab, const float* x, std::size_t n, std::uint8_t* out, Stream stream);

/**
 * QJL append: encodes num_new new tokens of every sequence straight into the pages qjl_paged_decode
 * reads, byte-identical to the reference codec's encode of each token (its sign bytes at the token's
 * slot of its (page, KV head) block, its fp16 ||x|| at slot `off` of the block's norms: the reference's
 * block of page_size tokens). The same kernel as qjl_encode (same float operations in the same order),
 * writing through the page table.
 * kcodec: qjl (any head_dim and qjl_rows it takes); x: device [batch][num_new][num_kv_heads][head_dim] of
 * type x_type (fp32, or fp16 / bf16 widened exactly: the bytes equal the reference's encode of the
 * widened values); start: device int32 [batch], each sequence's first new position (the pages covering
 * [start, start + num_new) must be in the table); pool.page_stride must equal
 * kcodec.page_stride(table.page_size). Nothing outside the new tokens' slots is written. bad: optional
 * device int32 (nullptr = no check): every vector the reference rejects (a NaN or Inf, a norm >= 32768)
 * sets *bad to 1, as tq_mse_append's flag (cuda.h: never cleared by the call; a flagged call's tokens
 * must not be counted); a separate check kernel reads x once more (fp64 norms).
 * Throws std::invalid_argument naming the argument (kcodec.method, shapes, page size, page stride,
 * x_type, null pointers while there is work).
 */
void qjl_append(const QjlTables& kcodec, const void* x, int batch, int num_new, int num_kv_heads,
                const std::int32_t* start, const PageTable& table, PagedPool pool, Stream stream,
                IoType x_type = IoType::kF32, std::int32_t* bad = nullptr);

/**
 * QJL query preparation: state[q] = S q (fp64 accumulation, stored fp32).
 * q: device fp32 [num_queries, head_dim]; state: device fp32 [num_queries, m].
 */
void qjl_prepare_query(const QjlTables& tab, const float* q, int num_queries, float* state, Stream stream);

/**
 * QJL scores: out[h][t - t0] = kappa * ||k_t|| * <state[h], signs_t> for tokens
 * t in [t0, t1) of a block of n tokens (fp32; per-bit sign flips, no decode).
 * state: device fp32 [num_queries, m] from qjl_prepare_query; block: device,
 * tab.block_bytes(n) bytes; out: device fp32 [num_queries, t1 - t0].
 * Throws std::invalid_argument unless t0 <= t1 <= n.
 */
void qjl_scores(const QjlTables& tab, const float* state, int num_queries, const std::uint8_t* block,
                std::size_t n, std::size_t t0, std::size_t t1, float* out, Stream stream);

/**
 * TurboQuant-Prod encode (Algorithm 2) of n vectors into one block,
 * byte-identical to the reference: MSE codes at bits-1 of the rotated unit
 * vector, QJL signs of its residual, fp16 ||x|| and gamma.
 * tab: a tq-prod QjlTables; x: device fp32 [n, head_dim]; out: device, tab.block_bytes(n) bytes.
 * head_dim 64 / 128 / 256: the FWHT in registers; other multiples of 16 (tab.dense()): the reference's
 * dense y = Pi x (ascending sums, multiply then add, each rounded), d^2 multiply-adds per vector (not tuned).
 */
void tq_prod_encode(const QjlTables& tab, const float* x, std::size_t n, std::uint8_t* out, Stream stream);

/**
 * TurboQuant-Prod append: encodes num_new new tokens of every sequence straight into the pages
 * tq_prod_paged_decode reads, byte-identical to the reference codec's encode of each token (its
 * code_bytes() bytes at the token's slot of its (page, KV head) block, its [||x||, gamma] fp16 pair at
 * slot `off` of the block's pairs: the reference's block of page_size tokens). The same kernel as
 * tq_prod_encode (same float operations in the same order), writing through the page table.
 * kcodec: tq-prod (head_dim a multiple of 16 in 64..256); x: device [batch][num_new][num_kv_heads][head_dim] of type
 * x_type (fp32, or fp16 / bf16 widened exactly: the bytes equal the reference's encode of the widened
 * values); start: device int32 [batch], each sequence's first new position (the pages covering
 * [start, start + num_new) must be in the table); pool.page_stride must equal
 * tq_prod_page_stride(table.page_size, kcodec.code_bytes()). Nothing outside the new tokens' slots is
 * written. bad: optional device int32 (nullptr = no check): every vector the reference rejects (a NaN
 * or Inf, a norm >= 32768) sets *bad to 1, as tq_mse_append's flag (cuda.h: never cleared by the call;
 * a flagged call's tokens must not be counted); a separate check kernel reads x once more (fp64 norms).
 * Throws std::invalid_argument naming the argument (kcodec.method, shapes, page size, page stride,
 * x_type, null pointers while there is work).
 */
void tq_prod_append(const QjlTables& kcodec, const void* x, int batch, int num_new, int num_kv_heads,
                    const std::int32_t* start, const PageTable& table, PagedPool pool, Stream stream,
                    IoType x_type = IoType::kF32, std::int32_t* bad = nullptr);

/**
 * TurboQuant-Prod query preparation: state[q] = [Pi q (head_dim), S Pi q (m)]
 * (fp64, stored fp32; tab.dense(): Pi q as the reference's dense sums in fp64). q: device fp32
 * [num_queries, head_dim]; state: device fp32 [num_queries, head_dim + m].
 */
void tq_prod_prepare_query(const QjlTables& tab, const float* q, int num_queries, float* state, Stream stream);

/**
 * TurboQuant-Prod scores (unbiased inner products, as the reference):
 * out[h][t - t0] = ||x_t|| * (<Pi q, c[code_t]> + kappa * gamma_t * <S Pi q, signs_t>)
 * for t in [t0, t1) of a block of n tokens. state: device fp32
 * [num_queries, head_dim + m]; block: device, tab.block_bytes(n) bytes;
 * out: device fp32 [num_queries, t1 - t0]. Throws unless t0 <= t1 <= n.
 */
void tq_prod_scores(const QjlTables& tab, const float* state, int num_queries, const std::uint8_t* block,
                    std::size_t n, std::size_t t0, std::size_t t1, float* out, Stream stream);

/// Shapes and options of one fused decode-attention call on TurboQuant-Prod keys
/// and TurboQuant-MSE values in contiguous (non-paged) blocks, one query token per sequence.
struct ProdDecodeArgs {
  int batch = 0, num_heads = 0, num_kv_heads = 0;  ///< num_heads a multiple of num_kv_heads (any GQA ratio)
  const float* q = nullptr;            ///< device fp32 [batch][num_heads][head_dim]
  float* out = nullptr;                ///< device fp32 [batch][num_heads][head_dim]
  /// device: [batch][num_kv_heads] key blocks, each a formats.h block of `capacity`
  /// tokens (ktab.block_bytes(capacity) bytes, e.g. written by tq_prod_encode with n = capacity)
  const std::uint8_t* keys = nullptr;
  /// device: [batch][num_kv_heads] value blocks of `capacity` tokens
  /// (capacity * (vtab.code_bytes() + 2) bytes each, the tq-mse formats.h block)
  const std::uint8_t* values = nullptr;
  int capacity = 0;                    ///< tokens per block, >= max_seq_len
  const std::int32_t* seq_lens = nullptr;  ///< device int32 [batch], each in 1..max_seq_len (tokens [0, len) attended)
  int max_seq_len = 0;                 ///< host-side bound on seq_lens (chooses the split count)
  float softmax_scale = 0;             ///< > 0
  int num_splits = 0;                  ///< split-K count 1..256; 0 = min(256, ceil(max_seq_len / 128))
  void* workspace = nullptr;           ///< device, tq_prod_decode_workspace_bytes(args, head_dim) bytes
};

/// Workspace bytes of tq_prod_decode: splits * batch * num_heads * (head_dim + 2) floats.
std::size_t tq_prod_decode_workspace_bytes(const ProdDecodeArgs& args, int head_dim);

/**
 * Split-K decode attention on TurboQuant-Prod keys (ktab: tq-prod, rows <= 2048)
 * and TurboQuant-MSE values (vtab, same head_dim). Per (split, sequence, query
 * head) block: Pi q and S Pi q once (fp32), logit_t = softmax_scale *
 * ||k_t|| (<Pi q, c[code_t]> + kappa gamma_t <S Pi q, signs_t>), online softmax,
 * values accumulated in the value rotation's domain; the splits merge by
 * log-sum-exp and the result is rotated back once (Pi_v^T; dense matrix products at head_dims that
 * are not powers of two, where both tables are dense()). fp32 throughout;
 * tested against attention_compressed (fp64, context = seq_len): relative
 * error <= 1e-4 per sequence (kProdDecodeRelTol in tests/cuda/test_cuda_qjl.cpp).
 * A simple CUDA-core kernel (one query head per block, no tile sharing across
 * the GQA group, no cp.async pipeline): correct first, not tuned.
 * Throws std::invalid_argument naming the argument (shapes, scale, splits,
 * capacity < max_seq_len, null pointers, head_dim mismatch, keys not tq-prod, values at a fractional
 * width: vtab.split()).
 */
void tq_prod_decode(const QjlTables& ktab, const TqMseTables& vtab, const ProdDecodeArgs& args, Stream stream);

/// Bytes of one (page, KV head) block of TurboQuant-Prod keys: page_size * (code_bytes + 4)
/// (codes, then the [||x||, gamma] fp16 pair of each token, formats.h) rounded up to 32.
std::size_t tq_prod_page_stride(int page_size, std::size_t code_bytes);

/**
 * The fast decode for TurboQuant-Prod keys: split-K flash-decoding on paged
 * Prod keys (kcodec: tq-prod, bits 1..4, m = head_dim) and TurboQuant-MSE
 * values (vcodec), through the fp16 tensor-core kernel of tq_mse_decode
 * (decode_h16.cuh): per 16-token tile, S1 = C_mse . (Pi q) from the MSE pair
 * tables and S2 = (+-1 sign pairs) . (kappa S Pi q) as a second MMA chain;
 * logit = scale * ||k|| * (S1 + gamma * S2) (TurboQuant Algorithm 2's unbiased
 * estimate); S Pi q is computed once per block. Values, GQA, windows, soft-cap,
 * io types, splits and workspace as in tq_mse_decode (cuda.h). Pages: key pool blocks of
 * tq_prod_page_stride(page_size, kcodec.code_bytes()) bytes holding page_size tokens' codes then their
 * [||x||, gamma] pairs; value pool as tq_mse_decode. args.kernel 0 (default) at head_dim 64, 80, 96, 112, 128,
 * 256: that fp16 tensor-core kernel, fp16 operands, fp32 accumulation (tolerance as the MSE fp16 kernel; at 80,
 * 96, 112 the dense rotations: Pi q in the set-up, Pi_v^T in the combine kernel; tests/cuda/
 * test_cuda_attention.cpp SketchKeysDenseHeadDimsTensorCoresMatchReference).
 * args.kernel 1, and kernel 0 at the other head_dims (144, 160, ..., 240; dense rotations as above): the CUDA-core kernel of
 * tq_mse_decode (decode.cuh, SketchKeyFmt), fp32 throughout: per token ||k|| (<Pi q, c[code]> + kappa
 * gamma <S Pi q, signs>) from the lane's 16 dims of MSE codes and sign bits (tests/cuda/
 * test_cuda_attention.cpp SketchKeysCudaCoresMatchReference: relative error 1e-4 against fp64).
 * Integer value widths only (vcodec.split() throws). Throws std::invalid_argument naming the argument
 * (head_dim outside 64..256 or not a multiple of 16, kcodec.rows != head_dim, kernel not 0 or 1, ...).
 */
void tq_prod_paged_decode(const QjlTables& kcodec, const TqMseTables& vcodec, PagedPool kpool, PagedPool vpool,
                          const PageTable& table, const DecodeArgs& args, Stream stream);

/**
 * Split-K flash-decoding on paged QJL keys (kcodec: qjl, head_dim a multiple of 16 in 64..256, qjl_rows 0 =
 * head_dim) and TurboQuant-MSE values (vcodec, integer widths 1..4). args.kernel 0 (default) at head_dim
 * 64, 80, 96, 112, 128, 256: the fp16 tensor-core kernel of tq_mse_decode (decode_h16.cuh, H16Layout::QJL): the
 * Prod kernel's sign chain with no MSE part; args.kernel 1, and kernel 0 at 144, 160, ..., 240: the CUDA-core
 * kernel (decode.cuh SketchKeyFmt, fp32, logit as below; tolerance 1e-4 relative against fp64). Per
 * block, S q of its (up to 8) query heads once (fp32, times softmax_scale log2(e) kappa, then fp16
 * fragments); per 16-token tile the (+-1 sign pairs) . (S q) MMA chain gives <S q, signs_t>, and
 * logit_t = softmax_scale * kappa * ||k_t|| * <S q, signs_t> (QJL's estimate of <q, k_t>, Zandieh,
 * Daliri, Han, arXiv 2406.03482, Lemma 3.2). Values, GQA, windows, soft-cap, io types, splits and
 * workspace (decode_workspace_bytes) as in tq_mse_decode (cuda.h).
 * Pages: key pool blocks of kcodec.page_stride(page_size) bytes, each the reference's qjl block of
 * page_size tokens (sign bytes, then the fp16 norms), as qjl_append writes them; value pool as
 * tq_mse_decode. fp16 operands, fp32 accumulation: tested against attention_compressed (fp64) with the
 * MSE fp16 kernel's tolerance. Throws std::invalid_argument naming the argument (kcodec.method, head_dim,
 * kcodec.rows, kernel not 0 or 1, vcodec.bits at a fractional width, pools and page table as tq_mse_decode).
 */
void qjl_paged_decode(const QjlTables& kcodec, const TqMseTables& vcodec, PagedPool kpool, PagedPool vpool,
                      const PageTable& table, const DecodeArgs& args, Stream stream);

}  // namespace turbokv::cuda
