// TurboQuant-Prod keys on the GPU (arXiv 2504.19874, Algorithm 2): encode
// (MSE at b-1 bits of the Hadamard-rotated unit vector, QJL signs of the
// rotated residual, fp16 ||x|| and gamma = ||r||: the reference's bytes), query
// preparation (Pi q and S Pi q in fp64) and unbiased scores (fp32).
//
// Encode: the block tile of qjl.cuh (32 vectors, 4 warps). Phase 1, per vector
// by one warp, lane l holding the E = D/32 consecutive elements [lE, lE + E),
// with the reference's float operations (formats.h, rotation.h), each an
// explicitly rounded intrinsic:
//   sum = sumsq_spec(x); y = x * sign; FWHT h = 1 .. E/2 in registers, h = E ..
//   D/2 by shuffles (the lower partner y + o, the upper o - y, as
//   __fmaf_rn(+-1, y, o): the product is exact, so it rounds like the add);
//   norm = sqrt(sum); inv = norm > 0 ? 1 / norm : 0; u = (y * scale) * inv;
//   code = #boundaries < u; r = u - c[code] (b = 1: r = u);
// r overwrites the tile row, gamma = sqrt(sumsq_spec(r)), codes are packed
// from a per-warp byte buffer. Phase 2: sketch_signs on the residual rows.
#include <cmath>

#include "qjl.cuh"
#include "splitk.cuh"
#include "turbokv/cuda_qjl.h"
#include "turbokv/error.h"
#include "turbokv/pack.h"

