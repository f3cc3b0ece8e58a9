// PolarQuant (src/ref/polar.cpp; Han et al., arXiv 2502.02617) on the GPU:
// PolarTables, encode and paged append (the reference's bytes) and fused split-K
// decode attention on PolarQuant keys and values (pages or contiguous blocks).
//
// Encode: 128 threads (4 warps), one token per warp at a time, lane l holding
// the E = D/32 consecutive coordinates [lE, lE + E) (at a head_dim that is not a power of two, whose
// reference rotation is its dense Haar matrix: y = Pi x by warp_dense_rotate into a shared row, D = 0). The reference's operations
// (rotation.h Rotation::forward, ref/polar.h Polar::do_encode):
//   y = x * sign; FWHT (warp_fwht: the reference's butterflies); y = y * scale   (fp32)
//   level 1, pair i: r_i = polar_radius(y_2i, y_2i+1), code = polar_cell1(y_2i, y_2i+1, b) (fp64)
//   levels 2..4, pair i: r'_i = polar_radius(r_2i, r_2i+1), code = polar_cell_hi(r_2i, r_2i+1, tangents)
//   the d/16 level-4 radii: fp64 -> fp32 -> fp16.
// formats.h's functions: fp64 products, sums, square roots (__dmul_rn, __dadd_rn, __dsqrt_rn here) and
// compares, so the bytes are the reference's on every input.
// The radii of a level live in shared memory (two per-warp fp64 buffers), the codes in a per-warp
// byte buffer, packed into the LSB-first streams by warp_pack_n.
//
// The same encode kernel writes a contiguous block (polar_encode) or pages (polar_append: fp32, fp16
// or bf16 input widened exactly).
//
// Decode: the staged split-K kernel (staged.cuh) with PolarFmt below, on pages (polar_paged_decode)
// or contiguous blocks (polar_decode): Pi q once per query head, keys and values rebuilt once per KV
// head and 32-token step into shared memory (y_i = r4 * t4 * t3 * t2 * t1, the reference's product
// order), the merge rotates back once.
#include <cmath>
#include <vector>

#include "../ref/polar.h"
#include "qjl.cuh"
#include "splitk.cuh"
#include "staged.cuh"
#include "turbokv/cuda_polar.h"
#include "turbokv/error.h"
#include "turbokv/pack.h"

