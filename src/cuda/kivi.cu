// KIVI-style asymmetric integer groups on the GPU (reference: src/ref/kivi.cpp; layout: formats.h
// "kivi" and include/turbokv/cuda_kivi.h). Append writes the reference's bytes: per group
// mn16 = fp16 at or below the minimum, scale16 = (max - mn16) / (2^b - 1) in fp64, rounded to fp32
// and then up to fp16, code = clamp(rint((x - mn16) / scale16), 0, 2^b - 1) with IEEE fp32 subtract
// and divide (0 when scale16 == 0). Decode: the staged split-K kernel (staged.cuh) with the formats
// below, through decode.cu's plan, workspace and log-sum-exp merge (no rotation).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <type_traits>

#include "decode_h16.cuh"
#include "staged.cuh"
#include "turbokv/cuda_kivi.h"
#include "turbokv/error.h"
#include "turbokv/fastdiv.h"
#include "turbokv/half.h"

namespace turbokv::cuda {
namespace {


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

/// x_hat = mn16 + scale16 * code, rounded as the reference's decode (product, then sum). w: the
/// group's (mn16, scale16) fp16 bits, low and high half. The fp16 -> fp32 conversions are the
/// hardware's (exact; half.h's portable half_to_float cost ~20 instructions each and made the decode
/// issue-bound: 692 instructions per token and KV head, ncu run s10-9).
__device__ __forceinline__ float dequant(unsigned w, float code) {
  __half2 h;
  memcpy(&h, &w, 4);
  const float2 f = __half22float2(h);
  return __fadd_rn(f.x, __fmul_rn(f.y, code));
}

/// The (mn16 | scale16 << 16) word at p, read as two 2-byte halves (the value scalars start right
/// after the codes: at page size 1 and rows of 4k + 2 bytes not 4-byte aligned).
__device__ __forceinline__ unsigned param_word(const std::uint16_t* p) {
  return p[0] | (static_cast<unsigned>(p[1]) << 16);
}

/// The fp16 pair (code i, code i + 1) of the quad u (4 fields of `bits` bits, garbage above) as the
/// fp16 integers they are: the fields go into the mantissas of 1024.0 (0x6400; codes < 1024 are exact
/// there) and 1024 is subtracted, exactly.
__device__ __forceinline__ __half2 code_pair(unsigned u, int bits, unsigned m) {
  const unsigned lo = (u & m) | 0x64006400u;
  const unsigned x = ((u << (16 - bits)) & (m << 16)) | lo;
  __half2 h;
  memcpy(&h, &x, 4);
  return __hsub2(h, __half2(__ushort_as_half(0x6400), __ushort_as_half(0x6400)));
}

/// Elements j .. j + 3 of a KIVI row from its quad of codes u and the words w[i] = (mn16 | scale16 << 16)
/// of element j + i. fp32 (the CUDA-core kernel): the reference's rounding (dequant). fp16 (the
/// tensor-core kernel): code pairs as exact fp16 integers, then one fma per pair, mn16 + scale16 * code
/// rounded once to fp16 (the fp32 path rounds the product, the sum, then to fp16: the two differ by at
/// most one fp16 ulp; the kernel's tolerance is 3e-3 relative). Two fp16 multiply-adds per quad
/// instead of four conversions, multiplies and adds per element (ncu run s17-1: the fp32 staging cost
/// 627 instructions per warp iteration of 32 elements per lane).
__device__ __forceinline__ void kivi_quad(float* dst, unsigned u, int bits, unsigned m, const unsigned w[4]) {
  detail::store_quad(dst, dequant(w[0], static_cast<float>(u & m)), dequant(w[1], static_cast<float>((u >> bits) & m)),
                     dequant(w[2], static_cast<float>((u >> (2 * bits)) & m)),
                     dequant(w[3], static_cast<float>((u >> (3 * bits)) & m)));
}
__device__ __forceinline__ void kivi_quad(__half* dst, unsigned u, int bits, unsigned m, const unsigned w[4]) {
  const __half2 c01 = code_pair(u, bits, m), c23 = code_pair(u >> (2 * bits), bits, m);
  auto h2 = [](unsigned x) {
    __half2 h;
    memcpy(&h, &x, 4);
    return h;
  };
  // (scale16 of j, of j + 1) and (mn16 of j, of j + 1) from the words' high and low halves.
  const __half2 r01 = __hfma2(c01, h2(__byte_perm(w[0], w[1], 0x7632)), h2(__byte_perm(w[0], w[1], 0x5410)));
  const __half2 r23 = __hfma2(c23, h2(__byte_perm(w[2], w[3], 0x7632)), h2(__byte_perm(w[2], w[3], 0x5410)));
  unsigned x0, x1;
  memcpy(&x0, &r01, 4);
  memcpy(&x1, &r23, 4);
  *reinterpret_cast<uint2*>(dst) = make_uint2(x0, x1);
}

/// A key group's (mn16 | scale16 << 16) words of 4 channels at p when they are not 16-byte aligned
/// (page_size cb not a multiple of 16: page sizes 1 and 2 at some widths). Not inlined: inlined, ptxas
/// if-converted both paths and issued this one's 8 predicated-off loads and 4 byte permutes per quad on
/// the aligned path too (ncu run s17-2).
__device__ __noinline__ uint4 key_params_unaligned(const std::uint16_t* p) {
  return make_uint4(param_word(p), param_word(p + 2), param_word(p + 4), param_word(p + 6));
}

/// Staged-decode formats (staged.cuh) of KIVI's page blocks (formats.h "kivi"): side.bits = b,
/// side.group = G (group_div: division by it), side.cb = packed(head_dim, b). Keys: the (mn16,
/// scale16) of channel j of the token's group of G tokens (read from global memory: 4 head_dim bytes
/// per group; one 16-byte load per quad where the group's scalars are 16-byte aligned, i.e. page_size
/// cb is a multiple of 16); values: those of the token's channel group j / G (side.sb = 4 head_dim / G
/// bytes per token, copied with the codes; one word per quad when 4 divides G).
/// B: the width as a compile-time constant (0: side.bits at run time). B = 2, 4, 8 make cb = head_dim B
/// / 8 a multiple of 4, so raw rows are 4-byte aligned (kAlignedRows: the AlignedWords reader) and so
/// is the values' side data in the copy (page_size cb and sb = 4 head_dim / G are multiples of 4: one
/// word per group). kivi_decode takes the B instances for keys and values of
/// equal width 2 or 4 at head_dim 64, 128, 256 (the tensor-core kernel only), B = 0 otherwise.
template <int B>
struct KiviKeyFmt {
  static constexpr bool kLut = false, kSide = true, kRawSide = false, kSmemTab = false;
  static constexpr bool kAlignedRows = B == 2 || B == 4 || B == 8;
  static constexpr bool kPrefetch = true;
  __device__ __forceinline__ static std::size_t side_off(const detail::StagedSide& s, int D, int ps, int slot) {
    return static_cast<std::size_t>(ps) * s.cb +
           4 * static_cast<std::size_t>(s.group_div.div(static_cast<unsigned>(slot))) * D;  // the group's
  }
  /// The group's 4 D bytes of scalars into L1 a step before they are read, from the group's first
  /// token in the step (staged.cuh kPrefetchOf): read without it, the first quad of each token stalled
  /// on them (15% of the tensor-core kernel's stall samples at one byte permute, ncu run s17-4).
  __device__ __forceinline__ static void prefetch(const detail::StagedSide& s, int D, const std::uint8_t* blk, int ps,
                                                  int slot, bool first, int sub) {
    if (!first && s.group_div.mod(static_cast<unsigned>(slot)) != 0) return;
    const std::uint8_t* p = blk + side_off(s, D, ps, slot);
    for (int line = sub; line * 128 < 4 * D; line += detail::kRawLanes)
      asm volatile("prefetch.global.L1 [%0];" ::"l"(p + line * 128));
  }
  template <int KQ, int LS, class R, class T>
  __device__ __forceinline__ static void stage(const detail::StagedSide& s, int D, const std::uint8_t* row,
                                               const std::uint8_t* side, int lane, T* dst) {
    const int bits = B ? B : s.bits;
    const auto* par = reinterpret_cast<const std::uint16_t*>(side);
    const bool vec = (reinterpret_cast<std::uintptr_t>(side) & 15) == 0;
    const unsigned m = (1u << bits) - 1u;
    // Every quad's scalars are loaded before the first is used: loaded next to their use, the
    // tensor-core kernel stalled on each (the four byte permutes after them held 42% of its stall
    // samples, ncu run s17-3).
    uint4 v[KQ] = {};
    if (vec) {
#pragma unroll
      for (int k = 0; k < KQ; ++k)
        if (4 * (lane + LS * k) < D) v[k] = __ldg(reinterpret_cast<const uint4*>(side) + lane + LS * k);
    } else {
#pragma unroll
      for (int k = 0; k < KQ; ++k)
        if (4 * (lane + LS * k) < D) v[k] = key_params_unaligned(par + 8 * (lane + LS * k));
    }
#pragma unroll
    for (int k = 0; k < KQ; ++k) {
      const int q = lane + LS * k, j = 4 * q;
      if (j < D) {
        const unsigned u = detail::quad_fields<R>(row, q, bits);
        const unsigned w[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
        kivi_quad(dst + j, u, bits, m, w);
      }
    }
  }
};
template <int B>
struct KiviValueFmt {
  static constexpr bool kLut = false, kSide = true, kRawSide = true, kSmemTab = false;
  static constexpr bool kAlignedRows = B == 2 || B == 4 || B == 8;
  __device__ __forceinline__ static std::size_t side_off(const detail::StagedSide& s, int /*D*/, int ps, int slot) {
    return static_cast<std::size_t>(ps) * s.cb + static_cast<std::size_t>(slot) * s.sb;  // sb = 4 D / G
  }
  template <int KQ, int LS, class R, class T>
  __device__ __forceinline__ static void stage(const detail::StagedSide& s, int D, const std::uint8_t* row,
                                               const std::uint8_t* side, int lane, T* dst) {
    const int bits = B ? B : s.bits;
    const auto* par = reinterpret_cast<const std::uint16_t*>(side);
    auto word = [&](unsigned g) {  // group g's (mn16 | scale16 << 16)
      if constexpr (R::kAligned) return reinterpret_cast<const unsigned*>(side)[g];
      else return param_word(par + 2 * g);
    };
    const unsigned m = (1u << bits) - 1u;
    const bool quad_group = (s.group & 3) == 0;  // a quad lies in one channel group
#pragma unroll
    for (int k = 0; k < KQ; ++k) {
      const int q = lane + LS * k, j = 4 * q;
      if (j < D) {
        const unsigned u = detail::quad_fields<R>(row, q, bits);
        unsigned w[4];
        if (quad_group) {
          w[0] = w[1] = w[2] = w[3] = word(s.group_div.div(static_cast<unsigned>(j)));
        } else {
#pragma unroll
          for (int i = 0; i < 4; ++i) w[i] = word(s.group_div.div(static_cast<unsigned>(j + i)));
        }
        kivi_quad(dst + j, u, bits, m, w);
      }
    }
  }
};

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

/// kivi_page_stride with its argument errors attributed to `where`.
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
}  // namespace

std::size_t kivi_page_stride(const CodecConfig& cfg, int page_size) {
  return kivi_stride("cuda::kivi_page_stride", cfg, page_size);
}

void kivi_append(const CodecConfig& cfg, const void* x, int batch, int num_new, int num_kv_heads,
                 const std::int32_t* start, const PageTable& table, PagedPool pool, Stream stream, IoType x_type,
                 std::int32_t* bad) {
  const char* where = "cuda::kivi_append";
  check_kivi(where, cfg);
  const long long total =
      detail::check_append(where, x, batch, num_new, num_kv_heads, start, table, pool, x_type,
                           kivi_stride(where, cfg, table.page_size), "must equal kivi_page_stride(cfg, page_size)");
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
  detail::flag_bad_vectors(x, x_type, total, cfg.head_dim, bad, s);
  detail::flag_bad_kivi_scales(x, x_type, batch, num_new, num_kv_heads, cfg.head_dim, bits, cfg.role == Role::kKey,
                               cfg.group_size, bad, s);
  switch (x_type) {
    case IoType::kF32: return launch_kivi_append<float>(cfg, a, static_cast<int>(total), s);
    case IoType::kF16: return launch_kivi_append<__half>(cfg, a, static_cast<int>(total), s);
    case IoType::kBf16: return launch_kivi_append<__nv_bfloat16>(cfg, a, static_cast<int>(total), s);
  }
}

namespace detail {
// decode.cu: KIVI on the fp16 tensor-core kernel of decode_h16.cuh (H16Layout::KIVI; instances below).
void kivi_paged_decode_h16(const CodecConfig& kcfg, const CodecConfig& vcfg, PagedPool kpool, PagedPool vpool,
                           const PageTable& table, const DecodeArgs& args, std::size_t kstride, std::size_t vstride,
                           Stream stream);

/// Head_dim 256: 8 warps per block, 12 with DecodeArgs::block_warps 12 only (run s30-4, b16 / b64 x 32k / 128k:
/// 0.96-1.19x the 8-warp kernel, losing at b16 x 32k, so the default keeps 8; run_mma's rule).
void launch_kivi_h16(int b, int d, int /*vb*/, const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  auto by_d = [&](auto bc) {
    constexpr int B = decltype(bc)::value;
    // The step's value scalars (16 tokens x head_dim / G_v words) must fit the stage's value slot.
    auto fits = [&](int vsb) {
      if (64 * (d / a.vside.group) > vsb) throw std::logic_error("launch_kivi_h16: value groups too small");
    };
    switch (d) {
      case 64:
        fits(H16Layout<64, B, B, 16, false, false, kModeKivi>::VSB);
        return launch_h16<64, B, B, false, kModeKivi>(shape, s, a);
      case 128:
        fits(H16Layout<128, B, B, 16, false, false, kModeKivi>::VSB);
        return launch_h16<128, B, B, false, kModeKivi>(shape, s, a);
      case 256:
        fits(H16Layout<256, B, B, 8, false, false, kModeKivi>::VSB);
        return launch_h16<256, B, B, false, kModeKivi>(shape, s, a);
    }
    throw std::logic_error("launch_kivi_h16: head_dim out of range");
  };
  if (b == 2) return by_d(std::integral_constant<int, 2>{});
  if (b == 3) return by_d(std::integral_constant<int, 3>{});
  if (b == 4) return by_d(std::integral_constant<int, 4>{});
  throw std::logic_error("launch_kivi_h16: bits out of range");
}
}  // namespace detail

void kivi_decode(const CodecConfig& kcfg, const CodecConfig& vcfg, PagedPool kpool, PagedPool vpool,
                 const PageTable& table, const DecodeArgs& args, Stream stream) {
  const char* where = "cuda::kivi_decode";
  check_arg(kcfg.role == Role::kKey && vcfg.role == Role::kValue, where, "kcodec/vcodec role",
            turbokv::detail::concat(kcfg.role == Role::kKey ? "key" : "value", "/",
                                    vcfg.role == Role::kKey ? "key" : "value"),
            "must be a key codec and a value codec");
  check_arg(kcfg.head_dim == args.head_dim && vcfg.head_dim == args.head_dim, where, "codec head_dim", kcfg.head_dim,
            "must equal args.head_dim for keys and values");
  const std::size_t kstride = kivi_stride(where, kcfg, table.page_size),
                    vstride = kivi_stride(where, vcfg, table.page_size);  // also checks the codecs
  {
    // Kernel 0 on the TurboQuant fp16 kernel (decode_h16.cuh, codes dequantized straight into the mma
    // fragments, no staging tile) where its layout applies: head_dim 64 / 128 / 256 (dense code rows; at
    // 256 and 4 bits rows of 128 bytes, since session 19), keys and values at 2, 3 (since session 19) or 4
    // bits alike, pages of at least 16 tokens, key groups
    // a multiple of 16 tokens (a warp step in one group), value groups a multiple of head_dim / 8 channels
    // (a lane's dims in one group; at 256 also 16: two groups). TURBOKV_KIVI_H16=0 in the environment
    // keeps the staged kernel (A/B runs, tests of both paths).
    static const bool h16_off = detail::env_off("TURBOKV_KIVI_H16");
    const int d = args.head_dim, kb = static_cast<int>(kcfg.bits), vb = static_cast<int>(vcfg.bits);
    const bool h16 = args.kernel == 0 && !h16_off && (d == 64 || d == 128 || d == 256) && kb == vb &&
                     kcfg.bits == kb && vcfg.bits == vb && kb >= 2 && kb <= 4 &&
                     table.page_size >= 16 && kcfg.group_size % 16 == 0 &&
                     (vcfg.group_size % (d / 8) == 0 || (d == 256 && vcfg.group_size == 16));
    if (h16) {
      detail::kivi_paged_decode_h16(kcfg, vcfg, kpool, vpool, table, args, kstride, vstride, stream);
      return;
    }
  }
  detail::StagedCall call;
  call.kside.bits = static_cast<int>(kcfg.bits), call.kside.group = kcfg.group_size;
  call.kside.group_div = FastDiv(kcfg.group_size);
  call.kside.cb = args.head_dim * call.kside.bits / 8;
  call.vside.bits = static_cast<int>(vcfg.bits), call.vside.group = vcfg.group_size;
  call.vside.group_div = FastDiv(vcfg.group_size);
  call.vside.cb = args.head_dim * call.vside.bits / 8;
  call.vside.sb = 4 * (args.head_dim / vcfg.group_size);  // each token's (min, scale) per channel group
  call.launch = detail::launch_staged<KiviKeyFmt<0>, KiviValueFmt<0>>;
  const int d = args.head_dim;
  const bool pow2 = d == 64 || d == 128 || d == 256;
  if (pow2 && kcfg.bits == 2 && vcfg.bits == 2)  // compile-time widths (KiviKeyFmt)
    call.launch_tc = detail::launch_staged_tc<KiviKeyFmt<2>, KiviValueFmt<2>, 64, 128, 256>;
  else if (pow2 && kcfg.bits == 4 && vcfg.bits == 4)
    call.launch_tc = detail::launch_staged_tc<KiviKeyFmt<4>, KiviValueFmt<4>, 64, 128, 256>;
  else
    call.launch_tc = detail::launch_staged_tc_any_dim<KiviKeyFmt<0>, KiviValueFmt<0>>;
  detail::run_staged_paged(where, kpool, vpool, table, args, kstride, "must equal kivi_page_stride(kcodec, page_size)",
                           vstride, "must equal kivi_page_stride(vcodec, page_size)", call, detail::stream_of(stream));
}

}  // namespace turbokv::cuda
