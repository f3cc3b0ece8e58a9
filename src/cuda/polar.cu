// PolarQuant (src/ref/polar.cpp; Han et al., arXiv 2502.02617) on the GPU:
// PolarTables, encode (the reference's bytes) and a fused split-K decode
// attention on PolarQuant keys and values in contiguous blocks.
//
// Encode: 128 threads (4 warps), one token per warp at a time, lane l holding
// the E = D/32 consecutive coordinates [lE, lE + E). The reference's operations
// (rotation.h Rotation::forward, ref/polar.h Polar::do_encode):
//   y = x * sign; FWHT (warp_fwht: the reference's butterflies); y = y * scale   (fp32)
//   level 1, pair i: r_i = hypot(y_2i, y_2i+1), psi = atan2(y_2i+1, y_2i) (fp64),
//     psi < 0 -> psi + 2 pi, code = (int)(psi / (2 pi) * 2^b), clamped to 2^b - 1
//   levels 2..4, pair i: r'_i = hypot(r_2i, r_2i+1), code = #{boundaries < (float)atan2(r_2i+1, r_2i)}
//   the d/16 level-4 radii: fp64 -> fp32 -> fp16.
// atan2_dir gives the host libm's value at the axis and diagonal directions (cuda_polar.h).
// The radii of a level live in shared memory (two per-warp fp64 buffers), the codes in a per-warp
// byte buffer, packed into the LSB-first streams by warp_pack_n.
//
// Decode: grid (splits, batch * num_heads), 128 threads, one token per thread per tile of 128
// tokens for the scores (the 16 coordinates of each group rebuilt in registers from its radius,
// down the levels), one coordinate per thread for the values (y_i = r4 * t4 * t3 * t2 * t1, the
// reference's product order), as rvq_decode.
#include <cmath>
#include <vector>

#include "../ref/polar.h"
#include "qjl.cuh"
#include "splitk.cuh"
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
constexpr double kTwoPi = 2 * M_PI;
// Offsets in PolarTables::tables().
constexpr int kCos1 = 0, kSin1 = 16;
__host__ __device__ constexpr int lvl_cos(int l) { return 32 + 48 * (l - 2); }
__host__ __device__ constexpr int lvl_sin(int l) { return lvl_cos(l) + 16; }
__host__ __device__ constexpr int lvl_bnd(int l) { return lvl_cos(l) + 32; }

/// atan2(y, x) in fp64 as the host's libm gives it at the 8 axis / diagonal directions (dirs,
/// PolarTables::directions(); x, y not both zero), CUDA's atan2 elsewhere (and for (+-0, +-0),
/// whose IEEE results both follow).
__device__ __forceinline__ double atan2_dir(double y, double x, const double* __restrict__ dirs) {
  const double ax = fabs(x), ay = fabs(y);
  if ((ax == 0.0) != (ay == 0.0) || (ax == ay && ax != 0.0)) {
    // Direction index k: angle k * pi / 4 counter-clockwise from +x (k = 0..7).
    const int sx = x > 0.0 ? 1 : x < 0.0 ? -1 : 0, sy = y > 0.0 ? 1 : y < 0.0 ? -1 : 0;
    int k;
    if (sy == 0) k = sx > 0 ? 0 : 4;
    else if (sx == 0) k = sy > 0 ? 2 : 6;
    else if (sy > 0) k = sx > 0 ? 1 : 3;
    else k = sx < 0 ? 5 : 7;
    return __ldg(dirs + k);
  }
  return atan2(y, x);
}

struct EncArgs {
  const float* x;
  std::size_t n;
  const float* signs;
  const float* tab;
  const double* dirs;
  float scale;
  int b1, b2;
  std::size_t l1_bytes, code_bytes;
  std::uint8_t* out;
};

