// Two-stage residual scalar quantization (RVQ, src/ref/rvq.cpp) on the GPU:
// RvqTables, encode (the reference's bytes) and a fused split-K decode
// attention on RVQ keys and values in contiguous blocks.
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
// codes go through a per-warp byte buffer into the LSB-first streams
// [stage 1 packed(D, b)][stage 2 packed(D, b)]; lane 0 stores fp16 ||x||.
//
// Decode: grid (splits, batch * num_heads), 128 threads, one token per thread
// per tile of 128 tokens (same structure as tq_prod_decode in tq_prod.cu).
#include <cmath>
#include <vector>

#include "../ref/rvq.h"
#include "qjl.cuh"
#include "splitk.cuh"
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
  const float* x;
  std::size_t n;
  const float* signs;
  const float* c1;
  const float* b1;
  const float* c2;
  const float* b2;
  float scale;
  std::uint8_t* out;
};

template <int D, int B>
__global__ void __launch_bounds__(kEncThreads) rvq_encode_kernel(const EncArgs a) {
  constexpr int E = D / 32;
  constexpr int K = 1 << B, NB = K - 1;
  constexpr std::size_t SB = static_cast<std::size_t>(D) * B / 8, CB = 2 * SB;
  __shared__ __align__(16) float rows[kEncWarps][D];
  __shared__ std::uint8_t codes[kEncWarps][2][D];
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float sgn[E], bnd1[NB], bnd2[NB], cen1[K];
#pragma unroll
  for (int e = 0; e < E; ++e) sgn[e] = __ldg(a.signs + lane * E + e);
#pragma unroll
  for (int k = 0; k < NB; ++k) bnd1[k] = __ldg(a.b1 + k), bnd2[k] = __ldg(a.b2 + k);
#pragma unroll
  for (int k = 0; k < K; ++k) cen1[k] = __ldg(a.c1 + k);
  float* row = rows[w];
  for (std::size_t t = static_cast<std::size_t>(blockIdx.x) * kEncWarps + w; t < a.n;
       t += static_cast<std::size_t>(gridDim.x) * kEncWarps) {  // warp-uniform
    const float* xt = a.x + t * D;
    float y[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const float v = __ldg(xt + lane * E + e);
      row[lane * E + e] = v;
      y[e] = __fmul_rn(v, sgn[e]);
    }
    __syncwarp();
    const float sum = sumsq_row(row, D);
    warp_fwht<E>(y);
    const float norm = __fsqrt_rn(sum);
    const float inv = norm > 0.0f ? __fdiv_rn(1.0f, norm) : 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const float u = __fmul_rn(__fmul_rn(y[e], a.scale), inv);
      const unsigned k1 = count_below(u, bnd1);
      const float r = __fsub_rn(u, select_centroid(k1, cen1));
      codes[w][0][lane * E + e] = static_cast<std::uint8_t>(k1);
      codes[w][1][lane * E + e] = static_cast<std::uint8_t>(count_below(r, bnd2));
    }
    __syncwarp();
    std::uint8_t* tok = a.out + t * CB;
    warp_pack_n(codes[w][0], D, B, tok);
    warp_pack_n(codes[w][1], D, B, tok + SB);
    if (lane == 0) store_half_le(a.out + a.n * CB + 2 * t, norm);
    __syncwarp();  // row and codes are rewritten for the next token
  }
}

template <int D, int B>
void launch_encode(const EncArgs& a, cudaStream_t s) {
  rvq_encode_kernel<D, B><<<detail::capped_grid(a.n, kEncWarps), kEncThreads, 0, s>>>(a);
  TKV_CHECK_LAUNCH();
}

template <int D>
void launch_encode_d(int bits, const EncArgs& a, cudaStream_t s) {
  switch (bits) {
    case 1: return launch_encode<D, 1>(a, s);
    case 2: return launch_encode<D, 2>(a, s);
    case 3: return launch_encode<D, 3>(a, s);
    case 4: return launch_encode<D, 4>(a, s);
  }
}

// ---- Fused split-K decode: RVQ keys, RVQ values (contiguous blocks).


struct DecArgs {
  const float* q;
  const std::uint8_t* keys;
  const std::uint8_t* values;
  const std::int32_t* lens;
  int num_heads, group, num_kv_heads, d, kb, vb, capacity, splits;
  std::size_t ksb, kstride, vsb, vstride;  // stage bytes and block bytes
  const float* ksigns;
  const float* kc1;
  const float* kc2;
  float kscale, logit_scale;  // logit_scale = softmax_scale * log2(e)
  const float* vc1;
  const float* vc2;
  float* ws;  // [splits][batch * num_heads][d + 2]: m, l, acc[d]
};



