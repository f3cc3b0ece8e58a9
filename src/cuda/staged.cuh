// The staged split-K decode: one CUDA-core kernel template for the methods whose codes are decoded
// element by element (KIVI, RVQ, product VQ, PolarQuant), on paged pools (cuda.h's page table) or on
// contiguous per-(sequence, KV head) blocks (the VqDecodeArgs entry points). Not public API.
//
// Grid and head subsets as decode_kernel (decode.cuh): x = split, y = batch * num_kv_heads, z = group
// of up to two subsets of 128 threads, each serving HPW <= 4 query heads of one GQA group. Per step of
// 32 tokens the block decodes the step's keys and values once into shared memory (warp w stages
// tokens w, w + W, ...; lanes over elements), so every query head of the block reads them; then
// warp w of a subset serves head w: lane = token for the scores (float4 dot products with the query),
// one running max / sum per warp (online softmax, base 2), lanes over channels for the values. Each
// warp writes its head's split partials; decode.cu merges them by log-sum-exp and applies the value
// codec's inverse rotation (and smoothing) once per output row (combine_kernel).
//
// A format KF / VF is a type with
//   template <int KQ, class R> __device__ static void stage(const StagedSide& s, int D,
//       const std::uint8_t* row, const std::uint8_t* side, int lane, float* dst);
//   __device__ static std::size_t side_off(const StagedSide& s, int D, int ps, int slot);
// stage writes the quads dst[4 q .. 4 q + 3] (q = lane + 32 k, 4 q < D, k < KQ; one float4 store each) =
// elements 4 q .. 4 q + 3 of one token, in the domain where the logit is <q', dst> (q' the query as the
// host prepared it: rotated for the rotated methods) and the values accumulate, from the token's code
// row `row` (cb bytes, read through the reader R: GlobalBytes or SharedWords) and its side data `side`
// (norms, radii, scales: the bytes at side_off(s, D, ps, slot) of the token's block of ps tokens, the
// page size or the contiguous block's capacity). Its constants: kLut (below), kSide (stage reads side
// data), kRawSide (the side data, StagedSide::sb bytes per token, is copied with the raw row; else it
// is read from global memory), kSmemTab (tab0 / tab1 are read from shared memory: the host sets
// StagedSide::ntab0 / ntab1, 0 otherwise). A key
// format with kLut = true is not staged: lane t of each head's warp scores its own token from the codes
// and the head's look-up table (product VQ: VecInfer's table attend), through
//   __device__ static float score(const StagedSide& s, const std::uint8_t* blk, int ps, int slot,
//                                 const float* lut);
// lut = side.tab1 + (sequence * num_heads + head) * side.lut_floats, filled by StagedCall::prep. Quads, not
// single elements per lane: the per-token work (row pointers, scalars) is shared (session 12: one
// element per lane, with a 1-2 byte load and a branch each, made the staging the kernel's bottleneck).
// The formats live in their methods' files (kivi.cu, rvq.cu, pvq.cu, polar.cu).
//
// Raw rows (session 14): where the host's plan_raw allows (StagedSide::chunk > 0), the block copies the
// next step's code rows and side data into shared memory with cp.async (16-byte pieces where the code
// bytes allow) while it computes the current step, and stage reads them there (SharedWords); the tables
// of StagedSide::ntab0 / ntab1 floats are copied to shared memory once per block. Otherwise stage reads
// the rows from global memory as before (GlobalBytes).
#pragma once

#include <functional>
#include <type_traits>

#include "decode.cuh"
#include "turbokv/cuda_vq.h"


