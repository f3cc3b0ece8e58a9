// Split-K flash-decoding attention on paged TurboQuant-MSE (or contiguous
// fp16) keys and values. Included by the instance files decode_k*.cu and
// decode_f16.cu; the runtime -> compile-time dispatch is launch_decode() below.
//
// Grid: x = split, y = batch * num_kv_heads, z = group of up to two head subsets.
// Block: 128 threads per head subset (HPW query heads of one KV group), up to
// two subsets (so up to 8 query heads) share every tile loaded into shared memory.
// Thread mapping inside a subset: TPT = head_dim/16 rounded up to a power of two
// lanes per token, the first head_dim/16 each owning 16 dimensions (its slice of
// Pi q and of the rotated-domain value accumulator; the others idle: head_dim 80,
// 96, 112, ...); 128/TPT token slots. Tiles of 64 tokens are copied global ->
// shared with cp.async (16-, 8- or 4-byte chunks as the row size allows; rows of
// 2 mod 4 bytes (1 or 3 bits at head_dim 16 mod 32: 80, 112, 144, ...) by plain 2-byte loads),
// double-buffered.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "common.cuh"

namespace turbokv::cuda::detail {

constexpr int kTile = 64;
constexpr int kSubThreads = 128;
constexpr int kMaxSubPerBlock = 2;

/// One pool's method parameters in the staged decode kernel (staged.cuh); each format reads the
/// fields it documents.
struct StagedSide {
  const float* tab0;  ///< device tables (codebook, centroids, trig tables)
  const float* tab1;  ///< a second table (RVQ: the stage-2 codebook; look-up-table keys: the tables, set by the host)
  int bits, bits2;    ///< code widths
  int cb;             ///< code bytes per token
  int off;            ///< RVQ: stage-1 bytes; PolarQuant: level-1 bytes (offsets in a row); product-VQ keys: num_sub
  int group;          ///< KIVI: group size
  FastDiv group_div;  ///< KIVI: division by the group size
  std::size_t lut_floats;  ///< look-up-table keys (product VQ): floats per (sequence, query head) table
  int shift;          ///< product VQ: log2 of the sub-vector size
  // Set by the method: the per-token side data (norms, radii, KIVI value scales) copied with the codes
  // (sb bytes at the format's side_off; 0: none, or read from global memory as KIVI's key groups), and
  // the leading floats of tab0 / tab1 the block copies to shared memory (0: read from global memory).
  int sb;
  int ntab0, ntab1;
  // Set by the host (plan_raw, decode.cu): the step's code rows copied to shared memory by cp.async in
  // chunk-byte pieces (16, 8 or 4: the largest dividing code bytes, block stride and pool address; for
  // rows of a number of bytes that is not a multiple of 4, the aligned pieces holding each row, which
  // then starts (slot cb) mod chunk bytes into its copy: 16-byte pieces where stride and address are
  // multiples of 16, else 4-byte words; 0: the rows are read from global memory), cpt code pieces per
  // token (cb / chunk, or the pieces cb bytes can span: (cb + 30) / 16 or (cb + 6) / 4), rs bytes per
  // row, sw side words per row (a token's cpt + sw pieces are issued by issue_raw, staged.cuh).
  int chunk, cpt, rs, sw;
};

struct DecodeKernelArgs {
  const float* q;
  float* ws_acc;  // [batch][num_heads][splits][D]
  float* ws_ml;   // [batch][num_heads][splits][2]
  const std::uint8_t* kpool;
  const std::uint8_t* vpool;
  std::size_t kstride, vstride;  // paged: bytes per (page, head) block
  const std::int32_t* seq_lens;
  const std::int32_t* pages;
  int max_pages, page_shift;
  int capacity;  // contiguous layout (fp16): tokens per (sequence, head)
  int head_dim, tpt_shift;
  int num_heads, num_kv_heads, group, nsub, num_splits;
  float qscale;  // softmax_scale * log2(e) (* Hadamard scale for rotated keys)
  int window;
  const float* ksigns;
  const float* kcent;
  const float* vcent;
  int vtab_shared;  // fp16 kernel: keys and values share one codebook (one pair table)
  float softcap_l2;   // soft-capping in log2 units: log2(e) * softcap (0 = off)
  float softcap_inv;  // 1 / softcap_l2
  const float* sketch;  // TurboQuant-Prod keys: the QJL sketch transposed, S^T, device [head_dim][m] (m = head_dim)
  float kappa;          // its unbiasing constant
  // fp16 tensor-core kernel with one split (decode_h16.cuh, FUSE): the block writes the output itself
  // (inverse value rotation vsigns, vscale; out of type io: 0 fp32, 1 fp16, 2 bf16), no combine kernel.
  int fuse_out;
#ifdef TURBOKV_H16_TRACE
  unsigned long long* trace;  // common.cuh h16_trace_buf
#endif
  void* out;
  int io;
  const float* vsigns;
  float vscale;
  // Fractional TurboQuant-MSE widths (decode_h16.cuh SPLIT instances, TqMseTables::split()): the keys'
  // and values' channels [head_dim] (part 0's then part 1's); nullptr otherwise.
  const std::int32_t* kchan;
  const std::int32_t* vchan;
  // Dense (Haar) rotations (head_dim not a power of two; TqMseTables::dense(), CUDA-core kernel only):
  // the keys' Pi^T and the values' Pi, device [head_dim][head_dim] row-major; nullptr otherwise.
  const float* krot_t;
  const float* vrot;
  // Staged decodes (staged.cuh: KIVI, RVQ, product VQ, PolarQuant): each pool's method parameters,
  // and the value codec's smoothing applied after the inverse rotation (product VQ; nullptr: none).
  StagedSide kside, vside;
  const float* vlambda;
  // Product VQ on the fp16 tensor-core kernel (decode_h16.cuh, MODE kModePvq): the key codec's smoothing,
  // device [head_dim] (q is multiplied by it before the rotation); nullptr otherwise.
  const float* klambda;
  // Two-stage RVQ at 3 or 4 bits per stage on the fp16 tensor-core kernel (decode_h16.cuh, MODE kModeRvq2):
  // the stage-2 codebooks of keys and values (kcent / vcent hold stage 1's); nullptr otherwise.
  const float* kcent2;
  const float* vcent2;
  int batch;  // sequences (the fp16 kernel's PAIR instances: an odd batch's last block has one)
};

/// Logit soft-capping on a log2-scaled logit x = log2(e) * l: log2(e) * c * tanh(l / c).
__device__ __forceinline__ float soft_cap(const DecodeKernelArgs& a, float x) {
  return a.softcap_l2 > 0.0f ? a.softcap_l2 * tanhf(x * a.softcap_inv) : x;
}

/// d[0..3] += a . b for m16n8k16, A row-major (a0..a3), B col-major (b0, b1), fp16 in, fp32 accumulate.
__device__ __forceinline__ void mma_f16(float d[4], const std::uint32_t a[4], std::uint32_t b0, std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ std::uint32_t pack_h2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&h);
}