namespace turbokv::cuda {
namespace {

using namespace detail::splitk;

using namespace detail::qjl;

struct ProdArgs {
  const void* x;  // [n][D] of the kernel's XT
  std::size_t n;
  int m;
  const float* st;
  const float* signs;
  const float* centroids;
  const float* boundaries;
  float scale;
  std::size_t mse_bytes;
  const float* rot_t;  // dense rotations (head_dim not a power of two): Pi^T [D][D] row-major; else nullptr
  int d;               // head_dim (the dense kernel's runtime D)
};

/// The MSE stage of both encoders in registers: the (b-1)-bit codebook's boundaries and centroids.
template <int MB>
struct ProdQuant {
  static constexpr int NB = MB > 0 ? (1 << MB) - 1 : 0;
  float bnd[NB > 0 ? NB : 1], cen[NB + 1];
  __device__ __forceinline__ explicit ProdQuant(const ProdArgs& a) {
#pragma unroll
    for (int k = 0; k < NB; ++k) bnd[k] = __ldg(a.boundaries + k);
    if constexpr (MB > 0) {
#pragma unroll
      for (int k = 0; k <= NB; ++k) cen[k] = __ldg(a.centroids + k);
    } else {
      cen[0] = 0.0f;
    }
  }
  /// The residual u - c[code] of the unit-vector coordinate u (u itself at MB = 0); code = #boundaries < u
  /// (ScalarCodebook::quantize) into *code when MB > 0.
  __device__ __forceinline__ float residual(float u, std::uint8_t* code_out) const {
    if constexpr (MB == 0) {
      return u;
    } else {
      unsigned code = 0;
#pragma unroll
      for (int k = 0; k < NB; ++k) code += u > bnd[k] ? 1u : 0u;
      float c = cen[0];
#pragma unroll
      for (int k = 1; k <= NB; ++k) c = code == static_cast<unsigned>(k) ? cen[k] : c;  // select, no local memory
      *code_out = static_cast<std::uint8_t>(code);
      return __fsub_rn(u, c);
    }
  }
};

/// The end of one vector's encode, by its warp (both encoders below): gamma = ||r|| from the residual row
/// [d] (shared memory, sumsq_spec's order), the MSE stage's codes cw [d] packed into the LSB-first stream
/// (MB > 0), and the fp16 [||x||, gamma] stored. Ends with __syncwarp (row and cw are rewritten next).
template <int MB>
__device__ __forceinline__ void store_prod_vector(const float* row, const std::uint8_t* cw, int d, float norm,
                                                  const detail::TokenDst& to) {
  const float gamma = __fsqrt_rn(sumsq_row(row, d));
  if constexpr (MB > 0) warp_pack_n(cw, d, MB, to.codes);
  if ((threadIdx.x & 31) == 0) {
    store_half_le(to.scalars, norm);
    store_half_le(to.scalars + 2, gamma);
  }
  __syncwarp();
}

/// Writes vector v's codes and [||x||, gamma] through dst (detail::BlockDst: tq_prod_encode's block;
/// detail::PagedDst: tq_prod_append's pages). XT: the input type (fp16 / bf16 widened exactly on load).
template <int D, int MB, class XT, class Dst>
__global__ void __launch_bounds__(kThreads) tq_prod_encode_kernel(const ProdArgs a, const Dst dst) {
  constexpr int E = D / 32;
  constexpr int LD = tile_ld(D);
  extern __shared__ __align__(16) float smem[];
  float* xs = smem;
  float* sst = smem + kVecs * LD;
  std::uint8_t* cbuf = reinterpret_cast<std::uint8_t*>(sst + kJChunk * kRowTile);  // [kWarps][D] codes
  const std::size_t v0 = static_cast<std::size_t>(blockIdx.x) * kVecs;
  const int nv = a.n - v0 < static_cast<std::size_t>(kVecs) ? static_cast<int>(a.n - v0) : kVecs;
  load_tile<XT>(a.x, v0, nv, D, xs);
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float sgn[E];
#pragma unroll
  for (int e = 0; e < E; ++e) sgn[e] = __ldg(a.signs + lane * E + e);
  const ProdQuant<MB> pq(a);
  __syncthreads();
  std::uint8_t* cw = cbuf + w * D;
  for (int v = 0; v < kVecsPerWarp; ++v) {
    const int vv = w * kVecsPerWarp + v;
    if (vv >= nv) break;  // warp-uniform
    float* row = xs + vv * LD;
    const float sum = sumsq_row(row, D);
    float y[E];
#pragma unroll
    for (int e = 0; e < E; ++e) y[e] = __fmul_rn(row[lane * E + e], sgn[e]);
    warp_fwht<E>(y);
    const float norm = __fsqrt_rn(sum);
    const float inv = norm > 0.0f ? __fdiv_rn(1.0f, norm) : 0.0f;
    __syncwarp();  // every lane has read the row (sum of squares, own elements)
#pragma unroll
    for (int e = 0; e < E; ++e)
      row[lane * E + e] = pq.residual(__fmul_rn(__fmul_rn(y[e], a.scale), inv), cw + lane * E + e);
    __syncwarp();
    store_prod_vector<MB>(row, cw, D, norm, dst.at(v0 + vv));
  }
  sketch_signs(xs, nv, D, a.m, a.st, sst, dst, v0, a.mse_bytes);
}

/// The encoder at a head_dim that is not a power of two (80, 96, 112, 160, ...): the reference's dense
/// Haar rotation y_i = sum_j Pi[i][j] x_j in ascending j, each product and sum rounded on its own
/// (rotation.h; __fmul_rn / __fadd_rn, no FMA), then u = y * (1 / ||x||) (no Hadamard scale) and the
/// rest as tq_prod_encode_kernel: codes, residual, gamma, packing, sketch signs. Phase 1: thread i < D
/// accumulates coordinate i of 8 of the tile's vectors at a time (Pi^T row j read once per 8 vectors,
/// x_j broadcast from the tile) into ys; phase 2: one warp per vector, lane l holding elements l + 32k.
/// Correct first: the d^2 multiply-adds per vector are not tuned.
template <int MB, class XT, class Dst>
__global__ void __launch_bounds__(kThreads) tq_prod_encode_dense_kernel(const ProdArgs a, const Dst dst) {
  constexpr int kV = 8;
  const int D = a.d, LD = tile_ld(D);
  extern __shared__ __align__(16) float smem[];
  float* xs = smem;
  float* sst = smem + kVecs * LD;
  float* ys = sst + kJChunk * kRowTile;                                    // [kVecs][D]: Pi x
  std::uint8_t* cbuf = reinterpret_cast<std::uint8_t*>(ys + kVecs * D);  // [kWarps][D] codes
  const std::size_t v0 = static_cast<std::size_t>(blockIdx.x) * kVecs;
  const int nv = a.n - v0 < static_cast<std::size_t>(kVecs) ? static_cast<int>(a.n - v0) : kVecs;
  load_tile<XT>(a.x, v0, nv, D, xs);
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const ProdQuant<MB> pq(a);
  __syncthreads();
  for (int i = threadIdx.x; i < D; i += kThreads)
    for (int vb = 0; vb < nv; vb += kV) {
      float y[kV];
#pragma unroll
      for (int v = 0; v < kV; ++v) y[v] = 0.0f;
      for (int j = 0; j < D; ++j) {
        const float m = __ldg(a.rot_t + static_cast<std::size_t>(j) * D + i);
#pragma unroll
        for (int v = 0; v < kV; ++v) y[v] = __fadd_rn(y[v], __fmul_rn(m, xs[(vb + v) * LD + j]));  // rows >= nv: 0
      }
#pragma unroll
      for (int v = 0; v < kV; ++v)
        if (vb + v < nv) ys[(vb + v) * D + i] = y[v];
    }
  __syncthreads();
  std::uint8_t* cw = cbuf + w * D;
  for (int v = 0; v < kVecsPerWarp; ++v) {
    const int vv = w * kVecsPerWarp + v;
    if (vv >= nv) break;  // warp-uniform
    float* row = xs + vv * LD;
    const float sum = sumsq_row(row, D);
    const float norm = __fsqrt_rn(sum);
    const float inv = norm > 0.0f ? __fdiv_rn(1.0f, norm) : 0.0f;
    __syncwarp();  // every lane has read the row
    for (int i = lane; i < D; i += 32) row[i] = pq.residual(__fmul_rn(ys[vv * D + i], inv), cw + i);
    __syncwarp();
    store_prod_vector<MB>(row, cw, D, norm, dst.at(v0 + vv));
  }
  sketch_signs(xs, nv, D, a.m, a.st, sst, dst, v0, a.mse_bytes);
}

template <int MB, class XT, class Dst>
void launch_encode_dense(const ProdArgs& a, const Dst& dst, cudaStream_t s) {
  const std::size_t smem = smem_bytes(a.d, static_cast<std::size_t>(kVecs) * a.d * sizeof(float) +
                                               static_cast<std::size_t>(kWarps) * a.d);
  allow_smem(tq_prod_encode_dense_kernel<MB, XT, Dst>, smem);
  const std::size_t grid = (a.n + kVecs - 1) / kVecs;
  tq_prod_encode_dense_kernel<MB, XT, Dst><<<static_cast<unsigned>(grid), kThreads, smem, s>>>(a, dst);
  TKV_CHECK_LAUNCH();
}

template <int D, int MB, class XT, class Dst>
void launch_encode(const ProdArgs& a, const Dst& dst, cudaStream_t s) {
  const std::size_t smem = smem_bytes(D, static_cast<std::size_t>(kWarps) * D);
  allow_smem(tq_prod_encode_kernel<D, MB, XT, Dst>, smem);
  const std::size_t grid = (a.n + kVecs - 1) / kVecs;
  tq_prod_encode_kernel<D, MB, XT, Dst><<<static_cast<unsigned>(grid), kThreads, smem, s>>>(a, dst);
  TKV_CHECK_LAUNCH();
}

/// The one dispatch from (head_dim, MSE bits, input type) to the encoder's compile-time constants.
template <class Dst>
void launch_encode_any(const QjlTables& tab, IoType x_type, const ProdArgs& a, const Dst& dst, cudaStream_t s) {
  if (tab.dense()) {
    detail::with_io_type(x_type, [&](auto xt_c) {
      using XT = typename decltype(xt_c)::type;
      switch (tab.mse_bits()) {
        case 0: return launch_encode_dense<0, XT>(a, dst, s);
        case 1: return launch_encode_dense<1, XT>(a, dst, s);
        case 2: return launch_encode_dense<2, XT>(a, dst, s);
        case 3: return launch_encode_dense<3, XT>(a, dst, s);
      }
    });
    return;
  }
  detail::with_pow2_head_dim(tab.head_dim(), [&](auto d_c) {
    detail::with_io_type(x_type, [&](auto xt_c) {
      constexpr int D = decltype(d_c)::value;
      using XT = typename decltype(xt_c)::type;
      switch (tab.mse_bits()) {
        case 0: return launch_encode<D, 0, XT>(a, dst, s);
        case 1: return launch_encode<D, 1, XT>(a, dst, s);
        case 2: return launch_encode<D, 2, XT>(a, dst, s);
        case 3: return launch_encode<D, 3, XT>(a, dst, s);
      }
    });
  });
}

// state[q] = [Pi q, S Pi q] in fp64 (Rotation::forward(double) order), stored fp32. rot_t (dense
// rotations): Pi^T [d][d]; y_i = sum_j Pi[i][j] q_j in ascending j (2 d doubles of shared memory).
__global__ void tq_prod_prepare_kernel(const float* __restrict__ q, int d, int m, const float* __restrict__ signs,
                                       double scale, const float* __restrict__ rot_t, const float* __restrict__ st,
                                       float* __restrict__ state) {
  extern __shared__ double y[];
  const float* qq = q + static_cast<std::size_t>(blockIdx.x) * d;
  float* out = state + static_cast<std::size_t>(blockIdx.x) * (d + m);
  if (rot_t != nullptr) {
    double* qd = y + d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) qd[j] = qq[j];
    __syncthreads();
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
      double acc = 0;
      for (int j = 0; j < d; ++j)
        acc = __dadd_rn(acc, __dmul_rn(static_cast<double>(__ldg(rot_t + static_cast<std::size_t>(j) * d + i)), qd[j]));
      y[i] = acc;
    }
    scale = 1.0;
  } else {
    for (int j = threadIdx.x; j < d; j += blockDim.x) y[j] = static_cast<double>(qq[j]) * signs[j];
  }
  for (int h = 1; rot_t == nullptr && h < d; h <<= 1) {
    __syncthreads();
    for (int p = threadIdx.x; p < d / 2; p += blockDim.x) {
      const int j = (p / h) * 2 * h + p % h;
      const double u = y[j], v = y[j + h];
      y[j] = u + v;
      y[j + h] = u - v;
    }
  }
  __syncthreads();
  for (int j = threadIdx.x; j < d; j += blockDim.x) y[j] *= scale;
  __syncthreads();
  for (int j = threadIdx.x; j < d; j += blockDim.x) out[j] = static_cast<float>(y[j]);
  for (int i = threadIdx.x; i < m; i += blockDim.x) {
    double acc = 0;
    for (int j = 0; j < d; ++j) acc = __fma_rn(static_cast<double>(__ldg(st + static_cast<std::size_t>(j) * m + i)), y[j], acc);
    out[d + i] = static_cast<float>(acc);
  }
}