namespace turbokv::cuda::detail {

constexpr int kStagedStep = 32;  // tokens per block step

/// The field of `bits` (1..8) bits at bit offset `bit` of an LSB-first stream (turbokv/pack.h). The
/// second byte is read only when the field crosses into it (a block's last row may end the allocation).
__device__ __forceinline__ unsigned field_at(const std::uint8_t* p, int bit, int bits) {
  const std::uint8_t* b = p + (bit >> 3);
  const int sh = bit & 7;
  unsigned w = b[0];
  if (sh + bits > 8) w |= static_cast<unsigned>(b[1]) << 8;
  return (w >> sh) & ((1u << bits) - 1u);
}

/// Bits [bit, bit + nbits) of an LSB-first stream (turbokv/pack.h) in the low bits of the result, with
/// garbage above them (the caller masks); (bit mod 8) + nbits must be at most 32. Reads only the 1-4
/// bytes holding them (a block's last row may end the allocation).
__device__ __forceinline__ unsigned span_at(const std::uint8_t* p, int bit, int nbits) {
  const int sh = bit & 7, nb = (sh + nbits + 7) >> 3;
  const std::uint8_t* b = p + (bit >> 3);
  unsigned w = b[0];
  if (nb > 1) w |= static_cast<unsigned>(b[1]) << 8;
  if (nb > 2) w |= static_cast<unsigned>(b[2]) << 16;
  if (nb > 3) w |= static_cast<unsigned>(b[3]) << 24;
  return w >> sh;
}

/// Code readers of the staged formats. GlobalBytes: span_at (global memory; reads only the bytes
/// holding the bits: a block's last row may end the allocation). SharedWords: the two aligned 32-bit
/// words holding them (a row copied to shared memory, with at least 8 readable bytes after its codes).
struct GlobalBytes {
  __device__ __forceinline__ static unsigned span(const std::uint8_t* p, int bit, int nbits) {
    return span_at(p, bit, nbits);
  }
};
struct SharedWords {
  __device__ __forceinline__ static unsigned span(const std::uint8_t* p, int bit, int /*nbits*/) {
    const std::uint8_t* at = p + (bit >> 3);
    const unsigned mis = static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(at) & 3);
    // Pointer arithmetic (not an integer round trip), so the compiler keeps the shared address space.
    const std::uint32_t* w = reinterpret_cast<const std::uint32_t*>(at - mis);
    return __funnelshift_r(w[0], w[1], (mis << 3) + static_cast<unsigned>(bit & 7));
  }
};

/// The field of `bits` (1..8) bits at bit offset `bit` of an LSB-first stream, through reader R.
template <class R>
__device__ __forceinline__ unsigned field(const std::uint8_t* p, int bit, int bits) {
  return R::span(p, bit, bits) & ((1u << bits) - 1u);
}

/// The 4 fields of `bits` (1..8) bits of elements 4 q .. 4 q + 3: field i is bits [i bits, (i + 1) bits)
/// of the result (4 q bits is a multiple of 4: the span starts at bit 0 or 4 of a byte and fits in 4 bytes).
template <class R>
__device__ __forceinline__ unsigned quad_fields(const std::uint8_t* p, int q, int bits) {
  return R::span(p, 4 * q * bits, 4 * bits);
}

/// The fp16 at p (any alignment: PolarQuant's radii follow codes of an odd number of bytes), widened
/// (exact).
__device__ __forceinline__ float half_at(const std::uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(p[0] | (p[1] << 8))));
}

/// Stores a quad of staged elements (dst 16-byte aligned).
__device__ __forceinline__ void store_quad(float* dst, float x, float y, float z, float w) {
  *reinterpret_cast<float4*>(dst) = make_float4(x, y, z, w);
}

/// Shared memory of staged_decode_kernel, in this order: the block's scaled queries [4 nsub_block][D],
/// the step's decoded keys and values [kStagedStep][D + 4] each (rows of an odd number of 16-byte
/// units: the lanes' float4 reads of 32 different rows hit distinct bank groups), P [4 nsub_block][32],
/// the tables (kside ntab0 + ntab1, vside ntab0 + ntab1 floats, rounded up to 4), then the raw rows of
/// each side with chunk > 0 ([kStagedStep][rs] bytes).
struct StagedLayout {
  std::size_t tab, rawk, rawv, total;  // byte offsets, total bytes
  __host__ __device__ StagedLayout(int d, int nsub_block, const StagedSide& k, const StagedSide& v, bool klut) {
    const std::size_t fl = std::size_t(4) * nsub_block * d + 2 * std::size_t(kStagedStep) * (d + 4) +
                           4 * std::size_t(nsub_block) * kStagedStep;
    const std::size_t nt = klut ? std::size_t(v.ntab0 + v.ntab1) : std::size_t(k.ntab0 + k.ntab1 + v.ntab0 + v.ntab1);
    tab = fl * sizeof(float);
    rawk = tab + (nt + 3) / 4 * 4 * sizeof(float);
    rawv = rawk + (!klut && k.chunk > 0 ? std::size_t(kStagedStep) * k.rs : 0);
    total = rawv + (v.chunk > 0 ? std::size_t(kStagedStep) * v.rs : 0);
  }
};