/// movmatrix.trans (PTX ISA 7.8, sm_75+): the warp's 8x8 matrix of 16-bit elements, lane l holding
/// row l / 4, columns 2 (l % 4) (low half) and 2 (l % 4) + 1 (high half), transposed in registers:
/// lane l receives row l / 4 of the transpose in the same layout, i.e. (column l / 4, rows 2 (l % 4) and
/// 2 (l % 4) + 1) of the input. All 32 lanes must execute it together.
__device__ __forceinline__ std::uint32_t movm_trans(std::uint32_t x) {
  std::uint32_t y;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

/// (a & m) | (b & ~m): bits of a where m is set, of b elsewhere (one LOP3; written in PTX because
/// ptxas otherwise spends two on the masks when b is a shifted value).
__device__ __forceinline__ std::uint32_t bitsel(std::uint32_t a, std::uint32_t b, std::uint32_t m) {
  std::uint32_t y;
  asm("lop3.b32 %0, %1, %2, %3, 0xE4;" : "=r"(y) : "r"(a), "r"(b), "r"(m));
  return y;
}

/// ldmatrix.x4: four 8x8 fp16 matrices from shared memory; lane l gives the 16-byte row address
/// `addr` of row l % 8 of matrix l / 8 and receives, per matrix i, r[i] = elements (row l / 4, columns
/// 2 (l % 4) and 2 (l % 4) + 1) (PTX ISA "ldmatrix").
__device__ __forceinline__ void ldsm_x4(std::uint32_t r[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
/// ldmatrix.x2: matrices 0 and 1 of ldsm_x4 (lanes 0..15 give the row addresses).
__device__ __forceinline__ void ldsm_x2(std::uint32_t r[2], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
/// The same, transposed: r[i] = elements (rows 2 (l % 4) and 2 (l % 4) + 1, column l / 4) of matrix i.
__device__ __forceinline__ void ldsm_x4_trans(std::uint32_t r[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/// TurboQuant-MSE codes of width B: 16 dims = 2B bytes per thread.
template <int B>
struct TqFmt {
  static constexpr bool kRotated = true, kHasNorm = true, kContiguous = false;
  static constexpr bool kSketch = false;  // keys scored by a QJL sign sketch too (SketchKeyFmt)
  static constexpr int kEntries = 1 << B;
  static constexpr int kStages = 4;  // cp.async pipeline depth (tiles in flight per block)
  __host__ __device__ static int code_bytes(int d) { return d * B / 8; }
  __device__ __forceinline__ static void load16(const std::uint8_t* row, int r, const float* tab, float v[16]) {
    const std::uint8_t* p = row + r * 2 * B;
    std::uint64_t w;
    if constexpr (B == 4) {
      w = *reinterpret_cast<const std::uint64_t*>(p);
    } else if constexpr (B == 2) {
      w = *reinterpret_cast<const std::uint32_t*>(p);
    } else if constexpr (B == 1) {
      w = *reinterpret_cast<const std::uint16_t*>(p);
    } else {
      const std::uint16_t* p16 = reinterpret_cast<const std::uint16_t*>(p);
      w = std::uint64_t(p16[0]) | (std::uint64_t(p16[1]) << 16) | (std::uint64_t(p16[2]) << 32);
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = tab[static_cast<unsigned>(w >> (B * i)) & ((1u << B) - 1u)];
  }
};

/// fp16 values: 16 dims = 32 bytes per thread.
struct F16Fmt {
  static constexpr bool kRotated = false, kHasNorm = false, kContiguous = true;
  static constexpr bool kSketch = false;  // keys scored by a QJL sign sketch too (SketchKeyFmt)
  static constexpr int kEntries = 0;
  static constexpr int kStages = 2;  // 64 tokens x 2 x head_dim x 2 bytes per stage
  __host__ __device__ static int code_bytes(int d) { return 2 * d; }
  __device__ __forceinline__ static void load16(const std::uint8_t* row, int r, const float*, float v[16]) {
    const uint4* p = reinterpret_cast<const uint4*>(row + r * 32);
    const uint4 a = p[0], b = p[1];
    const unsigned u[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&u[i]));
      v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
  }
};

/// fp8 e4m3 codes with a per-token fp16 scale (formats.h "fp8"): 16 dims = 16 bytes per thread. The
/// scale takes the norm's place: logit = scale_t * <q, e4m3(code_t)>, value weight * scale_t. e4m3 ->
/// fp16 (hardware cvt, exact) -> fp32 (exact), so the values are e4m3_to_float's (turbokv/half.h).
struct F8Fmt {
  static constexpr bool kRotated = false, kHasNorm = true, kContiguous = false;
  static constexpr bool kSketch = false;  // keys scored by a QJL sign sketch too (SketchKeyFmt)
  static constexpr int kEntries = 0;
  static constexpr int kStages = 3;  // 64 tokens x 2 x head_dim bytes per stage
  __host__ __device__ static int code_bytes(int d) { return d; }
  __device__ __forceinline__ static void load16(const std::uint8_t* row, int r, const float*, float v[16]) {
    const uint4 w = *reinterpret_cast<const uint4*>(row + r * 16);
    const unsigned u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const __half2_raw hr =
            __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>((u[i] >> (16 * k)) & 0xffffu), __NV_E4M3);
        const float2 f = __half22float2(__half2(hr));
        v[4 * i + 2 * k] = f.x, v[4 * i + 2 * k + 1] = f.y;
      }
  }
};

/// Sketch keys in the CUDA-core kernel (tq_prod_paged_decode / qjl_paged_decode where the fp16
/// tensor-core kernel does not apply: kernel 1, head_dim 80, 96, 112, 160, ...; m = head_dim sketch rows).
/// A token's row: [MSE codes, head_dim MB / 8 bytes][head_dim sign bits, LSB-first] (formats.h "qjl" /
/// "tq-prod"); lane r's 16 dims are its MSE codes at bytes 2 MB r.. (TqFmt<MB>::load16) and sign bits
/// 16 r .. 16 r + 15 (bytes head_dim MB / 8 + 2 r, 2 r + 1). PROD (TurboQuant-Prod, Zandieh et al.,
/// arXiv 2504.19874, Alg. 2): rotated query, scalars [||x||, gamma] per token (4 bytes at page_size *
/// code_bytes + 4 slot: read from global memory in the token loop, kHasNorm false), logit = ||x|| (<Pi q,
/// c> + kappa gamma <S Pi q, signs>). !PROD (QJL, arXiv 2406.03482): unrotated query, the fp16 norm as
/// TqFmt's (staged), logit = ||x|| kappa <S q, signs>.
template <int MB, bool PROD>
struct SketchKeyFmt {
  static constexpr bool kRotated = PROD, kHasNorm = !PROD, kContiguous = false, kSketch = true;
  static constexpr int kMseBits = MB;
  static constexpr int kEntries = MB > 0 ? 1 << MB : 0;
  static constexpr int kStages = 4;
  __host__ __device__ static int code_bytes(int d) { return d * MB / 8 + d / 8; }
  /// As TqFmt<MB>::load16, by 2-byte loads: a row of d MB / 8 + d / 8 bytes is only 2-byte aligned in the
  /// stage where that is 2 mod 4 (MB 2 at head_dim 80, 112, 176, ...).
  __device__ __forceinline__ static void load16(const std::uint8_t* row, int r, const float* tab, float v[16]) {
    if constexpr (MB > 0) {
      const std::uint16_t* p16 = reinterpret_cast<const std::uint16_t*>(row + r * 2 * MB);
      std::uint64_t w = 0;
#pragma unroll
      for (int k = 0; k < MB; ++k) w |= static_cast<std::uint64_t>(p16[k]) << (16 * k);
#pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = tab[static_cast<unsigned>(w >> (MB * i)) & ((1u << MB) - 1u)];
    }
  }
  /// Sign bits 16 r .. 16 r + 15 of the token's sketch (bit i: dim 16 r + i; 1 = +1).
  __device__ __forceinline__ static unsigned signs16(const std::uint8_t* row, int r, int d) {
    return *reinterpret_cast<const std::uint16_t*>(row + d * MB / 8 + 2 * r);
  }
};

__device__ __forceinline__ int round16(int x) { return (x + 15) & ~15; }

constexpr int kMaxTilePages = kTile + 1;  // pages a 64-token tile can touch (page_size 1: 64)

/// Page ids of the tiles in flight, kept in shared memory one tile ahead of their
/// copies: the page-table loads never stall a copy (their latency hides behind
/// a tile's compute). Slot it % stages holds tile it's pages, from first(it).
struct PageRing {
  std::int32_t* s;         // [stages][kMaxTilePages], shared
  const std::int32_t* pt;  // this sequence's page-table row (nullptr: contiguous cache)
  int shift, t_begin, t_end, stages;
  __device__ int first(int it) const { return (t_begin + it * kTile) >> shift; }
  __device__ int count(int it) const {
    const int t0 = t_begin + it * kTile, t1 = min(t_end, t0 + kTile) - 1;
    return (t1 >> shift) - (t0 >> shift) + 1;
  }
  __device__ int fetch(int it, int ntiles, int tid) const {
    return (pt && it < ntiles && tid < count(it)) ? __ldg(pt + first(it) + tid) : 0;
  }
  __device__ void store(int it, int tid, int v) const {
    if (tid < kMaxTilePages) s[(it % stages) * kMaxTilePages + tid] = v;
  }
  __device__ const std::int32_t* slot(int it) const { return s + (it % stages) * kMaxTilePages; }
};

/// Issues the cp.async copies of tokens [t0, t0 + n) of one pool into a stage.
/// Rows land rs bytes apart in shared memory (rs >= cb, multiple of 16 when cb is).
template <class F>
__device__ __forceinline__ void issue_rows_strided(std::uint8_t* s_codes, int rs, std::uint32_t* s_norm,
                                                   const std::uint8_t* pool, std::size_t stride, int cb,
                                                   const DecodeKernelArgs& a, int b, int g, int t0, int n, int tid,
                                                   int nthr, const std::int32_t* pg, int first) {
  if constexpr (F::kContiguous) {
    const std::uint8_t* base =
        pool + ((static_cast<std::size_t>(b) * a.num_kv_heads + g) * a.capacity + t0) * static_cast<std::size_t>(cb);
    const int chunks = n * cb / 16;
    for (int c = tid; c < chunks; c += nthr) cp_async_n<16>(s_codes + 16 * c, base + 16 * c);
  } else {
    const int pmask = (1 << a.page_shift) - 1;
    // Rows in CH-byte chunks (the largest of 16, 8, 4 dividing cb), each from its token's page. Rows
    // of 2 mod 4 bytes are only 2-byte aligned in a page and cp.async copies 4, 8 or 16 bytes: those
    // are plain 2-byte loads and stores (the stage was consumed before this issue's barrier, and the
    // consumer's barrier after cp_async_wait orders them).
    auto rows = [&](auto ch_c) {
      constexpr int CH = decltype(ch_c)::value;
      const int cpt = cb / CH, chunks = n * cpt;
      for (int c = tid; c < chunks; c += nthr) {
        const int tok = c / cpt, piece = c - tok * cpt, pos = t0 + tok;
        const int page = pg[(pos >> a.page_shift) - first];
        const std::uint8_t* src = pool + (static_cast<std::size_t>(page) * a.num_kv_heads + g) * stride +
                                  static_cast<std::size_t>(pos & pmask) * cb + CH * piece;
        if constexpr (CH >= 4)
          cp_async_n<CH>(s_codes + tok * rs + CH * piece, src);
        else
          *reinterpret_cast<std::uint16_t*>(s_codes + tok * rs + CH * piece) =
              *reinterpret_cast<const std::uint16_t*>(src);
      }
    };
    if (cb % 16 == 0) rows(std::integral_constant<int, 16>{});
    else if (cb % 8 == 0) rows(std::integral_constant<int, 8>{});
    else if (cb % 4 == 0) rows(std::integral_constant<int, 4>{});
    else rows(std::integral_constant<int, 2>{});
    if constexpr (F::kHasNorm) {
      // The aligned 4-byte word holding each token's fp16 norm (its half: see norm_at).
      for (int i = tid; i < n; i += nthr) {
        const int pos = t0 + i;
        const int page = pg[(pos >> a.page_shift) - first];
        const std::uint8_t* blk = pool + (static_cast<std::size_t>(page) * a.num_kv_heads + g) * stride;
        const std::size_t off = (static_cast<std::size_t>(pmask + 1) * cb + 2 * static_cast<std::size_t>(pos & pmask));
        cp_async_n<4>(s_norm + i, blk + (off & ~std::size_t(3)));
      }
    }
  }
}

/// Tokens [t_begin, t_end) of split `split` of sequence b in the CUDA-core kernels: the window's
/// range (the last `window` tokens, or all) cut into num_splits chunks of whole kTile tiles.
__device__ __forceinline__ void split_range(const DecodeKernelArgs& a, int b, int split, int& t_begin, int& t_end) {
  const int L = a.seq_lens[b];
  const int start = (a.window > 0 && L > a.window) ? L - a.window : 0;
  const int len = L - start;
  int chunk = (len + a.num_splits - 1) / a.num_splits;
  chunk = (chunk + kTile - 1) / kTile * kTile;
  t_begin = start + split * chunk;
  t_end = min(L, t_begin + chunk);
}

/// The fp16 norm of token pos from its staged 4-byte word: blocks start 16-byte
/// aligned and page_size * code_bytes is a multiple of 16 for page_size >= 2, so
/// the norm is the high half exactly when page_size >= 2 and pos is odd.
__device__ __forceinline__ float norm_at(std::uint32_t word, int pos, int page_shift) {
  const unsigned hi = (page_shift > 0) ? (pos & 1) : 0;
  return __half2float(__ushort_as_half(static_cast<unsigned short>(word >> (16 * hi))));
}
/// norm_at for any even code_bytes cb (head_dim a multiple of 16): the norms start at byte
/// page_size * cb of the block, 2 mod 4 when page_size = 1 and cb = 2 mod 4 (1 or 3 bits at head_dim
/// 16 mod 32: 80, 112, 144, ...), so the norm's half is bit 1 of its byte offset page_size * cb + 2 (pos mod page_size).
__device__ __forceinline__ float norm_at_cb(std::uint32_t word, int pos, int page_shift, int cb) {
  const unsigned hi = ((((1u << page_shift) * static_cast<unsigned>(cb)) >> 1) + (pos & ((1 << page_shift) - 1))) & 1u;
  return __half2float(__ushort_as_half(static_cast<unsigned short>(word >> (16 * hi))));
}

/// The end of a CUDA-core split kernel: the 4 warps of head subset `sub` left their (m, l) in
/// s_ml [nsub_block][4][HPW][2] and their rotated-domain accumulators in s_acc [nsub_block][4][HPW][D]
/// (shared, after a barrier); merges them by log-sum-exp and writes the split's partials (ws_acc,
/// ws_ml) of the subset's heads. st: the thread's index in its subset (kSubThreads threads).
template <int HPW>
__device__ __forceinline__ void store_subset_partials(const DecodeKernelArgs& a, const float* s_acc, const float* s_ml,
                                                      int sub_local, int sub, int st, int b, int g, int split) {
  const int D = a.head_dim;
  for (int idx = st; idx < HPW * D; idx += kSubThreads) {
    const int h = idx / D, d = idx - h * D;
    const int hg = sub * HPW + h;
    if (hg >= a.group) continue;
    float mw[4], M = -INFINITY;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      mw[w] = s_ml[((sub_local * 4 + w) * HPW + h) * 2];
      M = fmaxf(M, mw[w]);
    }
    float sum = 0.0f, lsum = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float f = mw[w] == -INFINITY ? 0.0f : exp2f(mw[w] - M);
      sum += f * s_acc[((sub_local * 4 + w) * HPW + h) * D + d];
      lsum += f * s_ml[((sub_local * 4 + w) * HPW + h) * 2 + 1];
    }
    const std::size_t bh = static_cast<std::size_t>(b) * a.num_heads + g * a.group + hg;
    a.ws_acc[(bh * a.num_splits + split) * D + d] = sum;
    if (d == 0) {
      a.ws_ml[(bh * a.num_splits + split) * 2] = M;
      a.ws_ml[(bh * a.num_splits + split) * 2 + 1] = lsum;
    }
  }
}

template <class KF, class VF, int HPW>
__global__ void __launch_bounds__(kSubThreads* kMaxSubPerBlock)
    decode_kernel(const DecodeKernelArgs a) {
  extern __shared__ __align__(16) std::uint8_t smem[];
  constexpr int kStages = KF::kStages < VF::kStages ? KF::kStages : VF::kStages;
  const int D = a.head_dim;
  const int tpt = 1 << a.tpt_shift;
  const int nl = D >> 4;  // lanes r < nl own dims [16r, 16r + 16); the rest of the tpt lanes idle
  const int split = blockIdx.x;
  const int b = blockIdx.y / a.num_kv_heads, g = blockIdx.y % a.num_kv_heads;
  const int tid = threadIdx.x, nthr = blockDim.x;
  const int sub_local = tid / kSubThreads, nsub_block = nthr / kSubThreads;
  const int sub = blockIdx.z * kMaxSubPerBlock + sub_local;
  const bool sub_active = sub < a.nsub;
  const int st = tid % kSubThreads;  // thread index inside the subset
  const int lane = tid % 32, warp_in_sub = st / 32;
  const int slot = st >> a.tpt_shift, r = st & (tpt - 1), nslots = kSubThreads >> a.tpt_shift;

  const int cbK = KF::code_bytes(D), cbV = VF::code_bytes(D);
  const int kc_bytes = round16(kTile * cbK), vc_bytes = round16(kTile * cbV);
  const int stage_bytes = kc_bytes + vc_bytes + 2 * kTile * 4;
  float* s_ktab = reinterpret_cast<float*>(smem);
  float* s_vtab = s_ktab + 16;
  std::int32_t* s_pg = reinterpret_cast<std::int32_t*>(smem + 128);
  std::uint8_t* stages = smem + 128 + round16(kStages * kMaxTilePages * 4);
  float* scratch = reinterpret_cast<float*>(stages + kStages * stage_bytes);

  // This split's token range.
  int t_begin, t_end;
  split_range(a, b, split, t_begin, t_end);
  const int ntiles = t_begin < t_end ? (t_end - t_begin + kTile - 1) / kTile : 0;

  const PageRing ring{s_pg, KF::kContiguous ? nullptr : a.pages + static_cast<std::size_t>(b) * a.max_pages,
                      a.page_shift, t_begin, t_end, kStages};
  auto issue = [&](int it) {
    std::uint8_t* sp = stages + (it % kStages) * stage_bytes;
    const int t0 = t_begin + it * kTile, n = min(kTile, t_end - t0);
    std::uint32_t* s_kn = reinterpret_cast<std::uint32_t*>(sp + kc_bytes + vc_bytes);
    const std::int32_t* pg = ring.slot(it);
    const int first = ring.first(it);
    issue_rows_strided<KF>(sp, cbK, s_kn, a.kpool, a.kstride, cbK, a, b, g, t0, n, tid, nthr, pg, first);
    issue_rows_strided<VF>(sp + kc_bytes, cbV, s_kn + kTile, a.vpool, a.vstride, cbV, a, b, g, t0, n, tid, nthr, pg,
                           first);
  };
  for (int it = 0; it < kStages; ++it) ring.store(it, tid, ring.fetch(it, ntiles, tid));
  __syncthreads();
#pragma unroll
  for (int it = 0; it < kStages - 1; ++it) {
    if (it < ntiles) issue(it);
    cp_async_commit();
  }

  if (tid < 16) {
    s_ktab[tid] = tid < KF::kEntries ? a.kcent[tid] : 0.0f;
    s_vtab[tid] = tid < VF::kEntries ? a.vcent[tid] : 0.0f;
  }
  // Rotated queries of this block's heads (Pi q, in shared memory).
  const int nq = nsub_block * HPW;
  for (int idx = tid; idx < nq * D; idx += nthr) {
    const int vec = idx / D, d = idx - vec * D;
    const int hg = (blockIdx.z * kMaxSubPerBlock + vec / HPW) * HPW + vec % HPW;  // head index in the group
    float qv = 0.0f;
    if (hg < a.group) qv = a.q[(static_cast<std::size_t>(b) * a.num_heads + g * a.group + hg) * D + d];
    if (KF::kRotated && a.ksigns) qv *= a.ksigns[d];
    scratch[idx] = qv;
  }
  __syncthreads();
  // y[vec][i] = sum_j m[j][i] x[vec][j] for the block's nq query vectors (m: [D][D] row-major, fp32 fma).
  auto matvec_t = [&](const float* __restrict__ m, const float* x, float* y) {
    for (int idx = tid; idx < nq * D; idx += nthr) {
      const int vec = idx / D, i = idx - vec * D;
      float acc = 0.0f;
      for (int j = 0; j < D; ++j) acc = fmaf(__ldg(m + static_cast<std::size_t>(j) * D + i), x[vec * D + j], acc);
      y[idx] = acc;
    }
    __syncthreads();
  };
  if (KF::kRotated && a.krot_t) {
    // Dense rotation: Pi q = sum_j Pi^T[j][.] q_j into the scratch's second part, then back.
    float* y = scratch + nq * D;
    matvec_t(a.krot_t, scratch, y);
    for (int idx = tid; idx < nq * D; idx += nthr) scratch[idx] = y[idx];
    __syncthreads();
  } else if (KF::kRotated) {
    for (int h = 1; h < D; h <<= 1) {
      for (int p = tid; p < nq * D / 2; p += nthr) {
        const int vec = p / (D / 2), pp = p - vec * (D / 2);
        const int j = (pp / h) * 2 * h + pp % h;
        float* x = scratch + vec * D;
        const float u = x[j], w = x[j + h];
        x[j] = u + w;
        x[j + h] = u - w;
      }
      __syncthreads();
    }
  }
  float q[HPW][16];
#pragma unroll
  for (int h = 0; h < HPW; ++h)
#pragma unroll
    for (int i = 0; i < 16; ++i) q[h][i] = r < nl ? scratch[(sub_local * HPW + h) * D + r * 16 + i] * a.qscale : 0.0f;
  // Sketch keys: S q' (q' = Pi q or q; a.sketch = S^T [D][D]) into the scratch's second part, then the
  // lane's 16 rows times qscale kappa in registers.
  float sq[KF::kSketch ? HPW : 1][16];
  if constexpr (KF::kSketch) {
    float* y = scratch + nq * D;
    matvec_t(a.sketch, scratch, y);
    const float f = a.qscale * a.kappa;
#pragma unroll
    for (int h = 0; h < HPW; ++h)
#pragma unroll
      for (int i = 0; i < 16; ++i) sq[h][i] = r < nl ? y[(sub_local * HPW + h) * D + r * 16 + i] * f : 0.0f;
  }

  float m[HPW], l[HPW], acc[HPW][16];
#pragma unroll
  for (int h = 0; h < HPW; ++h) {
    m[h] = -INFINITY, l[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) acc[h][i] = 0.0f;
  }

  for (int it = 0; it < ntiles; ++it) {
    if (it + kStages - 1 < ntiles) issue(it + kStages - 1);
    cp_async_commit();
    const int pnext = ring.fetch(it + kStages, ntiles, tid);  // stored after this tile's compute
    cp_async_wait<kStages - 1>();
    __syncthreads();
    if (sub_active) {
      const std::uint8_t* sp = stages + (it % kStages) * stage_bytes;
      const std::uint8_t* s_kc = sp;
      const std::uint8_t* s_vc = sp + kc_bytes;
      const std::uint32_t* s_kn = reinterpret_cast<const std::uint32_t*>(sp + kc_bytes + vc_bytes);
      const std::uint32_t* s_vn = s_kn + kTile;
      const int t0 = t_begin + it * kTile, n = min(kTile, t_end - t0);
      for (int tt = slot; tt < kTile; tt += nslots) {
        const bool valid = tt < n;
        float kv[16];
        if (r < nl && (!KF::kSketch || KF::kEntries > 0)) {
          KF::load16(s_kc + tt * cbK, r, s_ktab, kv);
        } else {
#pragma unroll
          for (int i = 0; i < 16; ++i) kv[i] = 0.0f;
        }
        float dot[HPW];
#pragma unroll
        for (int h = 0; h < HPW; ++h) {
          dot[h] = 0.0f;
#pragma unroll
          for (int i = 0; i < 16; ++i) dot[h] = fmaf(q[h][i], kv[i], dot[h]);
        }
        float kn_sk = 1.0f;  // sketch keys with [||x||, gamma] scalars (PROD): ||x||
        if constexpr (KF::kSketch) {
          float gamma = 1.0f;
          if constexpr (!KF::kHasNorm) {  // the token's scalars from its page (global memory)
            gamma = 0.0f;
            if (valid) {
              const int pos = t0 + tt, pmask = (1 << a.page_shift) - 1;
              // The page id from the table in global memory, not the ring: this tile's ring slot is
              // rewritten (ring.store below) by warps that finish their tokens first.
              const int page = __ldg(a.pages + static_cast<std::size_t>(b) * a.max_pages + (pos >> a.page_shift));
              const std::uint8_t* sc = a.kpool + (static_cast<std::size_t>(page) * a.num_kv_heads + g) * a.kstride +
                                       static_cast<std::size_t>(pmask + 1) * cbK + 4 * static_cast<std::size_t>(pos & pmask);
              kn_sk = __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(sc))));
              gamma = __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(sc + 2))));
            }
          }
          const unsigned bits = r < nl ? KF::signs16(s_kc + tt * cbK, r, D) : 0u;
#pragma unroll
          for (int h = 0; h < HPW; ++h) {
            float sd = 0.0f;
#pragma unroll
            for (int i = 0; i < 16; ++i) sd += (bits >> i) & 1u ? sq[h][i] : -sq[h][i];
            dot[h] = fmaf(gamma, sd, dot[h]);
          }
        }
        for (int off = tpt >> 1; off > 0; off >>= 1)