constexpr int kScoreThreads = 128;

// One thread per token; grid (token tiles, queries). Shared: Pi q [d], S Pi q [m].
template <int MB>
__global__ void __launch_bounds__(kScoreThreads) tq_prod_scores_kernel(
    const float* __restrict__ state, int d, int m, const float* __restrict__ centroids,
    const std::uint8_t* __restrict__ block, std::size_t n, std::size_t t0, std::size_t t1, std::size_t code_bytes,
    std::size_t mse_bytes, float kappa, float* __restrict__ out) {
  extern __shared__ float sh[];
  float* rq = sh;
  float* sq = sh + d;
  const float* stq = state + static_cast<std::size_t>(blockIdx.y) * (d + m);
  for (int i = threadIdx.x; i < d + m; i += blockDim.x) sh[i] = stq[i];
  float cen[1 << MB];
  if constexpr (MB > 0) {
#pragma unroll
    for (int k = 0; k < (1 << MB); ++k) cen[k] = __ldg(centroids + k);
  }
  __syncthreads();
  const std::size_t t = t0 + static_cast<std::size_t>(blockIdx.x) * kScoreThreads + threadIdx.x;
  if (t >= t1) return;
  const std::uint8_t* tc = block + t * code_bytes;
  float dot = 0.0f;
  if constexpr (MB > 0) {
    // Groups of 8 codes = MB bytes (MB <= 3: one 24-bit word); each group's 8
    // products summed as a tree, groups alternate between 2 accumulators.
    float d0 = 0.0f, d1 = 0.0f;
    for (int g = 0; g < d / 8; ++g) {
      unsigned word = 0;
#pragma unroll
      for (int b = 0; b < MB; ++b) word |= static_cast<unsigned>(__ldg(tc + MB * g + b)) << (8 * b);
      float pr[8];
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const unsigned k = (word >> (MB * c)) & ((1u << MB) - 1u);
        float ck = cen[0];
#pragma unroll
        for (int j = 1; j < (1 << MB); ++j) ck = k == static_cast<unsigned>(j) ? cen[j] : ck;  // select, no local memory
        pr[c] = __fmul_rn(rq[8 * g + c], ck);
      }
      if (g & 1)
        d1 += tree8(pr);
      else
        d0 += tree8(pr);
    }
    dot = d0 + d1;
  }
  const float s = signed_sum(sq, tc + mse_bytes, m);
  const float norm = load_half_le(block + n * code_bytes + 4 * t);
  const float gamma = load_half_le(block + n * code_bytes + 4 * t + 2);
  out[static_cast<std::size_t>(blockIdx.y) * (t1 - t0) + (t - t0)] =
      __fmul_rn(norm, __fmaf_rn(__fmul_rn(kappa, gamma), s, dot));
}