template <int D>
__global__ void __launch_bounds__(kEncThreads) polar_encode_kernel(const EncArgs a) {
  constexpr int E = D / 32, NH = 7 * D / 16;
  __shared__ double ra[kEncWarps][D / 2], rb[kEncWarps][D / 4];
  __shared__ std::uint8_t c1[kEncWarps][D / 2], ch[kEncWarps][NH];
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int k1 = 1 << a.b1, nb2 = (1 << a.b2) - 1;
  float sgn[E];
#pragma unroll
  for (int e = 0; e < E; ++e) sgn[e] = __ldg(a.signs + lane * E + e);
  for (std::size_t t = static_cast<std::size_t>(blockIdx.x) * kEncWarps + w; t < a.n;
       t += static_cast<std::size_t>(gridDim.x) * kEncWarps) {  // warp-uniform
    const float* xt = a.x + t * D;
    float y[E];
#pragma unroll
    for (int e = 0; e < E; ++e) y[e] = __fmul_rn(__ldg(xt + lane * E + e), sgn[e]);
    detail::splitk::warp_fwht<E>(y);
#pragma unroll
    for (int e = 0; e < E; ++e) y[e] = __fmul_rn(y[e], a.scale);
    // Level 1: this lane's E / 2 pairs.
#pragma unroll
    for (int p = 0; p < E / 2; ++p) {
      const int i = lane * (E / 2) + p;
      const double a0 = y[2 * p], a1 = y[2 * p + 1];
      ra[w][i] = hypot(a0, a1);
      double psi = atan2_dir(a1, a0, a.dirs);
      if (psi < 0) psi = __dadd_rn(psi, kTwoPi);
      int code = static_cast<int>(__dmul_rn(__ddiv_rn(psi, kTwoPi), static_cast<double>(k1)));
      if (code >= k1) code = k1 - 1;
      c1[w][i] = static_cast<std::uint8_t>(code);
    }
    __syncwarp();
    // Levels 2..4: pairs of the previous level's radii (ra -> rb -> ra -> rb).
    int off = 0;
    for (int l = 2; l <= 4; ++l) {
      const double* src = (l & 1) ? rb[w] : ra[w];
      double* dst = (l & 1) ? ra[w] : rb[w];
      const int cnt = D >> l;
      const float* bnd = a.tab + lvl_bnd(l);
      for (int i = lane; i < cnt; i += 32) {
        const double a0 = src[2 * i], a1 = src[2 * i + 1];
        dst[i] = hypot(a0, a1);
        const float psi = __double2float_rn(atan2_dir(a1, a0, a.dirs));
        unsigned code = 0;
        for (int k = 0; k < nb2; ++k) code += psi > __ldg(bnd + k) ? 1u : 0u;
        ch[w][off + i] = static_cast<std::uint8_t>(code);
      }
      off += cnt;
      __syncwarp();
    }
    // Level-4 radii (in rb after level 4): fp64 -> fp32 -> fp16, token-major.
    std::uint8_t* rad = a.out + a.n * a.code_bytes + t * (2 * (D / 16));
    if (lane < D / 16) store_half_le(rad + 2 * lane, __double2float_rn(rb[w][lane]));
    std::uint8_t* tok = a.out + t * a.code_bytes;
    warp_pack_n(c1[w], D / 2, a.b1, tok);
    warp_pack_n(ch[w], NH, a.b2, tok + a.l1_bytes);
    __syncwarp();  // ra, rb and the codes are rewritten for the next token
  }
}

template <int D>
void launch_encode(const EncArgs& a, cudaStream_t s) {
  polar_encode_kernel<D><<<detail::capped_grid(a.n, kEncWarps), kEncThreads, 0, s>>>(a);
  TKV_CHECK_LAUNCH();
}

// ---- Fused split-K decode: PolarQuant keys, PolarQuant values (contiguous blocks).

struct DecArgs {
  const float* q;
  const std::uint8_t* keys;
  const std::uint8_t* values;
  const std::int32_t* lens;
  int num_heads, group, num_kv_heads, d, capacity, splits;
  int kb1, kb2, vb1, vb2;
  std::size_t kl1, kcb, kstride, vl1, vcb, vstride;  // level-1 bytes, code bytes, block bytes
  const float* ksigns;
  const float* ktab;
  const float* vtab;
  float kscale, logit_scale;  // logit_scale = softmax_scale * log2(e)
  float* ws;                  // [splits][batch * num_heads][d + 2]: m, l, acc[d]
};

/// Shared-memory copy of one codec's tables: [cos1 16][sin1 16][cos, sin of levels 2..4, 16 each].
struct Trig {
  float c1[16], s1[16], c[3][16], s[3][16];
};

__device__ __forceinline__ void load_trig(Trig& t, const float* __restrict__ tab) {
  for (int i = threadIdx.x; i < 16; i += blockDim.x) {
    t.c1[i] = __ldg(tab + kCos1 + i);
    t.s1[i] = __ldg(tab + kSin1 + i);
    for (int l = 2; l <= 4; ++l) {
      t.c[l - 2][i] = __ldg(tab + lvl_cos(l) + i);
      t.s[l - 2][i] = __ldg(tab + lvl_sin(l) + i);
    }
  }
}

/// Coordinate i of a token's y_hat (ref::Polar::reconstruct): the level-4 radius of group i / 16
/// times the cos or sin of the angle at each level (level l: angle i >> l, sin where bit l - 1 of
/// i is set), fp32 products in the reference's order (level 4 first).
__device__ __forceinline__ float polar_coord(const Trig& t, const std::uint8_t* tc, std::size_t l1, float r4, int i,
                                             int d, int b1, int b2) {
  float r = r4;
  int off = d / 4 + d / 8;  // level-4 angles in the high stream
#pragma unroll
  for (int l = 4; l >= 2; --l) {
    const unsigned a = get_code(tc + l1, static_cast<std::size_t>(off + (i >> l)), b2);
    r = __fmul_rn(r, ((i >> (l - 1)) & 1) ? t.s[l - 2][a] : t.c[l - 2][a]);
    off -= d >> (l - 1);  // level l - 1's offset: d/4 (level 3), 0 (level 2)
  }
  const unsigned a = get_code(tc, static_cast<std::size_t>(i >> 1), b1);
  return __fmul_rn(r, (i & 1) ? t.s1[a] : t.c1[a]);
}

