// QJL on the GPU (arXiv 2406.03482): QjlTables (shared with TurboQuant-Prod),
// encode into a block or pages (sign bits of S x + fp16 ||x||, the reference's bytes), query
// preparation (S q in fp64), scores (kappa * ||k|| * <S q, signs>, fp32), and the instances of the
// fp16 tensor-core decode for QJL keys (decode_h16.cuh, H16Layout::QJL; qjl_paged_decode is in decode.cu
// with the other paged decodes).
#include <cmath>
#include <type_traits>
#include <vector>

#include "../ref/internal.h"
#include "decode_h16.cuh"
#include "qjl.cuh"
#include "turbokv/codebook.h"
#include "turbokv/cuda_qjl.h"
#include "turbokv/error.h"
#include "turbokv/formats.h"
#include "turbokv/rotation.h"

namespace turbokv::cuda {
namespace {

using namespace detail::qjl;

// Norm of every vector (sumsq_spec order, one warp per vector), then the sketch signs; vector v's sign
// bytes and fp16 norm go through dst (detail::BlockDst: qjl_encode's block; detail::PagedDst: qjl_append's
// pages). XT: the input type (fp16 / bf16 widened exactly on load into the tile).
template <class XT, class Dst>
__global__ void __launch_bounds__(kThreads) qjl_encode_kernel(const void* __restrict__ x, std::size_t n, int d,
                                                              int m, const float* __restrict__ st, const Dst dst) {
  extern __shared__ __align__(16) float smem[];
  float* xs = smem;
  float* sst = smem + kVecs * tile_ld(d);
  const std::size_t v0 = static_cast<std::size_t>(blockIdx.x) * kVecs;
  const int nv = n - v0 < static_cast<std::size_t>(kVecs) ? static_cast<int>(n - v0) : kVecs;
  load_tile<XT>(x, v0, nv, d, xs);
  __syncthreads();
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int v = 0; v < kVecsPerWarp; ++v) {
    const int vv = w * kVecsPerWarp + v;
    if (vv >= nv) break;  // warp-uniform
    const float norm = __fsqrt_rn(sumsq_row(xs + vv * tile_ld(d), d));
    if (lane == 0) store_half_le(dst.at(v0 + vv).scalars, norm);
  }
  sketch_signs(xs, nv, d, m, st, sst, dst, v0, 0);
}

template <class Dst>
void launch_qjl_encode(const QjlTables& tab, IoType x_type, const void* x, std::size_t n, const Dst& dst,
                       cudaStream_t s) {
  const int d = tab.head_dim();
  const std::size_t smem = smem_bytes(d, 0);
  const std::size_t grid = (n + kVecs - 1) / kVecs;
  detail::with_io_type(x_type, [&](auto xt_c) {
    auto kernel = qjl_encode_kernel<typename decltype(xt_c)::type, Dst>;
    allow_smem(kernel, smem);
    kernel<<<static_cast<unsigned>(grid), kThreads, smem, s>>>(x, n, d, tab.rows(), tab.sketch_t(), dst);
  });
  TKV_CHECK_LAUNCH();
}

// state[q][i] = sum_j S[i][j] q_j in fp64 (ascending j), stored fp32. One block per query.
__global__ void qjl_prepare_kernel(const float* __restrict__ q, int d, int m, const float* __restrict__ st,
                                   float* __restrict__ state) {
  extern __shared__ double qd[];
  const float* qq = q + static_cast<std::size_t>(blockIdx.x) * d;
  for (int j = threadIdx.x; j < d; j += blockDim.x) qd[j] = qq[j];
  __syncthreads();
  for (int i = threadIdx.x; i < m; i += blockDim.x) {
    double acc = 0;
    for (int j = 0; j < d; ++j) acc = __fma_rn(static_cast<double>(__ldg(st + static_cast<std::size_t>(j) * m + i)), qd[j], acc);
    state[static_cast<std::size_t>(blockIdx.x) * m + i] = static_cast<float>(acc);
  }
}

constexpr int kScoreThreads = 128;

// One thread per token; grid (token tiles, queries); S q of the block's query in shared memory.
__global__ void __launch_bounds__(kScoreThreads) qjl_scores_kernel(const float* __restrict__ state, int m,
                                                                   const std::uint8_t* __restrict__ block,
                                                                   std::size_t n, std::size_t t0, std::size_t t1,
                                                                   std::size_t code_bytes, float kappa,
                                                                   float* __restrict__ out) {
  extern __shared__ float sq[];
  const float* st = state + static_cast<std::size_t>(blockIdx.y) * m;
  for (int i = threadIdx.x; i < m; i += blockDim.x) sq[i] = st[i];
  __syncthreads();
  const std::size_t t = t0 + static_cast<std::size_t>(blockIdx.x) * kScoreThreads + threadIdx.x;
  if (t >= t1) return;
  const float s = signed_sum(sq, block + t * code_bytes, m);
  const float norm = load_half_le(block + n * code_bytes + 2 * t);
  out[static_cast<std::size_t>(blockIdx.y) * (t1 - t0) + (t - t0)] = __fmul_rn(__fmul_rn(kappa, norm), s);
}

}  // namespace