namespace turbokv::cuda {
namespace {

using namespace detail::splitk;

using detail::qjl::load_half_le;
using detail::qjl::store_half_le;
using detail::qjl::warp_pack_n;

constexpr int kEncThreads = 128;
constexpr int kEncWarps = kEncThreads / 32;
// Offsets in PolarTables::tables(): level l's (cos, sin) pairs of its 16 cells / centroids (float2 each),
// and levels 2..4's boundaries.
__host__ __device__ constexpr int lvl_cs(int l) { return l == 1 ? 0 : 32 + 48 * (l - 2); }
__host__ __device__ constexpr int lvl_bnd(int l) { return lvl_cs(l) + 32; }

struct EncArgs {
  const void* x;  // [n][d] of the kernel's XT
  std::size_t n;
  const float* signs;
  const float* tab;
  const double* tans;  // PolarTables::tangents(): level l's boundary tangents at [3 (l - 2) + k]
  float scale;
  int b1, b2;
  std::size_t l1_bytes, code_bytes;
  const float* rot_t;  // dense rotations (D = 0): Pi^T [d][d]; else nullptr
  int d;               // head_dim
};

/// Level-1 pair i of the rotated y = (a0, a1): its radius into ra, its angle's code into c1 (formats.h).
__device__ __forceinline__ void polar_level1(float y0, float y1, int i, int b1, double* ra, std::uint8_t* c1) {
  ra[i] = polar_radius(y0, y1);
  c1[i] = static_cast<std::uint8_t>(polar_cell1(y0, y1, b1));
}

/// Resident blocks the encode asks ptxas for: 8 (64 registers, no spills) up to head_dim 128, where ptxas left to
/// itself took 124 registers at d128 (4 blocks of 4 warps per SM for a latency-bound loop); 7 (72) at d256.
/// H100 run s46-3 against the default: d128 1.35-1.42x, d64 and d256 0.98-1.00x (the bound alone changes their
/// register allocation slightly; a d128-only kernel changed d64's code too, so this measured form is kept).
constexpr int enc_min_blocks(int d) { return d <= 128 ? 8 : 7; }

/// D: head_dim (64, 128, 256), or 0 for a dense-rotation head_dim a.d (y = Pi x by warp_dense_rotate
/// into the warp's shared row, then the level-1 pairs from there).
template <int D, class XT, class Dst>
__global__ void __launch_bounds__(kEncThreads, enc_min_blocks(D)) polar_encode_kernel(const EncArgs a, const Dst dst) {
  constexpr bool kDense = D == 0;
  constexpr int DM = kDense ? 256 : D, E = D / 32;
  const int d = kDense ? a.d : D, NH = 7 * d / 16;
  __shared__ double ra[kEncWarps][DM / 2], rb[kEncWarps][DM / 4];
  __shared__ std::uint8_t c1[kEncWarps][DM / 2], ch[kEncWarps][7 * DM / 16];
  __shared__ float rows[kEncWarps][kDense ? DM : 1];
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int nb2 = (1 << a.b2) - 1;
  float sgn[kDense ? 1 : E];
  if constexpr (!kDense) {
#pragma unroll
    for (int e = 0; e < E; ++e) sgn[e] = __ldg(a.signs + lane * E + e);
  }
  for (std::size_t t = static_cast<std::size_t>(blockIdx.x) * kEncWarps + w; t < a.n;
       t += static_cast<std::size_t>(gridDim.x) * kEncWarps) {  // warp-uniform
    if constexpr (kDense) {
      float* row = rows[w];
      for (int i = lane; i < d; i += 32) row[i] = detail::load_x<XT>(a.x, t * d + i);
      __syncwarp();
      detail::splitk::warp_dense_rotate_row(a.rot_t, row, d);
      for (int i = lane; i < d / 2; i += 32) polar_level1(row[2 * i], row[2 * i + 1], i, a.b1, ra[w], c1[w]);
    } else {
      float y[E];
#pragma unroll
      for (int e = 0; e < E; ++e) y[e] = __fmul_rn(detail::load_x<XT>(a.x, t * D + lane * E + e), sgn[e]);
      detail::splitk::warp_fwht<E>(y);
#pragma unroll
      for (int e = 0; e < E; ++e) y[e] = __fmul_rn(y[e], a.scale);
      // Level 1: this lane's E / 2 pairs.
#pragma unroll
      for (int p = 0; p < E / 2; ++p) polar_level1(y[2 * p], y[2 * p + 1], lane * (E / 2) + p, a.b1, ra[w], c1[w]);
    }
    __syncwarp();
    // Levels 2..4: pairs of the previous level's radii (ra -> rb -> ra -> rb).
    int off = 0;
    for (int l = 2; l <= 4; ++l) {
      const double* src = (l & 1) ? rb[w] : ra[w];
      double* dst = (l & 1) ? ra[w] : rb[w];
      const int cnt = d >> l;
      double tk[3];
      for (int k = 0; k < 3; ++k) tk[k] = __ldg(a.tans + 3 * (l - 2) + k);
      for (int i = lane; i < cnt; i += 32) {
        const double a0 = src[2 * i], a1 = src[2 * i + 1];
        dst[i] = polar_radius(a0, a1);
        ch[w][off + i] = static_cast<std::uint8_t>(polar_cell_hi(a0, a1, tk, nb2));
      }
      off += cnt;
      __syncwarp();
    }
    // Level-4 radii (in rb after level 4): fp64 -> fp32 -> fp16, token-major.
    const detail::TokenDst to = dst.at(t);
    if (lane < d / 16) store_half_le(to.scalars + 2 * lane, __double2float_rn(rb[w][lane]));
    warp_pack_n(c1[w], d / 2, a.b1, to.codes);
    warp_pack_n(ch[w], NH, a.b2, to.codes + a.l1_bytes);
    __syncwarp();  // ra, rb, the row and the codes are rewritten for the next token
  }
}

template <class Dst>
void launch_encode(const PolarTables& tab, IoType x_type, const EncArgs& a, const Dst& dst, cudaStream_t s) {
  auto go = [&](auto d_c) {
    detail::with_io_type(x_type, [&](auto xt_c) {
      constexpr int D = decltype(d_c)::value;
      using XT = typename decltype(xt_c)::type;
      polar_encode_kernel<D, XT><<<detail::capped_grid(a.n, kEncWarps), kEncThreads, 0, s>>>(a, dst);
      TKV_CHECK_LAUNCH();
    });
  };
  detail::with_head_dim_or_dense(tab.head_dim(), tab.dense(), go);
}

// ---- Staged decode (staged.cuh): side.bits = b (level-1 bits), side.bits2 = level 2..4 bits,
// side.off = level-1 bytes, side.cb = code bytes, tab0 = PolarTables::tables(). Element j = y_hat_j
// in the rotated domain (ref::Polar::reconstruct): the level-4 radius of group j / 16 times the cos or
// sin of the angle at each level (level l: angle j >> l, sin where bit l - 1 of j is set), fp32
// products in the reference's order (level 4 first).

/// Level 2..4 angle bits for level-1 width b (cuda_polar.h PolarTables::high_bits: max(1, b - 2)).
__host__ __device__ constexpr int polar_high_bits(int b) { return b > 3 ? b - 2 : 1; }

/// B: the level-1 width as a template constant (2..4; the level 2..4 width polar_high_bits(B)), or 0:
/// both widths from the side at run time (mixed key / value widths, and the CUDA-core kernel).
/// A lane stages runs of U = 4, 2 or 1 quads (4 where it stages 3 or 4 quads per token, KQ: in the fp16
/// kernel at every head_dim, with lanes_per_token lanes per token: one 16-element group of one radius,
/// one level-4 and two level-3 angles per lane; in the CUDA-core kernel 2 at head_dim > 128, else 1).
/// A run's angles of each level are adjacent in the code row, so one read
/// per level serves the run (one span of <= 32 level-1 bits, one of the level-2, one of the level-3
/// angles) where quads one by one read four fields each; its shared factors (the radius times the
/// level-4 and level-3 cos / sin) are loaded once. The products and their order are the quad-by-quad
/// ones: staged elements are bit-identical for every U and B.
template <int B>
struct PolarFmt {
  static constexpr bool kLut = false, kSide = true, kRawSide = true, kSmemTab = true;
  __device__ __forceinline__ static std::size_t side_off(const detail::StagedSide& s, int D, int ps, int slot) {
    return static_cast<std::size_t>(ps) * s.cb + 2 * static_cast<std::size_t>(slot) * (D / 16);  // fp16 radii
  }
  /// staged_tc_kernel's lanes per token: one per 16-element radius group, rounded up to a power of two
  /// (4 at head_dim 64, 8 up to 128, 16 above; lanes past the groups idle).
  __host__ __device__ static constexpr int lanes_per_token(int d) { return d <= 64 ? 4 : d <= 128 ? 8 : 16; }
  template <int KQ, int LS, class R, class T>
  __device__ __forceinline__ static void stage(const detail::StagedSide& s, int D, const std::uint8_t* row,
                                               const std::uint8_t* rad, int lane, T* dst) {
    constexpr int U = KQ >= 3 ? 4 : KQ, KU = (KQ + U - 1) / U;  // runs per lane: U KU >= KQ
    const int b1 = B ? B : s.bits, bh = B ? polar_high_bits(B) : s.bits2;
    const unsigned m1 = (1u << b1) - 1u, mh = (1u << bh) - 1u;
    const std::uint8_t* hi = row + (B ? D * B / 16 : s.off);  // levels 2..4: [level 2: D/4][level 3: D/8][level 4: D/16]
    const float* t = s.tab0;
    const float2* cs1 = reinterpret_cast<const float2*>(t + lvl_cs(1));  // 8-byte aligned (shared copies too)
    const float2* cs2 = reinterpret_cast<const float2*>(t + lvl_cs(2));
    const float2* cs3 = reinterpret_cast<const float2*>(t + lvl_cs(3));
    const float2* cs4 = reinterpret_cast<const float2*>(t + lvl_cs(4));
#pragma unroll
    for (int k = 0; k < KU; ++k) {
      // Run of quads q0 .. q0 + U - 1 (elements 4 q0 .. 4 q0 + 4 U - 1): inside one radius group (U divides 4).
      const int q0 = U * (lane + LS * k);
      if (4 * q0 < D) {
        const unsigned c1 = R::span(row, 2 * q0 * b1, 2 * U * b1);  // level-1 angles 2 q0 .. 2 q0 + 2 U - 1
        const unsigned c2 = R::span(hi, q0 * bh, U * bh);           // level-2 angles q0 .. q0 + U - 1
        const unsigned c3 = R::span(hi, (D / 4 + (q0 >> 1)) * bh, ((U + 1) / 2) * bh);  // level 3: q0 / 2 ..
        const unsigned a4 = detail::field<R>(hi, (D / 4 + D / 8 + (q0 >> 2)) * bh, bh);
        const float r = detail::half_at(rad + 2 * (q0 >> 2));
        const float2 f4 = cs4[a4];
        float y[4 * U];
#pragma unroll
        for (int i = 0; i < U; ++i) {
          // Quad q: elements 4 q .. 4 q + 3 share the level-4, -3 and -2 angles (q >> 2, q >> 1, q) and
          // the radius; the level-2 factor is cos for the first two and sin for the last two; level 1
          // has two angles.
          const int q = q0 + i;
          const unsigned a3 = (c3 >> ((i >> 1) * bh)) & mh, a2 = (c2 >> (i * bh)) & mh;
          const unsigned e0 = (c1 >> (2 * i * b1)) & m1, e1 = (c1 >> ((2 * i + 1) * b1)) & m1;
          const float2 f3 = cs3[a3], f2 = cs2[a2], g0 = cs1[e0], g1 = cs1[e1];
          const float r4 = __fmul_rn(r, ((q >> 1) & 1) ? f4.y : f4.x);
          const float r3 = __fmul_rn(r4, (q & 1) ? f3.y : f3.x);
          const float r0 = __fmul_rn(r3, f2.x), r1 = __fmul_rn(r3, f2.y);
          y[4 * i] = __fmul_rn(r0, g0.x);
          y[4 * i + 1] = __fmul_rn(r0, g0.y);
          y[4 * i + 2] = __fmul_rn(r1, g1.x);
          y[4 * i + 3] = __fmul_rn(r1, g1.y);
        }
        detail::store_run<U>(dst + 4 * q0, y, lane);
      }
    }
  }
};

detail::StagedSide polar_side(const PolarTables& t) {
  detail::StagedSide s{};
  s.tab0 = t.tables();
  s.bits = t.bits(), s.bits2 = t.high_bits();
  s.off = static_cast<int>(t.level1_bytes()), s.cb = static_cast<int>(t.code_bytes());
  s.sb = 2 * (t.head_dim() / 16), s.ntab0 = PolarTables::kTableFloats;
  return s;
}

detail::StagedCall polar_call(const PolarTables& kt, const PolarTables& vt) {
  detail::StagedCall c;
  c.kside = polar_side(kt), c.vside = polar_side(vt);
  c.launch = detail::launch_staged<PolarFmt<0>, PolarFmt<0>>;
  if (kt.dense()) {  // head_dim not a power of two: dense rotations
    c.krot_t = kt.rotation_t(), c.vrot = vt.rotation();
  } else {
    c.ksigns = kt.signs(), c.kscale = kt.hadamard_scale();
    c.vsigns = vt.signs(), c.vscale = vt.hadamard_scale();
  }
  // The fp16 kernel with the widths as template constants where keys and values share them (as the
  // tables check: high_bits() follows bits()); mixed widths read them at run time.
  c.launch_tc = detail::launch_staged_tc_any_dim<PolarFmt<0>, PolarFmt<0>>;
  if (kt.bits() == vt.bits() && kt.high_bits() == polar_high_bits(kt.bits()) && vt.high_bits() == kt.high_bits()) {
    if (kt.bits() == 2) c.launch_tc = detail::launch_staged_tc_any_dim<PolarFmt<2>, PolarFmt<2>>;
    if (kt.bits() == 3) c.launch_tc = detail::launch_staged_tc_any_dim<PolarFmt<3>, PolarFmt<3>>;
    if (kt.bits() == 4) c.launch_tc = detail::launch_staged_tc_any_dim<PolarFmt<4>, PolarFmt<4>>;
  }
  return c;
}

}  // namespace

PolarTables::PolarTables(const CodecConfig& cfg) {
  const char* where = "cuda::PolarTables";
  check_arg(cfg.method == Method::kPolar, where, "method", method_name(cfg.method), "must be polar");
  check_arg(!cfg.center, where, "center", cfg.center, "must be off on the GPU");
  check_arg(cfg.bits == 2 || cfg.bits == 3 || cfg.bits == 4, where, "bits", cfg.bits,
            "must be an integer width 2..4 for polar");
  check_arg(detail::gpu_head_dim(cfg.head_dim), where, "head_dim", cfg.head_dim,
            "must be a multiple of 16 in 64..256 for polar on the GPU");
  const ref::Polar r(cfg);  // the reference codec's own rotation and tables
  head_dim_ = cfg.head_dim;
  bits_ = r.level1_bits();
  high_bits_ = r.high_bits();
  scale_ = detail::upload_rotation(r.rotation(), signs_, rotation_, rotation_t_);  // dense where not a power of two
  std::vector<float> tab(kTableFloats, 0.0f);
  for (int l = 1; l <= 4; ++l) {
    for (std::size_t i = 0; i < r.cos_table(l).size(); ++i) {
      tab[lvl_cs(l) + 2 * i] = r.cos_table(l)[i];
      tab[lvl_cs(l) + 2 * i + 1] = r.sin_table(l)[i];
    }
    if (l == 1) continue;
    const auto& bnd = r.level_codebook(l).boundaries;
    for (std::size_t i = 0; i < bnd.size(); ++i) tab[lvl_bnd(l) + i] = bnd[i];
  }
  tab_ = detail::upload(tab);
  std::vector<double> tans(9, 0.0);
  for (int l = 2; l <= 4; ++l) {
    const auto& tk = r.level_tangents(l);
    for (std::size_t k = 0; k < tk.size() && k < 3; ++k) tans[3 * (l - 2) + k] = tk[k];
  }
  tans_ = detail::upload(tans);
}

std::size_t PolarTables::page_stride(int page_size) const {
  detail::check_page_size("cuda::PolarTables::page_stride", page_size);
  return detail::token_page_stride(page_size, code_bytes(), 2 * static_cast<std::size_t>(num_radii()));
}

namespace {
EncArgs enc_args(const PolarTables& tab, const void* x, std::size_t n) {
  return EncArgs{x,          n,               tab.signs(),        tab.tables(),     tab.tangents(), tab.hadamard_scale(),
                 tab.bits(), tab.high_bits(), tab.level1_bytes(), tab.code_bytes(), tab.rotation_t(), tab.head_dim()};
}
}  // namespace

void polar_encode(const PolarTables& tab, const float* x, std::size_t n, std::uint8_t* out, Stream stream) {
  if (!detail::check_block_io("cuda::polar_encode", n, x, "x", out)) return;
  launch_encode(tab, IoType::kF32, enc_args(tab, x, n),
                detail::BlockDst{out, n, tab.code_bytes(), 2 * static_cast<std::size_t>(tab.num_radii())},
                detail::stream_of(stream));
}

void polar_append(const PolarTables& tab, const void* x, int batch, int num_new, int num_kv_heads,
                  const std::int32_t* start, const PageTable& table, PagedPool pool, Stream stream, IoType x_type,
                  std::int32_t* bad) {
  long long total = 0;
  const detail::PagedDst dst =
      detail::paged_dst("cuda::polar_append", x, batch, num_new, num_kv_heads, start, table, pool, x_type,
                        tab.code_bytes(), 2 * static_cast<std::size_t>(tab.num_radii()),
                        "must equal PolarTables::page_stride(page_size)", total);
  if (total == 0) return;
  detail::flag_bad_vectors(x, x_type, total, tab.head_dim(), bad, detail::stream_of(stream));
  launch_encode(tab, x_type, enc_args(tab, x, static_cast<std::size_t>(total)), dst, detail::stream_of(stream));
}

std::size_t polar_decode_workspace_bytes(const VqDecodeArgs& args, int head_dim) {
  return detail::staged_blocks_workspace("cuda::polar_decode_workspace_bytes", args, head_dim);
}

void polar_decode(const PolarTables& ktab, const PolarTables& vtab, const VqDecodeArgs& a, Stream stream) {
  detail::staged_block_decode("cuda::polar_decode", ktab, vtab, a, polar_call(ktab, vtab), detail::stream_of(stream));
}

void polar_paged_decode(const PolarTables& ktab, const PolarTables& vtab, PagedPool kpool, PagedPool vpool,
                        const PageTable& table, const DecodeArgs& args, Stream stream) {
  detail::staged_paged_decode("cuda::polar_paged_decode", ktab, vtab, kpool, vpool, table, args, polar_call(ktab, vtab),
                              detail::stream_of(stream));
}

}  // namespace turbokv::cuda
