// Tensor-core split-K decode attention on paged TurboQuant-MSE keys/values
// (head_dim 64/128/256 at compile time). Same grid, workspace and merge as
// decode.cuh; what changes is the inner product work, which on CUDA cores costs
// ~2 x group FMAs per cached element (see docs/CUDA_NOTES.md):
//
//   scores  S[16 tokens x 8 heads]  = C_k[16 x D] . (Pi q)^T[D x 8]     (mma m16n8k8)
//   values  O^T[D x 8 heads]       += C_v^T[D x 8 tokens] . P[8 x 8]
//
// C = centroid values looked up from the codes in shared memory. fp32 accuracy
// from TF32 tensor cores by the 3xTF32 split: x = hi + lo with hi = tf32(x),
// A.B ~= hi_a.hi_b + hi_a.lo_b + lo_a.hi_b (error ~2^-21 relative).
// Each warp owns 16 tokens of every 64-token tile: its own online-softmax
// state (max per head) and accumulator fragments; the block's 4 warps merge at
// the end. Up to 8 query heads of a KV group per block (grid z for more).
#pragma once

#include <cstdlib>

#include "decode.cuh"

namespace turbokv::cuda::detail {

__device__ __forceinline__ float tf32_hi(float x) {
  std::uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
}

/// 3xTF32 split of a centroid read from a plain fp32 table: hi = c truncated to tf32 (low 13 bits
/// cleared), lo = c - hi (exact). One 4-byte shared look-up per element instead of a (hi, lo) float2.
__device__ __forceinline__ void split_tz(float c, float& h, float& l) {
  h = __uint_as_float(__float_as_uint(c) & 0xffffe000u);
  l = c - h;
}

/// d[0..3] += a . b for m16n8k8, A row-major (a0..a3), B col-major (b0, b1), TF32 in, fp32 accumulate.
__device__ __forceinline__ void mma_tf32(float d[4], const float a[4], float b0, float b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])),
        "r"(__float_as_uint(a[3])), "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)));
}

/// The 8 codes (8*B bits, LSB-first) that start at byte `o` of a smem row (row 16-byte aligned).
template <int B>
__device__ __forceinline__ std::uint32_t load_group(const std::uint8_t* row, int o) {
  if constexpr (B == 4) return *reinterpret_cast<const std::uint32_t*>(row + o);
  if constexpr (B == 2) return *reinterpret_cast<const std::uint16_t*>(row + o);
  if constexpr (B == 1) return row[o];
  if constexpr (B == 3) {
    const std::uint32_t* w = reinterpret_cast<const std::uint32_t*>(row + (o & ~3));
    return __funnelshift_r(w[0], w[1], 8 * (o & 3));
  }
  return 0;
}

/// Row stride in shared memory: 16-byte multiple, odd in 16-byte units (bank-conflict free for 8 rows).
__host__ __device__ constexpr int mma_row_stride(int cb) {
  const int s = (cb + 15) / 16 * 16;
  return ((s / 16) % 2 == 0) ? s + 16 : s;
}

constexpr int kMmaStages = 4;
constexpr int kMmaHeads = 8;

/// A warp's P[16 tokens][8 heads] in shared memory: row t at 8 t + 8 (t / 4) (each group of 4 rows
/// shifted by 8 more floats), so the transposed reads of the value MMAs' B fragments (rows
/// 2 tig + {0, 1, 8, 9} or 8 ks + tig + {0, 4}, column gid) and the float2 writes by (gid, tig)
/// hit 32 distinct banks.
constexpr int kPWarpFloats = 16 * kMmaHeads + 24;
__host__ __device__ constexpr int p_at(int t, int h) { return t * kMmaHeads + h + 8 * (t >> 2); }
static_assert(p_at(15, 7) < kPWarpFloats && p_at(3, 7) < p_at(4, 0) && p_at(7, 7) < p_at(8, 0) &&
                  p_at(11, 7) < p_at(12, 0),
              "P rows must not overlap");

/// 2^x by the special-function unit (ex2.approx.ftz: relative error ~2^-22; 2^-inf = 0).
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/// The running max's start in the fp16 kernel's PAIR instances (decode_h16.cuh), instead of -inf:
/// there a step may hold no token of a column's sequence (the other sequence's rows are tokens), and
/// with a finite floor below any real logit, masked logits (-inf) still give p = 2^(-inf - m) = 0 and
/// the correction 2^(m - m_new) stays 0 or 1, never NaN.
constexpr float kPairMaxFloor = -1e30f;