QjlTables::QjlTables(const CodecConfig& cfg) {
  const char* where = "cuda::QjlTables";
  check_arg(cfg.method == Method::kQjl || cfg.method == Method::kTurboProd, where, "method",
            method_name(cfg.method), "must be qjl or tq-prod");
  check_arg(!cfg.center, where, "center", cfg.center, "must be off on the GPU");
  check_arg(cfg.qjl_rows >= 0 && cfg.qjl_rows % 8 == 0 && cfg.qjl_rows <= 8192, where, "qjl_rows", cfg.qjl_rows,
            "must be 0 (= head_dim) or a multiple of 8 up to 8192");
  method_ = cfg.method;
  if (method_ == Method::kQjl) {
    check_arg(cfg.bits == 1, where, "bits", cfg.bits, "must be 1 for qjl");
    check_arg(cfg.head_dim >= 8 && cfg.head_dim <= 1024 && cfg.head_dim % 8 == 0, where, "head_dim", cfg.head_dim,
              "must be a multiple of 8 in 8..1024 for qjl");
  } else {
    check_arg(cfg.bits == 1 || cfg.bits == 2 || cfg.bits == 3 || cfg.bits == 4, where, "bits", cfg.bits,
              "must be an integer width 1..4 for tq-prod on the GPU");
    check_arg(cfg.head_dim >= 64 && cfg.head_dim <= 256 && cfg.head_dim % 16 == 0, where, "head_dim", cfg.head_dim,
              "must be a multiple of 16 in 64..256 for tq-prod on the GPU");
    check_arg(cfg.rotation == RotationKind::kHadamard, where, "rotation", rotation_name(cfg.rotation),
              "must be hadamard for tq-prod on the GPU");
  }
  head_dim_ = cfg.head_dim;
  rows_ = cfg.qjl_rows ? cfg.qjl_rows : cfg.head_dim;
  bits_ = static_cast<int>(cfg.bits);
  mse_bits_ = method_ == Method::kQjl ? 0 : bits_ - 1;
  // The reference codecs' objects: Sketch(m, d, orthogonal, seed ^ 0x51); for
  // tq-prod RotatedScalar(d, b - 1, rotation, codebook, seed).
  const ref::Sketch sk(rows_, head_dim_, cfg.qjl_orthogonal, cfg.seed ^ 0x51ull);
  kappa_ = sk.kappa;
  sketch_ = detail::upload(sk.s);
  sketch_t_ = detail::upload(sk.st);
  if (method_ == Method::kTurboProd) {
    const Rotation rot(head_dim_, cfg.rotation, cfg.seed);
    scale_ = detail::upload_rotation(rot, signs_, rotation_, rotation_t_);  // dense where not a power of two
    if (mse_bits_ > 0) {
      const ScalarCodebook& cb = lloyd_max_codebook(head_dim_, mse_bits_, cfg.codebook);
      centroids_ = detail::upload(cb.centroids);
      boundaries_ = detail::upload(cb.boundaries);
    }
  }
}

void qjl_encode(const QjlTables& tab, const float* x, std::size_t n, std::uint8_t* out, Stream stream) {
  const char* where = "cuda::qjl_encode";
  check_arg(tab.method() == Method::kQjl, where, "tab.method", method_name(tab.method()), "must be qjl");
  if (!detail::check_block_io(where, n, x, "x", out)) return;
  launch_qjl_encode(tab, IoType::kF32, x, n, detail::BlockDst{out, n, tab.code_bytes(), 2}, detail::stream_of(stream));
}

