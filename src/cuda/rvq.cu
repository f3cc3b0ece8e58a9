// Two-stage residual scalar quantization (RVQ, src/ref/rvq.cpp) on the GPU:
// RvqTables, encode and paged append (the reference's bytes) and fused split-K
// decode attention on RVQ keys and values (pages or contiguous blocks).
//
// Encode: 128 threads (4 warps), one token per warp at a time, lane l holding
// the E = D/32 consecutive coordinates [lE, lE + E). The reference's float
// operations (formats.h, rotation.h, ref/common.cpp RotatedScalar::encode), each
// an explicitly rounded intrinsic:
//   sum = sumsq_spec(x); y = x * sign; FWHT h = 1 .. E/2 in registers, h = E ..
//   D/2 by shuffles (lower partner y + o, upper o - y, as __fmaf_rn(+-1, y, o):
//   the product is exact, so it rounds like the add); norm = sqrt(sum);
//   inv = norm > 0 ? 1 / norm : 0; u = (y * scale) * inv;
//   code1 = #{boundaries1 < u}; r = u - c1[code1]; code2 = #{boundaries2 < r};
// At a head_dim that is not a power of two (80, 96, 112, ...: the reference rotates by its dense Haar
// matrix) the same kernel with D = 0 (head_dim at run time): lane l holds coordinates l + 32 k, y = Pi x
// by warp_dense_rotate (the reference's order), u = y * inv, the rest as above.
// codes go through a per-warp byte buffer into the LSB-first streams
// [stage 1 packed(D, b)][stage 2 packed(D, b)]; lane 0 stores fp16 ||x||. The same kernel writes a
// contiguous block (rvq_encode) or pages (rvq_append: fp32, fp16 or bf16 input widened exactly).
//
// Decode: the staged split-K kernel (staged.cuh) with RvqFmt below, on pages (rvq_paged_decode) or
// contiguous blocks (rvq_decode): Pi q once per query head, keys and values decoded once per KV head
// and 32-token step into shared memory, the merge rotates back once.
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "../ref/rvq.h"
#include "decode_h16.cuh"
#include "qjl.cuh"
#include "splitk.cuh"
#include "staged.cuh"
#include "turbokv/cuda_vq.h"
#include "turbokv/error.h"
#include "turbokv/pack.h"