__global__ void __launch_bounds__(kDecThreads) polar_decode_split_kernel(const DecArgs a) {
  extern __shared__ float sh[];
  float* rq = sh;               // [d]
  float* pw = rq + a.d;         // [kDecTile] softmax weights
  float* red = pw + kDecTile;   // [32]
  __shared__ Trig kt, vt;
  const int bh = blockIdx.y, b = bh / a.num_heads, h = bh % a.num_heads, g = h / a.group;
  const int d = a.d;
  const int len = __ldg(a.lens + b);
  const int chunk = (len + a.splits - 1) / a.splits;
  const int s0 = min(len, static_cast<int>(blockIdx.x) * chunk), s1 = min(len, s0 + chunk);
  for (int j = threadIdx.x; j < d; j += blockDim.x) rq[j] = __ldg(a.q + static_cast<std::size_t>(bh) * d + j);
  load_trig(kt, a.ktab);
  load_trig(vt, a.vtab);
  __syncthreads();
  rotate_shared(rq, d, a.ksigns, a.kscale, false);
  const std::uint8_t* kbk = a.keys + (static_cast<std::size_t>(b) * a.num_kv_heads + g) * a.kstride;
  const std::uint8_t* vbk = a.values + (static_cast<std::size_t>(b) * a.num_kv_heads + g) * a.vstride;
  const std::uint8_t* krad = kbk + static_cast<std::size_t>(a.capacity) * a.kcb;
  const std::uint8_t* vrad = vbk + static_cast<std::size_t>(a.capacity) * a.vcb;
  const int nr = d / 16;
  float mrun = -INFINITY, lrun = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
  const int i0 = threadIdx.x, i1 = threadIdx.x + kDecThreads;
  for (int t0 = s0; t0 < s1; t0 += kDecTile) {
    const int t = t0 + threadIdx.x;
    float logit = -INFINITY;
    if (t < s1) {
      const std::uint8_t* tc = kbk + static_cast<std::size_t>(t) * a.kcb;
      float dot0 = 0.0f, dot1 = 0.0f;  // even / odd groups
      for (int j = 0; j < nr; ++j) {
        const float r4 = load_half_le(krad + 2 * (static_cast<std::size_t>(t) * nr + j));
        float part = 0.0f;
        for (int m = 0; m < 16; ++m)
          part = __fmaf_rn(rq[16 * j + m], polar_coord(kt, tc, a.kl1, r4, 16 * j + m, d, a.kb1, a.kb2), part);
        if (j & 1) dot1 = __fadd_rn(dot1, part);
        else dot0 = __fadd_rn(dot0, part);
      }
      logit = (dot0 + dot1) * a.logit_scale;
    }
    softmax_tile(logit, 1.0f, t < s1, mrun, lrun, acc0, acc1, pw, red);  // publishes pw
    const int nt = min(kDecTile, s1 - t0);
    for (int tt = 0; tt < nt; ++tt) {
      const std::size_t tk = static_cast<std::size_t>(t0 + tt);
      const std::uint8_t* vc = vbk + tk * a.vcb;
      const float wgt = pw[tt];
      if (i0 < d) {
        const float r4 = load_half_le(vrad + 2 * (tk * nr + (i0 >> 4)));
        acc0 = __fmaf_rn(wgt, polar_coord(vt, vc, a.vl1, r4, i0, d, a.vb1, a.vb2), acc0);
      }
      if (i1 < d) {
        const float r4 = load_half_le(vrad + 2 * (tk * nr + (i1 >> 4)));
        acc1 = __fmaf_rn(wgt, polar_coord(vt, vc, a.vl1, r4, i1, d, a.vb1, a.vb2), acc1);
      }
    }
    __syncthreads();  // pw is rewritten by the next tile
  }
  store_partial(a.ws, bh, d, mrun, lrun, acc0, acc1, i0, i1);
}
}  // namespace