/// The part of a warp's online-softmax step that does not depend on how norms are staged, per
/// element of the m16n8 score fragment s[4] (rows ta = tb + gid / tc = tb + gid + 8 = tokens, columns
/// 2 tig + {0, 1} = heads; element i is (row ta, tc for i < 2, >= 2; column i & 1)) before norms: ok[i]
/// whether it is a token of its head's sequence, nk[i] / nv[i] that token's key and value norms (any
/// value when not ok). Applies the key norm and soft-capping, updates the running max m and sum l per
/// head, rescales the accumulator fragments acc[J][4], and returns the value weights pw[4] = p * ||v||
/// in the layout of s (elements not ok get zero weight). Masked logits are -inf (p = 2^-inf = 0): every
/// warp that runs a step has a valid row in each column, or (PAIR) a running max starting at
/// kPairMaxFloor, so the new running max is finite.
template <int J>
__device__ __forceinline__ void softmax_elems(const DecodeKernelArgs& a, float s[4], const bool ok[4], const float nk[4],
                                              const float nv[4], float m[2], float l[2], float (&acc)[J][4],
                                              float pw[4]) {
  float x[4] = {s[0] * nk[0], s[1] * nk[1], s[2] * nk[2], s[3] * nk[3]};
  if (a.softcap_l2 > 0.0f) {  // uniform: one branch for the four logits
#pragma unroll
    for (int i = 0; i < 4; ++i) x[i] = a.softcap_l2 * tanhf(x[i] * a.softcap_inv);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) s[i] = ok[i] ? x[i] : -INFINITY;
  // The running max changes only where some logit of the step exceeds it; when no lane's does
  // (one vote), the max reduction, the correction factors and the rescale are skipped: the result
  // is the same bit for bit (the reduction would give max(m, tmax) = m and f = 2^0 = 1 exactly).
  // At the first step m = -inf (PAIR: kPairMaxFloor) and a valid row exists (PAIR: a logit above the
  // floor), so the vote is true unless every valid
  // logit is -inf or NaN (then both this and the full path give NaN).
  float f[2] = {1.0f, 1.0f};
  const bool up = s[0] > m[0] || s[1] > m[1] || s[2] > m[0] || s[3] > m[1];
  if (__any_sync(0xffffffffu, up)) {
    float tmax[2] = {fmaxf(s[0], s[2]), fmaxf(s[1], s[3])};
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
      tmax[0] = fmaxf(tmax[0], __shfl_xor_sync(0xffffffffu, tmax[0], off));
      tmax[1] = fmaxf(tmax[1], __shfl_xor_sync(0xffffffffu, tmax[1], off));
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float mn = fmaxf(m[h], tmax[h]);
      f[h] = ex2_approx(m[h] - mn);  // m = -inf (first step): 2^-inf = 0
      m[h] = mn;
    }
    if (f[0] != 1.0f || f[1] != 1.0f) {
#pragma unroll
      for (int j = 0; j < J; ++j) acc[j][0] *= f[0], acc[j][1] *= f[1], acc[j][2] *= f[0], acc[j][3] *= f[1];
    }
  }
  const float p[4] = {ex2_approx(s[0] - m[0]), ex2_approx(s[1] - m[1]), ex2_approx(s[2] - m[0]),
                      ex2_approx(s[3] - m[1])};
  l[0] = l[0] * f[0] + (p[0] + p[2]);
  l[1] = l[1] * f[1] + (p[1] + p[3]);
#pragma unroll
  for (int i = 0; i < 4; ++i) pw[i] = p[i] * (ok[i] ? nv[i] : 0.0f);  // (stale norms of invalid rows may be NaN)
}

/// softmax_elems with per-row validity and norms: va / vc whether rows ta / tc are tokens of the
/// sequence, nka, nkc, nva, nvc their key and value norms (any value when invalid).
template <int J>
__device__ __forceinline__ void softmax_weights(const DecodeKernelArgs& a, float s[4], bool va, bool vc, float nka,
                                                float nkc, float nva, float nvc, float m[2], float l[2],
                                                float (&acc)[J][4], float pw[4]) {
  const bool ok[4] = {va, va, vc, vc};
  const float nk[4] = {nka, nka, nkc, nkc}, nv[4] = {nva, nva, nvc, nvc};
  softmax_elems<J>(a, s, ok, nk, nv, m, l, acc, pw);
}