namespace turbokv::cuda {
namespace {

using namespace detail::splitk;

using detail::qjl::load_half_le;
using detail::qjl::store_half_le;
using detail::qjl::warp_pack_n;
using detail::qjl::sumsq_row;

constexpr int kEncThreads = 128;
constexpr int kEncWarps = kEncThreads / 32;


/// Number of the NB boundaries strictly below v (the reference's quantize()).
template <int NB>
__device__ __forceinline__ unsigned count_below(float v, const float (&bnd)[NB]) {
  unsigned c = 0;
#pragma unroll
  for (int k = 0; k < NB; ++k) c += v > bnd[k] ? 1u : 0u;
  return c;
}

/// cen[code] by selects (no local memory).
template <int K>
__device__ __forceinline__ float select_centroid(unsigned code, const float (&cen)[K]) {
  float c = cen[0];
#pragma unroll
  for (int k = 1; k < K; ++k) c = code == static_cast<unsigned>(k) ? cen[k] : c;
  return c;
}

struct EncArgs {
  const void* x;  // [n][d] of the kernel's XT
  std::size_t n;
  const float* signs;
  const float* c1;
  const float* b1;
  const float* c2;
  const float* b2;
  float scale;
  const float* rot_t;  // dense rotations (D = 0): Pi^T [d][d]; else nullptr
  int d;               // head_dim
};

/// D: head_dim (64, 128, 256), or 0 for a dense-rotation head_dim a.d (see the file comment).
template <int D, int B, class XT, class Dst>
__global__ void __launch_bounds__(kEncThreads) rvq_encode_kernel(const EncArgs a, const Dst dst) {
  constexpr bool kDense = D == 0;
  constexpr int E = kDense ? kDenseLaneElems : D / 32, DM = kDense ? 256 : D;
  constexpr int K = 1 << B, NB = K - 1;
  const int d = kDense ? a.d : D;
  const std::size_t SB = static_cast<std::size_t>(d) * B / 8;
  __shared__ __align__(16) float rows[kEncWarps][DM];
  __shared__ std::uint8_t codes[kEncWarps][2][DM];
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // Coordinate of this lane's element e.
  auto coord = [&](int e) { return kDense ? lane + 32 * e : lane * E + e; };
  float sgn[kDense ? 1 : E], bnd1[NB], bnd2[NB], cen1[K];
  if constexpr (!kDense) {
#pragma unroll
    for (int e = 0; e < E; ++e) sgn[e] = __ldg(a.signs + lane * E + e);
  }
#pragma unroll
  for (int k = 0; k < NB; ++k) bnd1[k] = __ldg(a.b1 + k), bnd2[k] = __ldg(a.b2 + k);
#pragma unroll
  for (int k = 0; k < K; ++k) cen1[k] = __ldg(a.c1 + k);
  float* row = rows[w];
  for (std::size_t t = static_cast<std::size_t>(blockIdx.x) * kEncWarps + w; t < a.n;
       t += static_cast<std::size_t>(gridDim.x) * kEncWarps) {  // warp-uniform
    float y[E];
    float sum;
    if constexpr (kDense) {
      for (int i = lane; i < d; i += 32) row[i] = detail::load_x<XT>(a.x, t * d + i);
      __syncwarp();
      sum = sumsq_row(row, d);
      warp_dense_rotate(a.rot_t, row, d, y);
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float v = detail::load_x<XT>(a.x, t * D + lane * E + e);
        row[lane * E + e] = v;
        y[e] = __fmul_rn(v, sgn[e]);
      }
      __syncwarp();
      sum = sumsq_row(row, D);
      warp_fwht<E>(y);
    }
    const float norm = __fsqrt_rn(sum);
    const float inv = norm > 0.0f ? __fdiv_rn(1.0f, norm) : 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int i = coord(e);
      if (kDense && i >= d) break;
      const float u = kDense ? __fmul_rn(y[e], inv) : __fmul_rn(__fmul_rn(y[e], a.scale), inv);
      const unsigned k1 = count_below(u, bnd1);
      const float r = __fsub_rn(u, select_centroid(k1, cen1));
      codes[w][0][i] = static_cast<std::uint8_t>(k1);
      codes[w][1][i] = static_cast<std::uint8_t>(count_below(r, bnd2));
    }
    __syncwarp();
    const detail::TokenDst to = dst.at(t);
    warp_pack_n(codes[w][0], d, B, to.codes);
    warp_pack_n(codes[w][1], d, B, to.codes + SB);
    if (lane == 0) store_half_le(to.scalars, norm);
    __syncwarp();  // row and codes are rewritten for the next token
  }
}

template <int D, int B, class XT, class Dst>
void launch_encode(const EncArgs& a, const Dst& dst, cudaStream_t s) {
  rvq_encode_kernel<D, B, XT, Dst><<<detail::capped_grid(a.n, kEncWarps), kEncThreads, 0, s>>>(a, dst);
  TKV_CHECK_LAUNCH();
}

/// The one dispatch from (head_dim, bits, input type) to the encoder's compile-time constants.
template <class Dst>
void launch_encode_any(const RvqTables& tab, IoType x_type, const EncArgs& a, const Dst& dst, cudaStream_t s) {
  auto go = [&](auto d_c, auto xt_c) {
    constexpr int D = decltype(d_c)::value;
    using XT = typename decltype(xt_c)::type;
    switch (tab.bits()) {
      case 1: return launch_encode<D, 1, XT>(a, dst, s);
      case 2: return launch_encode<D, 2, XT>(a, dst, s);
      case 3: return launch_encode<D, 3, XT>(a, dst, s);
      case 4: return launch_encode<D, 4, XT>(a, dst, s);
    }
  };
  detail::with_head_dim_or_dense(tab.head_dim(), tab.dense(), [&](auto d_c) {
    detail::with_io_type(x_type, [&](auto xt_c) { go(d_c, xt_c); });
  });
}

