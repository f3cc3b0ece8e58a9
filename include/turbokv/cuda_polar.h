// turbokv — CUDA kernels (src/cuda/polar.cu) for PolarQuant (Han, Kacham,
// Karbasi, Mirrokni, Zandieh, arXiv 2502.02617; reference: src/ref/polar.cpp):
// y = Pi x (randomized Hadamard), then a recursive polar transform over 4
// levels: level-1 angles psi1_i = atan2(y_2i+1, y_2i) in [0, 2 pi) on a uniform
// grid of 2^b cells, levels 2..4 angles of the radius pairs in [0, pi/2] with
// Lloyd-Max codebooks of max(1, b - 2) bits, and the d/16 level-4 radii in fp16
// (formats.h "polar").
//
// polar_encode writes the reference encode's bytes: the rotation with the
// reference's fp32 operations (each an explicitly rounded intrinsic), the polar
// transform with formats.h's fp64 arithmetic (polar_radius, polar_cell1,
// polar_cell_hi: correctly rounded products, sums and square roots, and
// compares against the cells' edges), so every byte is the reference's on every
// input. (Until session 46 the reference called the host libm's atan2 and hypot,
// and the GPU's fp64 atan2 / hypot could differ from them in the last bits.)
// At a head_dim that is not a power of two (multiples of 16 in 64..256) Pi is the reference's dense
// Haar matrix (rotation.h), applied in the reference's order; the decodes rotate the query by Pi and
// the merged output by Pi^T around either kernel (as rvq's, cuda_vq.h).
// polar_append writes the same bytes straight into pages (cuda.h's paged layout).
// polar_decode / polar_paged_decode are split-K decode attention on PolarQuant keys
// and values in contiguous blocks (VqDecodeArgs, like rvq_decode) or pages
// (DecodeArgs, like rvq_paged_decode): the staged kernel of src/cuda/staged.cuh,
// fp32 (the reference accumulates in fp64), checked against attention_compressed.
//
// Every function takes device pointers and a stream, validates its arguments on
// the host (std::invalid_argument naming the argument and value), launches
// asynchronously and checks the launch (std::runtime_error on a CUDA error).
// Inputs must be finite with norms < 32768 (the reference throws; every radius is
// then below 32768): polar_encode does not check, polar_append flags such vectors
// in an optional device int32 `bad` (as rvq_append).
#pragma once

#include <cstddef>
#include <cstdint>

#include "turbokv/codec.h"
#include "turbokv/cuda.h"
#include "turbokv/cuda_vq.h"

namespace turbokv::cuda {

/**
 * Device copy of one PolarQuant codec's constants, built from the same
 * reference object as make_codec(cfg) (ref::Polar): the Hadamard signs, the
 * fp32 cos / sin tables of the level-1 cell centres and of the level 2..4
 * centroids, the level 2..4 codebook boundaries (fp32) and their fp64 tangents
 * (the encode's compares).
 * Supported: method polar, integer bits 2..4, head_dim a multiple of 16 in 64..256 (where it is not a
 * power of two the reference rotates by its dense Haar matrix: dense() is true, rotation() /
 * rotation_t() hold it, signs() is nullptr and hadamard_scale() 1), center off. Throws
 * std::invalid_argument naming the field otherwise.
 */
class PolarTables {
 public:
  explicit PolarTables(const CodecConfig& cfg);
  PolarTables(const PolarTables&) = delete;
  PolarTables& operator=(const PolarTables&) = delete;