#pragma unroll
          for (int h = 0; h < HPW; ++h) dot[h] += __shfl_xor_sync(0xffffffffu, dot[h], off);
        if (valid) {
          const float kn = KF::kHasNorm ? norm_at_cb(s_kn[tt], t0 + tt, a.page_shift, cbK) : kn_sk;
          const float vn = VF::kHasNorm ? norm_at_cb(s_vn[tt], t0 + tt, a.page_shift, cbV) : 1.0f;
          float vv[16];
          if (r < nl) {
            VF::load16(s_vc + tt * cbV, r, s_vtab, vv);
          } else {
#pragma unroll
            for (int i = 0; i < 16; ++i) vv[i] = 0.0f;
          }
#pragma unroll
          for (int h = 0; h < HPW; ++h) {
            const float s = soft_cap(a, dot[h] * kn);
            if (s > m[h]) {
              const float f = exp2f(m[h] - s);
              l[h] *= f;
#pragma unroll
              for (int i = 0; i < 16; ++i) acc[h][i] *= f;
              m[h] = s;
            }
            const float p = exp2f(s - m[h]);
            l[h] += p;
            const float w = p * vn;
#pragma unroll
            for (int i = 0; i < 16; ++i) acc[h][i] = fmaf(w, vv[i], acc[h][i]);
          }
        }
      }
    }
    ring.store(it + kStages, tid, pnext);
    __syncthreads();
  }
  cp_async_wait<0>();

  // Merge the token slots of each warp (lanes that differ in the slot bits).
  for (int off = tpt; off < 32; off <<= 1) {
#pragma unroll
    for (int h = 0; h < HPW; ++h) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[h], off);
      const float lo = __shfl_xor_sync(0xffffffffu, l[h], off);
      const float mn = fmaxf(m[h], mo);
      const float fs = m[h] == -INFINITY ? 0.0f : exp2f(m[h] - mn);
      const float fo = mo == -INFINITY ? 0.0f : exp2f(mo - mn);
      l[h] = l[h] * fs + lo * fo;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const float ao = __shfl_xor_sync(0xffffffffu, acc[h][i], off);
        acc[h][i] = acc[h][i] * fs + ao * fo;
      }
      m[h] = mn;
    }
  }
  // Merge the 4 warps of each subset through shared memory, write the split's partials.
  __syncthreads();
  float* s_acc = scratch;                           // [nsub_block][4][HPW][D]
  float* s_ml = scratch + nsub_block * 4 * HPW * D;  // [nsub_block][4][HPW][2]
  if (lane < nl) {  // slot 0's owning lanes (lane = r)
#pragma unroll
    for (int h = 0; h < HPW; ++h) {
#pragma unroll
      for (int i = 0; i < 16; ++i) s_acc[((sub_local * 4 + warp_in_sub) * HPW + h) * D + r * 16 + i] = acc[h][i];
      if (r == 0) {
        s_ml[((sub_local * 4 + warp_in_sub) * HPW + h) * 2] = m[h];
        s_ml[((sub_local * 4 + warp_in_sub) * HPW + h) * 2 + 1] = l[h];
      }
    }
  }
  __syncthreads();
  if (!sub_active) return;
  store_subset_partials<HPW>(a, s_acc, s_ml, sub_local, sub, st, b, g, split);
}

