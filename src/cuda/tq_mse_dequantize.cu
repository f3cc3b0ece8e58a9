// TurboQuant-MSE dequantize on the GPU (tq_mse_dequantize, cuda.h): paged codes back to vectors, the
// reference decode's floats exactly (src/ref/tq_mse.cpp do_decode, rotation.cpp inverse_impl):
//   y_i = c[code_i];  Hadamard parts: x = FWHT(y) (the butterflies h = 1, 2, 4, ... with the reference's
//   operands), x_i = x_i * (scale * sign_i);  dense (Haar) parts: x_j = sum_i Pi[i][j] y_i in ascending i,
//   multiply then add, each rounded;  out[channel_i] = ||x_part|| * x_i.
// Every operation is an explicitly rounded intrinsic (no contraction into fma), so fp32 output is bit-identical
// to the reference and fp16 / bf16 output is its round-to-nearest-even conversion.
//
// One warp per (sequence, token, KV head) vector, grid-stride. Power-of-two parts (head_dim 64, 128, 256 at
// integer widths; the head_dim / 2 parts of fractional widths): lane L holds part elements [E L, E L + E)
// (stored by one or two vector stores when the output is 16-byte aligned at integer widths),
// E = part size / 32, rotated by splitk.cuh's warp_fwht (the reference's butterflies and operands). Dense parts (80, 96, 112): y in
// shared memory, lane L computes x_j for j = L, L + 32, ... (Pi from global memory, cached).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common.cuh"
#include "splitk.cuh"
#include "turbokv/cuda.h"
#include "turbokv/error.h"
#include "turbokv/fastdiv.h"

namespace turbokv::cuda {
namespace {

constexpr int kWarps = 8;

struct DequantArgs {
  const std::uint8_t* pool;
  std::size_t stride;  // bytes of a (page, KV head) block
  const std::int32_t* pages;
  const std::int32_t* start;
  int max_pages, page_shift, d, total;
  FastDiv div_heads, div_tokens;
  int cb;          // code bytes per token
  int nnorm;       // fp16 scalars per token (1, or 2 for the outlier split)
  int bits0;       // part 0's width (integer widths: the width; split: b + 1)
  int bits1;       // split: part 1's width b
  int off1;        // split: byte offset of part 1's codes in a token's codes
  const float* signs;  // [d] (split: part 0's then part 1's); dense: null
  const float* cent0;  // part 0's centroids
  const float* cent1;  // split: part 1's centroids
  const std::int32_t* chan;  // split: [d] output channel of each part element (part 0's then part 1's)
  const float* rot;    // dense: Pi [d][d] row-major
  float scale;         // 1 / sqrt(part size) (Hadamard parts)
  void* out;           // [batch][num_tokens][num_kv_heads][d] of OT
};

/// Code i (bits wide) of the LSB-first stream at p (turbokv/pack.h), read as bytes (any alignment).
__device__ __forceinline__ unsigned code_at(const std::uint8_t* p, int i, int bits) {
  const int bit = i * bits, byte = bit >> 3, sh = bit & 7;
  unsigned v = p[byte];
  if (sh + bits > 8) v |= static_cast<unsigned>(p[byte + 1]) << 8;
  return (v >> sh) & ((1u << bits) - 1u);
}

template <class OT>
__device__ __forceinline__ void store_out(void* out, std::size_t i, float v) {
  if constexpr (std::is_same_v<OT, float>)
    static_cast<float*>(out)[i] = v;
  else if constexpr (std::is_same_v<OT, __half>)
    static_cast<__half*>(out)[i] = __float2half_rn(v);
  else
    static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v);
}

/// The 16-bit pattern of OT(v) (round to nearest even), OT __half or __nv_bfloat16.
template <class OT>
__device__ __forceinline__ std::uint32_t bits16(float v) {
  if constexpr (std::is_same_v<OT, __half>)
    return __half_as_ushort(__float2half_rn(v));
  else
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

/// out[i .. i + E) = v as OT in one to two vector stores of E sizeof(OT) bytes (out + i aligned to
/// min(16, E sizeof(OT)) bytes); the same values as E store_out calls.
template <int E, class OT>
__device__ __forceinline__ void store_out_vec(void* out, std::size_t i, const float (&v)[E]) {
  constexpr int W = E * static_cast<int>(sizeof(OT)) / 4;  // 32-bit words, E >= 2
  std::uint32_t w[W];
#pragma unroll
  for (int k = 0; k < W; ++k)
    if constexpr (std::is_same_v<OT, float>)
      w[k] = __float_as_uint(v[k]);
    else
      w[k] = bits16<OT>(v[2 * k]) | (bits16<OT>(v[2 * k + 1]) << 16);
  std::uint32_t* p = reinterpret_cast<std::uint32_t*>(static_cast<OT*>(out) + i);
  if constexpr (W % 4 == 0) {
#pragma unroll
    for (int k = 0; k < W; k += 4) reinterpret_cast<uint4*>(p)[k / 4] = make_uint4(w[k], w[k + 1], w[k + 2], w[k + 3]);
  } else if constexpr (W == 2) {
    *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
  } else {
    *p = w[0];
  }
}

/// One power-of-two part of E * 32 elements: codes at `codes` (bits wide), centroids c (shared), signs
/// [part], norm; writes element e of lane L to out channel (chan ? chan[E L + e] : E L + e) of `o`. VEC
/// (chan null, `o` 16-byte aligned): the lane's E outputs in vector stores (store_out_vec).
template <int E, class OT, bool VEC>
__device__ __forceinline__ void hadamard_part(const std::uint8_t* codes, int bits, const float* c,
                                              const float* __restrict__ signs, const std::int32_t* __restrict__ chan,
                                              float scale, float norm, void* o, std::size_t obase, int lane) {
  float x[E];
#pragma unroll
  for (int e = 0; e < E; ++e) x[e] = c[code_at(codes, E * lane + e, bits)];
  detail::splitk::warp_fwht<E>(x);
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int i = E * lane + e;
    const float xi = __fmul_rn(x[e], scale * __ldg(signs + i));  // scale * (+-1): exact
    x[e] = __fmul_rn(norm, xi);
    if constexpr (!VEC) store_out<OT>(o, obase + (chan ? __ldg(chan + i) : i), x[e]);
  }
  if constexpr (VEC) store_out_vec<E, OT>(o, obase + E * lane, x);
}

/// The block of vector v: its codes and its scalars.
struct Src {
  const std::uint8_t* codes;
  const std::uint8_t* norms;
};
__device__ __forceinline__ Src src_of(const DequantArgs& a, int v) {
  const detail::AppendSlot sl = detail::append_slot(v, a.div_heads, a.div_tokens, a.start, a.pages, a.max_pages, a.page_shift);
  const std::uint8_t* blk = a.pool + (static_cast<std::size_t>(sl.page) * a.div_heads.d + sl.g) * a.stride;
  return {blk + static_cast<std::size_t>(sl.off) * a.cb,
          blk + (static_cast<std::size_t>(a.cb) << a.page_shift) + static_cast<std::size_t>(sl.off) * 2 * a.nnorm};
}

__device__ __forceinline__ float half_at(const std::uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(p[0] | (p[1] << 8))));
}