// ---- Fused split-K decode: TurboQuant-Prod keys, TurboQuant-MSE values (contiguous blocks).

constexpr int kMaxDecRows = 2048;

struct DecArgs {
  const float* q;
  const std::uint8_t* keys;
  const std::uint8_t* values;
  const std::int32_t* lens;
  int num_heads, group, num_kv_heads, d, m, kmb, vb, capacity, splits;
  std::size_t kcb, kmse, kstride, vcb, vstride;
  const float* ksigns;
  const float* kcent;
  const float* st;
  float kscale, kappa, logit_scale;  // logit_scale = softmax_scale * log2(e)
  const float* vsigns;
  const float* vcent;
  float vscale;
  float* ws;  // [splits][batch * num_heads][d + 2]: m, l, acc[d]
  const float* krot_t;  // dense key rotation (head_dim not a power of two): Pi^T [d][d]; else nullptr
};



__global__ void __launch_bounds__(kDecThreads) prod_decode_split_kernel(const DecArgs a) {
  extern __shared__ float sh[];
  float* rq = sh;                // [d]
  float* sq = rq + a.d;          // [m]
  float* pw = sq + a.m;          // [kDecTile] softmax weight * value norm
  float* vcent = pw + kDecTile;  // [16]
  float* kcent = vcent + 16;     // [8]
  float* red = kcent + 8;        // [32]
  float* tmp = red + 32;         // [d]: the dense rotation's scratch
  const int bh = blockIdx.y, b = bh / a.num_heads, h = bh % a.num_heads, g = h / a.group;
  const int d = a.d, m = a.m;
  const int len = __ldg(a.lens + b);
  const int chunk = (len + a.splits - 1) / a.splits;
  const int s0 = min(len, static_cast<int>(blockIdx.x) * chunk), s1 = min(len, s0 + chunk);
  for (int j = threadIdx.x; j < d; j += blockDim.x) rq[j] = __ldg(a.q + static_cast<std::size_t>(bh) * d + j);
  if (threadIdx.x < (1 << a.vb)) vcent[threadIdx.x] = __ldg(a.vcent + threadIdx.x);
  if (a.kmb > 0 && threadIdx.x < (1 << a.kmb)) kcent[threadIdx.x] = __ldg(a.kcent + threadIdx.x);
  __syncthreads();
  if (a.krot_t != nullptr)
    rotate_dense_shared(rq, tmp, d, a.krot_t);
  else
    rotate_shared(rq, d, a.ksigns, a.kscale, false);
  for (int i = threadIdx.x; i < m; i += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < d; ++j) acc = __fmaf_rn(__ldg(a.st + static_cast<std::size_t>(j) * m + i), rq[j], acc);
    sq[i] = acc;
  }
  __syncthreads();
  const std::uint8_t* kb = a.keys + (static_cast<std::size_t>(b) * a.num_kv_heads + g) * a.kstride;
  const std::uint8_t* vbk = a.values + (static_cast<std::size_t>(b) * a.num_kv_heads + g) * a.vstride;
  float mrun = -INFINITY, lrun = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
  const int i0 = threadIdx.x, i1 = threadIdx.x + kDecThreads;
  for (int t0 = s0; t0 < s1; t0 += kDecTile) {
    const int t = t0 + threadIdx.x;
    float logit = -INFINITY, vnorm = 0.0f;
    if (t < s1) {
      const std::uint8_t* tc = kb + static_cast<std::size_t>(t) * a.kcb;
      float dot = 0.0f;
      for (int i = 0; i < (a.kmb > 0 ? d : 0); ++i)
        dot = __fmaf_rn(rq[i], kcent[get_code(tc, static_cast<std::size_t>(i), a.kmb)], dot);
      const float ssum = signed_sum(sq, tc + a.kmse, m);
      const std::uint8_t* sc = kb + static_cast<std::size_t>(a.capacity) * a.kcb + 4 * static_cast<std::size_t>(t);
      const float score = load_half_le(sc) * __fmaf_rn(a.kappa * load_half_le(sc + 2), ssum, dot);
      logit = score * a.logit_scale;
      vnorm = load_half_le(vbk + static_cast<std::size_t>(a.capacity) * a.vcb + 2 * static_cast<std::size_t>(t));
    }
    softmax_tile(logit, vnorm, t < s1, mrun, lrun, acc0, acc1, pw, red);  // publishes pw
    const int nt = min(kDecTile, s1 - t0);
    for (int tt = 0; tt < nt; ++tt) {
      const std::uint8_t* vc = vbk + static_cast<std::size_t>(t0 + tt) * a.vcb;
      const float w = pw[tt];
      if (i0 < d) acc0 = __fmaf_rn(w, vcent[get_code(vc, static_cast<std::size_t>(i0), a.vb)], acc0);
      if (i1 < d) acc1 = __fmaf_rn(w, vcent[get_code(vc, static_cast<std::size_t>(i1), a.vb)], acc1);
    }
    __syncthreads();  // pw is rewritten by the next tile
  }
  store_partial(a.ws, bh, d, mrun, lrun, acc0, acc1, i0, i1);
}
}  // namespace