/// The copies of one side's raw rows for tokens [t0, t0 + n) into buf ([kStagedStep][s.rs] bytes): the
/// code row in s.chunk-byte pieces to buf + tok rs, the aligned words holding the side data (s.sb bytes
/// at F::side_off) to buf + tok rs + cb. All threads of the block take pieces; cp.async, not waited.
template <class F>
__device__ __forceinline__ void issue_raw(const StagedSide& s, int D, const std::uint8_t* pool, std::size_t stride,
                                          const DecodeKernelArgs& a, const std::int32_t* pt, int b, int g, int ps,
                                          int t0, int n, int tid, int nthr, std::uint8_t* buf) {
  const int cpt = s.cb / s.chunk, per = static_cast<int>(s.per_div.d);
  for (int c = tid; c < n * per; c += nthr) {
    const int tok = static_cast<int>(s.per_div.div(static_cast<unsigned>(c))), piece = c - tok * per;
    const int t = t0 + tok;
    const int page = pt ? __ldg(pt + (t >> a.page_shift)) : b;
    const int slot = pt ? t & (ps - 1) : t;
    const std::uint8_t* blk = pool + (static_cast<std::size_t>(page) * a.num_kv_heads + g) * stride;
    std::uint8_t* dst = buf + tok * s.rs;
    if (piece < cpt) {
      const std::uint8_t* src = blk + static_cast<std::size_t>(slot) * s.cb + piece * s.chunk;
      dst += piece * s.chunk;
      if (s.chunk == 16) cp_async_n<16>(dst, src);
      else if (s.chunk == 8) cp_async_n<8>(dst, src);
      else cp_async_n<4>(dst, src);
    } else {
      const int w = piece - cpt;
      const std::size_t off = F::side_off(s, D, ps, slot);
      if (4 * w < static_cast<int>(off & 3) + s.sb) cp_async_n<4>(dst + s.cb + 4 * w, blk + (off & ~std::size_t(3)) + 4 * w);
    }
  }
}

/// One token's staging (lanes over quads) into dst: from the raw row in shared memory (raw) or from
/// global memory.
template <class F, int KQ>
__device__ __forceinline__ void stage_token(const StagedSide& s, int D, bool raw, const std::uint8_t* raw_row,
                                            const std::uint8_t* blk, int ps, int slot, int lane, float* dst) {
  const std::size_t off = F::side_off(s, D, ps, slot);
  if (raw) {
    const std::uint8_t* side = F::kRawSide ? raw_row + s.cb + (off & 3) : blk + off;
    F::template stage<KQ, SharedWords>(s, D, raw_row, side, lane, dst);
  } else {
    F::template stage<KQ, GlobalBytes>(s, D, blk + static_cast<std::size_t>(slot) * s.cb, blk + off, lane, dst);
  }
}