// ---- Staged decode (staged.cuh): side.bits = b, side.off = stage bytes, side.cb = 2 stage bytes,
// tab0 / tab1 = the stage-1 / stage-2 centroids (2^b floats each, copied to shared memory), side data
// the fp16 norm. Element j = ||x|| (c1[code1_j] + c2[code2_j]) in the
// rotated domain (the sum rounded as the reference's decode, then times the fp16 norm).
/// B: the width as a compile-time constant (0: side.bits at run time). B = 2, 4 make the stage bytes
/// head_dim B / 8 (and the row, twice that) a multiple of 4 at head_dim 64, 128, 256 (kAlignedRows:
/// the AlignedWords reader); rvq_call takes them for keys and values of those widths (the
/// tensor-core kernel only).
template <int B>
struct RvqFmt {
  static constexpr bool kLut = false, kSide = true, kRawSide = true, kSmemTab = true;
  static constexpr bool kAlignedRows = B == 2 || B == 4;
  __device__ __forceinline__ static std::size_t side_off(const detail::StagedSide& s, int /*D*/, int ps, int slot) {
    return static_cast<std::size_t>(ps) * s.cb + 2 * static_cast<std::size_t>(slot);  // the fp16 norm
  }
  template <int KQ, int LS, class R, class T>
  __device__ __forceinline__ static void stage(const detail::StagedSide& s, int D, const std::uint8_t* row,
                                               const std::uint8_t* side, int lane, T* dst) {
    const int bits = B ? B : s.bits;
    const float norm = detail::half_at(side);
    const unsigned m = (1u << bits) - 1u;
#pragma unroll
    for (int k = 0; k < KQ; ++k) {
      const int q = lane + LS * k, j = 4 * q;
      if (j < D) {
        const unsigned u1 = detail::quad_fields<R>(row, q, bits), u2 = detail::quad_fields<R>(row + s.off, q, bits);
        float v[4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
          v[i] = norm * __fadd_rn(s.tab0[(u1 >> (i * bits)) & m], s.tab1[(u2 >> (i * bits)) & m]);
        detail::store_quad(dst + j, v[0], v[1], v[2], v[3]);
      }
    }
  }
};

detail::StagedSide rvq_side(const RvqTables& t) {
  detail::StagedSide s{};
  s.tab0 = t.centroids1(), s.tab1 = t.centroids2();
  s.bits = t.bits(), s.off = static_cast<int>(t.stage_bytes()), s.cb = static_cast<int>(t.code_bytes());
  s.sb = 2, s.ntab0 = s.ntab1 = 1 << t.bits();
  return s;
}

detail::StagedCall rvq_call(const RvqTables& kt, const RvqTables& vt) {
  detail::StagedCall c;
  c.kside = rvq_side(kt), c.vside = rvq_side(vt);
  c.launch = detail::launch_staged<RvqFmt<0>, RvqFmt<0>>;
  if (kt.dense()) {  // head_dim not a power of two: dense rotations
    c.krot_t = kt.rotation_t(), c.vrot = vt.rotation();
  } else {
    c.ksigns = kt.signs(), c.kscale = kt.hadamard_scale();
    c.vsigns = vt.signs(), c.vscale = vt.hadamard_scale();
  }
  if (!kt.dense() && kt.bits() == 2 && vt.bits() == 2)  // compile-time widths (RvqFmt) at 64 / 128 / 256
    c.launch_tc = detail::launch_staged_tc<RvqFmt<2>, RvqFmt<2>, 64, 128, 256>;
  else if (!kt.dense() && kt.bits() == 4 && vt.bits() == 4)
    c.launch_tc = detail::launch_staged_tc<RvqFmt<4>, RvqFmt<4>, 64, 128, 256>;
  else
    c.launch_tc = detail::launch_staged_tc_any_dim<RvqFmt<0>, RvqFmt<0>>;
  return c;
}

}  // namespace

