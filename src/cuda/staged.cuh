// The staged split-K decode: two kernel templates for the methods whose codes are decoded element by
// element (KIVI, RVQ, product VQ, PolarQuant), on paged pools (cuda.h's page table) or on contiguous
// per-(sequence, KV head) blocks (the VqDecodeArgs entry points): staged_decode_kernel (CUDA cores,
// fp32; args.kernel 1, and product VQ's look-up-table keys) described here, and staged_tc_kernel (fp16
// tiles and tensor-core MMAs; args.kernel 0, the default; section "The fp16 tensor-core staged decode"
// below). Both use the same formats and raw-row copies. Not public API.
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
//   template <int KQ, int LS, class R, class T> __device__ static void stage(const StagedSide& s, int D,
//       const std::uint8_t* row, const std::uint8_t* side, int lane, T* dst);
//   __device__ static std::size_t side_off(const StagedSide& s, int D, int ps, int slot);
// stage writes up to KQ quads dst[4 q .. 4 q + 3] per lane (lane < LS, the lanes per token: 32 in the CUDA-core
// kernel; KQ LS >= D / 4, the LS lanes together write all D / 4 quads: q = lane + LS k, k < KQ, 4 q < D, in most
// formats, runs of consecutive quads in PolarQuant's; T float or __half; store_quad / store_run) =
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
// Optional constants: kAlignedRows (the format's code bytes are a multiple of 4 wherever it is
// instantiated: raw rows are read by AlignedWords), kPrefetch (with a prefetch function: side data
// read from global memory is prefetched a step ahead by issue_raw). Both exist for the
// compile-time-width instances (KiviKeyFmt / KiviValueFmt / RvqFmt<B>, session 17).
// The formats live in their methods' files (kivi.cu, rvq.cu, pvq.cu, polar.cu).
//
// Raw rows (session 14): where the host's plan_raw allows (StagedSide::chunk > 0), the block copies the
// next step's code rows and side data into shared memory with cp.async (16-byte pieces where the code
// bytes allow, or where the pool's blocks do for rows of any length: plan_raw) while it computes the current step, and stage reads them there (SharedWords); the tables
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
  static constexpr bool kAligned = false;  // side data at any offset
  __device__ __forceinline__ static unsigned span(const std::uint8_t* p, int bit, int nbits) {
    return span_at(p, bit, nbits);
  }
};
struct SharedWords {
  static constexpr bool kAligned = false;
  __device__ __forceinline__ static unsigned span(const std::uint8_t* p, int bit, int /*nbits*/) {
    const std::uint8_t* at = p + (bit >> 3);
    const unsigned mis = static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(at) & 3);
    // Pointer arithmetic (not an integer round trip), so the compiler keeps the shared address space.
    const std::uint32_t* w = reinterpret_cast<const std::uint32_t*>(at - mis);
    return __funnelshift_r(w[0], w[1], (mis << 3) + static_cast<unsigned>(bit & 7));
  }
};

/// AlignedWords: a raw row whose copy starts 4-byte aligned (formats with kAlignedRows: code bytes a
/// multiple of 4, so the row starts at its copy's first byte): the word holding the bit and the next,
/// one funnel shift, no address arithmetic beyond the word index (for a compile-time width and a lane's
/// fixed quads the shift is the same for every token of the lane). kAligned: the reader is this one
/// (the format may then rely on its own side data's alignment in the copy, e.g. KIVI's values).
struct AlignedWords {
  static constexpr bool kAligned = true;
  __device__ __forceinline__ static unsigned span(const std::uint8_t* p, int bit, int /*nbits*/) {
    const std::uint32_t* w = reinterpret_cast<const std::uint32_t*>(p) + (bit >> 5);
    return __funnelshift_r(w[0], w[1], static_cast<unsigned>(bit & 31));
  }
};

/// Whether format F declares kAlignedRows (its code bytes are a multiple of 4 for every head_dim it is
/// instantiated for, so its raw rows are read by AlignedWords); formats without the constant are not.
template <class F>
inline constexpr bool kAlignedRowsOf = false;
template <class F>
  requires requires { F::kAlignedRows; }
