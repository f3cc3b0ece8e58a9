// turbokv — CUDA kernels (src/cuda/): bit packing, the TurboQuant-MSE append
// path (fused randomized Hadamard + quantize + pack straight into pages) and
// split-K flash-decoding attention directly on paged compressed keys/values.
//
// Every function takes device pointers and a stream, validates its arguments
// on the host (std::invalid_argument naming the argument), launches
// asynchronously and checks the launch (std::runtime_error on a CUDA error).
// Nothing here needs the CUDA headers: Stream is cudaStream_t.
//
// Paged cache (one pool for keys, one for values):
//   physical page p holds, for each KV head g, one formats.h block of
//   page_size tokens at pool + (p * num_kv_heads + g) * page_stride:
//     [ codes: page_size * code_bytes ][ page_size fp16 norms ][ zero padding ]
//   (fractional TurboQuant-MSE widths: page_size [||x_0||, ||x_1||] fp16 pairs;
//   TqMseTables::page_stride gives the stride of either).
//   page_stride = tq_page_stride(page_size, code_bytes) rounds the block up to
//   32 bytes so that every block starts on a 32-byte L2 sector (a block that
//   straddled sectors made the decode's copies read 1.5x the sectors). Token t of sequence b
//   lives in page page_table[b * max_pages + t / page_size] at offset
//   t % page_size. page_size is a power of two (1 .. 4096).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "turbokv/codec.h"

struct CUstream_st;

