// fp8 e4m3 baseline on the GPU: append straight into pages, byte-identical to the
// reference (src/ref/fp8.cpp, formats.h "fp8"): per token scale16 = max|x| / 448 rounded
// up to fp16 (at least 2^-24; 0 for a zero row), code_j = e4m3(x_j / scale16) (round to
// nearest even). One warp per vector, E = head_dim / 32 consecutive elements per lane;
// the max is a warp reduction of fmaxf (exact in any order), the division IEEE (no
// fast-math) and the conversions the reference's own (turbokv/half.h, host + device).
// Decode: fp8_decode in decode.cu (kernel 0: the fp16 tensor-core kernel of decode_h16.cuh with
// KB = VB = 8; kernel 1: the CUDA-core kernel with decode.cuh's F8Fmt; instances in decode_fp8.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common.cuh"
#include "turbokv/cuda.h"
#include "turbokv/error.h"
#include "turbokv/fastdiv.h"
#include "turbokv/half.h"

namespace turbokv::cuda {
namespace {

constexpr int kThreads = 256;

struct Fp8AppendArgs {
  const void* x;  // [total][D] of the kernel's XT
  int total;      // batch * num_new * num_kv_heads vectors
  FastDiv div_heads, div_new;
  const std::int32_t* start;
  const std::int32_t* pages;
  int max_pages, page_shift;
  std::uint8_t* pool;
  std::size_t stride;
};

template <int D, class XT>
__global__ void __launch_bounds__(kThreads) fp8_append_kernel(const Fp8AppendArgs a) {
  constexpr int E = D / 32;
  const int lane = threadIdx.x & 31;
  const int nwarps = gridDim.x * (kThreads / 32);
  for (int v = blockIdx.x * (kThreads / 32) + threadIdx.x / 32; v < a.total; v += nwarps) {  // warp-uniform
    const XT* src = static_cast<const XT*>(a.x) + static_cast<std::size_t>(v) * D + E * lane;
    float x[E];
#pragma unroll
    for (int e = 0; e < E; ++e) x[e] = static_cast<float>(src[e]);
    float mx = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) mx = fmaxf(mx, fabsf(x[e]));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const std::uint16_t h = mx > 0.0f ? float_to_half_up(fmaxf(mx / 448.0f, 5.9604644775390625e-08f)) : 0;
    const float sc = half_to_float(h);
    std::uint8_t c[E];
#pragma unroll
    for (int e = 0; e < E; ++e) c[e] = sc > 0.0f ? float_to_e4m3(x[e] / sc) : 0;
    const detail::AppendSlot slot =
        detail::append_slot(v, a.div_heads, a.div_new, a.start, a.pages, a.max_pages, a.page_shift);
    const int g = slot.g, page = slot.page, off = slot.off;
    std::uint8_t* blk = a.pool + (static_cast<std::size_t>(page) * a.div_heads.d + g) * a.stride;
    std::uint8_t* dst = blk + static_cast<std::size_t>(off) * D + E * lane;
    if constexpr (E == 2) {
      *reinterpret_cast<std::uint16_t*>(dst) = static_cast<std::uint16_t>(c[0] | (c[1] << 8));
    } else {
      std::uint32_t w[E / 4];
#pragma unroll
      for (int q = 0; q < E / 4; ++q)
        w[q] = c[4 * q] | (c[4 * q + 1] << 8) | (c[4 * q + 2] << 16) | (static_cast<std::uint32_t>(c[4 * q + 3]) << 24);
      if constexpr (E == 4) *reinterpret_cast<std::uint32_t*>(dst) = w[0];
      else *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
    }
    if (lane == 0)
      *reinterpret_cast<std::uint16_t*>(blk + (static_cast<std::size_t>(1) << a.page_shift) * D + 2 * off) = h;
  }
}

/// Other head_dim (multiples of 16 that are not powers of two: 80, 96, 112, ...): lane l holds the
/// elements l, l + 32, ... and stores their code bytes one by one; the same operations per element.
template <class XT>
__global__ void __launch_bounds__(kThreads) fp8_append_any_kernel(const Fp8AppendArgs a, int D) {
  constexpr int kMaxE = 8;  // D <= 256
  const int lane = threadIdx.x & 31;
  const int nwarps = gridDim.x * (kThreads / 32);
  for (int v = blockIdx.x * (kThreads / 32) + threadIdx.x / 32; v < a.total; v += nwarps) {  // warp-uniform
    const XT* src = static_cast<const XT*>(a.x) + static_cast<std::size_t>(v) * D;
    float x[kMaxE];
    float mx = 0.0f;
#pragma unroll
    for (int e = 0; e < kMaxE; ++e) {
      x[e] = lane + 32 * e < D ? static_cast<float>(src[lane + 32 * e]) : 0.0f;
      mx = fmaxf(mx, fabsf(x[e]));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const std::uint16_t h = mx > 0.0f ? float_to_half_up(fmaxf(mx / 448.0f, 5.9604644775390625e-08f)) : 0;
    const float sc = half_to_float(h);
    const detail::AppendSlot slot =
        detail::append_slot(v, a.div_heads, a.div_new, a.start, a.pages, a.max_pages, a.page_shift);
    std::uint8_t* blk = a.pool + (static_cast<std::size_t>(slot.page) * a.div_heads.d + slot.g) * a.stride;
    std::uint8_t* dst = blk + static_cast<std::size_t>(slot.off) * D;
#pragma unroll
    for (int e = 0; e < kMaxE; ++e)
      if (lane + 32 * e < D) dst[lane + 32 * e] = sc > 0.0f ? float_to_e4m3(x[e] / sc) : 0;
    if (lane == 0)
      *reinterpret_cast<std::uint16_t*>(blk + (static_cast<std::size_t>(1) << a.page_shift) * D + 2 * slot.off) = h;
  }
}

template <class XT>
void launch_fp8_append(int d, const Fp8AppendArgs& a, cudaStream_t s) {
  const int blocks_needed = (a.total + kThreads / 32 - 1) / (kThreads / 32);
  const int cap = detail::num_sms() * 8;
  const int grid = blocks_needed < cap ? blocks_needed : cap;
  switch (d) {
    case 64: fp8_append_kernel<64, XT><<<grid, kThreads, 0, s>>>(a); break;
    case 128: fp8_append_kernel<128, XT><<<grid, kThreads, 0, s>>>(a); break;
    case 256: fp8_append_kernel<256, XT><<<grid, kThreads, 0, s>>>(a); break;
    default: fp8_append_any_kernel<XT><<<grid, kThreads, 0, s>>>(a, d); break;
  }
  TKV_CHECK_LAUNCH();
}

}  // namespace

void fp8_append(int head_dim, const void* x, int batch, int num_new, int num_kv_heads, const std::int32_t* start,
                const PageTable& table, PagedPool pool, Stream stream, IoType x_type, std::int32_t* bad) {
  const char* where = "cuda::fp8_append";
  check_arg(detail::gpu_head_dim(head_dim), where, "head_dim", head_dim, "must be a multiple of 16 in 64..256");
  detail::check_page_size(where, table.page_size);  // before the stride: the error names this call
  const long long total =
      detail::check_append(where, x, batch, num_new, num_kv_heads, start, table, pool, x_type,
                           tq_page_stride(table.page_size, static_cast<std::size_t>(head_dim)),
                           "must equal tq_page_stride(page_size, head_dim)");
  if (total == 0) return;
  const Fp8AppendArgs a{x,         static_cast<int>(total), FastDiv(num_kv_heads), FastDiv(num_new), start, table.pages,
                        table.max_pages, __builtin_ctz(static_cast<unsigned>(table.page_size)), pool.data,
                        pool.page_stride};
  const cudaStream_t s = detail::stream_of(stream);
  detail::flag_bad_vectors(x, x_type, total, head_dim, bad, s);
  switch (x_type) {
    case IoType::kF32: return launch_fp8_append<float>(head_dim, a, s);
    case IoType::kF16: return launch_fp8_append<__half>(head_dim, a, s);
    case IoType::kBf16: return launch_fp8_append<__nv_bfloat16>(head_dim, a, s);
  }
}

}  // namespace turbokv::cuda