/// Power-of-two rotations: integer widths (SPLIT false, E = head_dim / 32) or the outlier split (SPLIT
/// true, two parts of E * 32 = head_dim / 2 elements).
template <int E, bool SPLIT, class OT, bool VEC = false>
__global__ void __launch_bounds__(32 * kWarps) dequant_kernel(const DequantArgs a) {
  __shared__ float cent[2][16];
  if (threadIdx.x < (1 << a.bits0)) cent[0][threadIdx.x] = __ldg(a.cent0 + threadIdx.x);
  if (SPLIT && threadIdx.x < (1 << a.bits1)) cent[1][threadIdx.x] = __ldg(a.cent1 + threadIdx.x);
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int nwarps = gridDim.x * kWarps;
  for (int v = blockIdx.x * kWarps + (threadIdx.x >> 5); v < a.total; v += nwarps) {  // warp-uniform
    const Src s = src_of(a, v);
    const std::size_t obase = static_cast<std::size_t>(v) * a.d;
    hadamard_part<E, OT, VEC && !SPLIT>(s.codes, a.bits0, cent[0], a.signs, SPLIT ? a.chan : nullptr, a.scale,
                                        half_at(s.norms), a.out, obase, lane);
    if constexpr (SPLIT)
      hadamard_part<E, OT, false>(s.codes + a.off1, a.bits1, cent[1], a.signs + 32 * E, a.chan + 32 * E, a.scale,
                           half_at(s.norms + 2), a.out, obase, lane);
  }
}

/// Dense (Haar) rotations at integer widths (head_dim 80, 96, 112, ...: up to 256).
template <class OT>
__global__ void __launch_bounds__(32 * kWarps) dequant_dense_kernel(const DequantArgs a) {
  __shared__ float cent[16];
  __shared__ float ys[kWarps][256];
  if (threadIdx.x < (1 << a.bits0)) cent[threadIdx.x] = __ldg(a.cent0 + threadIdx.x);
  __syncthreads();
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, d = a.d;
  float* y = ys[w];
  const int nwarps = gridDim.x * kWarps;
  for (int v = blockIdx.x * kWarps + w; v < a.total; v += nwarps) {
    const Src s = src_of(a, v);
    __syncwarp();  // the previous vector's reads of y are done
    for (int i = lane; i < d; i += 32) y[i] = cent[code_at(s.codes, i, a.bits0)];
    __syncwarp();
    const float norm = half_at(s.norms);
    const std::size_t obase = static_cast<std::size_t>(v) * d;
    for (int j = lane; j < d; j += 32) {
      float x = 0.0f;
      for (int i = 0; i < d; ++i) x = __fadd_rn(x, __fmul_rn(__ldg(a.rot + static_cast<std::size_t>(i) * d + j), y[i]));
      store_out<OT>(a.out, obase + j, __fmul_rn(norm, x));
    }
  }
}