void tq_prod_encode(const QjlTables& tab, const float* x, std::size_t n, std::uint8_t* out, Stream stream) {
  const char* where = "cuda::tq_prod_encode";
  check_arg(tab.method() == Method::kTurboProd, where, "tab.method", method_name(tab.method()), "must be tq-prod");
  if (!detail::check_block_io(where, n, x, "x", out)) return;
  const ProdArgs a{x, n, tab.rows(), tab.sketch_t(), tab.signs(), tab.centroids(), tab.boundaries(),
                   tab.hadamard_scale(), tab.mse_bytes(), tab.rotation_t(), tab.head_dim()};
  launch_encode_any(tab, IoType::kF32, a, detail::BlockDst{out, n, tab.code_bytes(), 4}, detail::stream_of(stream));
}

void tq_prod_append(const QjlTables& kcodec, const void* x, int batch, int num_new, int num_kv_heads,
                    const std::int32_t* start, const PageTable& table, PagedPool pool, Stream stream, IoType x_type,
                    std::int32_t* bad) {
  const char* where = "cuda::tq_prod_append";
  check_arg(kcodec.method() == Method::kTurboProd, where, "kcodec.method", method_name(kcodec.method()),
            "must be tq-prod");
  long long total = 0;
  const detail::PagedDst dst =
      detail::paged_dst(where, x, batch, num_new, num_kv_heads, start, table, pool, x_type, kcodec.code_bytes(), 4,
                        "must equal tq_prod_page_stride(page_size, kcodec.code_bytes())", total);
  if (total == 0) return;
  const ProdArgs a{x, static_cast<std::size_t>(total), kcodec.rows(), kcodec.sketch_t(), kcodec.signs(),
                   kcodec.centroids(), kcodec.boundaries(), kcodec.hadamard_scale(), kcodec.mse_bytes(),
                   kcodec.rotation_t(), kcodec.head_dim()};
  const cudaStream_t s = detail::stream_of(stream);
  detail::flag_bad_vectors(x, x_type, total, kcodec.head_dim(), bad, s);
  launch_encode_any(kcodec, x_type, a, dst, s);
}