void qjl_append(const QjlTables& kcodec, const void* x, int batch, int num_new, int num_kv_heads,
                const std::int32_t* start, const PageTable& table, PagedPool pool, Stream stream, IoType x_type,
                std::int32_t* bad) {
  const char* where = "cuda::qjl_append";
  check_arg(kcodec.method() == Method::kQjl, where, "kcodec.method", method_name(kcodec.method()), "must be qjl");
  long long total = 0;
  const detail::PagedDst dst =
      detail::paged_dst(where, x, batch, num_new, num_kv_heads, start, table, pool, x_type, kcodec.code_bytes(), 2,
                        "must equal kcodec.page_stride(page_size)", total);
  if (total == 0) return;
  const cudaStream_t s = detail::stream_of(stream);
  detail::flag_bad_vectors(x, x_type, total, kcodec.head_dim(), bad, s);
  launch_qjl_encode(kcodec, x_type, x, static_cast<std::size_t>(total), dst, s);
}

void qjl_prepare_query(const QjlTables& tab, const float* q, int num_queries, float* state, Stream stream) {
  const char* where = "cuda::qjl_prepare_query";
  check_arg(tab.method() == Method::kQjl, where, "tab.method", method_name(tab.method()), "must be qjl");
  check_arg(num_queries >= 0 && num_queries <= (1 << 30), where, "num_queries", num_queries, "must be in 0..2^30");
  if (num_queries == 0) return;
  check_arg(q != nullptr, where, "q", static_cast<const void*>(q), "must be a non-null device pointer");
  check_arg(state != nullptr, where, "state", static_cast<const void*>(state), "must be a non-null device pointer");
  const int d = tab.head_dim();
  qjl_prepare_kernel<<<num_queries, 256, sizeof(double) * d, detail::stream_of(stream)>>>(q, d, tab.rows(),
                                                                                           tab.sketch_t(), state);
  TKV_CHECK_LAUNCH();
}

void qjl_scores(const QjlTables& tab, const float* state, int num_queries, const std::uint8_t* block, std::size_t n,
                std::size_t t0, std::size_t t1, float* out, Stream stream) {
  const char* where = "cuda::qjl_scores";
  check_arg(tab.method() == Method::kQjl, where, "tab.method", method_name(tab.method()), "must be qjl");
  check_arg(num_queries >= 0 && num_queries <= 65535, where, "num_queries", num_queries, "must be in 0..65535");
  check_arg(t0 <= t1, where, "t0", t0, "must be <= t1");
  check_arg(t1 <= n, where, "t1", t1, "must be <= n");
  check_arg(t1 - t0 <= (static_cast<std::size_t>(1) << 36), where, "t1 - t0", t1 - t0, "must be <= 2^36");
  if (num_queries == 0 || t1 == t0) return;
  check_arg(state != nullptr, where, "state", static_cast<const void*>(state), "must be a non-null device pointer");
  check_arg(block != nullptr, where, "block", static_cast<const void*>(block), "must be a non-null device pointer");
  check_arg(out != nullptr, where, "out", static_cast<const void*>(out), "must be a non-null device pointer");
  const dim3 grid(static_cast<unsigned>((t1 - t0 + kScoreThreads - 1) / kScoreThreads),
                  static_cast<unsigned>(num_queries));
  qjl_scores_kernel<<<grid, kScoreThreads, sizeof(float) * tab.rows(), detail::stream_of(stream)>>>(
      state, tab.rows(), block, n, t0, t1, tab.code_bytes(), static_cast<float>(tab.kappa()), out);
  TKV_CHECK_LAUNCH();
}

std::size_t QjlTables::page_stride(int page_size) const {
  detail::check_page_size("cuda::QjlTables::page_stride", page_size);
  return detail::token_page_stride(page_size, code_bytes(), 2 * num_scalars());
}

namespace detail {

void launch_qjl_h16(int /*kb*/, int d, int vb, const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  launch_h16_kb<0, true, kModeQjl>(d, vb, shape, s, a);
}

void launch_qjl_decode(int vb, int hpw, const LaunchShape& shape, std::size_t smem, cudaStream_t s,
                       const DecodeKernelArgs& a) {
  launch_sketch_decode_kb<0, false>(vb, hpw, shape, smem, s, a);
}

}  // namespace detail
}  // namespace turbokv::cuda