struct LaunchShape {
  dim3 grid, block;
  int nsub_block;
  int* occupancy = nullptr;  ///< if set: store resident blocks per SM instead of launching
  int* tile_tokens = nullptr;  ///< with occupancy, if set: tokens per block step (left alone: kTile)
  /// The fp16 tensor-core kernel at head_dim 256 (TurboQuant-MSE integer or fractional, Prod keys, fp8, KIVI,
  /// 2 + 2-bit RVQ): 12 warps per block instead of 8 (run_mma's reading of DecodeArgs::block_warps; the same
  /// value for the occupancy query and the launch)
  bool wide = false;
};

/// The one runtime -> compile-time dispatch point of the decode kernels:
/// key/value formats are template types, HPW (query heads per subset) 1..4.
/// Launches (or, with shape.occupancy, only queries the resident blocks per SM of) one CUDA-core split
/// kernel. Driver calls cached per (kernel, shared memory, block size): at batch 1 a decode takes tens
/// of microseconds, so per-launch attribute / occupancy calls would dominate it.
inline void launch_cached(void (*kernel)(DecodeKernelArgs), const LaunchShape& shape, std::size_t smem,
                          cudaStream_t stream, const DecodeKernelArgs& a) {
  using Key = std::pair<const void*, std::pair<std::size_t, unsigned>>;
  static std::mutex mu;
  static std::map<Key, int> occ;
  static std::map<const void*, std::size_t> raised;  // the kernel's dynamic shared memory limit, only ever raised
  int o = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    const Key key{reinterpret_cast<const void*>(kernel), {smem, shape.block.x}};
    auto it = occ.find(key);
    if (it == occ.end()) {
      // One kernel can be launched with several sizes (the staged decode's raw rows depend on the
      // pools): lowering the limit for a smaller size would fail a cached launch of a larger one.
      std::size_t& lim = raised[reinterpret_cast<const void*>(kernel)];
      if (smem > 48 * 1024 && smem > lim) {
        TKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)));
        lim = smem;
      }
      TKV_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o, kernel, static_cast<int>(shape.block.x), smem));
      it = occ.emplace(key, o).first;
    }
    o = it->second;
  }
  if (shape.occupancy) {  // query only: resident blocks per SM
    *shape.occupancy = o;
    return;
  }
  kernel<<<shape.grid, shape.block, smem, stream>>>(a);
  TKV_CHECK_LAUNCH();
}