PolarTables::PolarTables(const CodecConfig& cfg) {
  const char* where = "cuda::PolarTables";
  check_arg(cfg.method == Method::kPolar, where, "method", method_name(cfg.method), "must be polar");
  check_arg(!cfg.center, where, "center", cfg.center, "must be off on the GPU");
  check_arg(cfg.bits == 2 || cfg.bits == 3 || cfg.bits == 4, where, "bits", cfg.bits,
            "must be an integer width 2..4 for polar");
  check_arg(cfg.head_dim == 64 || cfg.head_dim == 128 || cfg.head_dim == 256, where, "head_dim", cfg.head_dim,
            "must be 64, 128 or 256 for polar on the GPU");
  const ref::Polar r(cfg);  // the reference codec's own rotation and tables
  head_dim_ = cfg.head_dim;
  bits_ = r.level1_bits();
  high_bits_ = r.high_bits();
  scale_ = Rotation::hadamard_scale(head_dim_);
  signs_ = detail::upload(r.rotation().signs());
  std::vector<float> tab(kTableFloats, 0.0f);
  for (std::size_t i = 0; i < r.cos_table(1).size(); ++i) {
    tab[kCos1 + i] = r.cos_table(1)[i];
    tab[kSin1 + i] = r.sin_table(1)[i];
  }
  for (int l = 2; l <= 4; ++l) {
    for (std::size_t i = 0; i < r.cos_table(l).size(); ++i) {
      tab[lvl_cos(l) + i] = r.cos_table(l)[i];
      tab[lvl_sin(l) + i] = r.sin_table(l)[i];
    }
    const auto& bnd = r.level_codebook(l).boundaries;
    for (std::size_t i = 0; i < bnd.size(); ++i) tab[lvl_bnd(l) + i] = bnd[i];
  }
  tab_ = detail::upload(tab);
  const double dx[8] = {1, 1, 0, -1, -1, -1, 0, 1}, dy[8] = {0, 1, 1, 1, 0, -1, -1, -1};
  std::vector<double> dirs(8);
  for (int k = 0; k < 8; ++k) dirs[k] = std::atan2(dy[k], dx[k]);
  dirs_ = detail::upload(dirs);
}

void polar_encode(const PolarTables& tab, const float* x, std::size_t n, std::uint8_t* out, Stream stream) {
  if (!detail::check_block_io("cuda::polar_encode", n, x, "x", out)) return;
  const EncArgs a{x,          n,           tab.signs(),       tab.tables(),     tab.directions(), tab.hadamard_scale(),
                  tab.bits(), tab.high_bits(), tab.level1_bytes(), tab.code_bytes(), out};
  const cudaStream_t s = detail::stream_of(stream);
  switch (tab.head_dim()) {
    case 64: return launch_encode<64>(a, s);
    case 128: return launch_encode<128>(a, s);
    case 256: return launch_encode<256>(a, s);
  }
}

std::size_t polar_decode_workspace_bytes(const VqDecodeArgs& args, int head_dim) {
  return partial_bytes("cuda::polar_decode_workspace_bytes", args, head_dim);
}

void polar_decode(const PolarTables& ktab, const PolarTables& vtab, const VqDecodeArgs& a, Stream stream) {
  const char* where = "cuda::polar_decode";
  check_arg(vtab.head_dim() == ktab.head_dim(), where, "vtab.head_dim", vtab.head_dim(), "must equal ktab.head_dim");
  const long long rows = check_decode_args(where, a);
  if (rows == 0) return;
  const int d = ktab.head_dim(), splits = decode_splits(a);
  const std::size_t cap = static_cast<std::size_t>(a.capacity);
  const DecArgs k{a.q,
                  a.keys,
                  a.values,
                  a.seq_lens,
                  a.num_heads,
                  a.num_heads / a.num_kv_heads,
                  a.num_kv_heads,
                  d,
                  a.capacity,
                  splits,
                  ktab.bits(),
                  ktab.high_bits(),
                  vtab.bits(),
                  vtab.high_bits(),
                  ktab.level1_bytes(),
                  ktab.code_bytes(),
                  ktab.block_bytes(cap),
                  vtab.level1_bytes(),
                  vtab.code_bytes(),
                  vtab.block_bytes(cap),
                  ktab.signs(),
                  ktab.tables(),
                  vtab.tables(),
                  ktab.hadamard_scale(),
                  a.softmax_scale * 1.4426950408889634f,
                  static_cast<float*>(a.workspace)};
  const cudaStream_t s = detail::stream_of(stream);
  const std::size_t smem = sizeof(float) * (d + kDecTile + 32);
  polar_decode_split_kernel<<<dim3(splits, static_cast<unsigned>(rows)), kDecThreads, smem, s>>>(k);
  TKV_CHECK_LAUNCH();
  merge_rotate_kernel<<<static_cast<unsigned>(rows), kDecThreads, sizeof(float) * d, s>>>(
      k.ws, splits, static_cast<int>(rows), d, vtab.signs(), vtab.hadamard_scale(), nullptr, a.out);
  TKV_CHECK_LAUNCH();
}

}  // namespace turbokv::cuda