namespace turbokv::cuda {

using Stream = CUstream_st*;  ///< = cudaStream_t

/// Deleter of device allocations: cudaFree(p), its error ignored (noexcept; a null p is never passed
/// by std::unique_ptr). Defined in src/cuda/pack.cu, so this header needs no CUDA headers.
struct DeviceFree {
  void operator()(void* p) const noexcept;
};

/**
 * Owner of one cudaMalloc'ed device array of T (the device tables' storage):
 * frees it with cudaFree (DeviceFree) when destroyed or reset. Move-only
 * (std::unique_ptr); get() is the raw device pointer, null when empty.
 */
template <class T>
using DeviceArray = std::unique_ptr<T[], DeviceFree>;

/// Element type of device tensors at the API boundary (append input, decode query and output).
enum class IoType {
  kF32,   ///< float
  kF16,   ///< IEEE binary16 (uint16_t bits / __half)
  kBf16,  ///< bfloat16 (uint16_t bits / __nv_bfloat16)
};

/// Number of CUDA devices usable by this process; 0 if none or if the runtime
/// fails (then `why`, if given, receives the runtime's message).
int device_count(std::string* why = nullptr);

/// DRAM bytes per SM clock cycle of the current device at its peak clocks: 2 x memory clock x bus width / 8
/// over SM count x SM clock (cudaDeviceGetAttribute: cudaDevAttrMemoryClockRate, GlobalMemoryBusWidth,
/// MultiProcessorCount, ClockRate). About 12.8 on an H100 SXM (2619 MHz x 5120 bits, 132 SMs at 1980 MHz) and
/// 18.8 on an H200 (3201 MHz x 6144 bits). 0 where the runtime reports no device or no such attribute; no
/// error is thrown. Computed once per process, for the device current at the first call.
double dram_bytes_per_sm_cycle();

/// tq_mse_decode pairs sequences at head_dim 128 by default (DecodeArgs::pair_sequences -1) only on devices
/// with at least this many DRAM bytes per SM cycle (dram_bytes_per_sm_cycle): pairs cut instructions per
/// token, which pays where the one-sequence kernel is bound by instructions (H200, runs s34-1 .. s34-3: 3-bit
/// pairs 1.00-1.21x) and not where it already streams near the DRAM limit (H100 run s36-1: the one-sequence
/// 3-bit kernel at 94% of the device-to-device copy rate, pairs 0.91-0.95x of its speed).
inline constexpr double kPairMinDramBytesPerSmCycle = 16.0;

/**
 * Packs n codes (each < 2^bits) into the LSB-first stream of turbokv/pack.h.
 * codes: device, size n; out: device, size packed_bytes(n, bits). bits in 1..8.
 */
void pack_bits(const std::uint8_t* codes, std::size_t n, int bits, std::uint8_t* out, Stream stream);
/// Inverse of pack_bits. packed: device, size packed_bytes(n, bits); codes: device, size n.
void unpack_bits(const std::uint8_t* packed, std::size_t n, int bits, std::uint8_t* codes, Stream stream);

/**
 * Converts n fp32 values to fp16 bits with turbokv's rounding (turbokv/half.h `float_to_half`:
 * round-to-nearest-even, overflow to Inf, NaN to sign | 0x7e00), the conversion every GPU kernel
 * uses for the norms and scales it stores; the bits equal the host function's for every input.
 * x: device, [n] fp32; out: device, [n] uint16_t fp16 bits. Throws std::invalid_argument naming
 * `x/out` if n > 0 and either pointer is null.
 */
void fp32_to_fp16(const float* x, std::size_t n, std::uint16_t* out, Stream stream);

/// Bytes of one (page, KV head) block: page_size * (code_bytes + 2) rounded up to 32.
std::size_t tq_page_stride(int page_size, std::size_t code_bytes);

/**
 * Device copy of one TurboQuant-MSE codec's constants, taken from the reference
 * objects (Rotation(dim, kHadamard, seed).signs(), lloyd_max_codebook), so the
 * kernels write the reference codec's bytes exactly.
 *
 * Integer widths (bits 1..4, Hadamard rotation): from the CodecConfig (or the reference codec).
 * head_dim 64/128/256 rotate by the FWHT (signs(), hadamard_scale()); the other multiples of 16 in
 * 64..256 (80, 96, 112, ...) by the reference's dense Haar matrix (rotation.h: the kind a Hadamard
 * rotation takes at a non-power-of-two size): dense() is true, rotation() / rotation_t() hold it,
 * signs() is null and hadamard_scale() is 1. tq_mse_decode runs the fp16 tensor-core kernel at 80,
 * 96 and 112 (kernel 0) and the CUDA-core kernel at the other ones (and for kernel 1).
 *
 * Fractional widths b + 0.5 (b = 1, 2, 3; head_dim 128/256; the outlier split of
 * formats.h and src/ref/tq_mse.cpp, after Zandieh et al. Sec. 4.3): from a
 * *calibrated* reference codec (its channel split as its encode gathers it). Part 0 = the H = head_dim / 2 outlier channels at b + 1 bits, part 1
 * = the other H channels at b bits; each part has its own Hadamard rotation of size
 * H (seed + part) and Lloyd-Max codebook (dim H), and its own fp16 norm. On the
 * device: channels() [head_dim] = part 0's channels then part 1's (ascending each),
 * signs() [head_dim] = part 0's signs then part 1's; centroids()/boundaries() are
 * part 0's (b + 1 bits), centroids_lo()/boundaries_lo() part 1's (b bits).
 * A token's bytes: [part 0 codes: H (b+1) / 8][part 1 codes: H b / 8]; its scalars
 * [||x_0||, ||x_1||] (page_stride()).
 *
 * Throws std::invalid_argument for other configurations (naming the field), including centred
 * codecs (CodecConfig::center; before session 9 these were accepted and encoded un-centred), and for
 * a fractional codec that is not calibrated; std::logic_error if the reference's encoded layout is
 * not the outlier split of formats.h (an internal inconsistency).
 */
class TqMseTables {
 public:
  /// Integer widths only.
  explicit TqMseTables(const CodecConfig& cfg);
  /// Integer or fractional widths (ref: a tq-mse reference codec, calibrated if fractional).
  explicit TqMseTables(const Codec& ref);
  TqMseTables(const TqMseTables&) = delete;
  TqMseTables& operator=(const TqMseTables&) = delete;