void tq_prod_prepare_query(const QjlTables& tab, const float* q, int num_queries, float* state, Stream stream) {
  const char* where = "cuda::tq_prod_prepare_query";
  check_arg(tab.method() == Method::kTurboProd, where, "tab.method", method_name(tab.method()), "must be tq-prod");
  check_arg(num_queries >= 0 && num_queries <= (1 << 30), where, "num_queries", num_queries, "must be in 0..2^30");
  if (num_queries == 0) return;
  check_arg(q != nullptr, where, "q", static_cast<const void*>(q), "must be a non-null device pointer");
  check_arg(state != nullptr, where, "state", static_cast<const void*>(state), "must be a non-null device pointer");
  const int d = tab.head_dim();
  tq_prod_prepare_kernel<<<num_queries, 256, 2 * sizeof(double) * d, detail::stream_of(stream)>>>(
      q, d, tab.rows(), tab.signs(), static_cast<double>(tab.hadamard_scale()), tab.rotation_t(), tab.sketch_t(),
      state);
  TKV_CHECK_LAUNCH();
}

void tq_prod_scores(const QjlTables& tab, const float* state, int num_queries, const std::uint8_t* block,
                    std::size_t n, std::size_t t0, std::size_t t1, float* out, Stream stream) {
  const char* where = "cuda::tq_prod_scores";
  check_arg(tab.method() == Method::kTurboProd, where, "tab.method", method_name(tab.method()), "must be tq-prod");
  check_arg(num_queries >= 0 && num_queries <= 65535, where, "num_queries", num_queries, "must be in 0..65535");
  check_arg(t0 <= t1, where, "t0", t0, "must be <= t1");
  check_arg(t1 <= n, where, "t1", t1, "must be <= n");
  check_arg(t1 - t0 <= (static_cast<std::size_t>(1) << 36), where, "t1 - t0", t1 - t0, "must be <= 2^36");
  if (num_queries == 0 || t1 == t0) return;
  check_arg(state != nullptr, where, "state", static_cast<const void*>(state), "must be a non-null device pointer");
  check_arg(block != nullptr, where, "block", static_cast<const void*>(block), "must be a non-null device pointer");
  check_arg(out != nullptr, where, "out", static_cast<const void*>(out), "must be a non-null device pointer");
  const int d = tab.head_dim(), m = tab.rows();
  const dim3 grid(static_cast<unsigned>((t1 - t0 + kScoreThreads - 1) / kScoreThreads),
                  static_cast<unsigned>(num_queries));
  const std::size_t smem = sizeof(float) * (d + m);
  const cudaStream_t s = detail::stream_of(stream);
  const float kappa = static_cast<float>(tab.kappa());
  switch (tab.mse_bits()) {
#define TKV_PROD_SCORES(MB)                                                                                    \
  case MB:                                                                                                     \
    tq_prod_scores_kernel<MB><<<grid, kScoreThreads, smem, s>>>(state, d, m, tab.centroids(), block, n, t0, t1, \
                                                                tab.code_bytes(), tab.mse_bytes(), kappa, out); \
    break;
    TKV_PROD_SCORES(0)
    TKV_PROD_SCORES(1)
    TKV_PROD_SCORES(2)
    TKV_PROD_SCORES(3)
#undef TKV_PROD_SCORES
  }
  TKV_CHECK_LAUNCH();
}