RvqTables::RvqTables(const CodecConfig& cfg) {
  const char* where = "cuda::RvqTables";
  check_arg(cfg.method == Method::kRvq, where, "method", method_name(cfg.method), "must be rvq");
  check_arg(!cfg.center, where, "center", cfg.center, "must be off on the GPU");
  check_arg(cfg.bits == 1 || cfg.bits == 2 || cfg.bits == 3 || cfg.bits == 4, where, "bits", cfg.bits,
            "must be an integer width 1..4 for rvq");
  check_arg(detail::gpu_head_dim(cfg.head_dim), where, "head_dim", cfg.head_dim,
            "must be a multiple of 16 in 64..256 for rvq on the GPU");
  check_arg(cfg.rotation == RotationKind::kHadamard, where, "rotation", rotation_name(cfg.rotation),
            "must be hadamard for rvq on the GPU");
  head_dim_ = cfg.head_dim;
  bits_ = static_cast<int>(cfg.bits);
  const ref::Rvq r(cfg);  // the reference codec's own rotation and codebooks
  scale_ = detail::upload_rotation(r.rotation(), signs_, rotation_, rotation_t_);  // dense where not a power of two
  c1_ = detail::upload(r.stage1_codebook().centroids);
  b1_ = detail::upload(r.stage1_codebook().boundaries);
  c2_ = detail::upload(r.stage2_codebook().centroids);
  b2_ = detail::upload(r.stage2_codebook().boundaries);
  const auto& c1 = r.stage1_codebook().centroids;
  const auto& c2 = r.stage2_codebook().centroids;
  std::vector<float> cs(c1.size() * c2.size());
  for (std::size_t j = 0; j < c2.size(); ++j)
    for (std::size_t i = 0; i < c1.size(); ++i) cs[i + j * c1.size()] = c1[i] + c2[j];
  cs_ = detail::upload(cs);
}

std::size_t RvqTables::page_stride(int page_size) const {
  detail::check_page_size("cuda::RvqTables::page_stride", page_size);
  return detail::token_page_stride(page_size, code_bytes(), 2);
}

void rvq_encode(const RvqTables& tab, const float* x, std::size_t n, std::uint8_t* out, Stream stream) {
  if (!detail::check_block_io("cuda::rvq_encode", n, x, "x", out)) return;
  const EncArgs a{x, n, tab.signs(), tab.centroids1(), tab.boundaries1(), tab.centroids2(), tab.boundaries2(),
                  tab.hadamard_scale(), tab.rotation_t(), tab.head_dim()};
  launch_encode_any(tab, IoType::kF32, a, detail::BlockDst{out, n, tab.code_bytes(), 2}, detail::stream_of(stream));
}

void rvq_append(const RvqTables& tab, const void* x, int batch, int num_new, int num_kv_heads,
                const std::int32_t* start, const PageTable& table, PagedPool pool, Stream stream, IoType x_type,
                std::int32_t* bad) {
  long long total = 0;
  const detail::PagedDst dst = detail::paged_dst("cuda::rvq_append", x, batch, num_new, num_kv_heads, start, table,
                                                 pool, x_type, tab.code_bytes(), 2,
                                                 "must equal RvqTables::page_stride(page_size)", total);
  if (total == 0) return;
  const EncArgs a{x, static_cast<std::size_t>(total), tab.signs(), tab.centroids1(), tab.boundaries1(),
                  tab.centroids2(), tab.boundaries2(), tab.hadamard_scale(), tab.rotation_t(), tab.head_dim()};
  detail::flag_bad_vectors(x, x_type, total, tab.head_dim(), bad, detail::stream_of(stream));
  launch_encode_any(tab, x_type, a, dst, detail::stream_of(stream));
}

std::size_t rvq_decode_workspace_bytes(const VqDecodeArgs& args, int head_dim) {
  return detail::staged_blocks_workspace("cuda::rvq_decode_workspace_bytes", args, head_dim);
}

void rvq_decode(const RvqTables& ktab, const RvqTables& vtab, const VqDecodeArgs& a, Stream stream) {
  detail::staged_block_decode("cuda::rvq_decode", ktab, vtab, a, rvq_call(ktab, vtab), detail::stream_of(stream));
}

