// KIVI-style asymmetric integer groups on the GPU (reference: src/ref/kivi.cpp; layout: formats.h
// "kivi" and include/turbokv/cuda_kivi.h). Append writes the reference's bytes: per group
// mn16 = fp16 at or below the minimum, scale16 = (max - mn16) / (2^b - 1) in fp64, rounded to fp32
// and then up to fp16, code = clamp(rint((x - mn16) / scale16), 0, 2^b - 1) with IEEE fp32 subtract
// and divide (0 when scale16 == 0). Decode: the CUDA-core split-K kernel below, through decode.cu's
// plan, workspace and log-sum-exp merge (no rotation).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "decode.cuh"
#include "turbokv/cuda_kivi.h"
#include "turbokv/error.h"
#include "turbokv/fastdiv.h"
#include "turbokv/half.h"

namespace turbokv::cuda {
namespace {

using detail::DecodeKernelArgs;
using detail::kMaxSubPerBlock;
using detail::kSubThreads;
using detail::soft_cap;

struct KiviAppendArgs {
  const void* x;  // [batch][num_new][num_kv_heads][D] of the kernel's XT
  int batch, num_new, num_kv_heads, D, G, bits, cb;
  FastDiv div_heads, div_new;
  const std::int32_t* start;
  const std::int32_t* pages;
  int max_pages, page_shift;
  std::uint8_t* pool;
  std::size_t stride;
};

/// The (mn16, scale16) of a group with minimum mn and maximum mx, as the reference computes them.
__device__ __forceinline__ void group_params(float mn, float mx, int bits, std::uint16_t& hmn, std::uint16_t& hsc,
                                             float& mn16, float& sc16) {
  const float levels = static_cast<float>((1 << bits) - 1);
  hmn = float_to_half_down(mn);
  mn16 = half_to_float(hmn);
  hsc = float_to_half_up(__double2float_rn(__ddiv_rn(__dsub_rn(static_cast<double>(mx), static_cast<double>(mn16)),
                                                     static_cast<double>(levels))));
  sc16 = half_to_float(hsc);
}

__device__ __forceinline__ std::uint8_t group_code(float x, float mn16, float sc16, int bits) {
  if (!(sc16 > 0.0f)) return 0;
  const float levels = static_cast<float>((1 << bits) - 1);
  const float v = rintf(__fdiv_rn(__fsub_rn(x, mn16), sc16));
  return static_cast<std::uint8_t>(fminf(fmaxf(v, 0.0f), levels));
}

/// Byte k of a packed row (LSB-first stream) from its codes c[0..): bits [8k, 8k + 8).
__device__ __forceinline__ std::uint8_t packed_byte(const std::uint8_t* c, int k, int bits) {
  unsigned w = 0;
  for (int i = 8 * k / bits; i * bits < 8 * k + 8; ++i) {
    const int sh = i * bits - 8 * k;
    w |= sh >= 0 ? static_cast<unsigned>(c[i]) << sh : static_cast<unsigned>(c[i]) >> -sh;
  }
  return static_cast<std::uint8_t>(w);
}

/// Keys: one block per (sequence, key group of G new tokens, KV head); thread j < D owns channel j:
/// min / max over the group's G tokens, its (mn16, scale16), its G codes into shared memory
/// [G][D]; then the block packs the G rows and stores them in their page (a group lies in one page:
/// G divides page_size and the group starts at a multiple of G).
template <class XT>
__global__ void kivi_key_append_kernel(const KiviAppendArgs a) {
  extern __shared__ std::uint8_t codes[];  // [G][D]
  const int D = a.D, G = a.G, ngroups = a.num_new / G;
  const int blk_id = blockIdx.x;
  const int g = blk_id % a.num_kv_heads, rest = blk_id / a.num_kv_heads;
  const int q = rest % ngroups, b = rest / ngroups;
  const int pos0 = __ldg(a.start + b) + q * G;
  if (pos0 % G != 0) return;  // start not a multiple of G (the caller's contract): write nothing rather
                              // than rows past the group's page block
  const int page = __ldg(a.pages + static_cast<std::size_t>(b) * a.max_pages + (pos0 >> a.page_shift));
  const int ps = 1 << a.page_shift, slot0 = pos0 & (ps - 1);
  std::uint8_t* blk = a.pool + (static_cast<std::size_t>(page) * a.num_kv_heads + g) * a.stride;
  const XT* x = static_cast<const XT*>(a.x);
  for (int j = threadIdx.x; j < D; j += blockDim.x) {
    auto at = [&](int i) {
      return static_cast<float>(
          x[((static_cast<std::size_t>(b) * a.num_new + q * G + i) * a.num_kv_heads + g) * D + j]);
    };
    float mn = at(0), mx = mn;
    for (int i = 1; i < G; ++i) {  // std::min / std::max semantics (signed zeros as the reference)
      const float v = at(i);
      mn = v < mn ? v : mn, mx = mx < v ? v : mx;
    }
    std::uint16_t hmn, hsc;
    float mn16, sc16;
    group_params(mn, mx, a.bits, hmn, hsc, mn16, sc16);
    std::uint16_t* par =
        reinterpret_cast<std::uint16_t*>(blk + static_cast<std::size_t>(ps) * a.cb + 4 * ((slot0 / G) * D + j));
    par[0] = hmn, par[1] = hsc;
    for (int i = 0; i < G; ++i) codes[i * D + j] = group_code(at(i), mn16, sc16, a.bits);
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * a.cb; idx += blockDim.x) {
    const int i = idx / a.cb, k = idx - i * a.cb;
    blk[static_cast<std::size_t>(slot0 + i) * a.cb + k] = packed_byte(codes + i * D, k, a.bits);
  }
}

constexpr int kValueWarps = 8;

/// Values: one warp per (token, KV head) vector; lane l owns the channel groups l, l + 32, ...
/// (min / max over G channels, (mn16, scale16) into the warp's shared arrays), then the channels
/// l, l + 32, ... (codes into the warp's shared row), then the row's bytes.
template <class XT>
__global__ void __launch_bounds__(32 * kValueWarps) kivi_value_append_kernel(const KiviAppendArgs a, int total) {
  __shared__ std::uint8_t s_codes[kValueWarps][256];
  __shared__ float s_mn[kValueWarps][256], s_sc[kValueWarps][256];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int D = a.D, G = a.G, ng = D / G;
  for (int v = blockIdx.x * kValueWarps + w; v < total; v += gridDim.x * kValueWarps) {  // warp-uniform
    const XT* x = static_cast<const XT*>(a.x) + static_cast<std::size_t>(v) * D;
    const detail::AppendSlot sl =
        detail::append_slot(v, a.div_heads, a.div_new, a.start, a.pages, a.max_pages, a.page_shift);
    std::uint8_t* blk = a.pool + (static_cast<std::size_t>(sl.page) * a.num_kv_heads + sl.g) * a.stride;
    const int ps = 1 << a.page_shift;
    for (int gi = lane; gi < ng; gi += 32) {
      float mn = static_cast<float>(x[gi * G]), mx = mn;
      for (int i = 1; i < G; ++i) {
        const float t = static_cast<float>(x[gi * G + i]);
        mn = t < mn ? t : mn, mx = mx < t ? t : mx;
      }
      std::uint16_t hmn, hsc;
      group_params(mn, mx, a.bits, hmn, hsc, s_mn[w][gi], s_sc[w][gi]);
      std::uint16_t* par = reinterpret_cast<std::uint16_t*>(blk + static_cast<std::size_t>(ps) * a.cb +
                                                            4 * (static_cast<std::size_t>(sl.off) * ng + gi));
      par[0] = hmn, par[1] = hsc;
    }
    __syncwarp();
    for (int j = lane; j < D; j += 32)
      s_codes[w][j] = group_code(static_cast<float>(x[j]), s_mn[w][j / G], s_sc[w][j / G], a.bits);
    __syncwarp();
    for (int k = lane; k < a.cb; k += 32)
      blk[static_cast<std::size_t>(sl.off) * a.cb + k] = packed_byte(s_codes[w], k, a.bits);
    __syncwarp();
  }
}

/// x_hat = mn16 + scale16 * code, rounded as the reference's decode (product, then sum). par: the
/// group's (mn16, scale16) fp16 bits, low and high half. Codes: the field of channel j at width b
/// (1, 2, 3, 4 or 8) lies in the two bytes from bit j b (the second inside the block: a row is
/// followed by more rows or the block's scalars); the scalars are read as 2-byte halves (they start
/// right after the codes: at page size 1 and rows of 4k + 2 bytes not 4-byte aligned).
/// The fp16 -> fp32 conversions are the hardware's (exact; half.h's portable half_to_float cost ~20
/// instructions each and made the decode issue-bound: 692 instructions per token and KV head, ncu run
/// s10-9).
__device__ __forceinline__ float dequant(unsigned par, float code) {
  __half2 h;
  memcpy(&h, &par, 4);
  const float2 f = __half22float2(h);
  return __fadd_rn(f.x, __fmul_rn(f.y, code));
}

constexpr int kKiviTile = 32;     // tokens per block step

/// Shared memory of kivi_decode_kernel: the block's scaled queries [4 nsub_block][D], the step's
/// dequantized keys and values [kKiviTile][D + 4] each (rows of an odd number of 16-byte units:
/// the lanes' float4 reads of 32 different rows hit distinct bank groups), P [4 nsub_block][32].
inline std::size_t kivi_smem(int d, int nsub_block) {
  return (std::size_t(4) * nsub_block * d + 2 * std::size_t(kKiviTile) * (d + 4) + 4 * nsub_block * kKiviTile) *
         sizeof(float);
}

/// Decode: grid and head subsets as decode_kernel (decode.cuh; 128 threads per subset of HPW query
/// heads, up to 2 subsets per block). Per step of 32 tokens the whole block dequantizes the keys and
/// values once (one element per thread and pass, 2-byte loads) into shared memory (the query heads of
/// the block share them); then warp w of a subset serves head w (w < HPW): lane = token for the
/// scores (float4 dot products), one running max / sum per warp updated once per step, lanes over
/// channels for the values. Each warp writes its head's split partials itself.
/// KC = ceil(head_dim / 32): the channels j = lane + 32 k (k < KC) of a lane (a template constant:
/// with a runtime bound of 8 the loops issued 8 predicated iterations at every head_dim).
template <int HPW, int KC>
__global__ void __launch_bounds__(kSubThreads* kMaxSubPerBlock) kivi_decode_kernel(const DecodeKernelArgs a) {
  constexpr int kLaneChannels = KC;
  extern __shared__ __align__(16) float sm[];
  const int D = a.head_dim, DS = D + 4;
  const int split = blockIdx.x;
  const int b = blockIdx.y / a.num_kv_heads, g = blockIdx.y % a.num_kv_heads;
  const int tid = threadIdx.x, nthr = blockDim.x, nsub_block = nthr / kSubThreads;
  const int lane = tid % 32, wg = tid / 32, sub_local = wg / 4, hw = wg % 4;
  const int sub = blockIdx.z * kMaxSubPerBlock + sub_local;
  const int hg = sub * HPW + hw;
  const bool active = sub < a.nsub && hw < HPW && hg < a.group;  // warp-uniform
  float* s_q = sm;                           // [4 nsub_block][D]
  float* s_k = s_q + 4 * nsub_block * D;     // [32][DS]
  float* s_v = s_k + kKiviTile * DS;         // [32][DS]
  float* s_p = s_v + kKiviTile * DS + wg * kKiviTile;  // this warp's [32]

  int t_begin, t_end;
  detail::split_range(a, b, split, t_begin, t_end);
  const std::size_t bh = static_cast<std::size_t>(b) * a.num_heads + g * a.group + hg;

  for (int j = lane; j < D; j += 32)
    s_q[wg * D + j] = active ? a.q[bh * D + j] * a.qscale : 0.0f;
  float m = -INFINITY, l = 0.0f, acc[kLaneChannels];
#pragma unroll
  for (int k = 0; k < kLaneChannels; ++k) acc[k] = 0.0f;
  const std::int32_t* pt = a.pages + static_cast<std::size_t>(b) * a.max_pages;
  const int ps = 1 << a.page_shift, pmask = ps - 1, vng = D / a.vgroup;
  int vgi[kLaneChannels];  // value channel group of each of the lane's channels (no division per element)
#pragma unroll
  for (int k = 0; k < kLaneChannels; ++k) vgi[k] = (lane + 32 * k) / a.vgroup;
  for (int t0 = t_begin; t0 < t_end; t0 += kKiviTile) {
    const int n = min(kKiviTile, t_end - t0);
    __syncthreads();  // the previous step's keys and values are consumed
    // Warp w of the block stages tokens w, w + W, ... (the page id, row and scalar pointers once per
    // token), lanes over channels: a field's two bytes and its group's (mn16, scale16) halves. (Run
    // s10-3/s10-4: one element per thread with its token, page and group recomputed by integer
    // divisions took 16-18 ms at b16 x 64k d128.)
    // The step's page ids: lane l loads token t0 + l's (one coalesced load), a token's is a shuffle.
    const int nw = nthr / 32;
    const int my_page = lane < n ? __ldg(pt + ((t0 + lane) >> a.page_shift)) : 0;
#pragma unroll 4
    for (int tt = wg; tt < kKiviTile; tt += nw) {
      const int page = __shfl_sync(0xffffffffu, my_page, tt);
      if (tt >= n) break;  // warp-uniform
      const int t = t0 + tt, slot = t & pmask;
      const std::size_t blk = static_cast<std::size_t>(page) * a.num_kv_heads + g;
      const std::uint8_t* kb = a.kpool + blk * a.kstride;
      const std::uint8_t* vb = a.vpool + blk * a.vstride;
      const std::uint8_t* kr = kb + static_cast<std::size_t>(slot) * a.kcb;
      const std::uint8_t* vr = vb + static_cast<std::size_t>(slot) * a.vcb;
      const auto* kq = reinterpret_cast<const std::uint16_t*>(kb + static_cast<std::size_t>(ps) * a.kcb) +
                       2 * static_cast<std::size_t>(slot / a.kgroup) * D;
      const auto* vq = reinterpret_cast<const std::uint16_t*>(vb + static_cast<std::size_t>(ps) * a.vcb) +
                       2 * static_cast<std::size_t>(slot) * vng;
#pragma unroll
      for (int k = 0; k < kLaneChannels; ++k) {
        const int j = lane + 32 * k;
        if (j < D) {
          const int kbit = j * a.kbits, vbit = j * a.vbits;
          const unsigned kw = (kr[kbit >> 3] | (static_cast<unsigned>(kr[(kbit >> 3) + 1]) << 8)) >> (kbit & 7);
          const unsigned vw = (vr[vbit >> 3] | (static_cast<unsigned>(vr[(vbit >> 3) + 1]) << 8)) >> (vbit & 7);
          const unsigned kp = kq[2 * j] | (static_cast<unsigned>(kq[2 * j + 1]) << 16);
          const unsigned vp = vq[2 * vgi[k]] | (static_cast<unsigned>(vq[2 * vgi[k] + 1]) << 16);
          s_k[tt * DS + j] = dequant(kp, static_cast<float>(kw & ((1u << a.kbits) - 1u)));
          s_v[tt * DS + j] = dequant(vp, static_cast<float>(vw & ((1u << a.vbits) - 1u)));
        }
      }
    }
    __syncthreads();
    if (!active) continue;
    float s = -INFINITY;
    if (lane < n) {
      const float4* kr = reinterpret_cast<const float4*>(s_k + lane * DS);
      const float4* qr = reinterpret_cast<const float4*>(s_q + wg * D);
      float dot = 0.0f;
      for (int j4 = 0; j4 < D / 4; ++j4) {
        const float4 kv = kr[j4], qv = qr[j4];
        dot = fmaf(qv.x, kv.x, dot);
        dot = fmaf(qv.y, kv.y, dot);
        dot = fmaf(qv.z, kv.z, dot);
        dot = fmaf(qv.w, kv.w, dot);
      }
      s = soft_cap(a, dot);
    }
    float mt = s;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
    const float mn = fmaxf(m, mt);
    const float f = exp2f(m - mn);  // m = -inf: 0
    const float p = lane < n ? exp2f(s - mn) : 0.0f;
    float ps_sum = p;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ps_sum += __shfl_xor_sync(0xffffffffu, ps_sum, off);
    l = l * f + ps_sum;
    m = mn;
    s_p[lane] = p;
    __syncwarp();
#pragma unroll
    for (int k = 0; k < kLaneChannels; ++k) acc[k] *= f;
    for (int tt = 0; tt < n; ++tt) {
      const float w = s_p[tt];
#pragma unroll
      for (int k = 0; k < kLaneChannels; ++k)
        if (lane + 32 * k < D) acc[k] = fmaf(w, s_v[tt * DS + lane + 32 * k], acc[k]);
    }
    __syncwarp();
  }
  if (!active) return;
#pragma unroll
  for (int k = 0; k < kLaneChannels; ++k)
    if (lane + 32 * k < D) a.ws_acc[(bh * a.num_splits + split) * D + lane + 32 * k] = acc[k];
  if (lane == 0) {
    a.ws_ml[(bh * a.num_splits + split) * 2] = m;
    a.ws_ml[(bh * a.num_splits + split) * 2 + 1] = l;
  }
}

void check_kivi(const char* where, const CodecConfig& cfg) {
  check_arg(cfg.method == Method::kKivi, where, "method", method_name(cfg.method), "must be kivi");
  check_arg(cfg.bits == 1 || cfg.bits == 2 || cfg.bits == 3 || cfg.bits == 4 || cfg.bits == 8, where, "bits",
            cfg.bits, "must be 1, 2, 3, 4 or 8");
  check_arg(detail::gpu_head_dim(cfg.head_dim), where, "head_dim", cfg.head_dim,
            "must be a multiple of 16 in 64..256 on the GPU");
  check_arg(cfg.group_size >= 1, where, "group_size", cfg.group_size, "must be positive");
  if (cfg.role == Role::kValue)
    check_arg(cfg.head_dim % cfg.group_size == 0, where, "group_size", cfg.group_size,
              "must divide head_dim for value groups");
}

template <class XT>
void launch_kivi_append(const CodecConfig& cfg, const KiviAppendArgs& a, int total, cudaStream_t s) {
  if (cfg.role == Role::kKey) {
    const unsigned blocks = static_cast<unsigned>(a.batch) * (a.num_new / a.G) * a.num_kv_heads;
    if (blocks == 0) return;
    const int threads = (a.D + 31) / 32 * 32;
    kivi_key_append_kernel<XT><<<blocks, threads, static_cast<std::size_t>(a.G) * a.D, s>>>(a);
  } else {
    const int need = (total + kValueWarps - 1) / kValueWarps, cap = detail::num_sms() * 8;
    kivi_value_append_kernel<XT><<<need < cap ? need : cap, 32 * kValueWarps, 0, s>>>(a, total);
  }
  TKV_CHECK_LAUNCH();
}

}  // namespace

namespace detail {
void launch_kivi_decode(int hpw, const LaunchShape& shape, std::size_t /*smem of the staged kernels*/,
                        cudaStream_t s, const DecodeKernelArgs& a) {
  const std::size_t smem = kivi_smem(a.head_dim, static_cast<int>(shape.block.x) / kSubThreads);
  auto go = [&](auto hpw_c) {
    constexpr int H = decltype(hpw_c)::value;
    switch ((a.head_dim + 31) / 32) {
      case 2: return launch_cached(kivi_decode_kernel<H, 2>, shape, smem, s, a);
      case 3: return launch_cached(kivi_decode_kernel<H, 3>, shape, smem, s, a);
      case 4: return launch_cached(kivi_decode_kernel<H, 4>, shape, smem, s, a);
      case 5: return launch_cached(kivi_decode_kernel<H, 5>, shape, smem, s, a);
      case 6: return launch_cached(kivi_decode_kernel<H, 6>, shape, smem, s, a);
      case 7: return launch_cached(kivi_decode_kernel<H, 7>, shape, smem, s, a);
      case 8: return launch_cached(kivi_decode_kernel<H, 8>, shape, smem, s, a);
    }
    throw std::logic_error("launch_kivi_decode: head_dim out of range");
  };
  switch (hpw) {
    case 1: return go(std::integral_constant<int, 1>{});
    case 2: return go(std::integral_constant<int, 2>{});
    case 3: return go(std::integral_constant<int, 3>{});
    case 4: return go(std::integral_constant<int, 4>{});
  }
  throw std::logic_error("launch_kivi_decode: hpw out of range");
}
}  // namespace detail

namespace detail {
std::size_t kivi_stride(const char* where, const CodecConfig& cfg, int page_size) {
  check_kivi(where, cfg);
  detail::check_page_size(where, page_size);
  const std::size_t ps = static_cast<std::size_t>(page_size), d = static_cast<std::size_t>(cfg.head_dim);
  const std::size_t cb = d * static_cast<std::size_t>(cfg.bits) / 8;
  std::size_t scalars;
  if (cfg.role == Role::kKey) {
    check_arg(page_size % cfg.group_size == 0, where, "page_size", page_size,
              "must be a multiple of the key group_size (a key group lies in one page)");
    scalars = ps / static_cast<std::size_t>(cfg.group_size) * d;
  } else {
    scalars = ps * (d / static_cast<std::size_t>(cfg.group_size));
  }
  return (ps * cb + 4 * scalars + 31) / 32 * 32;
}
}  // namespace detail

std::size_t kivi_page_stride(const CodecConfig& cfg, int page_size) {
  return detail::kivi_stride("cuda::kivi_page_stride", cfg, page_size);
}

void kivi_append(const CodecConfig& cfg, const void* x, int batch, int num_new, int num_kv_heads,
                 const std::int32_t* start, const PageTable& table, PagedPool pool, Stream stream, IoType x_type) {
  const char* where = "cuda::kivi_append";
  check_kivi(where, cfg);
  const long long total =
      detail::check_append(where, x, batch, num_new, num_kv_heads, start, table, pool, x_type,
                           detail::kivi_stride(where, cfg, table.page_size), "must equal kivi_page_stride(cfg, page_size)");
  if (cfg.role == Role::kKey) {
    check_arg(num_new % cfg.group_size == 0, where, "num_new", num_new,
              "must be a multiple of the key group_size (keys are appended in whole groups)");
    check_arg(static_cast<long long>(cfg.group_size) * cfg.head_dim <= 48 * 1024, where, "group_size",
              cfg.group_size, "times head_dim must be at most 49152 (a key group's codes in shared memory)");
  }
  if (total == 0) return;
  const int bits = static_cast<int>(cfg.bits);
  const KiviAppendArgs a{x, batch, num_new, num_kv_heads, cfg.head_dim, cfg.group_size, bits,
                         cfg.head_dim * bits / 8, FastDiv(num_kv_heads), FastDiv(num_new), start, table.pages,
                         table.max_pages, __builtin_ctz(static_cast<unsigned>(table.page_size)), pool.data,
                         pool.page_stride};
  const cudaStream_t s = detail::stream_of(stream);
  switch (x_type) {
    case IoType::kF32: return launch_kivi_append<float>(cfg, a, static_cast<int>(total), s);
    case IoType::kF16: return launch_kivi_append<__half>(cfg, a, static_cast<int>(total), s);
    case IoType::kBf16: return launch_kivi_append<__nv_bfloat16>(cfg, a, static_cast<int>(total), s);
  }
}

}  // namespace turbokv::cuda
