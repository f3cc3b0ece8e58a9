// TurboQuant-MSE append: fused randomized Hadamard + quantize + pack, written
// straight into pages. One warp per vector; lane l holds elements
// [l * D/32, (l + 1) * D/32). The float operations are the reference's
// (formats.h, rotation.h), each an explicitly rounded intrinsic (no FMA):
//   y = x * sign; FWHT stages h = 1, 2, 4, ... ((a, b) -> (a + b, a - b));
//   y *= float(1/sqrt(D)); sumsq in 8 interleaved lanes + the fixed tree;
//   norm = sqrt(sum) (IEEE); t = y * (1 / norm) (IEEE); code = #boundaries < t.
#include "common.cuh"
#include "turbokv/error.h"
#include "turbokv/formats.h"

namespace turbokv::cuda {
namespace {

constexpr int kWarps = 8;

struct AppendArgs {
  const float* x;
  int total;  // batch * num_new * num_kv_heads vectors
  int num_new, num_kv_heads;
  const std::int32_t* start;
  const std::int32_t* pages;
  int max_pages, page_shift;
  std::uint8_t* pool;
  std::size_t stride;
  const float* signs;
  const float* boundaries;
  float scale;
};

template <int D, int B>
__global__ void __launch_bounds__(kWarps * 32) append_kernel(const AppendArgs a) {
  constexpr int EPL = D / 32;
  constexpr int CB = D * B / 8;
  constexpr int NB = (1 << B) - 1;
  __shared__ float s_sign[D];
  __shared__ float s_bnd[16];
  __shared__ float s_x[kWarps][D];
  __shared__ std::uint8_t s_c[kWarps][D];
  for (int i = threadIdx.x; i < D; i += blockDim.x) s_sign[i] = a.signs[i];
  if (threadIdx.x < 16) s_bnd[threadIdx.x] = threadIdx.x < NB ? a.boundaries[threadIdx.x] : INFINITY;
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float bnd[NB];  // the codebook's boundaries in registers (uniform): no shared-memory traffic per element
#pragma unroll
  for (int k = 0; k < NB; ++k) bnd[k] = s_bnd[k];
  auto load_x = [&](int v, float* x) {
    const float* xr = a.x + static_cast<std::size_t>(v) * D + lane * EPL;
    if constexpr (EPL % 4 == 0) {
#pragma unroll
      for (int e = 0; e < EPL; e += 4) {
        const float4 f = __ldcs(reinterpret_cast<const float4*>(xr + e));
        x[e] = f.x, x[e + 1] = f.y, x[e + 2] = f.z, x[e + 3] = f.w;
      }
    } else {
      const float2 f = __ldcs(reinterpret_cast<const float2*>(xr));
      x[0] = f.x, x[1] = f.y;
    }
  };
  // Software pipeline: the next vector's input is loaded while this one is encoded.
  const int step = gridDim.x * kWarps;
  float xn[EPL];
  int v = blockIdx.x * kWarps + warp;
  if (v < a.total) load_x(v, xn);
  for (; v < a.total; v += step) {
    float x[EPL];
#pragma unroll
    for (int e = 0; e < EPL; ++e) x[e] = xn[e];
    if (v + step < a.total) load_x(v + step, xn);
    // Destination block (loads issued now, used at the end).
    const int g = v % a.num_kv_heads;
    const int j = (v / a.num_kv_heads) % a.num_new;
    const int b = v / (a.num_kv_heads * a.num_new);
    const int pos = __ldg(a.start + b) + j;
    const int page = __ldg(a.pages + static_cast<std::size_t>(b) * a.max_pages + (pos >> a.page_shift));
    const int off = pos & ((1 << a.page_shift) - 1);
    float y[EPL];
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
      s_x[warp][lane * EPL + e] = x[e];
      y[e] = __fmul_rn(x[e], s_sign[lane * EPL + e]);
    }
    // FWHT, in-register stages then cross-lane stages.
#pragma unroll
    for (int h = 1; h < EPL; h <<= 1)
#pragma unroll
      for (int e = 0; e < EPL; ++e)
        if ((e & h) == 0) {
          const float p = y[e], q = y[e + h];
          y[e] = __fadd_rn(p, q);
          y[e + h] = __fsub_rn(p, q);
        }
#pragma unroll
    for (int h = EPL; h < D; h <<= 1) {
      const int lo = h / EPL;
      const bool upper = (lane & lo) != 0;
#pragma unroll
      for (int e = 0; e < EPL; ++e) {
        const float o = __shfl_xor_sync(0xffffffffu, y[e], lo);
        y[e] = upper ? __fsub_rn(o, y[e]) : __fadd_rn(y[e], o);
      }
    }
#pragma unroll
    for (int e = 0; e < EPL; ++e) y[e] = __fmul_rn(y[e], a.scale);
    // Sum of squares: lane k < 8 owns acc[k] over i = k, k + 8, ... ascending.
    __syncwarp();
    float acc = 0.0f;
    if (lane < 8) {
      float sq[D / 8];
#pragma unroll
      for (int m = 0; m < D / 8; ++m) sq[m] = s_x[warp][lane + 8 * m];
#pragma unroll
      for (int m = 0; m < D / 8; ++m) acc = __fadd_rn(acc, __fmul_rn(sq[m], sq[m]));
    }
    float av[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) av[k] = __shfl_sync(0xffffffffu, acc, k);
    const float sum = __fadd_rn(__fadd_rn(__fadd_rn(av[0], av[4]), __fadd_rn(av[2], av[6])),
                                __fadd_rn(__fadd_rn(av[1], av[5]), __fadd_rn(av[3], av[7])));
    const float norm = __fsqrt_rn(sum);
    const float inv = norm > 0.0f ? __fdiv_rn(1.0f, norm) : 0.0f;
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
      const float t = __fmul_rn(y[e], inv);
      int idx = 0;  // number of boundaries strictly below t
#pragma unroll
      for (int k = 0; k < NB; ++k) idx += t > bnd[k] ? 1 : 0;
      s_c[warp][lane * EPL + e] = static_cast<std::uint8_t>(idx);
    }
    __syncwarp();
    std::uint8_t* blk = a.pool + (static_cast<std::size_t>(page) * a.num_kv_heads + g) * a.stride;
    // Lane l writes 32-bit word l of the token's code bytes (CB is a multiple of 8).
    for (int w = lane; w * 4 < CB; w += 32) {
      const int bit0 = 32 * w;
      const int i0 = bit0 / B;
      const int i1 = min(D, (bit0 + 32 + B - 1) / B);
      std::uint32_t word = 0;
      for (int i = i0; i < i1; ++i) {
        const int o = i * B - bit0;
        const std::uint32_t c = s_c[warp][i];
        word |= o >= 0 ? (c << o) : (c >> -o);
      }
      *reinterpret_cast<std::uint32_t*>(blk + static_cast<std::size_t>(off) * CB + 4 * w) = word;
    }
    if (lane == 0)
      *reinterpret_cast<std::uint16_t*>(blk + (static_cast<std::size_t>(1) << a.page_shift) * CB + 2 * off) =
          float_to_half(norm);
    __syncwarp();
  }
}