  int head_dim() const { return head_dim_; }
  int bits() const { return bits_; }            ///< b: level-1 angle bits (the codec's nominal bits)
  int high_bits() const { return high_bits_; }  ///< level 2..4 angle bits: max(1, b - 2)
  int num_radii() const { return head_dim_ / 16; }  ///< fp16 level-4 radii per token
  /// Bytes of the level-1 angle stream: packed(head_dim / 2, b).
  std::size_t level1_bytes() const { return (static_cast<std::size_t>(head_dim_) / 2 * bits_ + 7) / 8; }
  /// Code bytes per token: level-1 stream, then the 7 head_dim / 16 level 2..4 angles, packed(., high_bits()).
  std::size_t code_bytes() const {
    return level1_bytes() + (static_cast<std::size_t>(7 * head_dim_ / 16) * high_bits_ + 7) / 8;
  }
  /// Bytes of a block of n tokens (= the reference's encoded_bytes(n)): codes, then n * num_radii() fp16 radii.
  std::size_t block_bytes(std::size_t n) const { return n * (code_bytes() + 2 * static_cast<std::size_t>(num_radii())); }
  /// Bytes of one (page, KV head) block of the paged layout: block_bytes(page_size) rounded up to 32
  /// (codes of page_size tokens, then their radii, token-major). Throws std::invalid_argument unless
  /// page_size is a power of two in 1..4096.
  std::size_t page_stride(int page_size) const;
  float hadamard_scale() const { return scale_; }
  const float* signs() const { return signs_.get(); }  ///< device, size head_dim (dense(): nullptr)
  /// True where head_dim is not a power of two: the reference's dense Haar rotation (rotation.h).
  bool dense() const { return rotation_ != nullptr; }
  /// dense(): Pi, device fp32 [head_dim][head_dim] row-major (Rotation::matrix()); nullptr otherwise.
  const float* rotation() const { return rotation_.get(); }
  /// dense(): Pi^T, device fp32 [head_dim][head_dim] row-major; nullptr otherwise.
  const float* rotation_t() const { return rotation_t_.get(); }
  /// device fp32, kTableFloats: level 1's [16][cos, sin] (the cell centres' cos and sin interleaved), then per
  /// level l = 2..4 [16][cos, sin] of the centroids and [16] boundaries (entries past 2^bits unused; the
  /// boundaries are not read by the kernels since session 46, whose encode compares against tangents()).
  const float* tables() const { return tab_.get(); }
  /// device fp64 [3][3]: level l's (2..4) boundary tangents (ref::Polar::level_tangents) at [l - 2][k],
  /// k < 2^high_bits() - 1 (the rest 0).
  const double* tangents() const { return tans_.get(); }
  static constexpr int kTableFloats = 32 + 3 * 48;

 private:
  int head_dim_ = 0, bits_ = 0, high_bits_ = 0;
  float scale_ = 0;
  DeviceArray<float> signs_, tab_, rotation_, rotation_t_;
  DeviceArray<double> tans_;
};

/**
 * PolarQuant encode of n vectors into one block, byte-identical to the reference
 * (the same fp64 arithmetic, formats.h).
 * x: device fp32 [n, head_dim]; out: device, tab.block_bytes(n) bytes (every
 * byte is written). Throws std::invalid_argument if a pointer is null while
 * n > 0, or n > 2^36.
 */
void polar_encode(const PolarTables& tab, const float* x, std::size_t n, std::uint8_t* out, Stream stream);

/// PolarQuant append into pages, byte-identical to the reference's encode of each token (codes at
/// the token's slot, its head_dim / 16 fp16 radii at slot `off` of the block's radii). Arguments and
/// errors as rvq_append (cuda_vq.h), `bad` included; pool.page_stride must equal tab.page_stride(page_size).
void polar_append(const PolarTables& tab, const void* x, int batch, int num_new, int num_kv_heads,
                  const std::int32_t* start, const PageTable& table, PagedPool pool, Stream stream,
                  IoType x_type = IoType::kF32, std::int32_t* bad = nullptr);

/// Workspace bytes of polar_decode: as rvq_decode_workspace_bytes (cuda_vq.h).
std::size_t polar_decode_workspace_bytes(const VqDecodeArgs& args, int head_dim);

/**
 * Split-K decode attention on PolarQuant keys (ktab) and values (vtab, same
 * head_dim; bit widths may differ), contiguous blocks as rvq_decode. Pi_k q once per query head
 * (fp32); per step the staged kernel rebuilds the keys and values of a KV head once into shared
 * memory (y_hat from the angle codes and the level-4 radius of each 16-coordinate group, the
 * reference's fp32 products, level 4 down to level 1), logit_t = softmax_scale * <Pi_k q, y_hat_t>,
 * online softmax, values accumulated as y_hat in the value rotation's domain; log-sum-exp merge, then
 * Pi_v^T once. args.kernel as rvq_decode: 0 (default) fp16 tiles and tensor-core MMAs, relative L2
 * error <= 3e-3 per sequence; 1 CUDA cores, fp32, <= 1e-4; against attention_compressed (fp64;
 * tests/cuda/test_cuda_vq.cpp CudaPolar.*, test_cuda_real.cpp CudaReal.PolarEncodeAndDecode, where
 * the real layers are held to 4e-3 with kernel 0). Not tuned. Throws std::invalid_argument naming the
 * argument (as rvq_decode).
 */
void polar_decode(const PolarTables& ktab, const PolarTables& vtab, const VqDecodeArgs& args, Stream stream);

/// polar_decode on paged pools (polar_append's layout; page strides ktab / vtab.page_stride(page_size)),
/// DecodeArgs as rvq_paged_decode (cuda_vq.h). Throws std::invalid_argument naming the argument.
void polar_paged_decode(const PolarTables& ktab, const PolarTables& vtab, PagedPool kpool, PagedPool vpool,
                        const PageTable& table, const DecodeArgs& args, Stream stream);

}  // namespace turbokv::cuda