template <class KF, class VF>
void launch_decode(int hpw, const LaunchShape& shape, std::size_t smem, cudaStream_t stream,
                   const DecodeKernelArgs& a) {
  auto go = [&](void (*kernel)(DecodeKernelArgs)) { launch_cached(kernel, shape, smem, stream, a); };
  switch (hpw) {
    case 1: return go(decode_kernel<KF, VF, 1>);
    case 2: return go(decode_kernel<KF, VF, 2>);
    case 3: return go(decode_kernel<KF, VF, 3>);
    case 4: return go(decode_kernel<KF, VF, 4>);
  }
  throw std::logic_error("launch_decode: hpw out of range");
}

/// The CUDA-core instances of sketch keys (SketchKeyFmt) with TurboQuant-MSE values of vb bits.
template <int MB, bool PROD>
void launch_sketch_decode_kb(int vb, int hpw, const LaunchShape& shape, std::size_t smem, cudaStream_t s,
                             const DecodeKernelArgs& a) {
  switch (vb) {
    case 1: return launch_decode<SketchKeyFmt<MB, PROD>, TqFmt<1>>(hpw, shape, smem, s, a);
    case 2: return launch_decode<SketchKeyFmt<MB, PROD>, TqFmt<2>>(hpw, shape, smem, s, a);
    case 3: return launch_decode<SketchKeyFmt<MB, PROD>, TqFmt<3>>(hpw, shape, smem, s, a);
    case 4: return launch_decode<SketchKeyFmt<MB, PROD>, TqFmt<4>>(hpw, shape, smem, s, a);
  }
  throw std::logic_error("launch_sketch_decode: value bits out of range");
}