/// KC = ceil(head_dim / 32): the accumulator channels j = lane + 32 k (k < KC) of a lane (a template
/// constant: with a runtime bound of 8 the loops issued 8 predicated iterations at every head_dim);
/// KQ = ceil(head_dim / 128): the quads a lane stages per token.
template <class KF, class VF, int HPW, int KC>
__global__ void __launch_bounds__(kSubThreads* kMaxSubPerBlock) staged_decode_kernel(const DecodeKernelArgs a) {
  constexpr int KQ = (KC + 3) / 4;
  extern __shared__ __align__(16) float sm[];
  const int D = a.head_dim, DS = D + 4;
  const int split = blockIdx.x;
  const int b = blockIdx.y / a.num_kv_heads, g = blockIdx.y % a.num_kv_heads;
  const int tid = threadIdx.x, nthr = blockDim.x, nsub_block = nthr / kSubThreads;
  const int lane = tid % 32, wg = tid / 32, sub_local = wg / 4, hw = wg % 4;
  const int sub = blockIdx.z * kMaxSubPerBlock + sub_local;
  const int hg = sub * HPW + hw;
  const bool active = sub < a.nsub && hw < HPW && hg < a.group;  // warp-uniform
  const StagedLayout lay(D, nsub_block, a.kside, a.vside, KF::kLut);
  float* s_q = sm;                                  // [4 nsub_block][D]
  float* s_k = s_q + 4 * nsub_block * D;            // [32][DS]
  float* s_v = s_k + kStagedStep * DS;              // [32][DS]
  float* s_p = s_v + kStagedStep * DS + wg * kStagedStep;  // this warp's [32]
  std::uint8_t* const smb = reinterpret_cast<std::uint8_t*>(sm);
  std::uint8_t* const rawk = smb + lay.rawk;
  std::uint8_t* const rawv = smb + lay.rawv;

  // The sides with their small tables in shared memory (read after the loop's first barrier).
  StagedSide ks = a.kside, vs = a.vside;
  {
    float* t = reinterpret_cast<float*>(smb + lay.tab);
    auto put = [&](const float*& p, int nf) {  // an unconditional pointer: the loads stay ld.shared
      for (int i = tid; i < nf; i += nthr) t[i] = __ldg(p + i);
      p = t;
      t += nf;
    };
    if constexpr (KF::kSmemTab) {
      put(ks.tab0, ks.ntab0);
      put(ks.tab1, ks.ntab1);
    }
    if constexpr (VF::kSmemTab) {
      put(vs.tab0, vs.ntab0);
      put(vs.tab1, vs.ntab1);
    }
  }
  const bool rawK = !KF::kLut && ks.chunk > 0, rawV = vs.chunk > 0;  // block-uniform
  // Page ids through the warps' shuffles: the look-up-table keys, the rows read from global memory, and
  // side data left there (KIVI's key groups).
  const bool need_pg =
      KF::kLut || !rawK || (KF::kSide && !KF::kRawSide) || !rawV || (VF::kSide && !VF::kRawSide);

  int t_begin, t_end;
  split_range(a, b, split, t_begin, t_end);
  const std::size_t bh = static_cast<std::size_t>(b) * a.num_heads + g * a.group + hg;

  for (int j = lane; j < D; j += 32) s_q[wg * D + j] = active ? a.q[bh * D + j] * a.qscale : 0.0f;
  float m = -INFINITY, l = 0.0f, acc[KC];
#pragma unroll
  for (int k = 0; k < KC; ++k) acc[k] = 0.0f;
  const bool paged = a.pages != nullptr;  // otherwise: block b * num_kv_heads + g holds a.capacity tokens
  const std::int32_t* pt = paged ? a.pages + static_cast<std::size_t>(b) * a.max_pages : nullptr;
  const int ps = paged ? 1 << a.page_shift : a.capacity;
  auto issue = [&](int t0) {
    const int n = min(kStagedStep, t_end - t0);
    if constexpr (!KF::kLut)
      if (rawK) issue_raw<KF>(ks, D, a.kpool, a.kstride, a, pt, b, g, ps, t0, n, tid, nthr, rawk);
    if (rawV) issue_raw<VF>(vs, D, a.vpool, a.vstride, a, pt, b, g, ps, t0, n, tid, nthr, rawv);
    cp_async_commit();
  };
  if ((rawK || rawV) && t_begin < t_end) issue(t_begin);
  for (int t0 = t_begin; t0 < t_end; t0 += kStagedStep) {
    const int n = min(kStagedStep, t_end - t0);
    if (rawK || rawV) cp_async_wait<0>();  // this step's raw rows (issued a step ahead)
    __syncthreads();  // the previous step's keys and values are consumed; the raw rows have landed
    // The step's page ids: lane l loads token t0 + l's (one coalesced load), a token's is a shuffle.
    const int nw = nthr / 32;
    const int my_page = need_pg && lane < n ? (paged ? __ldg(pt + ((t0 + lane) >> a.page_shift)) : b) : 0;
    // Not unrolled (session 14): unrolled by 4 with both paths in the loop, ptxas gave PolarQuant's
    // instance 128 registers and RVQ's spills (-Xptxas -v, HPW 4, KC 4), halving PolarQuant's occupancy
    // (its d128 decode went 5.6 -> 9.2 ms, run s14-2); not unrolled, 52-64 registers and no spills.
#pragma unroll 1
    for (int tt = wg; tt < kStagedStep; tt += nw) {
      const int page = __shfl_sync(0xffffffffu, my_page, tt);
      if (tt >= n) break;  // warp-uniform
      const int t = t0 + tt, slot = paged ? t & (ps - 1) : t;
      const std::size_t blk = static_cast<std::size_t>(page) * a.num_kv_heads + g;
      if constexpr (!KF::kLut)
        stage_token<KF, KQ>(ks, D, rawK, rawk + tt * ks.rs, a.kpool + blk * a.kstride, ps, slot, lane, s_k + tt * DS);
      stage_token<VF, KQ>(vs, D, rawV, rawv + tt * vs.rs, a.vpool + blk * a.vstride, ps, slot, lane, s_v + tt * DS);
    }
    __syncthreads();  // keys and values staged; the raw rows are free for the next step's copies
    if ((rawK || rawV) && t0 + kStagedStep < t_end) issue(t0 + kStagedStep);
    if (!active) continue;
    float s = -INFINITY;
    if constexpr (KF::kLut) {
      if (lane < n) {
        const int t = t0 + lane;
        const std::size_t blk = static_cast<std::size_t>(my_page) * a.num_kv_heads + g;
        s = soft_cap(a, a.qscale * KF::score(a.kside, a.kpool + blk * a.kstride, ps, paged ? t & (ps - 1) : t,
                                             a.kside.tab1 + bh * a.kside.lut_floats));
      }
    } else if (lane < n) {
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
    for (int k = 0; k < KC; ++k) acc[k] *= f;
    for (int tt = 0; tt < n; ++tt) {
      const float w = s_p[tt];
#pragma unroll
      for (int k = 0; k < KC; ++k)
        if (lane + 32 * k < D) acc[k] = fmaf(w, s_v[tt * DS + lane + 32 * k], acc[k]);
    }
    __syncwarp();
  }
  if (!active) return;
#pragma unroll
  for (int k = 0; k < KC; ++k)
    if (lane + 32 * k < D) a.ws_acc[(bh * a.num_splits + split) * D + lane + 32 * k] = acc[k];
  if (lane == 0) {
    a.ws_ml[(bh * a.num_splits + split) * 2] = m;
    a.ws_ml[(bh * a.num_splits + split) * 2 + 1] = l;
  }
}

/// The dispatch of one (KF, VF) pair: HPW 1..4 x KC = ceil(head_dim / 32) (2..8), shared memory from
/// StagedLayout (the smem argument of the run() launch signature is not used).
template <class KF, class VF>
void launch_staged(int hpw, const LaunchShape& shape, std::size_t /*smem*/, cudaStream_t s,
                   const DecodeKernelArgs& a) {
  const std::size_t smem =
      StagedLayout(a.head_dim, static_cast<int>(shape.block.x) / kSubThreads, a.kside, a.vside, KF::kLut).total;
  auto go = [&](auto hpw_c) {
    constexpr int H = decltype(hpw_c)::value;
    switch ((a.head_dim + 31) / 32) {
      case 2: return launch_cached(staged_decode_kernel<KF, VF, H, 2>, shape, smem, s, a);
      case 3: return launch_cached(staged_decode_kernel<KF, VF, H, 3>, shape, smem, s, a);
      case 4: return launch_cached(staged_decode_kernel<KF, VF, H, 4>, shape, smem, s, a);
      case 5: return launch_cached(staged_decode_kernel<KF, VF, H, 5>, shape, smem, s, a);
      case 6: return launch_cached(staged_decode_kernel<KF, VF, H, 6>, shape, smem, s, a);
      case 7: return launch_cached(staged_decode_kernel<KF, VF, H, 7>, shape, smem, s, a);
      case 8: return launch_cached(staged_decode_kernel<KF, VF, H, 8>, shape, smem, s, a);
    }
    throw std::logic_error("launch_staged: head_dim out of range");
  };
  switch (hpw) {
    case 1: return go(std::integral_constant<int, 1>{});
    case 2: return go(std::integral_constant<int, 2>{});
    case 3: return go(std::integral_constant<int, 3>{});
    case 4: return go(std::integral_constant<int, 4>{});
  }
  throw std::logic_error("launch_staged: hpw out of range");
}

/// The method-specific part of one staged decode call.
struct StagedCall {
  StagedSide kside{}, vside{};
  /// The query's preparation, once per (sequence, query head) before the split kernel: q' = Pi_k q
  /// (ksigns, kscale: the key codec's randomized Hadamard rotation, rotation.h); ksigns nullptr:
  /// q' = q (KIVI; product VQ smooths and rotates in its table prep).
  const float* ksigns = nullptr;
  float kscale = 1;
  /// The merged rows' finish: out = vlambda * Pi_v^T y (vsigns nullptr: out = y).
  const float* vsigns = nullptr;
  float vscale = 1;
  const float* vlambda = nullptr;
  /// The method's instance dispatch (launch_staged<KF, VF>).
  void (*launch)(int hpw, const LaunchShape&, std::size_t, cudaStream_t, const DecodeKernelArgs&) = nullptr;
  /// Look-up-table keys (KF::kLut): kside.lut_floats floats per (sequence, query head) in the workspace
  /// after the call's own carve-up (at most staged_lut_offset: the workspace must hold staged_lut_offset
  /// + the tables), filled before the split kernel by prep(call, q, rows, lut, stream) from the fp32
  /// queries q [rows][head_dim]; prep_ctx: the method's tables.
  void (*prep)(const StagedCall&, const float* q, int rows, float* lut, cudaStream_t) = nullptr;
  const void* prep_ctx = nullptr;
};

/// Where the look-up tables may start at the latest in a staged decode's workspace (for its size):
/// decode_workspace_bytes(args) rounded up to 16. Costly (the split model for every occupancy): size
/// queries only, not per call.
inline std::size_t staged_lut_offset(const DecodeArgs& args) { return (decode_workspace_bytes(args) + 15) / 16 * 16; }

/// Host side of a staged decode on paged pools (decode.cu): the shared argument and page checks
/// (pool strides must equal kstride / vstride, the layouts' values; kstride_rule / vstride_rule say
/// which), split plan, workspace (decode_workspace_bytes), query preparation, split kernel and merge.
void run_staged_paged(const char* where, PagedPool kpool, PagedPool vpool, const PageTable& table,
                      const DecodeArgs& args, std::size_t kstride, const char* kstride_rule, std::size_t vstride,
                      const char* vstride_rule, const StagedCall& call, cudaStream_t s);

/// The same on contiguous blocks (VqDecodeArgs: block b * num_kv_heads + g of kblock / vblock bytes,
/// args.capacity tokens each, fp32 q and out, no window or soft-cap).
void run_staged_blocks(const char* where, const VqDecodeArgs& args, int head_dim, std::size_t kblock,
                       std::size_t vblock, const StagedCall& call, cudaStream_t s);

/// Workspace bytes of a run_staged_blocks call (the *_decode_workspace_bytes of cuda_vq.h and
/// cuda_polar.h): decode_workspace_bytes of the equivalent DecodeArgs, plus lut_floats floats per
/// (sequence, query head) at staged_lut_offset for look-up-table keys; 0 when batch is 0.
std::size_t staged_blocks_workspace(const char* where, const VqDecodeArgs& args, int head_dim,
                                    std::size_t lut_floats = 0);

/// The paged decode entry point of a method with tables T (RvqTables, PvqTables, PolarTables: head_dim(),
/// page_stride(page_size)): the tables' head_dim must equal args.head_dim, the pools' strides their
/// page_stride(page_size); then run_staged_paged.
template <class T>
void staged_paged_decode(const char* where, const T& kt, const T& vt, PagedPool kpool, PagedPool vpool,
                         const PageTable& table, const DecodeArgs& args, const StagedCall& call, cudaStream_t s) {
  check_arg(kt.head_dim() == args.head_dim && vt.head_dim() == args.head_dim, where, "codec head_dim",
            kt.head_dim(), "must equal args.head_dim for keys and values");
  check_page_size(where, table.page_size);
  run_staged_paged(where, kpool, vpool, table, args, kt.page_stride(table.page_size),
                   "must equal ktab.page_stride(page_size)", vt.page_stride(table.page_size),
                   "must equal vtab.page_stride(page_size)", call, s);
}

/// The contiguous-block decode entry point of such a method (VqDecodeArgs): equal head_dims, blocks
/// of block_bytes(capacity); then run_staged_blocks.
template <class T>
void staged_block_decode(const char* where, const T& kt, const T& vt, const VqDecodeArgs& args, const StagedCall& call,
                         cudaStream_t s) {
  check_arg(vt.head_dim() == kt.head_dim(), where, "vtab.head_dim", vt.head_dim(), "must equal ktab.head_dim");
  const std::size_t cap = args.capacity > 0 ? static_cast<std::size_t>(args.capacity) : 0;
  run_staged_blocks(where, args, kt.head_dim(), kt.block_bytes(cap), vt.block_bytes(cap), call, s);
}

}  // namespace turbokv::cuda::detail