  int head_dim() const { return head_dim_; }
  /// Integer widths: the width; fractional: b (the low part's width; the outlier part has b + 1).
  int bits() const { return bits_; }
  /// True for a fractional width (the outlier split).
  bool split() const { return split_; }
  /// Nominal bits per coordinate: bits(), or bits() + 0.5 when split().
  double nominal_bits() const { return split_ ? bits_ + 0.5 : bits_; }
  /// Code bytes per token: head_dim * bits / 8, or H (b + 1) / 8 + H b / 8 (H = head_dim / 2) when split().
  std::size_t code_bytes() const {
    return split_ ? static_cast<std::size_t>(head_dim_ / 2) * (2 * bits_ + 1) / 8
                  : static_cast<std::size_t>(head_dim_) * bits_ / 8;
  }
  /// fp16 scalars per token: 1 (||x||), or 2 (||x_0||, ||x_1||) when split().
  int num_norms() const { return split_ ? 2 : 1; }
  /// Bytes of one (page, KV head) block of this codec: page_size * (code_bytes + 2 num_norms), rounded
  /// up to 32 (= tq_page_stride(page_size, code_bytes()) for integer widths). Throws
  /// std::invalid_argument unless page_size is a power of two in 1..4096.
  std::size_t page_stride(int page_size) const;
  /// 1 / sqrt(rotation size): head_dim, or head_dim / 2 when split(); 1 when dense().
  float hadamard_scale() const { return scale_; }
  /// True when head_dim is not a power of two: the rotation is the reference's dense Haar matrix.
  bool dense() const { return dense_; }
  /// dense(): Pi, device fp32 [head_dim][head_dim] row-major (Rotation::matrix()); nullptr otherwise.
  const float* rotation() const { return rotation_.get(); }
  /// dense(): Pi^T, device fp32 [head_dim][head_dim] row-major; nullptr otherwise.
  const float* rotation_t() const { return rotation_t_.get(); }
  const float* signs() const { return signs_.get(); }            ///< device, size head_dim (dense(): nullptr)
  const float* centroids() const { return centroids_.get(); }    ///< device, size 2^bits (split: 2^(bits+1))
  const float* boundaries() const { return boundaries_.get(); }  ///< device, size 2^bits - 1 (split: part 0's)
  /// split(): part 1's centroids (2^bits) and boundaries (2^bits - 1), device; nullptr otherwise.
  const float* centroids_lo() const { return centroids_lo_.get(); }
  const float* boundaries_lo() const { return boundaries_lo_.get(); }
  /// split(): device int32 [head_dim], part 0's channels then part 1's; nullptr otherwise.
  const std::int32_t* channels() const { return channels_.get(); }
  /// The host codebook (lloyd_max_codebook's cached object: equal addresses = equal codebooks);
  /// split(): part 0's.
  const ScalarCodebook& codebook() const { return *codebook_; }
  /// split(): part 1's host codebook; nullptr otherwise.
  const ScalarCodebook* codebook_lo() const { return codebook_lo_; }