/// softmax_weights, then P[16 tokens][8 heads] = p * ||v|| written to the warp's s_p (rows ta = tb + gid,
/// tc = ta + 8 at columns 2 tig + {0, 1}; p_at).
template <int J>
__device__ __forceinline__ void softmax_core(const DecodeKernelArgs& a, float s[4], bool va, bool vc, float nka,
                                             float nkc, float nva, float nvc, float m[2], float l[2],
                                             float (&acc)[J][4], int gid, int tig, float* s_p) {
  float pw[4];
  softmax_weights(a, s, va, vc, nka, nkc, nva, nvc, m, l, acc, pw);
  __syncwarp();
  *reinterpret_cast<float2*>(s_p + p_at(gid, 2 * tig)) = make_float2(pw[0], pw[1]);
  *reinterpret_cast<float2*>(s_p + p_at(gid + 8, 2 * tig)) = make_float2(pw[2], pw[3]);
  __syncwarp();
}

/// One warp's online-softmax step over its 16 tokens of a tile (softmax_core) for norms staged as
/// the 4-byte words of norm_at (rows at or past n are not tokens).
template <int J>
__device__ __forceinline__ void mma_softmax_step(const DecodeKernelArgs& a, float s[4], float m[2], float l[2],
                                                 float (&acc)[J][4], const std::uint32_t* s_kn,
                                                 const std::uint32_t* s_vn, int tb, int n, int t0, int gid, int tig,
                                                 float* s_p) {
  const int ta = tb + gid, tc = tb + gid + 8;  // tile rows of s[0..1] and s[2..3]
  const bool va = ta < n, vc = tc < n;
  const float nka = va ? norm_at(s_kn[ta], t0 + ta, a.page_shift) : 0.0f;
  const float nkc = vc ? norm_at(s_kn[tc], t0 + tc, a.page_shift) : 0.0f;
  const float nva = va ? norm_at(s_vn[ta], t0 + ta, a.page_shift) : 0.0f;
  const float nvc = vc ? norm_at(s_vn[tc], t0 + tc, a.page_shift) : 0.0f;
  softmax_core(a, s, va, vc, nka, nkc, nva, nvc, m, l, acc, gid, tig, s_p);
}

template <int D, int KB, int VB>
struct MmaLayout {
  static constexpr int cbK = D * KB / 8, cbV = D * VB / 8;
  static constexpr int rsK = mma_row_stride(cbK), rsV = mma_row_stride(cbV);
  static constexpr int stage = kTile * (rsK + rsV) + 2 * kTile * 4;
  static constexpr int tabs = 2 * 16 * 8;                   // ktab, vtab: float2[16] each
  static constexpr int qfrag = (D / 8) * 32 * 16;           // float4 per (kk, lane)
  static constexpr int qrot = kMmaHeads * D * 4;
  static constexpr int pbuf = 4 * kPWarpFloats * 4;         // per warp P[16][8] (p_at)
  static constexpr int merge = 4 * kMmaHeads * (D + 2) * 4; // per warp acc[8][D] + m, l
  static constexpr int off_q = tabs, off_qrot = off_q + qfrag, off_p = off_qrot + qrot;
  static constexpr int pages = (kMmaStages * kMaxTilePages * 4 + 15) / 16 * 16;
  static constexpr int off_pg = off_p + pbuf;
  static constexpr int off_stage = off_pg + pages;
  static constexpr int stages_bytes = kMmaStages * stage;
  static constexpr int bytes = off_stage + (stages_bytes > merge ? stages_bytes : merge);
};