template <class OT>
void launch(const TqMseTables& c, const DequantArgs& a, cudaStream_t s) {
  // Enough warps to cover the vectors, at most ~16 blocks per SM (grid-stride beyond).
  const long long want = (static_cast<long long>(a.total) + kWarps - 1) / kWarps;
  const unsigned grid = static_cast<unsigned>(std::min<long long>(want, 16LL * detail::num_sms()));
  const dim3 block(32 * kWarps);
  if (c.dense()) {
    dequant_dense_kernel<OT><<<grid, block, 0, s>>>(a);
  } else if (c.split()) {
    if (c.head_dim() == 128) dequant_kernel<2, true, OT><<<grid, block, 0, s>>>(a);
    else dequant_kernel<4, true, OT><<<grid, block, 0, s>>>(a);
  } else if (reinterpret_cast<std::uintptr_t>(a.out) % 16 == 0) {  // vector stores of each lane's outputs
    switch (c.head_dim()) {
      case 64: dequant_kernel<2, false, OT, true><<<grid, block, 0, s>>>(a); break;
      case 128: dequant_kernel<4, false, OT, true><<<grid, block, 0, s>>>(a); break;
      default: dequant_kernel<8, false, OT, true><<<grid, block, 0, s>>>(a); break;
    }
  } else {
    switch (c.head_dim()) {
      case 64: dequant_kernel<2, false, OT><<<grid, block, 0, s>>>(a); break;
      case 128: dequant_kernel<4, false, OT><<<grid, block, 0, s>>>(a); break;
      default: dequant_kernel<8, false, OT><<<grid, block, 0, s>>>(a); break;
    }
  }
  TKV_CHECK_LAUNCH();
}

}  // namespace

void tq_mse_dequantize(const TqMseTables& codec, PagedPool pool, const PageTable& table, int batch, int num_tokens,
                       int num_kv_heads, const std::int32_t* start, void* out, Stream stream, IoType out_type) {
  const char* where = "cuda::tq_mse_dequantize";
  check_arg(batch >= 0 && num_tokens >= 0, where, "batch/num_tokens", batch < 0 ? batch : num_tokens, "must be >= 0");
  check_arg(num_kv_heads > 0, where, "num_kv_heads", num_kv_heads, "must be positive");
  detail::check_page_size(where, table.page_size);
  check_arg(pool.page_stride == codec.page_stride(table.page_size), where, "pool.page_stride", pool.page_stride,
            "must equal codec.page_stride(page_size)");
  check_arg(out_type == IoType::kF32 || out_type == IoType::kF16 || out_type == IoType::kBf16, where, "out_type",
            static_cast<int>(out_type), "must be kF32, kF16 or kBf16");
  const long long total = 1LL * batch * num_tokens * num_kv_heads;
  check_arg(total <= (1LL << 31) - (1LL << 20), where, "batch*num_tokens*num_kv_heads", total,
            "must be at most 2^31 - 2^20");
  if (total == 0) return;
  check_arg(pool.data && table.pages && start && out, where, "pointers", 0, "must be non-null device pointers");
  check_arg(!codec.split() || codec.head_dim() == 128 || codec.head_dim() == 256, where, "head_dim", codec.head_dim(),
            "must be 128 or 256 at a fractional width");
  DequantArgs a{};
  a.pool = pool.data, a.stride = pool.page_stride, a.pages = table.pages, a.start = start;
  a.max_pages = table.max_pages, a.page_shift = __builtin_ctz(static_cast<unsigned>(table.page_size));
  a.d = codec.head_dim(), a.total = static_cast<int>(total);
  a.div_heads = FastDiv(num_kv_heads), a.div_tokens = FastDiv(num_tokens);
  a.cb = static_cast<int>(codec.code_bytes()), a.nnorm = codec.num_norms();
  a.bits0 = codec.split() ? codec.bits() + 1 : codec.bits(), a.bits1 = codec.bits();
  a.off1 = static_cast<int>(codec.head_dim() / 2 * (codec.bits() + 1) / 8);
  a.signs = codec.signs(), a.cent0 = codec.centroids(), a.cent1 = codec.centroids_lo(), a.chan = codec.channels();
  a.rot = codec.rotation(), a.scale = codec.hadamard_scale();
  a.out = out;
  const cudaStream_t s = detail::stream_of(stream);
  detail::with_io_type(out_type, [&](auto ot) { launch<typename decltype(ot)::type>(codec, a, s); });
}

}  // namespace turbokv::cuda