__global__ void __launch_bounds__(kDecThreads) rvq_decode_split_kernel(const DecArgs a) {
  extern __shared__ float sh[];
  float* rq = sh;               // [d]
  float* pw = rq + a.d;         // [kDecTile] softmax weight * value norm
  float* kc1 = pw + kDecTile;   // [16]
  float* kc2 = kc1 + 16;        // [16]
  float* vc1 = kc2 + 16;        // [16]
  float* vc2 = vc1 + 16;        // [16]
  float* red = vc2 + 16;        // [32]
  const int bh = blockIdx.y, b = bh / a.num_heads, h = bh % a.num_heads, g = h / a.group;
  const int d = a.d;
  const int len = __ldg(a.lens + b);
  const int chunk = (len + a.splits - 1) / a.splits;
  const int s0 = min(len, static_cast<int>(blockIdx.x) * chunk), s1 = min(len, s0 + chunk);
  for (int j = threadIdx.x; j < d; j += blockDim.x) rq[j] = __ldg(a.q + static_cast<std::size_t>(bh) * d + j);
  if (threadIdx.x < (1 << a.kb)) {
    kc1[threadIdx.x] = __ldg(a.kc1 + threadIdx.x);
    kc2[threadIdx.x] = __ldg(a.kc2 + threadIdx.x);
  }
  if (threadIdx.x < (1 << a.vb)) {
    vc1[threadIdx.x] = __ldg(a.vc1 + threadIdx.x);
    vc2[threadIdx.x] = __ldg(a.vc2 + threadIdx.x);
  }
  __syncthreads();
  rotate_shared(rq, d, a.ksigns, a.kscale, false);
  const std::uint8_t* kbk = a.keys + (static_cast<std::size_t>(b) * a.num_kv_heads + g) * a.kstride;
  const std::uint8_t* vbk = a.values + (static_cast<std::size_t>(b) * a.num_kv_heads + g) * a.vstride;
  const std::size_t kcb = 2 * a.ksb, vcb = 2 * a.vsb;
  float mrun = -INFINITY, lrun = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
  const int i0 = threadIdx.x, i1 = threadIdx.x + kDecThreads;
  for (int t0 = s0; t0 < s1; t0 += kDecTile) {
    const int t = t0 + threadIdx.x;
    float logit = -INFINITY, vnorm = 0.0f;
    if (t < s1) {
      const std::uint8_t* tc = kbk + static_cast<std::size_t>(t) * kcb;
      float dot0 = 0.0f, dot1 = 0.0f;  // even / odd coordinates
      for (int i = 0; i < d; i += 2) {
        const float y0 = __fadd_rn(kc1[get_code(tc, i, a.kb)], kc2[get_code(tc + a.ksb, i, a.kb)]);
        const float y1 = __fadd_rn(kc1[get_code(tc, i + 1, a.kb)], kc2[get_code(tc + a.ksb, i + 1, a.kb)]);
        dot0 = __fmaf_rn(rq[i], y0, dot0);
        dot1 = __fmaf_rn(rq[i + 1], y1, dot1);
      }
      const float knorm = load_half_le(kbk + static_cast<std::size_t>(a.capacity) * kcb + 2 * static_cast<std::size_t>(t));
      logit = knorm * (dot0 + dot1) * a.logit_scale;
      vnorm = load_half_le(vbk + static_cast<std::size_t>(a.capacity) * vcb + 2 * static_cast<std::size_t>(t));
    }
    softmax_tile(logit, vnorm, t < s1, mrun, lrun, acc0, acc1, pw, red);  // publishes pw
    const int nt = min(kDecTile, s1 - t0);
    for (int tt = 0; tt < nt; ++tt) {
      const std::uint8_t* vc = vbk + static_cast<std::size_t>(t0 + tt) * vcb;
      const float w = pw[tt];
      if (i0 < d)
        acc0 = __fmaf_rn(w, __fadd_rn(vc1[get_code(vc, i0, a.vb)], vc2[get_code(vc + a.vsb, i0, a.vb)]), acc0);
      if (i1 < d)
        acc1 = __fmaf_rn(w, __fadd_rn(vc1[get_code(vc, i1, a.vb)], vc2[get_code(vc + a.vsb, i1, a.vb)]), acc1);
    }
    __syncthreads();  // pw is rewritten by the next tile
  }
  store_partial(a.ws, bh, d, mrun, lrun, acc0, acc1, i0, i1);
}
}  // namespace