inline constexpr bool kAlignedRowsOf<F> = F::kAlignedRows;

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
/// The same into an fp16 tile (the tensor-core kernel; dst 8-byte aligned), each element rounded to
/// nearest even.
__device__ __forceinline__ void store_quad(__half* dst, float x, float y, float z, float w) {
  *reinterpret_cast<uint2*>(dst) = make_uint2(pack_h2(x, y), pack_h2(z, w));
}

/// Stores a run of U (1, 2 or 4) quads y[0 .. 4 U) of staged elements at dst (fp32: 16-byte aligned; fp16:
/// 8-byte aligned for U = 1, 16-byte for U >= 2), each rounded as store_quad. fp16 runs of 2 quads are one
/// 16-byte store; runs of 4 two, the lane's first store at its second half where bit 2 of `lane` is set:
/// lanes l and l + 4 of a quarter-warp staging adjacent 32-byte runs of one token then write different
/// banks (with 4 lanes per token, head_dim 64, the two tokens of a quarter-warp are 144 bytes apart, which
/// separates their banks already). fp32 runs are U float4 stores (lanes 32 U bytes apart: 2-way bank
/// conflicts for U = 2, the CUDA-core kernel above head_dim 128).
template <int U>
__device__ __forceinline__ void store_run(float* dst, const float* y, int /*lane*/) {
#pragma unroll
  for (int i = 0; i < U; ++i) store_quad(dst + 4 * i, y[4 * i], y[4 * i + 1], y[4 * i + 2], y[4 * i + 3]);
}
template <int U>
__device__ __forceinline__ void store_run(__half* dst, const float* y, int lane) {
  static_assert(U == 1 || U == 2 || U == 4, "runs of 1, 2 or 4 quads");
  if constexpr (U == 1) {
    store_quad(dst, y[0], y[1], y[2], y[3]);
  } else {
    std::uint32_t p[2 * U];
#pragma unroll
    for (int i = 0; i < 2 * U; ++i) p[i] = pack_h2(y[2 * i], y[2 * i + 1]);
    if constexpr (U == 2) {
      *reinterpret_cast<uint4*>(dst) = make_uint4(p[0], p[1], p[2], p[3]);
    } else {
      const bool swap = (lane >> 2) & 1;
      const uint4 lo = make_uint4(p[0], p[1], p[2], p[3]), hi = make_uint4(p[4], p[5], p[6], p[7]);
      *reinterpret_cast<uint4*>(dst + (swap ? 8 : 0)) = swap ? hi : lo;
      *reinterpret_cast<uint4*>(dst + (swap ? 0 : 8)) = swap ? lo : hi;
    }
  }
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

/// Piece `piece` (< s.cpt + s.sw) of one token's raw-row copy into dst (its row of the side's buffer,
/// s.rs bytes): pieces below s.cpt are the aligned s.chunk-byte pieces holding the code row (the row
/// starts (slot cb) mod chunk bytes into the first: 0 unless cb is not a multiple of 4, then chunk is 16
/// or 4 and pieces past the row's last byte are skipped, so no piece outside the block is read), to
/// dst + piece chunk; the rest are the aligned words holding the side data (s.sb bytes at F::side_off),
/// to dst + cpt chunk. cp.async, not waited.
template <class F>
__device__ __forceinline__ void issue_piece(const StagedSide& s, int D, const std::uint8_t* blk, int ps, int slot,
                                            int piece, std::uint8_t* dst) {
  if (piece < s.cpt) {
    const std::size_t row = static_cast<std::size_t>(slot) * s.cb, mis = row & (s.chunk - 1);
    const std::uint8_t* src = blk + (row - mis) + piece * s.chunk;
    dst += piece * s.chunk;
    const bool in_row = piece * s.chunk < static_cast<int>(mis) + s.cb;  // true for rows of whole pieces
    if (s.chunk == 16) {
      if (in_row) cp_async_n<16>(dst, src);
    } else if (s.chunk == 8) {
      cp_async_n<8>(dst, src);
    } else if (in_row) {
      cp_async_n<4>(dst, src);
    }
  } else {
    const int w = piece - s.cpt;
    const std::size_t off = F::side_off(s, D, ps, slot);
    if (4 * w < static_cast<int>(off & 3) + s.sb)
      cp_async_n<4>(dst + s.cpt * s.chunk + 4 * w, blk + (off & ~std::size_t(3)) + 4 * w);
  }
}

/// Whether format F has side data it reads from global memory and a hook to prefetch it:
///   __device__ static void prefetch(const StagedSide& s, int D, const std::uint8_t* blk, int ps, int slot,
///                                   bool first, int sub);
/// called by issue_raw for every token of the next step (first: the step's first token) from its
/// kRawLanes threads (sub = 0 .. kRawLanes - 1), a step before the staging reads the data (KIVI's key
/// groups: one prefetch to L1 per 128-byte line of a group, at the group's first token).
template <class F>
inline constexpr bool kPrefetchOf = false;
template <class F>
  requires requires { F::kPrefetch; }
inline constexpr bool kPrefetchOf<F> = F::kPrefetch;

/// The copies of both sides' raw rows (sides with rawK / rawV) for tokens [t0, t0 + n) into kbuf / vbuf
/// ([steps][rs] bytes each): kRawLanes threads per token, which look its page up once and share its
/// pieces (issue_piece; keys' first). All threads of the block take tokens; cp.async, not waited.
/// (Session 17: one thread per piece, each with its own division, page look-up and block address, cost
/// 236 instructions per piece loop trip, about 590 per warp and 64-token step of KIVI at d128, ncu run
/// s17-1.)
constexpr int kRawLanes = 4;
template <class KF, class VF>
__device__ __forceinline__ void issue_raw(const StagedSide& ks, const StagedSide& vs, bool rawK, bool rawV, int D,
                                          const DecodeKernelArgs& a, const std::int32_t* pt, int b, int g, int ps,
                                          int t0, int n, int tid, int nthr, std::uint8_t* kbuf, std::uint8_t* vbuf) {
  const int perK = rawK ? ks.cpt + ks.sw : 0, per = perK + (rawV ? vs.cpt + vs.sw : 0);
  for (int tok = tid / kRawLanes; tok < n; tok += nthr / kRawLanes) {
    const int t = t0 + tok;
    const int page = pt ? __ldg(pt + (t >> a.page_shift)) : b;
    const int slot = pt ? t & (ps - 1) : t;
    const std::size_t blk = static_cast<std::size_t>(page) * a.num_kv_heads + g;
    if constexpr (kPrefetchOf<KF>) KF::prefetch(ks, D, a.kpool + blk * a.kstride, ps, slot, tok == 0, tid % kRawLanes);
    for (int c = tid % kRawLanes; c < per; c += kRawLanes) {
      if constexpr (!KF::kLut) {  // look-up-table keys have no rows (rawK false)
        if (c < perK) {
          issue_piece<KF>(ks, D, a.kpool + blk * a.kstride, ps, slot, c, kbuf + tok * ks.rs);
          continue;
        }
      }
      issue_piece<VF>(vs, D, a.vpool + blk * a.vstride, ps, slot, c - perK, vbuf + tok * vs.rs);
    }
  }
}

/// The sides' small tables (StagedSide::ntab0 / ntab1 leading floats of tab0 / tab1, formats with
/// kSmemTab) copied to shared memory at t by the block's threads, and ks / vs pointed at the copies (an
/// unconditional pointer: the formats' loads stay ld.shared). Read only after a block barrier.
template <class KF, class VF>
__device__ __forceinline__ void copy_tables(StagedSide& ks, StagedSide& vs, float* t, int tid, int nthr) {
  auto put = [&](const float*& p, int nf) {
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

/// One token's staging (lanes over quads) into dst: from the raw row in shared memory (raw) or from
/// global memory.
template <class F, int KQ, int LS = 32, class T>
__device__ __forceinline__ void stage_token(const StagedSide& s, int D, bool raw, const std::uint8_t* raw_row,
                                            const std::uint8_t* blk, int ps, int slot, int lane, T* dst) {
  const std::size_t off = F::side_off(s, D, ps, slot);
  if (raw) {
    const std::uint8_t* side = F::kRawSide ? raw_row + s.cpt * s.chunk + (off & 3) : blk + off;
    if constexpr (kAlignedRowsOf<F>) {
      F::template stage<KQ, LS, AlignedWords>(s, D, raw_row, side, lane, dst);  // cb % 4 == 0: no offset
    } else {
      const std::size_t mis = (static_cast<std::size_t>(slot) * s.cb) & (s.chunk - 1);  // see issue_piece
      F::template stage<KQ, LS, SharedWords>(s, D, raw_row + mis, side, lane, dst);
    }
  } else {
    F::template stage<KQ, LS, GlobalBytes>(s, D, blk + static_cast<std::size_t>(slot) * s.cb, blk + off, lane, dst);
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
  copy_tables<KF, VF>(ks, vs, reinterpret_cast<float*>(smb + lay.tab), tid, nthr);
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
    issue_raw<KF, VF>(ks, vs, rawK, rawV, D, a, pt, b, g, ps, t0, n, tid, nthr, rawk, rawv);  // rawK: not kLut
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
    // The step's values are summed on their own, then added to the running sum once, as l adds the
    // step's ps_sum: added to acc token by token, the terms of a long, peaked split fell below half an
    // ulp of acc and were lost while l kept them (a relative error that grew with the split's length:
    // 2.98e-5 at d256 b64 x 128k in run s30-4, 1.8e-4 over one 128k-token split in an fp32 emulation
    // with values of mean 4; summed per step, 1.1e-6).
    float st[KC];
#pragma unroll
    for (int k = 0; k < KC; ++k) st[k] = 0.0f;
    for (int tt = 0; tt < n; ++tt) {
      const float w = s_p[tt];
#pragma unroll
      for (int k = 0; k < KC; ++k)
        if (lane + 32 * k < D) st[k] = fmaf(w, s_v[tt * DS + lane + 32 * k], st[k]);
    }
#pragma unroll
    for (int k = 0; k < KC; ++k) acc[k] = fmaf(acc[k], f, st[k]);
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

// ---- The fp16 tensor-core staged decode (args.kernel 0 for formats without look-up-table keys).
//
// Same grid, plan, workspace and merge as the tensor-core TurboQuant kernels (run_mma, decode.cu):
// x = split, y = sequence x KV head, z = group of up to 8 query heads of the KV head's GQA group;
// kTcWarps warps per block. Per step of kTcStep = 64 tokens the block stages the step's keys and values
// once, as the CUDA-core kernel does (the formats' stage, raw rows copied a step ahead), but into fp16
// tiles; then warp w takes tokens 16 w .. 16 w + 15 of the step with two mma.m16n8k16 products:
//
//   scores  S[16 x 16 tokens]  = Q[16 x D] . K^T[D x 16]     rows 0..7 the block's query heads (q' times
//                                                            qscale in fp16; rows 8..15 zero), K^T by ldmatrix
//   values  O^T[D x 8 heads] += V^T[D x 16] . P[16 x 8]      V^T by ldmatrix.trans, P the softmax weights:
//                                                            the score accumulators of rows 0..7 are already
//                                                            the B fragments (fp16)
//
// so every query head of the block reads each staged element once per KV head (the CUDA-core kernel
// reads the tiles once per query head, in fp32). Online softmax per warp and head (base 2); after the
// loop the warps' (max, sum, O) merge through shared memory by log-sum-exp and the block writes its
// split partials, which combine_kernel merges and rotates back.
// Precision: the staged elements, q' * qscale and the softmax weights are rounded to fp16 (relative
// error <= 2^-11 each); products accumulate in fp32. The tests bound the result with the fp16 kernels'
// tolerance.
constexpr int kTcWarps = 4, kTcStep = 16 * kTcWarps;
static_assert(kTcStep == kTile, "split_range cuts a split into whole kTile steps");

/// Shared memory of staged_tc_kernel, in this order: the step's keys and values as fp16 tiles
/// [kTcStep][D + 8] each (rows of an odd number of 16-byte units: the eight row addresses of an ldmatrix
/// hit distinct bank groups), the warps' running max and sum [kTcWarps][8] each, the block's scaled
/// queries [8][D + 8] fp16 (the mma A rows, read by ldmatrix each step: as registers they cost D / 8 of
/// them across the staging loop), the tables (as
/// StagedLayout), the raw rows of each side with chunk > 0 ([kTcStep][rs] bytes). After the loop the key
/// tile holds the warps' partial outputs, fp32 [kTcWarps][8][D] (128 D bytes <= the tile's 128 (D + 8)).
struct StagedTcLayout {
  std::size_t v, ml, q, tab, rawk, rawv, total;  // byte offsets (the key tile at 0), total bytes
  __host__ __device__ StagedTcLayout(int d, const StagedSide& k, const StagedSide& vs) {
    const std::size_t tile = std::size_t(kTcStep) * (d + 8) * 2;
    v = tile;
    ml = 2 * tile;
    q = ml + 2 * kTcWarps * 8 * sizeof(float);
    tab = q + std::size_t(8) * (d + 8) * 2;
    const std::size_t nt = std::size_t(k.ntab0 + k.ntab1 + vs.ntab0 + vs.ntab1);
    rawk = tab + (nt + 3) / 4 * 4 * sizeof(float);
    rawv = rawk + (k.chunk > 0 ? std::size_t(kTcStep) * k.rs : 0);
    total = rawv + (vs.chunk > 0 ? std::size_t(kTcStep) * vs.rs : 0);
  }
};

/// Blocks per SM the tensor-core kernel is compiled for (registers <= 65536 / (128 blocks)): shared
/// memory allows about 4 blocks at head_dim <= 128 (two 64-row fp16 tiles, 36 KB at d128, plus raw
/// rows), 3 up to 192, 2 above. Without the bound ptxas gave KIVI's d128 instance 146 registers after
/// an unrelated edit (3 blocks per SM): its decode went 4204 -> 5095 us at b16 x 64k (H200 runs s16-1,
/// s16-2).
constexpr int staged_tc_min_blocks(int d) { return d <= 128 ? 4 : d <= 192 ? 3 : 2; }

/// Lanes per token in staged_tc_kernel's staging at head_dim d (4, 8, 16 or 32): the formats' own
///   static constexpr int lanes_per_token(int d);
/// where both declare it and agree, else 8 at head_dim 64 / 128, 16 where 16 lanes divide the D / 4 quads,
/// 32 elsewhere. H200 A/B of that rule (min of two passes each): half-warps (16 lanes) where they divide the
/// quads against 32 lanes, d128 1.07-1.19x, d256 1.03-1.17x (run s16-4); 8 lanes at d64 / d128 against 16,
/// 1.03-1.22x (run s16-5).
template <class KF, class VF>
__host__ __device__ constexpr int staged_tc_lanes(int d) {
  if constexpr (requires { KF::lanes_per_token(64); VF::lanes_per_token(64); }) {
    if (KF::lanes_per_token(d) == VF::lanes_per_token(d)) return KF::lanes_per_token(d);
  }
  return d == 64 || d == 128 ? 8 : (d / 4) % 16 == 0 ? 16 : 32;
}

/// D = head_dim (a multiple of 16 in 64..256) as a template constant: the fragment arrays are registers.
template <class KF, class VF, int D>
__global__ void __launch_bounds__(32 * kTcWarps, staged_tc_min_blocks(D)) staged_tc_kernel(const DecodeKernelArgs a) {
  static_assert(!KF::kLut, "look-up-table keys are scored by the CUDA-core kernel");
  static_assert(D % 16 == 0 && D >= 64 && D <= 256, "head_dim");
  constexpr int DP = D + 8, KT = D / 16;
  // Staging: LPT lanes per token (staged_tc_lanes; a token has D / 4 quads, each of its lanes stages up to
  // KQ of them, which ones the format's stage says), TPI tokens per warp iteration: several tokens'
  // independent look-up chains in flight.
  constexpr int LPT = staged_tc_lanes<KF, VF>(D), TPI = 32 / LPT, KQ = (D / 4 + LPT - 1) / LPT;
  constexpr unsigned kFull = 0xffffffffu;
  extern __shared__ __align__(16) float sm[];
  std::uint8_t* const smb = reinterpret_cast<std::uint8_t*>(sm);
  const StagedTcLayout lay(D, a.kside, a.vside);
  __half* const s_k = reinterpret_cast<__half*>(smb);
  __half* const s_v = reinterpret_cast<__half*>(smb + lay.v);
  float* const s_m = reinterpret_cast<float*>(smb + lay.ml);
  float* const s_l = s_m + kTcWarps * 8;
  std::uint8_t* const rawk = smb + lay.rawk;
  std::uint8_t* const rawv = smb + lay.rawv;
  const int split = blockIdx.x, b = blockIdx.y / a.num_kv_heads, g = blockIdx.y % a.num_kv_heads;
  const int tid = threadIdx.x, lane = tid % 32, w = tid / 32, c4 = lane % 4, r8 = lane / 4;
  const int h0 = blockIdx.z * 8;  // the block's first head within the GQA group

  StagedSide ks = a.kside, vs = a.vside;
  copy_tables<KF, VF>(ks, vs, reinterpret_cast<float*>(smb + lay.tab), tid, 32 * kTcWarps);
  const bool rawK = ks.chunk > 0, rawV = vs.chunk > 0;  // block-uniform
  const bool need_pg = !rawK || (KF::kSide && !KF::kRawSide) || !rawV || (VF::kSide && !VF::kRawSide);
  int t_begin, t_end;
  split_range(a, b, split, t_begin, t_end);
  const std::size_t bh0 = static_cast<std::size_t>(b) * a.num_heads + g * a.group + h0;

  // The queries: row h = head h0 + h (zero past the group), q' * qscale in fp16 (read after the loop's
  // first barrier).
  __half* const s_q = reinterpret_cast<__half*>(smb + lay.q);
  for (int i = tid; i < 8 * D; i += 32 * kTcWarps) {
    const int h = i / D, j = i % D;
    s_q[h * DP + j] = __float2half_rn(h0 + h < a.group ? a.q[(bh0 + h) * D + j] * a.qscale : 0.0f);
  }
  float m = -INFINITY, l = 0.0f;  // head h0 + r8: running max (log2 units) and this lane's part of the sum
  float o[KT][4];                 // O^T m-tile mt: dims 16 mt + r8 (+ 8) x heads 2 c4, 2 c4 + 1
#pragma unroll
  for (int mt = 0; mt < KT; ++mt) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;

  const bool paged = a.pages != nullptr;  // otherwise: block b * num_kv_heads + g holds a.capacity tokens
  const std::int32_t* pt = paged ? a.pages + static_cast<std::size_t>(b) * a.max_pages : nullptr;
  const int ps = paged ? 1 << a.page_shift : a.capacity;
  auto issue = [&](int t0) {
    const int n = min(kTcStep, t_end - t0);
    issue_raw<KF, VF>(ks, vs, rawK, rawV, D, a, pt, b, g, ps, t0, n, tid, 32 * kTcWarps, rawk, rawv);
    cp_async_commit();
  };
  if ((rawK || rawV) && t_begin < t_end) issue(t_begin);
  // ldmatrix row addresses of this lane in warp w's 16-token slice: token (lane / 16) * 8 + lane % 8,
  // column ((lane / 8) % 2) * 8 (+ 16 per k- or m-tile). Keys (x4): matrices (tokens 0-7 | 8-15) x
  // (dims +0 | +8) = B fragments (b0, b1) of the two 8-token n-tiles; values (x4.trans): the A fragment
  // a0..a3 of one 16-dim m-tile.
  const std::uint32_t lrow =
      static_cast<std::uint32_t>((16 * w + (lane >> 4) * 8 + (lane & 7)) * DP * 2 + ((lane >> 3) & 1) * 16);
  const std::uint32_t kaddr = static_cast<std::uint32_t>(__cvta_generic_to_shared(s_k)) + lrow;
  const std::uint32_t vaddr = static_cast<std::uint32_t>(__cvta_generic_to_shared(s_v)) + lrow;
  // Query A fragments by ldmatrix.x2: matrices (rows 0-7) x (dims +0 | +8) = a0, a2 (a1 = a3 = 0: rows
  // 8..15); lanes 0..15 give row lane % 8, column (lane / 8) * 8.
  const std::uint32_t qaddr = static_cast<std::uint32_t>(__cvta_generic_to_shared(s_q)) +
                              static_cast<std::uint32_t>((lane & 7) * DP * 2 + ((lane >> 3) & 1) * 16);

  for (int t0 = t_begin; t0 < t_end; t0 += kTcStep) {
    const int n = min(kTcStep, t_end - t0);
    if (rawK || rawV) cp_async_wait<0>();  // this step's raw rows (issued a step ahead)
    __syncthreads();  // the previous step's tiles are consumed; the raw rows have landed
    // The step's page ids: lane l loads tokens t0 + l's and t0 + 32 + l's; a token's is a shuffle.
    const int pg0 = need_pg && lane < n ? (paged ? __ldg(pt + ((t0 + lane) >> a.page_shift)) : b) : 0;
    const int pg1 = need_pg && 32 + lane < n ? (paged ? __ldg(pt + ((t0 + 32 + lane) >> a.page_shift)) : b) : 0;
    const int nr = (n + 15) & ~15;  // rows the warps read: those past n are zeroed
    const int sl = lane % LPT;
#pragma unroll 1
    for (int tt0 = w * TPI; tt0 < nr; tt0 += kTcWarps * TPI) {
      const int tt = tt0 + lane / LPT;
      const int page = __shfl_sync(kFull, tt0 < 32 ? pg0 : pg1, tt & 31);  // tt0, tt0 + 1 on one side of 32
      __half* const kd = s_k + tt * DP;
      __half* const vd = s_v + tt * DP;
      if (tt < n) {
        const int t = t0 + tt, slot = paged ? t & (ps - 1) : t;
        const std::size_t blk = static_cast<std::size_t>(page) * a.num_kv_heads + g;
        stage_token<KF, KQ, LPT>(ks, D, rawK, rawk + tt * ks.rs, a.kpool + blk * a.kstride, ps, slot, sl, kd);
        stage_token<VF, KQ, LPT>(vs, D, rawV, rawv + tt * vs.rs, a.vpool + blk * a.vstride, ps, slot, sl, vd);
      } else {
        // Zero rows: a zero weight times a stale (or never written: NaN) value would be NaN.
        for (int j = 4 * sl; j < D; j += 4 * LPT) {
          store_quad(kd + j, 0.0f, 0.0f, 0.0f, 0.0f);
          store_quad(vd + j, 0.0f, 0.0f, 0.0f, 0.0f);
        }
      }
    }
    __syncthreads();  // tiles staged; the raw rows are free for the next step's copies
    if ((rawK || rawV) && t0 + kTcStep < t_end) issue(t0 + kTcStep);
    const int nv = n - 16 * w;  // this warp's tokens in the step (warp-uniform)
    if (nv <= 0) continue;
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kt = 0; kt < KT; ++kt) {
      std::uint32_t kf[4], qh[2];
      ldsm_x4(kf, kaddr + 32 * kt);
      ldsm_x2(qh, qaddr + 32 * kt);
      const std::uint32_t qf[4] = {qh[0], 0u, qh[1], 0u};
      mma_f16(s[0], qf, kf[0], kf[1]);
      mma_f16(s[1], qf, kf[2], kf[3]);
    }
    // Row r8 (head h0 + r8): tokens 2 c4, 2 c4 + 1 (n-tile 0) and 8 + 2 c4, 9 + 2 c4 (n-tile 1).
    float x[4] = {s[0][0], s[0][1], s[1][0], s[1][1]};
#pragma unroll
    for (int i = 0; i < 4; ++i) x[i] = (i >> 1) * 8 + 2 * c4 + (i & 1) < nv ? soft_cap(a, x[i]) : -INFINITY;
    float mx = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
    mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
    const float mn = fmaxf(m, mx), ms = mn == -INFINITY ? 0.0f : mn;
    const float f = exp2f(m - ms);  // m = -inf: 0
    float p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = exp2f(x[i] - ms);
    l = l * f + ((p[0] + p[1]) + (p[2] + p[3]));
    m = mn;
    // O^T's columns are heads 2 c4 and 2 c4 + 1: their factors live in lanes 8 c4 and 8 c4 + 4.
    const float f0 = __shfl_sync(kFull, f, 8 * c4), f1 = __shfl_sync(kFull, f, 8 * c4 + 4);
    const std::uint32_t pb0 = pack_h2(p[0], p[1]), pb1 = pack_h2(p[2], p[3]);
#pragma unroll
    for (int mt = 0; mt < KT; ++mt) {
      o[mt][0] *= f0;
      o[mt][1] *= f1;
      o[mt][2] *= f0;
      o[mt][3] *= f1;
      std::uint32_t vf[4];
      ldsm_x4_trans(vf, vaddr + 32 * mt);
      mma_f16(o[mt], vf, pb0, pb1);
    }
  }

  // Merge the warps: the sum of the quad's lanes, then (max, sum, O) by log-sum-exp through shared memory.
  l += __shfl_xor_sync(kFull, l, 1);
  l += __shfl_xor_sync(kFull, l, 2);
  __syncthreads();  // every warp is done with the tiles: the key tile takes the partial outputs
  if (c4 == 0) {
    s_m[w * 8 + r8] = m;
    s_l[w * 8 + r8] = l;
  }
  __syncthreads();
  float M0 = -INFINITY, M1 = -INFINITY;
#pragma unroll
  for (int ww = 0; ww < kTcWarps; ++ww) {
    M0 = fmaxf(M0, s_m[ww * 8 + 2 * c4]);
    M1 = fmaxf(M1, s_m[ww * 8 + 2 * c4 + 1]);
  }
  const float sc0 = M0 == -INFINITY ? 0.0f : exp2f(s_m[w * 8 + 2 * c4] - M0);
  const float sc1 = M1 == -INFINITY ? 0.0f : exp2f(s_m[w * 8 + 2 * c4 + 1] - M1);
  float* const px = reinterpret_cast<float*>(smb);  // [kTcWarps][8][D]
  float* const p0 = px + (w * 8 + 2 * c4) * D + r8;
#pragma unroll
  for (int mt = 0; mt < KT; ++mt) {
    p0[16 * mt] = o[mt][0] * sc0;
    p0[D + 16 * mt] = o[mt][1] * sc1;
    p0[16 * mt + 8] = o[mt][2] * sc0;
    p0[D + 16 * mt + 8] = o[mt][3] * sc1;
  }
  __syncthreads();
  for (int i = tid; i < 8 * D; i += 32 * kTcWarps) {
    const int h = i / D, j = i % D;
    if (h0 + h >= a.group) break;  // i / D only grows
    float acc = 0.0f;
#pragma unroll
    for (int ww = 0; ww < kTcWarps; ++ww) acc += px[(ww * 8 + h) * D + j];
    a.ws_acc[((bh0 + h) * a.num_splits + split) * D + j] = acc;
  }
  if (tid < 8 && h0 + tid < a.group) {
    float M = -INFINITY, L = 0.0f;
#pragma unroll
    for (int ww = 0; ww < kTcWarps; ++ww) M = fmaxf(M, s_m[ww * 8 + tid]);
#pragma unroll
    for (int ww = 0; ww < kTcWarps; ++ww)
      L += M == -INFINITY ? 0.0f : s_l[ww * 8 + tid] * exp2f(s_m[ww * 8 + tid] - M);
    a.ws_ml[((bh0 + tid) * a.num_splits + split) * 2] = M;
    a.ws_ml[((bh0 + tid) * a.num_splits + split) * 2 + 1] = L;
  }
}

/// The tensor-core dispatch of one (KF, VF) pair over the head_dims Ds the method takes (shared
/// memory from StagedTcLayout; shape.block = 32 kTcWarps threads).
template <class KF, class VF, int... Ds>
void launch_staged_tc(const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  const std::size_t smem = StagedTcLayout(a.head_dim, a.kside, a.vside).total;
  const bool launched =
      ((a.head_dim == Ds ? (launch_cached(staged_tc_kernel<KF, VF, Ds>, shape, smem, s, a), true) : false) || ...);
  if (!launched) throw std::logic_error("launch_staged_tc: head_dim out of range");
}

/// launch_staged_tc at every head_dim the GPU takes (the multiples of 16 in 64..256): the formats'
/// run-time-width instances and PolarQuant's compile-time-width ones (RVQ's and KIVI's compile-time-width
/// instances are at 64 / 128 / 256 only).
template <class KF, class VF>
void launch_staged_tc_any_dim(const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  launch_staged_tc<KF, VF, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256>(shape, s, a);
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
  /// Dense rotations (head_dim not a power of two; ksigns and vsigns nullptr): q' = Pi_k q by krot_t =
  /// Pi_k^T [head_dim][head_dim] (fp32) and out = vlambda * Pi_v^T y by vrot = Pi_v (the merge), around
  /// either kernel.
  const float* krot_t = nullptr;
  const float* vrot = nullptr;
  /// The method's instance dispatch (launch_staged<KF, VF>): the CUDA-core kernel (args.kernel 1).
  void (*launch)(int hpw, const LaunchShape&, std::size_t, cudaStream_t, const DecodeKernelArgs&) = nullptr;
  /// The fp16 tensor-core kernel's (launch_staged_tc<KF, VF, head_dims...>; args.kernel 0); nullptr:
  /// kernel 0 runs the CUDA-core kernel as well (look-up-table keys).
  void (*launch_tc)(const LaunchShape&, cudaStream_t, const DecodeKernelArgs&) = nullptr;
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