namespace detail {
// decode.cu: the 2 + 2-bit RVQ decode on the fp16 tensor-core kernel of decode_h16.cuh (RVQ instances below).
void rvq_paged_decode_h16(const RvqTables& ktab, const RvqTables& vtab, PagedPool kpool, PagedPool vpool,
                          const PageTable& table, const DecodeArgs& args, Stream stream);

/// kb = 2 bits per stage: one 4-bit code per coordinate (the layout's KB = 4, H16Layout::RVQ; head_dim 64, 80,
/// 96, 112, 128, 256; at head_dim 256
/// 12 warps per block by DecodeArgs::block_warps' rule, 1.02-1.10x the 8-warp kernel, run s30-4). kb = 3, 4: two
/// parts (H16Layout::RVQ2; head_dim 64, 80, 96, 112, 128), 8 warps per block, 2 (4 + 4) or
/// 3 (3 + 3) pipeline stages per warp at head_dim
/// 128: two stages' pair tables take 128 KB (16 warps would leave room for fewer than 2 stages of 256- /
/// 192-byte rows).
void launch_rvq_h16(int kb, int d, int /*vb*/, const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  auto go = [&](auto d_c) {
    constexpr int D = decltype(d_c)::value;
    if (kb == 2) return launch_h16<D, 4, 4, false, kModeRvq>(shape, s, a);
    if constexpr (D != 256) {
      if (kb == 3) return launch_h16_nw<D, 3, 3, 8, false, false, kModeRvq2>(shape, s, a);
      if (kb == 4) return launch_h16_nw<D, 4, 4, 8, false, false, kModeRvq2>(shape, s, a);
    }
    throw std::logic_error("launch_rvq_h16: bits out of range");
  };
  switch (d) {
    case 64: return go(std::integral_constant<int, 64>{});
    case 128: return go(std::integral_constant<int, 128>{});
    case 256: return go(std::integral_constant<int, 256>{});
    case 80: return go(std::integral_constant<int, 80>{});  // dense rotations
    case 96: return go(std::integral_constant<int, 96>{});
    case 112: return go(std::integral_constant<int, 112>{});
  }
  throw std::logic_error("launch_rvq_h16: head_dim out of range");
}

/// Whether launch_rvq_h16 has the instance for kb / vb bits per stage at head_dim d (the widths equal):
/// 2 + 2 at 64, 80, 96, 112, 128, 256; 3 + 3 and 4 + 4 at 64, 80, 96, 112, 128.
bool rvq_h16_route(int kb, int vb, int d) {
  if (kb != vb || !(pow2_head_dim(d) || h16_dense_head_dim(d))) return false;
  return kb == 2 || ((kb == 3 || kb == 4) && d != 256);
}
}  // namespace detail

void rvq_paged_decode(const RvqTables& ktab, const RvqTables& vtab, PagedPool kpool, PagedPool vpool,
                      const PageTable& table, const DecodeArgs& args, Stream stream) {
  // Kernel 0 with the same width on both sides: at 2 bits per stage a coordinate is a 4-bit code in two
  // planes, decoded by the TurboQuant fp16 kernel's pair tables (decode_h16.cuh, H16Layout::RVQ); at 3 and
  // 4 bits each stage is a TurboQuant-like part with its own pair tables, both accumulated in the same
  // fragments (H16Layout::RVQ2); the head_dims: rvq_h16_route (at 80, 96, 112 with dense rotations: q
  // rotated by Pi in the kernel's set-up, Pi_v^T by the combine kernel). The other widths and head_dims
  // take the staged kernel. TURBOKV_RVQ_H16=0 in the environment keeps the staged kernel everywhere (for
  // A/B runs and tests of both paths).
  static const bool h16_off = detail::env_off("TURBOKV_RVQ_H16");
  if (args.kernel == 0 && !h16_off && detail::rvq_h16_route(ktab.bits(), vtab.bits(), args.head_dim)) {
    detail::rvq_paged_decode_h16(ktab, vtab, kpool, vpool, table, args, stream);
    return;
  }
  detail::staged_paged_decode("cuda::rvq_paged_decode", ktab, vtab, kpool, vpool, table, args, rvq_call(ktab, vtab),
                              detail::stream_of(stream));
}

}  // namespace turbokv::cuda