/// Instance entry points (one file per key width, plus fp16).
void launch_prod_decode_k01(int kmb, int vb, int hpw, const LaunchShape&, std::size_t, cudaStream_t,
                            const DecodeKernelArgs&);
void launch_prod_decode_k23(int kmb, int vb, int hpw, const LaunchShape&, std::size_t, cudaStream_t,
                            const DecodeKernelArgs&);
void launch_qjl_decode(int vb, int hpw, const LaunchShape&, std::size_t, cudaStream_t, const DecodeKernelArgs&);
void launch_tq_decode_k1(int vb, int hpw, const LaunchShape&, std::size_t, cudaStream_t, const DecodeKernelArgs&);
void launch_tq_decode_k2(int vb, int hpw, const LaunchShape&, std::size_t, cudaStream_t, const DecodeKernelArgs&);
void launch_tq_decode_k3(int vb, int hpw, const LaunchShape&, std::size_t, cudaStream_t, const DecodeKernelArgs&);
void launch_tq_decode_k4(int vb, int hpw, const LaunchShape&, std::size_t, cudaStream_t, const DecodeKernelArgs&);
void launch_f16_decode(int hpw, const LaunchShape&, std::size_t, cudaStream_t, const DecodeKernelArgs&);
void launch_fp8_decode(int hpw, const LaunchShape&, std::size_t, cudaStream_t, const DecodeKernelArgs&);

template <int KB>
void launch_tq_decode_kb(int vb, int hpw, const LaunchShape& shape, std::size_t smem, cudaStream_t s,
                         const DecodeKernelArgs& a) {
  switch (vb) {
    case 1: return launch_decode<TqFmt<KB>, TqFmt<1>>(hpw, shape, smem, s, a);
    case 2: return launch_decode<TqFmt<KB>, TqFmt<2>>(hpw, shape, smem, s, a);
    case 3: return launch_decode<TqFmt<KB>, TqFmt<3>>(hpw, shape, smem, s, a);
    case 4: return launch_decode<TqFmt<KB>, TqFmt<4>>(hpw, shape, smem, s, a);
  }
  throw std::logic_error("launch_tq_decode: value bits out of range");
}

}  // namespace turbokv::cuda::detail