std::size_t tq_prod_decode_workspace_bytes(const ProdDecodeArgs& args, int head_dim) {
  return partial_bytes("cuda::tq_prod_decode_workspace_bytes", args, head_dim);
}

void tq_prod_decode(const QjlTables& ktab, const TqMseTables& vtab, const ProdDecodeArgs& a, Stream stream) {
  const char* where = "cuda::tq_prod_decode";
  check_arg(ktab.method() == Method::kTurboProd, where, "ktab.method", method_name(ktab.method()), "must be tq-prod");
  check_arg(ktab.rows() <= kMaxDecRows, where, "ktab.rows", ktab.rows(), "must be <= 2048 for the decode kernel");
  check_arg(vtab.head_dim() == ktab.head_dim(), where, "vtab.head_dim", vtab.head_dim(), "must equal ktab.head_dim");
  check_arg(!vtab.split(), where, "vtab.bits", vtab.nominal_bits(), "must be an integer width (1..4) here");
  const long long rows = check_decode_args(where, a);
  if (rows == 0) return;
  const int d = ktab.head_dim(), m = ktab.rows(), splits = decode_splits(a);
  DecArgs k{a.q, a.keys, a.values, a.seq_lens, a.num_heads, a.num_heads / a.num_kv_heads, a.num_kv_heads, d, m,
            ktab.mse_bits(), vtab.bits(), a.capacity, splits, ktab.code_bytes(), ktab.mse_bytes(),
            ktab.block_bytes(static_cast<std::size_t>(a.capacity)), vtab.code_bytes(),
            static_cast<std::size_t>(a.capacity) * (vtab.code_bytes() + 2), ktab.signs(), ktab.centroids(),
            ktab.sketch_t(), ktab.hadamard_scale(), static_cast<float>(ktab.kappa()),
            a.softmax_scale * 1.4426950408889634f, vtab.signs(), vtab.centroids(), vtab.hadamard_scale(),
            static_cast<float*>(a.workspace), ktab.rotation_t()};
  const cudaStream_t s = detail::stream_of(stream);
  const std::size_t smem = sizeof(float) * (2 * d + m + kDecTile + 16 + 8 + 32);
  prod_decode_split_kernel<<<dim3(splits, static_cast<unsigned>(rows)), kDecThreads, smem, s>>>(k);
  TKV_CHECK_LAUNCH();
  merge_rotate_kernel<<<static_cast<unsigned>(rows), kDecThreads, 2 * sizeof(float) * d, s>>>(
      k.ws, splits, static_cast<int>(rows), d, vtab.signs(), vtab.hadamard_scale(), vtab.rotation(), nullptr, a.out);
  TKV_CHECK_LAUNCH();
}

}  // namespace turbokv::cuda