template <int D, int B>
void launch_append(const AppendArgs& a, cudaStream_t s) {
  const int blocks_needed = (a.total + kWarps - 1) / kWarps;
  const int cap = detail::num_sms() * 8;
  append_kernel<D, B><<<blocks_needed < cap ? blocks_needed : cap, kWarps * 32, 0, s>>>(a);
  TKV_CHECK_LAUNCH();
}

template <int D>
void launch_append_d(int bits, const AppendArgs& a, cudaStream_t s) {
  switch (bits) {
    case 1: return launch_append<D, 1>(a, s);
    case 2: return launch_append<D, 2>(a, s);
    case 3: return launch_append<D, 3>(a, s);
    case 4: return launch_append<D, 4>(a, s);
  }
}

}  // namespace

void tq_mse_append(const TqMseTables& codec, const float* x, int batch, int num_new, int num_kv_heads,
                   const std::int32_t* start, const PageTable& table, PagedPool pool, Stream stream) {
  const char* where = "cuda::tq_mse_append";
  check_arg(batch >= 0 && num_new >= 0, where, "batch/num_new", batch, "must be >= 0");
  check_arg(num_kv_heads > 0, where, "num_kv_heads", num_kv_heads, "must be positive");
  check_arg(table.page_size >= 1 && (table.page_size & (table.page_size - 1)) == 0, where, "page_size",
            table.page_size, "must be a power of two");
  check_arg(pool.page_stride == tq_page_stride(table.page_size, codec.code_bytes()), where, "pool.page_stride",
            pool.page_stride, "must equal tq_page_stride(page_size, code_bytes)");
  const long long total = 1LL * batch * num_new * num_kv_heads;
  check_arg(total < (1LL << 31), where, "batch*num_new*num_kv_heads", total, "must be < 2^31");
  if (total == 0) return;
  check_arg(x && start && table.pages && pool.data, where, "pointers", 0, "must be non-null device pointers");
  AppendArgs a{x, static_cast<int>(total), num_new, num_kv_heads, start, table.pages, table.max_pages,
               __builtin_ctz(static_cast<unsigned>(table.page_size)), pool.data, pool.page_stride,
               codec.signs(), codec.boundaries(), codec.hadamard_scale()};
  const cudaStream_t s = detail::stream_of(stream);
  switch (codec.head_dim()) {
    case 64: return launch_append_d<64>(codec.bits(), a, s);
    case 128: return launch_append_d<128>(codec.bits(), a, s);
    case 256: return launch_append_d<256>(codec.bits(), a, s);
  }
}

}  // namespace turbokv::cuda