// kOneTab (default since v7): centroid tables as fp32[16] (one wavefront per 32 look-ups), split per
// element by split_tz; false = the v6 (tf32 hi, lo) float2 tables (two wavefronts per 32 look-ups).
template <int D, int KB, int VB, bool kOneTab = true>
__global__ void __launch_bounds__(128) decode_mma_kernel(const DecodeKernelArgs a) {
  using Lay = MmaLayout<D, KB, VB>;
  using KF = TqFmt<KB>;
  using VF = TqFmt<VB>;
  extern __shared__ __align__(16) std::uint8_t smem[];
  float2* s_ktab = reinterpret_cast<float2*>(smem);  // (tf32 hi, lo) of each centroid
  float2* s_vtab = s_ktab + 16;
  float* s_kt1 = reinterpret_cast<float*>(smem);  // kOneTab: fp32 centroids
  float* s_vt1 = s_kt1 + 16;
  float4* s_qf = reinterpret_cast<float4*>(smem + Lay::off_q);
  float* s_qrot = reinterpret_cast<float*>(smem + Lay::off_qrot);
  std::uint8_t* stages = smem + Lay::off_stage;
  std::int32_t* s_pg = reinterpret_cast<std::int32_t*>(smem + Lay::off_pg);

  const int split = blockIdx.x;
  const int b = blockIdx.y / a.num_kv_heads, g = blockIdx.y % a.num_kv_heads;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int gid = lane >> 2, tig = lane & 3;
  float* s_p = reinterpret_cast<float*>(smem + Lay::off_p) + warp * kPWarpFloats;

  const int L = a.seq_lens[b];
  const int start = (a.window > 0 && L > a.window) ? L - a.window : 0;
  const int len = L - start;
  int chunk = (len + a.num_splits - 1) / a.num_splits;
  chunk = (chunk + kTile - 1) / kTile * kTile;
  const int t_begin = start + split * chunk;
  const int t_end = min(L, t_begin + chunk);
  const int ntiles = t_begin < t_end ? (t_end - t_begin + kTile - 1) / kTile : 0;

  const PageRing ring{s_pg, a.pages + static_cast<std::size_t>(b) * a.max_pages, a.page_shift, t_begin, t_end,
                      kMmaStages};
  auto issue = [&](int it) {
    std::uint8_t* sp = stages + (it % kMmaStages) * Lay::stage;
    const int t0 = t_begin + it * kTile, n = min(kTile, t_end - t0);
    std::uint32_t* s_kn = reinterpret_cast<std::uint32_t*>(sp + kTile * (Lay::rsK + Lay::rsV));
    const std::int32_t* pg = ring.slot(it);
    const int first = ring.first(it);
    issue_rows_strided<KF>(sp, Lay::rsK, s_kn, a.kpool, a.kstride, Lay::cbK, a, b, g, t0, n, tid, 128, pg, first);
    issue_rows_strided<VF>(sp + kTile * Lay::rsK, Lay::rsV, s_kn + kTile, a.vpool, a.vstride, Lay::cbV, a, b, g, t0,
                           n, tid, 128, pg, first);
  };
  for (int it = 0; it < kMmaStages; ++it) ring.store(it, tid, ring.fetch(it, ntiles, tid));
  __syncthreads();
#pragma unroll
  for (int it = 0; it < kMmaStages - 1; ++it) {
    if (it < ntiles) issue(it);
    cp_async_commit();
  }

  if (tid < 16) {
    const float kc = tid < KF::kEntries ? a.kcent[tid] : 0.0f;
    const float vc = tid < VF::kEntries ? a.vcent[tid] : 0.0f;
    if constexpr (kOneTab) {
      s_kt1[tid] = kc;
      s_vt1[tid] = vc;
    } else {
      const float kh = tf32_hi(kc), vh = tf32_hi(vc);
      s_ktab[tid] = make_float2(kh, kc - kh);
      s_vtab[tid] = make_float2(vh, vc - vh);
    }
  }
  // Rotated, pre-scaled queries of the block's (up to) 8 heads, then their B fragments.
  for (int idx = tid; idx < kMmaHeads * D; idx += 128) {
    const int n = idx / D, d = idx % D;
    const int hg = blockIdx.z * kMmaHeads + n;
    float qv = 0.0f;
    if (hg < a.group) qv = a.q[(static_cast<std::size_t>(b) * a.num_heads + g * a.group + hg) * D + d] * a.ksigns[d];
    s_qrot[idx] = qv;
  }
  __syncthreads();
  for (int h = 1; h < D; h <<= 1) {
    for (int p = tid; p < kMmaHeads * D / 2; p += 128) {
      const int vec = p / (D / 2), pp = p % (D / 2);
      const int j = (pp / h) * 2 * h + pp % h;
      float* x = s_qrot + vec * D;
      const float u = x[j], w = x[j + h];
      x[j] = u + w;
      x[j + h] = u - w;
    }
    __syncthreads();
  }
  for (int idx = tid; idx < (D / 8) * 32; idx += 128) {
    const int kk = idx / 32, ln = idx % 32, n = ln >> 2, k = ln & 3;
    const float b0 = s_qrot[n * D + 8 * kk + k] * a.qscale, b1 = s_qrot[n * D + 8 * kk + k + 4] * a.qscale;
    const float h0 = tf32_hi(b0), h1 = tf32_hi(b1);
    s_qf[idx] = make_float4(h0, h1, b0 - h0, b1 - h1);
  }
  __syncthreads();

  // This lane's B fragments of Pi q (hi, lo). Holding them in registers (D/2 floats) would save one
  // LDS.128 per 8 dims but takes the 128-dim kernel from ~105 to 182 registers (2 instead of 3 blocks
  // per SM), so they stay in shared memory; the switch is kept for the next experiment.
  constexpr bool kQReg = false;
  float4 qreg[kQReg ? D / 8 : 1];
  if constexpr (kQReg) {
#pragma unroll
    for (int kk = 0; kk < D / 8; ++kk) qreg[kk] = s_qf[kk * 32 + lane];
  }

  // Per-thread state: heads 2*tig, 2*tig+1; accumulator fragments acc[j] = O^T[16j + {gid, gid+8}][2tig + {0,1}].
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float acc[D / 16][4];
#pragma unroll
  for (int j = 0; j < D / 16; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  constexpr unsigned KM = (1u << KB) - 1u, VM = (1u << VB) - 1u;

  for (int it = 0; it < ntiles; ++it) {
    if (it + kMmaStages - 1 < ntiles) issue(it + kMmaStages - 1);
    cp_async_commit();
    const int pnext = ring.fetch(it + kMmaStages, ntiles, tid);  // stored after this tile's compute
    cp_async_wait<kMmaStages - 1>();
    __syncthreads();
    const std::uint8_t* sp = stages + (it % kMmaStages) * Lay::stage;
    const std::uint8_t* s_kc = sp;
    const std::uint8_t* s_vc = sp + kTile * Lay::rsK;
    const std::uint32_t* s_kn = reinterpret_cast<const std::uint32_t*>(sp + kTile * (Lay::rsK + Lay::rsV));
    const std::uint32_t* s_vn = s_kn + kTile;
    const int t0 = t_begin + it * kTile, n = min(kTile, t_end - t0);
    const int tb = warp * 16;  // this warp's 16 tokens of the tile
    if (tb < n) {
      // ---- scores: S[token tb + {gid, gid+8}][head 2tig + {0,1}]
      float s3[3][4] = {};  // hi.hi, hi.lo, lo.hi kept apart (independent MMA chains)
      const std::uint8_t* r0 = s_kc + (tb + gid) * Lay::rsK;
      const std::uint8_t* r1 = r0 + 8 * Lay::rsK;
#pragma unroll
      for (int kk = 0; kk < D / 8; ++kk) {
        float4 qf;
        if constexpr (kQReg) qf = qreg[kk];
        else qf = s_qf[kk * 32 + lane];
        const std::uint32_t w0 = load_group<KB>(r0, kk * KB), w1 = load_group<KB>(r1, kk * KB);
        float ah[4], al[4];
        if constexpr (kOneTab) {
          split_tz(s_kt1[(w0 >> (tig * KB)) & KM], ah[0], al[0]);
          split_tz(s_kt1[(w1 >> (tig * KB)) & KM], ah[1], al[1]);
          split_tz(s_kt1[(w0 >> ((tig + 4) * KB)) & KM], ah[2], al[2]);
          split_tz(s_kt1[(w1 >> ((tig + 4) * KB)) & KM], ah[3], al[3]);
        } else {
          const float2 c0 = s_ktab[(w0 >> (tig * KB)) & KM], c1 = s_ktab[(w1 >> (tig * KB)) & KM];
          const float2 c2 = s_ktab[(w0 >> ((tig + 4) * KB)) & KM], c3 = s_ktab[(w1 >> ((tig + 4) * KB)) & KM];
          ah[0] = c0.x, ah[1] = c1.x, ah[2] = c2.x, ah[3] = c3.x;
          al[0] = c0.y, al[1] = c1.y, al[2] = c2.y, al[3] = c3.y;
        }
        mma_tf32(s3[0], ah, qf.x, qf.y);
        mma_tf32(s3[1], ah, qf.z, qf.w);
        mma_tf32(s3[2], al, qf.x, qf.y);
      }
      float s[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) s[i] = s3[0][i] + (s3[1][i] + s3[2][i]);
      mma_softmax_step(a, s, m, l, acc, s_kn, s_vn, tb, n, t0, gid, tig, s_p);
      // ---- values: O^T[16j + {gid, gid+8}][heads] += C_v^T[.., tokens] . P[tokens][heads]
      // The tile's six MMAs per block j (two 8-token halves x hi.hi, hi.lo, lo.hi) accumulate into a
      // zeroed fragment that is then added to acc[j] with IEEE fp32 adds. Accumulating the whole
      // split inside the MMA made the error grow with the split length L (0.9e-5 to 3.1e-5 at
      // 17,000-20,000 tokens in H200 runs s5-8, s5-9; 1.0e-6 to 2.2e-6 with this, run s6-8), as the
      // tensor cores' fp32 accumulation is not round-to-nearest (products aligned and truncated:
      // Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021,
      // measured on V100/T4/A100; the H200 result above is consistent with it).
      float bh[2][2], bl[2][2];
      const std::uint8_t* ra[2];
      const std::uint8_t* rb[2];
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        const float pb0 = s_p[p_at(8 * ks + tig, gid)], pb1 = s_p[p_at(8 * ks + tig + 4, gid)];
        bh[ks][0] = tf32_hi(pb0), bh[ks][1] = tf32_hi(pb1), bl[ks][0] = pb0 - bh[ks][0], bl[ks][1] = pb1 - bh[ks][1];
        ra[ks] = s_vc + (tb + 8 * ks + tig) * Lay::rsV;
        rb[ks] = ra[ks] + 4 * Lay::rsV;
      }
#pragma unroll
      for (int j = 0; j < D / 16; ++j) {
        float t4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
          const std::uint32_t la = load_group<VB>(ra[ks], 2 * j * VB), ha = load_group<VB>(ra[ks], (2 * j + 1) * VB);
          const std::uint32_t lb = load_group<VB>(rb[ks], 2 * j * VB), hb = load_group<VB>(rb[ks], (2 * j + 1) * VB);
          float ah[4], al[4];
          if constexpr (kOneTab) {
            split_tz(s_vt1[(la >> (gid * VB)) & VM], ah[0], al[0]);
            split_tz(s_vt1[(ha >> (gid * VB)) & VM], ah[1], al[1]);
            split_tz(s_vt1[(lb >> (gid * VB)) & VM], ah[2], al[2]);
            split_tz(s_vt1[(hb >> (gid * VB)) & VM], ah[3], al[3]);
          } else {
            const float2 c0 = s_vtab[(la >> (gid * VB)) & VM], c1 = s_vtab[(ha >> (gid * VB)) & VM];
            const float2 c2 = s_vtab[(lb >> (gid * VB)) & VM], c3 = s_vtab[(hb >> (gid * VB)) & VM];
            ah[0] = c0.x, ah[1] = c1.x, ah[2] = c2.x, ah[3] = c3.x;
            al[0] = c0.y, al[1] = c1.y, al[2] = c2.y, al[3] = c3.y;
          }
          mma_tf32(t4, ah, bh[ks][0], bh[ks][1]);
          mma_tf32(t4, ah, bl[ks][0], bl[ks][1]);
          mma_tf32(t4, al, bh[ks][0], bh[ks][1]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[j][i] += t4[i];
      }
    }
    ring.store(it + kMmaStages, tid, pnext);
    __syncthreads();
  }
  cp_async_wait<0>();
  __syncthreads();

  // Merge the 4 warps: per warp m, l (reduced over its rows) and acc into shared memory.
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) l[h] += __shfl_xor_sync(0xffffffffu, l[h], off);
  float* s_acc = reinterpret_cast<float*>(stages);          // [4 warps][8 heads][D]
  float* s_ml = s_acc + 4 * kMmaHeads * D;                  // [4 warps][8 heads][2]
#pragma unroll
  for (int j = 0; j < D / 16; ++j) {
    s_acc[(warp * kMmaHeads + 2 * tig) * D + 16 * j + gid] = acc[j][0];
    s_acc[(warp * kMmaHeads + 2 * tig + 1) * D + 16 * j + gid] = acc[j][1];
    s_acc[(warp * kMmaHeads + 2 * tig) * D + 16 * j + gid + 8] = acc[j][2];
    s_acc[(warp * kMmaHeads + 2 * tig + 1) * D + 16 * j + gid + 8] = acc[j][3];
  }
  if (gid == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      s_ml[(warp * kMmaHeads + 2 * tig + h) * 2] = m[h];
      s_ml[(warp * kMmaHeads + 2 * tig + h) * 2 + 1] = l[h];
    }
  }
  __syncthreads();
  for (int idx = tid; idx < kMmaHeads * D; idx += 128) {
    const int h = idx / D, d = idx % D;
    const int hg = blockIdx.z * kMmaHeads + h;
    if (hg >= a.group) continue;
    float mw[4], M = -INFINITY;
#pragma unroll
    for (int w = 0; w < 4; ++w) M = fmaxf(M, mw[w] = s_ml[(w * kMmaHeads + h) * 2]);
    float sum = 0.0f, lsum = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float fw = mw[w] == -INFINITY ? 0.0f : exp2f(mw[w] - M);
      sum += fw * s_acc[(w * kMmaHeads + h) * D + d];
      lsum += fw * s_ml[(w * kMmaHeads + h) * 2 + 1];
    }
    const std::size_t bh = static_cast<std::size_t>(b) * a.num_heads + g * a.group + hg;
    a.ws_acc[(bh * a.num_splits + split) * D + d] = sum;
    if (d == 0) {
      a.ws_ml[(bh * a.num_splits + split) * 2] = M;
      a.ws_ml[(bh * a.num_splits + split) * 2 + 1] = lsum;
    }
  }
}