RvqTables::RvqTables(const CodecConfig& cfg) {
  const char* where = "cuda::RvqTables";
  check_arg(cfg.method == Method::kRvq, where, "method", method_name(cfg.method), "must be rvq");
  check_arg(!cfg.center, where, "center", cfg.center, "must be off on the GPU");
  check_arg(cfg.bits == 1 || cfg.bits == 2 || cfg.bits == 3 || cfg.bits == 4, where, "bits", cfg.bits,
            "must be an integer width 1..4 for rvq");
  check_arg(cfg.head_dim == 64 || cfg.head_dim == 128 || cfg.head_dim == 256, where, "head_dim", cfg.head_dim,
            "must be 64, 128 or 256 for rvq on the GPU");
  check_arg(cfg.rotation == RotationKind::kHadamard, where, "rotation", rotation_name(cfg.rotation),
            "must be hadamard for rvq on the GPU");
  head_dim_ = cfg.head_dim;
  bits_ = static_cast<int>(cfg.bits);
  const ref::Rvq r(cfg);  // the reference codec's own rotation and codebooks
  scale_ = Rotation::hadamard_scale(head_dim_);
  signs_ = detail::upload(r.rotation().signs());
  c1_ = detail::upload(r.stage1_codebook().centroids);
  b1_ = detail::upload(r.stage1_codebook().boundaries);
  c2_ = detail::upload(r.stage2_codebook().centroids);
  b2_ = detail::upload(r.stage2_codebook().boundaries);
}

void rvq_encode(const RvqTables& tab, const float* x, std::size_t n, std::uint8_t* out, Stream stream) {
  if (!detail::check_block_io("cuda::rvq_encode", n, x, "x", out)) return;
  const EncArgs a{x, n, tab.signs(), tab.centroids1(), tab.boundaries1(), tab.centroids2(), tab.boundaries2(),
                  tab.hadamard_scale(), out};
  const cudaStream_t s = detail::stream_of(stream);
  switch (tab.head_dim()) {
    case 64: return launch_encode_d<64>(tab.bits(), a, s);
    case 128: return launch_encode_d<128>(tab.bits(), a, s);
    case 256: return launch_encode_d<256>(tab.bits(), a, s);
  }
}

std::size_t rvq_decode_workspace_bytes(const VqDecodeArgs& args, int head_dim) {
  return partial_bytes("cuda::rvq_decode_workspace_bytes", args, head_dim);
}

void rvq_decode(const RvqTables& ktab, const RvqTables& vtab, const VqDecodeArgs& a, Stream stream) {
  const char* where = "cuda::rvq_decode";
  check_arg(vtab.head_dim() == ktab.head_dim(), where, "vtab.head_dim", vtab.head_dim(), "must equal ktab.head_dim");
  const long long rows = check_decode_args(where, a);
  if (rows == 0) return;
  const int d = ktab.head_dim(), splits = decode_splits(a);
  const DecArgs k{a.q, a.keys, a.values, a.seq_lens, a.num_heads, a.num_heads / a.num_kv_heads, a.num_kv_heads, d,
                  ktab.bits(), vtab.bits(), a.capacity, splits, ktab.stage_bytes(),
                  ktab.block_bytes(static_cast<std::size_t>(a.capacity)), vtab.stage_bytes(),
                  vtab.block_bytes(static_cast<std::size_t>(a.capacity)), ktab.signs(), ktab.centroids1(),
                  ktab.centroids2(), ktab.hadamard_scale(), a.softmax_scale * 1.4426950408889634f, vtab.centroids1(),
                  vtab.centroids2(), static_cast<float*>(a.workspace)};
  const cudaStream_t s = detail::stream_of(stream);
  const std::size_t smem = sizeof(float) * (d + kDecTile + 4 * 16 + 32);
  rvq_decode_split_kernel<<<dim3(splits, static_cast<unsigned>(rows)), kDecThreads, smem, s>>>(k);
  TKV_CHECK_LAUNCH();
  merge_rotate_kernel<<<static_cast<unsigned>(rows), kDecThreads, sizeof(float) * d, s>>>(
      k.ws, splits, static_cast<int>(rows), d, vtab.signs(), vtab.hadamard_scale(), nullptr, a.out);
  TKV_CHECK_LAUNCH();
}

}  // namespace turbokv::cuda