 private:
  void init(const CodecConfig& cfg);
  const ScalarCodebook* codebook_ = nullptr;
  const ScalarCodebook* codebook_lo_ = nullptr;
  int head_dim_ = 0, bits_ = 0;
  bool split_ = false, dense_ = false;
  float scale_ = 0;
  DeviceArray<float> signs_, centroids_, boundaries_, centroids_lo_, boundaries_lo_, rotation_, rotation_t_;
  DeviceArray<std::int32_t> channels_;
};

/// Where the paged blocks of one pool are.
struct PagedPool {
  /// device; num_pages * num_kv_heads * page_stride bytes, 16-byte aligned (the decodes copy pages by
  /// 16-byte cp.async and bulk copies; cudaMalloc's 256-byte alignment qualifies): the paged decodes throw
  /// std::invalid_argument naming kpool.data / vpool.data otherwise.
  std::uint8_t* data = nullptr;
  /// Bytes of one (page, KV head) block: the codec's TqMseTables::page_stride(page_size)
  /// (tq_page_stride(page_size, code_bytes) at integer widths; TurboQuant-Prod keys:
  /// tq_prod_page_stride). Fractional widths need their two-norm layout: at page_size <= 8 the
  /// stride alone cannot tell it from a one-norm block.
  std::size_t page_stride = 0;
};

/// The page table shared by the key and value pools.
struct PageTable {
  const std::int32_t* pages = nullptr;  ///< device, [batch][max_pages] physical page ids
  int max_pages = 0;
  int page_size = 16;                   ///< tokens per page, power of two
};

/**
 * Append: encodes num_new new tokens of every sequence straight into pages
 * (prefill chunk: num_new > 1; decode step: num_new = 1), byte-identical to
 * the reference codec's encode of the same vectors. Integer and fractional widths
 * (codec.split(): each part encoded from its gathered channels, two launches).
 * pool.page_stride must equal codec.page_stride(table.page_size).
 * x: device [batch][num_new][num_kv_heads][head_dim] of type x_type (fp32, or fp16 / bf16 widened
 * exactly on load: the bytes equal the reference's encode of the widened values);
 * start: device int32 [batch], position of each sequence's first new token
 * (the pages covering [start, start + num_new) must be in the table).
 * Bad vectors: the reference rejects a vector holding a NaN or Inf or with norm >= 32768 (its
 * norm is stored in fp16). The kernels cannot throw; with `bad` (optional device int32, nullptr = no
 * check) every such vector sets *bad to 1 (atomicOr; the call never clears it: zero it first, read it
 * after the stream synchronizes). The test is on the kernel's fp32 norm (at fractional widths the
 * second part adds the first part's stored fp16 norm), so a vector within rounding of 32768 may be
 * judged differently from the reference's fp64 norm. The flag is per call, not per vector: when it
 * is set, the call's new tokens must not be counted, for every sequence of the batch (a flagged
 * vector's bytes are written but meaningless; find it with the reference codec's validate if needed).
 * Nothing before `start` is touched, so a cache that advances its lengths only after a clean flag
 * stays unchanged; every unflagged vector's bytes are exact. Cost: one compare per vector on the
 * norm-storing lane (fractional widths: plus one fp16 load, a multiply, an fma and a square root in
 * the second part's launch); H200 encode rows with the flag on: 0.988x geomean (docs/RESULTS.md
 * "Session 27").
 * At head_dim 64, 128, 256 with an integer width, x must be
 * 16-byte aligned (std::invalid_argument naming x otherwise; cudaMalloc pointers are).
 */
void tq_mse_append(const TqMseTables& codec, const void* x, int batch, int num_new, int num_kv_heads,
                   const std::int32_t* start, const PageTable& table, PagedPool pool, Stream stream,
                   IoType x_type = IoType::kF32, std::int32_t* bad = nullptr);

/**
 * Dequantize: reads num_tokens tokens of every sequence back from TurboQuant-MSE pages, for code that
 * wants the vectors themselves (a prefill or chunked-prefill attention kernel of the caller's over the
 * cached prefix, an export). out[b][j][g][:] = the reference codec's decode of token start[b] + j of
 * sequence b, KV head g (src/ref/tq_mse.cpp: ||x|| * Pi^T c[codes]; fractional widths: each part's
 * norm * its inverse rotation, scattered back to its channels): with out_type fp32 bit-identical to
 * Codec::decode of the same bytes (the same fp32 operations in the same order: the FWHT butterflies
 * h = 1, 2, 4, ..., then x_i (scale sign_i), then norm x_i; dense rotations sum_i Pi[i][j] y_i in
 * ascending i, multiply then add), with fp16 / bf16 its round-to-nearest-even conversion.
 * codec: any TqMseTables (integer widths at head_dim 64..256, fractional at 128 / 256); pool: its
 * pages (pool.page_stride must equal codec.page_stride(table.page_size)); start: device int32 [batch],
 * each sequence's first position to read (the pages covering [start, start + num_tokens) must be in
 * the table); out: device [batch][num_tokens][num_kv_heads][head_dim] of out_type (the layout of
 * tq_mse_append's x, so appending x and dequantizing gives the reference's round trip). One warp per
 * vector; dense rotations read Pi (head_dim^2 floats) per vector from cache: correct first, not tuned.
 * Throws std::invalid_argument naming the argument (batch/num_tokens < 0, num_kv_heads, page_size,
 * pool.page_stride, out_type, null pointers while there is work, more than 2^31 - 2^20 vectors).
 */
void tq_mse_dequantize(const TqMseTables& codec, PagedPool pool, const PageTable& table, int batch, int num_tokens,
                       int num_kv_heads, const std::int32_t* start, void* out, Stream stream,
                       IoType out_type = IoType::kF32);

/// Shapes and options of one decode-attention call (one query token per sequence).
struct DecodeArgs {
  /// head_dim: a multiple of 16 in 64..256; 64, 128, 256 for every tensor-core kernel (kernel 0 and 2), and 80, 96,
  /// 112 too for kernel 0 of tq_mse_decode, fp8_decode, tq_prod_paged_decode and qjl_paged_decode; the others (144,
  /// 160, ...) run the CUDA-core kernel (those decodes with dense-rotation tables, fp16_decode), as do
  /// rvq_paged_decode, pvq_paged_decode and polar_paged_decode at every head_dim that is not a power of two.
  int batch = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  const void* q = nullptr;              ///< device [batch][num_heads][head_dim] of type `io`
  void* out = nullptr;                  ///< device [batch][num_heads][head_dim] of type `io`
  /// Type of q and out. Accumulation is fp32 either way; 16-bit queries are widened once
  /// (exactly) into the workspace, outputs rounded to nearest even once at the end.
  IoType io = IoType::kF32;
  /// Logit soft-capping c > 0: logit = c * tanh(logit / c) (Gemma 2); 0 = off. Must be finite, >= 0.
  float softcap = 0;
  const std::int32_t* seq_lens = nullptr;  ///< device int32 [batch], each in 1..max_seq_len
  int max_seq_len = 0;                  ///< host-side bound on seq_lens (chooses the split count)
  float softmax_scale = 0;              ///< > 0
  int window = 0;                       ///< sliding window in tokens (0 = all)
  /// Split-K count; 0 = chosen by a cost model (<= 256): waves of blocks x (tiles per split + a block's
  /// set-up), so one full wave where the blocks fit, several waves where one split per block would
  /// leave SMs idle.
  int num_splits = 0;
  void* workspace = nullptr;            ///< device, decode_workspace_bytes(args) bytes
  /// tq_mse_decode's kernel: 0 = fp16 tensor cores (default, fastest: Pi q, centroids and softmax
  /// weights rounded to fp16, fp32 accumulation; decode_h16.cuh), 1 = CUDA cores (fp32),
  /// 2 = 3xTF32 tensor cores (fp32-accurate, decode_mma.cuh). Other values throw. At head_dim not a
  /// power of two (dense rotations) 2 throws, and 0 means 1 except at 80, 96 and 112.
  /// The staged decodes (kivi_decode, rvq_paged_decode, polar_paged_decode, pvq_paged_decode): 0 = fp16
  /// tensor cores (default; product VQ's look-up-table keys, and RVQ / product VQ / PolarQuant at head_dims that
  /// are not powers of two: CUDA cores), 1 = CUDA cores (fp32); others throw. fp8_decode: 0 = fp16 tensor cores at head_dim 64, 80, 96, 112, 128, 256 (default; the
  /// CUDA-core kernel at the other head_dims), 1 = CUDA cores (fp32); others throw.
  int kernel = 0;
  /// Two sequences per block in tq_mse_decode's kernel 0 where it applies: head_dim 64 or 128, page_size 16,
  /// batch >= 2, at most 4 query heads per KV head, 2..4-bit keys and values. Sequences b and b + 1
  /// (b even) of one KV head share each 16-token step: the step of twice the head_dim over both rows with
  /// block-diagonal queries, so the step's head_dim-independent work (softmax over 8 columns, masks,
  /// waits, copy issue) serves 2 G query heads instead of G (docs/CUDA_NOTES.md "Session 28", "Session
  /// 34"). Same tolerance as kernel 0. -1 (default): where it applies, batch >= 8 and batch * max_seq_len
  /// >= 2^19, and at head_dim 128 only for 3-bit keys and values, or 2-bit keys and values with batch *
  /// max_seq_len >= 2^21 (elsewhere one sequence per block measured faster on an H200: fewer, longer blocks
  /// pay the pair step's set-up less; at head_dim 128 4-bit pairs were 0.88-0.98x, runs s34-2 / s34-3), and
  /// at head_dim 128 only on devices with dram_bytes_per_sm_cycle() >= kPairMinDramBytesPerSmCycle (H200
  /// yes, H100 no: there the one-sequence kernel measured faster, run s36-1);
  /// 1: wherever it applies; 0: never (one sequence per block). Other values throw.
  int pair_sequences = -1;
  /// Warps per block of the fp16 tensor-core kernel (kernel 0) at head_dim 256 (each warp runs its own
  /// pipeline of 16-token steps): tq_mse_decode at integer and fractional widths, tq_prod_paged_decode,
  /// rvq_paged_decode at 2 + 2 bits, fp8_decode and kivi_decode; also tq_mse_decode's sequence pairs at
  /// head_dim 128 (pair_sequences: their step is a head_dim-256 step; batch counts sequence pairs there).
  /// 0 (default) = 12 where batch * num_kv_heads >= 16 and batch * num_kv_heads * min(window, max_seq_len) >= 2^19 (window 0: max_seq_len), else 8, for
  /// TurboQuant-MSE / -Prod keys and RVQ; fp8 and KIVI run 8 unless 12 is asked for; 8 or 12 = that count.
  /// Every decode entry point validates it; the others (product VQ, PolarQuant, staged RVQ widths, kernels
  /// 1 and 2, other head_dims) ignore it. Same results within kernel 0's tolerance (the split count follows
  /// the block step of 16 x warps tokens). H200, 4/1 heads (docs/CUDA_NOTES.md "Session 29", "Session 30"):
  /// 12 warps 1.03-1.33x faster at batch 16 and 64 x 32k-128k tokens (3 and 4 bits; Prod keys 1.01-1.10x;
  /// 2-bit 1.02-1.14x; RVQ 1.02-1.10x), 0.92-0.98x at batch 1 and at batch 16 x 4k; fp8 0.99-1.00x and KIVI
  /// 0.96-1.19x (hence not by default). Other values throw.
  int block_warps = 0;
};

/// Workspace bytes needed by tq_mse_decode / fp16_decode for args (an upper bound
/// over the automatic split choices: (splits * (head_dim + 2) + head_dim) * batch * num_heads floats).
std::size_t decode_workspace_bytes(const DecodeArgs& args);

/**
 * Split-K flash-decoding attention on paged TurboQuant-MSE keys and values.
 * q is rotated once per block (Pi q); logit_t = scale * norm_t * <Pi q, c[code_t]>;
 * values accumulate in the rotated domain, the split partials merge by
 * log-sum-exp and the result is rotated back once (Pi^T; with one split the
 * fp16 kernel does this itself, otherwise a second kernel). Any GQA ratio; all
 * query heads of a KV group (up to 8 in one block) share each loaded tile.
 * kcodec/vcodec: the key and value codecs (same head_dim); kpool/vpool: their pools, page strides
 * kcodec.page_stride(page_size) and vcodec.page_stride(page_size).
 * head_dim not a power of two (80, 96, 112, ...; TqMseTables::dense()): Pi q is the dense matrix
 * product (fp32) in the kernel's set-up, and the merge (always the combine kernel) applies Pi^T
 * densely. Kernel 0 at 80, 96, 112 is the fp16 tensor-core kernel (every integer key and value width,
 * its tolerance; tests/cuda/test_cuda_attention.cpp, H16DenseHeadDimsEveryWidth), elsewhere the
 * CUDA-core kernel (fp32, kernel 0 or 1; tolerance as kernel 1, DenseHeadDims).
 * Fractional widths (TqMseTables::split(), head_dim 128/256): keys and values at the same width
 * b + 0.5 with the same codebook kind, args.kernel = 0 only; per part its own query rotation,
 * pair tables and norm: logit_t = scale (||k_0,t|| <Pi_0 q_0, c_hi[code]> + ||k_1,t|| <Pi_1 q_1, c_lo[code]>),
 * values accumulated per part (softmax weight times that part's norm) and rotated back per part
 * into their channels. Tolerance as the integer fp16 kernel (tests/cuda/test_cuda_attention.cpp,
 * TqMseFractionalMatchesReference; real KV: test_cuda_real.cpp).
 * Throws std::invalid_argument naming the argument (shapes, page strides, mixed fractional/integer
 * or unequal fractional widths, kernel != 0 with fractional widths).
 */
void tq_mse_decode(const TqMseTables& kcodec, const TqMseTables& vcodec, PagedPool kpool, PagedPool vpool,
                   const PageTable& table, const DecodeArgs& args, Stream stream);

/**
 * fp8 e4m3 baseline (formats.h "fp8", src/ref/fp8.cpp): head_dim e4m3 bytes per token and an fp16
 * scale = max|x| / 448 rounded up (codes e4m3(x / scale), round to nearest even), in the paged layout
 * above with code_bytes = head_dim (page_stride = tq_page_stride(page_size, head_dim)).
 * fp8_append: as tq_mse_append (x: device [batch][num_new][num_kv_heads][head_dim] of type x_type,
 * fp16 / bf16 widened exactly; start: device int32 [batch]); bytes identical to the reference
 * codec's encode. head_dim a multiple of 16 in 64..256. Bad vectors (the reference throws on a NaN or Inf
 * or a norm >= 32768): with `bad` (optional device int32, nullptr = no check) each sets *bad to 1, as
 * tq_mse_append's flag (never cleared by the call; a flagged call's tokens must not be counted). Here a
 * separate check kernel reads x once more before the encode (fp64 norms: only a norm within fp64
 * rounding of 32768 can be judged differently from the reference). Throws std::invalid_argument
 * naming the argument.
 */
void fp8_append(int head_dim, const void* x, int batch, int num_new, int num_kv_heads, const std::int32_t* start,
                const PageTable& table, PagedPool pool, Stream stream, IoType x_type = IoType::kF32,
                std::int32_t* bad = nullptr);

/**
 * Split-K decode attention on paged fp8 keys and values (fp8_append's layout), unrotated:
 * logit_t = softmax_scale * s_k,t * <q, e4m3(k_t)>, values s_v,t * e4m3(v_t), fp32 accumulation.
 * args.kernel 0 (default) at head_dim 64, 80, 96, 112, 128, 256: tq_mse_decode's fp16 tensor-core kernel
 * (decode_h16.cuh, KB = VB = 8): each e4m3 pair becomes an mma A register by one cvt (exact), q and
 * the softmax weights times s_v rounded to fp16; within 3e-3 relative of the fp64 reference
 * (tests/cuda/test_cuda_fp8.cpp; real KV 4e-3, test_cuda_real.cpp); H200, batch 16 x 65,536 tokens,
 * 32/8 heads, head_dim 128: 550 us, 1.71x cuDNN SDPA on the fp16 cache (docs/RESULTS.md, run s18-1).
 * Stale bytes of rows outside [window start, seq_len) are never read into a result (e4m3 NaN patterns
 * there are zeroed). args.kernel 1, and kernel 0 at the other head_dims: the CUDA-core kernel of
 * tq_mse_decode (e4m3 -> fp16 -> fp32 exact), within 2e-5 relative. Shapes, GQA, windows, soft-cap, io
 * types, splits and workspace as tq_mse_decode. Throws std::invalid_argument naming the argument.
 */
void fp8_decode(PagedPool kpool, PagedPool vpool, const PageTable& table, const DecodeArgs& args, Stream stream);

/**
 * Baseline: the same split-K flash-decoding kernel on a contiguous fp16 cache.
 * k, v: device fp16 bits [batch][num_kv_heads][capacity][head_dim], capacity >= max_seq_len.
 */
void fp16_decode(const std::uint16_t* k, const std::uint16_t* v, int capacity, const DecodeArgs& args,
                 Stream stream);

}  // namespace turbokv::cuda