/// Launch (or occupancy query) of decode_mma_kernel<D, KB, VB>; grid z = ceil(group / 8).
template <int D, int KB, int VB, bool kOneTab = true>
void launch_mma(const LaunchShape& shape, cudaStream_t stream, const DecodeKernelArgs& a) {
  auto kernel = decode_mma_kernel<D, KB, VB, kOneTab>;
  constexpr int smem = MmaLayout<D, KB, VB>::bytes;
  static const bool attr_set = [&] {  // once per instance, not per launch
    if (smem > 48 * 1024)
      TKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  }();
  (void)attr_set;
  if (shape.occupancy) {
    static int occ = -1;
    if (occ < 0) TKV_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, 128, smem));
    *shape.occupancy = occ;
    return;
  }
  kernel<<<shape.grid, dim3(128), smem, stream>>>(a);
  TKV_CHECK_LAUNCH();
}

template <int KB>
void launch_mma_kb(int d, int vb, const LaunchShape& shape, cudaStream_t s, const DecodeKernelArgs& a) {
  auto by_d = [&](auto vbc) {
    constexpr int VB = decltype(vbc)::value;
    switch (d) {
      case 64: return launch_mma<64, KB, VB>(shape, s, a);
      case 128: return launch_mma<128, KB, VB>(shape, s, a);
      case 256: return launch_mma<256, KB, VB>(shape, s, a);
    }
    throw std::logic_error("launch_mma: head_dim out of range");
  };
  switch (vb) {
    case 1: return by_d(std::integral_constant<int, 1>{});
    case 2: return by_d(std::integral_constant<int, 2>{});
    case 3: return by_d(std::integral_constant<int, 3>{});
    case 4: return by_d(std::integral_constant<int, 4>{});
  }
  throw std::logic_error("launch_mma: value bits out of range");
}

void launch_mma_k1(int d, int vb, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);
void launch_mma_k2(int d, int vb, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);
void launch_mma_k3(int d, int vb, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);
void launch_mma_k4(int d, int vb, const LaunchShape&, cudaStream_t, const DecodeKernelArgs&);

}  // namespace turbokv::cuda::detail
