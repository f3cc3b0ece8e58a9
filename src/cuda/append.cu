// TurboQuant-MSE append: fused randomized Hadamard + quantize + pack, written
// straight into pages. D/16 threads per vector (a group), 16 consecutive
// elements each (see append_kernel). The float operations are the reference's
// (formats.h, rotation.h), each an explicitly rounded intrinsic (no FMA):
//   y = x * sign; FWHT stages h = 1, 2, 4, ... ((a, b) -> (a + b, a - b));
//   y *= float(1/sqrt(D)); sumsq in 8 interleaved lanes + the fixed tree;
//   norm = sqrt(sum) (IEEE); t = y * (1 / norm) (IEEE); code = #boundaries < t.
// v3 moves data only: stages h = 1..8 in registers on 16 consecutive elements,
// one shared-memory transpose (each thread then holds 16/T consecutive elements
// of every 16-element block), stages h = 16..D/2 in registers, quantize in that
// layout, codes back to stream order as bytes through shared memory. Every
// element sees the same operations in the same order as in the reference, so
// codes and norms are bit-identical to it. History and measurements:
// docs/CUDA_NOTES.md ("Encode v3"); v2 (session 1) did stages h >= 16 with shuffles.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common.cuh"
#include "turbokv/error.h"
#include "turbokv/fastdiv.h"
#include "turbokv/formats.h"

namespace turbokv::cuda {
namespace {

constexpr int kThreads = 256;

struct AppendArgs {
  const void* x;  // [total][D] of the kernel's XT
  int total;  // batch * num_new * num_kv_heads vectors
  FastDiv div_heads, div_new;  // divisors num_kv_heads and num_new (v -> (v / num_kv_heads, v % num_kv_heads), ...)
  const std::int32_t* start;
  const std::int32_t* pages;
  int max_pages, page_shift;
  std::uint8_t* pool;
  std::size_t stride;
  const float* signs;
  const float* boundaries;
  float scale;
  // SPLIT instances (one part of a fractional width, TqMseTables::split()): element i of this part's
  // vector is input channel chan[i] of a row of in_stride elements; its codes go to byte code_off of
  // the token's row_bytes and its norm is scalar norm_idx of the token's two.
  const std::int32_t* chan;
  int in_stride, row_bytes, code_off, norm_idx;
  // Dense rotation (head_dim not a power of two, append_dense_kernel): Pi^T [dim][dim] row-major.
  const float* rot_t;
  int dim;
  // Optional (nullptr: off): set to 1 by a vector the reference would reject (see rejected_norm).
  std::int32_t* bad;
};

// The reference rejects a vector holding a NaN or Inf, or whose norm is >= 32768 (ref/common.cpp:
// its fp16 norm must stay in range). Here the fp32 norm of the kernel's own sum of squares is tested:
// a NaN or Inf input, or squares that overflow, make it NaN or Inf, so one compare covers all three.
// (The fp64 norm of the reference and this fp32 one can differ in the last bits: vectors within
// rounding of 32768 may be judged differently.)
__device__ __forceinline__ bool rejected_norm(float norm) { return !(norm < 32768.0f); }

// The rotation of thread t's four 16-byte units in the staged input (kStage): slot s holds unit s ^
// stage_rot(t). Also the rotation of the squares' block p (stored by its owner, thread p).
__host__ __device__ constexpr int stage_rot(int t) { return (t >> 1) & 3; }

// Centroid index without a compare per boundary (B >= 3): a monotone cell map
// cell(u) = round((kCells - 1) * sat(u * sa + sb)) into kCells cells: one fma
// with the .sat modifier (clamps to [0, 1] and maps NaN to +0, so NaN lands in
// cell 0), then an fma by kCells - 1 onto the 1.5 * 2^23 rounding constant
// (two instructions; clamping the cell with max and min cost three). Because
// the map is monotone, every boundary in a lower cell is < u and every boundary
// in a higher cell is > u; the table is built by applying the same map to the
// boundaries, so when each cell holds at most one boundary
//   #boundaries < u  ==  base[cell] + (u > first[cell])
// exactly (first = the first boundary at or above the cell, +inf if none).
// The boundaries are ascending (codebook.h: midpoints of ascending centroids),
// so base[cell] indexes the first one at or above the cell. When some cell
// holds two boundaries the block falls back to one compare per boundary
// (block-uniform flag; never the case for the d = 64/128/256 codebooks).
constexpr int kCells = 32;
constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23

__device__ __forceinline__ int cell_of(float u, float sa, float sb) {
  float s;
  asm("fma.rn.sat.f32 %0, %1, %2, %3;" : "=f"(s) : "f"(u), "f"(sa), "f"(sb));
  return __float_as_int(__fmaf_rn(s, static_cast<float>(kCells - 1), kMagic)) - __float_as_int(kMagic);
}

// x << s with PTX's clamp (s >= 32 gives 0).
__device__ __forceinline__ unsigned shl_clamped(unsigned x, int s) {
  unsigned r;
  asm("shl.b32 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(s));
  return r;
}

// base + (u > first) (false for NaN) as a compare and a predicated add: written as C++ (or with
// `set`), ptxas made it a compare, a select and an add.
__device__ __forceinline__ unsigned count_above(unsigned base, float u, float first) {
  asm("{\n\t.reg .pred p;\n\tsetp.gt.f32 p, %1, %2;\n\t@p add.u32 %0, %0, 1;\n\t}" : "+r"(base) : "f"(u), "f"(first));
  return base;
}

// The Hadamard signs are +-1 (Rotation::signs): +-1.0f = {0x3F or 0xBF} 80 00 00,
// so a sign is kept as its top byte, four to a register, and rebuilt with one
// PRMT (byte k of quad on top of 0x00800000): the same float operand for the
// same multiply. The PRMT is volatile asm inside the loop: otherwise the
// compiler hoists the 16 rebuilt signs out of the loop and holds 16 registers.
template <int K>
__device__ __forceinline__ float sign_of(unsigned quad) {
  unsigned r;
  asm volatile("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(quad), "r"(0x00800000u), "n"(0x0654 | (K << 12)));
  return __uint_as_float(r);
}

// Elements [16t, 16t + 16) of vector v in two parts: raw 16-byte loads (4 for fp32,
// 2 for 16-bit input, so a 16-bit prefetch holds 8 registers), then the exact widening.
template <class XT>
struct RawX {
  uint4 w[std::is_same_v<XT, float> ? 4 : 2];
};
template <int D, class XT>
__device__ __forceinline__ void load_raw(const AppendArgs& a, int v, int t, RawX<XT>& r) {
  const uint4* xr =
      reinterpret_cast<const uint4*>(static_cast<const XT*>(a.x) + static_cast<std::size_t>(v) * D + 16 * t);
#pragma unroll
  for (int j = 0; j < (std::is_same_v<XT, float> ? 4 : 2); ++j) r.w[j] = __ldcs(xr + j);
}
template <class XT>
__device__ __forceinline__ void widen_raw(const RawX<XT>& r, float* x) {
  if constexpr (std::is_same_v<XT, float>) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      x[4 * j] = __uint_as_float(r.w[j].x), x[4 * j + 1] = __uint_as_float(r.w[j].y);
      x[4 * j + 2] = __uint_as_float(r.w[j].z), x[4 * j + 3] = __uint_as_float(r.w[j].w);
    }
  } else {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const unsigned w[4] = {r.w[j].x, r.w[j].y, r.w[j].z, r.w[j].w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        XT h[2];
        memcpy(h, &w[k], 4);
        x[8 * j + 2 * k] = static_cast<float>(h[0]);
        x[8 * j + 2 * k + 1] = static_cast<float>(h[1]);
      }
    }
  }
}

// v3. T = D/16 threads per vector (group); thread t of a group.
//  1. Load: thread t holds the 16 consecutive elements [16t, 16t + 16); the group's
//     next vector is prefetched (raw 16-byte loads).
//  2. x_i * x_i (rounded, as the reference's chain multiply) goes to the group's x
//     row (element i at float 20 (i / 16) + i % 16, row stride RX = 20T + 8 floats)
//     for the sum of squares.
//  3. y = x * sign; FWHT stages h = 1, 2, 4, 8 in registers (pairs inside a block
//     of 16 elements).
//  4. Transpose through the group's y row (block j = elements [16j, 16j + 16) at
//     float 20j, row stride RY = 20T, + 16 when 20T is a multiple of 32): thread t
//     writes its block with 4 STS.128, then, after __syncwarp, reads for every
//     block j its P = 16/T consecutive elements i = 16j + Pt + q (q < P) with one
//     LDS.{128,64,32} (T = 4, 8, 16): z[P j + q] = y[16j + Pt + q].
//  5. FWHT stages h = 16 .. D/2 pair i with i + h, i.e. block j with block j + h/16
//     at the same (t, q): both are in this thread's z, so these stages run in
//     registers. Same butterflies, same stage order, same (a + b, a - b) as the
//     reference.
//  6. Sum of squares from the x row's squares (8 interleaved lanes k = i % 8 over ascending i,
//     then the fixed tree by an xor-butterfly: both partners compute the same sum).
//  7. Quantize in the transposed layout (same ops per element), the code of element
//     i as one byte at byte 64 + 80 (i / 16) + i % 16 of the group's x row: the
//     4-float gap after each 16-float block, which the x writes never touch (P
//     consecutive codes: one STS.{32,U16,U8}). After __syncwarp thread t reads the
//     16 code bytes of elements [16t, 16t + 16) with one LDS.128 and packs them
//     LSB-first into its 2B bytes of the stream.
// Staged input (fp32 at T = 8, 16: kStagedInput). Thread t's 16 consecutive floats are 64 bytes at a
// 64-byte lane stride, so each of the four LDG.128 of a warp touched 16 cache lines: ncu (run s26-1,
// d256 3-bit) had these loads at about a third of the L1 data-pipe wavefronts, the unit that bounds the
// kernel (87% busy). Instead, lane 0 of each warp brings the warp's 32 / T consecutive vectors into
// the warp's stage in shared memory (dynamic, D * 4 bytes per group) by one bulk copy completing on
// the warp's mbarrier, issued a vector ahead (once every lane has read the stage; the loop is then
// warp-uniform, with whole-warp __syncwarps), and thread
// t reads its 64 bytes with four LDS.128 at rotated units: slot s holds unit s ^ rot,
// rot = stage_rot(t) = (t >> 1) & 3, so the 8 lanes of a quarter-warp hit 8 distinct 16-byte bank groups (4t + (s ^ rot) mod 8). The
// rotation is carried, not undone: the signs are stored per slot, FWHT stages h = 4, 8 pair slots (s,
// s ^ 1) and (s, s ^ 2) and write (a + b, a - b) or (b - a, b + a) by one fma with +-1 each (the
// reference's rounded sums, formats.h), the y row takes slot s at unit s ^ rot (conflict-free at a
// 16-float block stride, which also saves the row's gaps: four blocks of about 56 KB fit an SM), and the
// squares are stored by slot, the chain readers of block p undoing rot(p) (compile-time) in their
// addresses and, at T = 16, in the order of each pair. Run s26-4 (A/B): 1.03-1.07x at head_dim 128 /
// 256 (2-bit 0.995-1.003x); with a copy per group and a partial-mask __syncwarp (s26-2/3) racecheck
// flagged the re-issue and the y stores had become 4-way-conflicting STS.32 (address through `+`,
// not a float4 index): 0.83-0.93x.
// Two __syncwarps per vector (kStage: a third after the stage reads): after the x/y writes, and after the code writes
// (every x/y read of the vector precedes the code writes: the codes depend on
// them; the code bytes of the next vector are written after its first
// __syncwarp, which follows this vector's code reads).
// Registers (59-64, no spills with nvcc 13.0): the
// signs are not held; s_sign keeps the top byte of each +-1.0f and one LDS.128
// per vector plus one PRMT per element rebuild the same float operand of the
// same multiply (sign_of); 16-bit input (not SPLIT) XORs the raw sign bits instead
// (s_sgnx, two LDS.128 per vector; see SX in append_kernel). The table and fallback paths are separate loops
// (no flag register).
// Shared memory per block: x rows VPB * RX + y rows VPB * RY floats (42.5 to
// 44.0 KB; 4 blocks of 256 threads per SM, bound by registers). Bank conflicts
// (per warp; STS/LDS.128 in quarter-warp phases of 8 lanes, LDS.64 in half-warps): block stride 20
// floats puts the 8 STS.128 of a phase on 8 distinct 4-bank groups
// (20t mod 32 = 0, 20, 8, 28, 16, 4, 24, 12); the
// transposed reads of one block by one group cover 16 consecutive floats, and
// RY mod 32 = 16 puts the next group of the phase on the other 16 banks. Code
// bytes: a group writes 16 consecutive bytes per block, the x rows of the groups
// of a warp start 32 bytes apart mod 128 (T = 8, 16); the chunk reads at
// 80t + 64 hit 8 distinct 16-byte bank groups. T = 4 (d64): 2-way on the x row's
// STS.128 and 2-way code writes/reads (8 groups per warp at 96g mod 128); the
// sum-of-squares LDS.64 reads are conflict-free (kPairX below).
// Cell table: two 32-word arrays (base, first), two conflict-free LDS.32 per
// element; at T = 4 and 16 base comes from a popcount of the cells' occupancy
// mask instead (one LDS per element fewer where L1 is the limit: runs s9-1 and
// s25-4, see the comment at `occ` below).
// Squares stored by their owner (s9-2, A/B, b16/b64 x 64k): +1 to +3% at every
// head_dim (threads t and t + 8 no longer both square a chain at T = 16).
// kPairX (T = 4, 16): elements j and j + 8 of a block adjacent in the x row, so a
// chain reads two elements per LDS.64 (s9-3, A/B: d64 +5 to +6%: at T = 4 the
// LDS.64 of a half-warp's four groups (rows 88 floats apart) hit distinct banks,
// where the LDS.32 reads were 2-way; d256 +1 to +3%: half the load instructions).
// Not at T = 8: two groups per half-warp at RX = 168 floats conflict 2-way on the
// LDS.64, and d128 measured 6% slower with it (s9-3). One 8-byte entry per cell (one LDS.64) was 3% slower at 4 bits on the
// H200 (run s5-6): 32 such entries span 256 bytes, so lanes of a half-warp on
// cells c and c + 16 conflict; so was v3 without the input prefetch (48
// registers, 5 blocks per SM).
template <int D, class XT, bool SPLIT>
constexpr bool kStagedInput = !SPLIT && D >= 128 && std::is_same_v<XT, float>;

template <int D, int B, bool kTable, class XT, bool SPLIT = false>
__global__ void __launch_bounds__(kThreads, 4) append_kernel(const AppendArgs a) {
  // Sign by XOR (SX; 16-bit input, not SPLIT): y = x * sign is exact, and for a 16-bit input it is the
  // input with its sign bit flipped where sign = -1 (a product by +-1 negates exactly, NaN and zeros
  // included), so the raw words are XORed with the signs' bit masks (bits 15 and 31 of word k: elements
  // 2k, 2k + 1 of the thread's 16) before the exact widening, and the squares are taken of y (y * y = x * x
  // bit for bit): 8 LOP3 and 2 LDS.128 per vector instead of 16 PRMT, 16 FMUL and 1 LDS.128 (24 fewer
  // instructions of ~600 per vector and thread at head_dim 128; H100 run s36-1, A/B in alternating passes:
  // 1.3-6.6% faster at head_dim 64 / 128 / 256, 2-4 bits, fp16 and bf16 input).
  constexpr bool SX = !std::is_same_v<XT, float> && !SPLIT;
  constexpr int T = D / 16;
  constexpr int P = 16 / T;          // consecutive elements per block after the transpose
  constexpr int VPB = kThreads / T;  // vectors per block step
  constexpr int RX = T * 20 + 8;     // x row stride in floats (as v2)
  // Staged input (fp32 at T = 8, 16; see "Staged input" above): the group's vector arrives by one bulk
  // copy into its stage, and thread t's four 16-byte units are read rotated (slot s holds unit s ^ rot).
  constexpr bool kStage = kStagedInput<D, XT, SPLIT>;
  constexpr int YB = kStage ? 16 : 20;  // y row: float offset of block j is YB * j
  constexpr int RY = kStage ? T * 16 + 16 : T * 20 + ((T * 20) % 32 == 0 ? 16 : 0);  // y row stride: 16 mod 32
  constexpr unsigned SS = D * sizeof(XT);  // stage bytes per group
  constexpr int CB = D * B / 8;
  constexpr bool kPairX = T != 8;  // x row blocks in (j, j + 8) pairs (see the square stores)
  constexpr int NB = (1 << B) - 1;
  static_assert(T >= 4 && T <= 16, "head_dim 64..256");
  static_assert(RY % 32 == 16 && RX % 4 == 0, "row strides");
  __shared__ __align__(16) float s_x[VPB * RX];
  __shared__ __align__(16) float s_y[VPB * RY];
  __shared__ float s_bnd[16];
  __shared__ int s_base[kCells];  // the cell table: two 32-word arrays (see cell_of)
  __shared__ float s_first[kCells];
  __shared__ unsigned s_occ;      // bit c: cell c holds a boundary (T = 4 uses it instead of s_base)
  __shared__ int s_ok;
  // Byte k of word m of s_sign[t]: top byte of the sign of element 16t + 4m + k
  // (see sign_of); one LDS.128 per vector instead of 4 registers held.
  __shared__ uint4 s_sign[SX ? 1 : T];
  // SX: word k % 4 of s_sgnx[k / 4][t]: the sign bits of elements 16t + 2k (bit 15) and 16t + 2k + 1 (bit
  // 31); one LDS.128 per half, conflict-free (16-byte entries of consecutive threads).
  __shared__ uint4 s_sgnx[SX ? 2 : 1][SX ? T : 1];
  __shared__ std::int32_t s_chan[SPLIT ? D : 1];  // SPLIT: this part's input channels
  __shared__ __align__(8) unsigned long long s_bar[kStage ? kThreads / 32 : 1];  // kStage: one mbarrier per warp
  extern __shared__ __align__(16) unsigned char s_stage[];  // kStage: [VPB][SS] (dynamic)
  if (SPLIT)
    for (int i = threadIdx.x; i < D; i += kThreads) s_chan[i] = a.chan[i];
  if (threadIdx.x < 16) s_bnd[threadIdx.x] = threadIdx.x < NB ? a.boundaries[threadIdx.x] : INFINITY;
  if constexpr (SX) {
    if (threadIdx.x < 8 * T) {
      const int wt = threadIdx.x / 8, k = threadIdx.x % 8;
      const unsigned s0 = __float_as_uint(__ldg(a.signs + 16 * wt + 2 * k)) >> 31;
      const unsigned s1 = __float_as_uint(__ldg(a.signs + 16 * wt + 2 * k + 1)) >> 31;
      reinterpret_cast<unsigned*>(s_sgnx)[((k / 4) * T + wt) * 4 + k % 4] = (s0 << 15) | (s1 << 31);
    }
  } else if (threadIdx.x < 4 * T) {
    // Word m of s_sign[wt]: unit m of thread wt's block, or with kStage unit m ^ rot(wt), the unit its
    // slot m holds.
    const int wt = threadIdx.x / 4, wm = threadIdx.x % 4;
    const int unit = kStage ? wm ^ stage_rot(wt) : wm;
    unsigned w = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) w |= (__float_as_uint(__ldg(a.signs + 16 * wt + 4 * unit + k)) >> 24) << (8 * k);
    reinterpret_cast<unsigned*>(s_sign)[threadIdx.x] = w;
  }
  if constexpr (kStage) {
    if (threadIdx.x < kThreads / 32) {
      detail::mbar_init(static_cast<std::uint32_t>(__cvta_generic_to_shared(&s_bar[threadIdx.x])), 1);
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
  }
  __syncthreads();
  const float lo_b = s_bnd[0], hi_b = s_bnd[NB - 1];
  float invw = (kCells - 3) / (hi_b - lo_b);  // boundaries span cells ~1 .. kCells - 2
  if (!(invw > 0.0f && invw < 1e30f)) invw = 1.0f;
  const float sa = invw / (kCells - 1), sb = rintf(1.0f - lo_b * invw) / (kCells - 1);  // cell_of's map
  if (kTable && threadIdx.x < kCells) {
    const int c = threadIdx.x;
    int base = 0, same = 0;
    for (int k = 0; k < NB; ++k) {
      const int ck = cell_of(s_bnd[k], sa, sb);
      base += ck < c ? 1 : 0;
      same += ck == c ? 1 : 0;
    }
    // first = s_bnd[base]: +inf when base == NB (s_bnd[NB..15] = inf; NB <= 15)
    s_base[c] = base;
    s_first[c] = s_bnd[base];
    const bool ok = __all_sync(0xffffffffu, same <= 1);
    const unsigned occ = __ballot_sync(0xffffffffu, same != 0);
    if (c == 0) s_ok = ok ? 1 : 0, s_occ = occ;
  }
  __syncthreads();
  const bool use_table = kTable && s_ok != 0;
  // base[c] = #boundaries in cells below c = popc(occ << (32 - c)) when no cell holds two (the
  // table path's condition): three ALU instructions instead of a shared-memory look-up. Used at
  // T = 4 and 16, where the loop is bound by L1 / shared memory (ncu, run s25-3: d256 3-bit L1/TEX
  // 93% busy, issue slots 62%): run s25-4 measured it +0.7 to +1.1% at d64, +1.1 to +1.5% at d256
  // (3 and 4 bits), -0.6 to -0.8% at d128 (T = 8 keeps the table). History: run s9-1 had it +2% at d64 and -4 to -5%
  // at d128 / d256 when those loops were issue-bound.
  const unsigned occ = kTable ? s_occ : 0u;
  const int grp = threadIdx.x / T, t = threadIdx.x % T;
  const int lane = threadIdx.x % 32;
  const unsigned gmask = ((1u << T) - 1u) << (lane & ~(T - 1));
  float bnd[kTable ? 1 : NB];  // without the table: the boundaries in registers (uniform)
  if constexpr (!kTable)
#pragma unroll
    for (int k = 0; k < NB; ++k) bnd[k] = s_bnd[k];
  float* xrow = s_x + grp * RX;
  const float* yrd = s_y + grp * RY + P * t;  // transposed read of block j at + YB j
  float* ywr = s_y + grp * RY + YB * t;       // this thread's block
  // kStage: the warp's stage (its VPW groups' vectors, consecutive in x and in the stage) and
  // mbarrier; thread t's 64 bytes of its group's vector; slot s holds unit s ^ rot.
  constexpr int VPW = 32 / T;
  const int gw = grp % VPW;  // group within the warp
  const int rot = stage_rot(t);
  const std::uint32_t bar = kStage ? static_cast<std::uint32_t>(__cvta_generic_to_shared(&s_bar[threadIdx.x / 32])) : 0u;
  const std::uint32_t stg =
      kStage ? static_cast<std::uint32_t>(__cvta_generic_to_shared(s_stage + (grp - gw) * SS)) : 0u;
  const float4* srd = reinterpret_cast<const float4*>(s_stage + grp * SS + 64 * t);
  // kStage: the loop is warp-uniform (every sync is a whole-warp __syncwarp; groups past the end
  // compute on stale stage bytes and store nothing).
  const unsigned smask = kStage ? 0xffffffffu : gmask;
  // FWHT stages h = 4, 8 on rotated slots: the butterfly of slots (s, s + h/4) is
  // (fma(sg, a, b), fma(-sg, b, a)): (a + b, a - b) when slot s holds the lower unit, (b - a, b + a)
  // when it holds the upper one (rot's bit set) -- each result the reference's own rounded sum.
  const float sg4 = (rot & 1) ? -1.0f : 1.0f, sg8 = (rot & 2) ? -1.0f : 1.0f;
  // Code bytes of block j at + 80 j. 3 bits at T = 16 (one byte per thread and block): thread t's byte
  // at (t & 8) | (t & 1) << 2 | (t >> 1) & 3 instead of t, so that the reader's four words hold its
  // codes (c0 c2 c4 c6), (c1 c3 c5 c7), (c8 ... c14), (c9 ... c15) and two shift-adds make 6-bit
  // pairs (see the B == 3 pack).
  constexpr bool kPermute3 = B == 3 && T == 16;
  std::uint8_t* cwr = reinterpret_cast<std::uint8_t*>(xrow) + 64 +
                      (kPermute3 ? (t & 8) | ((t & 1) << 2) | ((t >> 1) & 3) : P * t);
  const uint4* crd = reinterpret_cast<const uint4*>(reinterpret_cast<const std::uint8_t*>(xrow) + 64 + 80 * t);
  const int step = gridDim.x * VPB;
  // The loop, instantiated for the table and the fallback path (no per-vector
  // branch, no register for the flag).
  const auto run = [&](auto tab) {
    [[maybe_unused]] RawX<XT> xn;  // prefetch of the group's next vector (not SPLIT, not kStage)
    int v = blockIdx.x * VPB + grp;
    [[maybe_unused]] std::uint32_t parity = 0;  // kStage: phase of the warp's mbarrier
    // kStage: lane 0 (group 0: v is the warp's first vector) copies the warp's vectors that exist.
    const auto stage_copy = [&](int v0) {
      const int nv = a.total - v0 < VPW ? a.total - v0 : VPW;
      detail::bulk_load(bar, stg, static_cast<const XT*>(a.x) + static_cast<std::size_t>(v0) * D, nv * SS);
    };
    if constexpr (kStage) {
      if (lane == 0 && v < a.total) stage_copy(v);
    } else if (!SPLIT && v < a.total) {
      load_raw<D, XT>(a, v, t, xn);
    }
    // Uniform per group (all T lanes share v); kStage: per warp (while its first vector exists).
    for (; (kStage ? v - gw : v) < a.total; v += step) {
      float x[16];
      if constexpr (kStage) {
        detail::mbar_wait(bar, parity);
        parity ^= 1u;
#pragma unroll
        for (int sl = 0; sl < 4; ++sl) {
          const float4 f = srd[sl ^ rot];
          x[4 * sl] = f.x, x[4 * sl + 1] = f.y, x[4 * sl + 2] = f.z, x[4 * sl + 3] = f.w;
        }
        // Every lane has read the stage: the next vectors' copy may overwrite it (issued here, a whole
        // vector ahead).
        __syncwarp();
        if (lane == 0 && v + step < a.total) stage_copy(v + step);
      } else if constexpr (SPLIT) {
        // Gathered channels: 16 scalar loads, widened exactly. Prefetching them a vector ahead (as the
        // raw loads below) measured -2.5% to +1% (H200 run s9-6): not kept.
        const XT* row = static_cast<const XT*>(a.x) + static_cast<std::size_t>(v) * a.in_stride;
#pragma unroll
        for (int i = 0; i < 16; ++i) x[i] = static_cast<float>(row[s_chan[16 * t + i]]);
      } else {
        if constexpr (SX) {  // x becomes y = x * sign (exact): the sign bits flipped in the raw words
          const uint4 m0 = s_sgnx[0][t], m1 = s_sgnx[1][t];
          xn.w[0].x ^= m0.x, xn.w[0].y ^= m0.y, xn.w[0].z ^= m0.z, xn.w[0].w ^= m0.w;
          xn.w[1].x ^= m1.x, xn.w[1].y ^= m1.y, xn.w[1].z ^= m1.z, xn.w[1].w ^= m1.w;
        }
        widen_raw<XT>(xn, x);
      }
      // The square of element i (rounded: __fmul_rn, as the chain's own multiply would be) at
      // xrow[20 * (i / 16) + i % 16]: squared once by its owner, not by every chain reader
      // (threads t and t + 8 read the same chain at T = 16).
      // kPairX (T = 16): inside the block, element j at 2 (j % 8) + j / 8 instead, so that the chain
      // elements i and i + 8 are adjacent and a chain reads them with one LDS.64.
      // kStage: by slot, not by unit (slot s holds unit s ^ rot: the readers of block p undo rot(p),
      // a compile-time constant there; stores by unit would conflict 2-way).
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int j0 = kPairX ? 2 * q : 4 * q, j1 = kPairX ? 2 * q + 8 : 4 * q + 1;
        const int j2 = kPairX ? 2 * q + 1 : 4 * q + 2, j3 = kPairX ? 2 * q + 9 : 4 * q + 3;
        *reinterpret_cast<float4*>(xrow + 20 * t + 4 * q) =
            make_float4(__fmul_rn(x[j0], x[j0]), __fmul_rn(x[j1], x[j1]), __fmul_rn(x[j2], x[j2]),
                        __fmul_rn(x[j3], x[j3]));
      }
      float y[16];
      if constexpr (SX) {
#pragma unroll
        for (int e = 0; e < 16; ++e) y[e] = x[e];  // the signs are in x already
      } else {
        const uint4 sv = s_sign[t];
        const unsigned sq[4] = {sv.x, sv.y, sv.z, sv.w};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          y[4 * m] = __fmul_rn(x[4 * m], sign_of<0>(sq[m]));
          y[4 * m + 1] = __fmul_rn(x[4 * m + 1], sign_of<1>(sq[m]));
          y[4 * m + 2] = __fmul_rn(x[4 * m + 2], sign_of<2>(sq[m]));
          y[4 * m + 3] = __fmul_rn(x[4 * m + 3], sign_of<3>(sq[m]));
        }
      }
      // The next vector's raw loads, issued once x is dead (its squares and y are made), so that they
      // can land in x's registers: issued at the top of the loop (while x was live) they needed their
      // own, and ptxas copied them into x's at the end of every vector (16 MOVs at fp32).
      if constexpr (!SPLIT && !kStage)
        if (v + step < a.total) load_raw<D, XT>(a, v + step, t, xn);
#pragma unroll
      for (int h = 1; h < 16; h <<= 1)
#pragma unroll
        for (int e = 0; e < 16; ++e)
          if ((e & h) == 0) {
            const float p = y[e], q = y[e + h];
            if (kStage && h >= 4) {
              const float sg = h == 4 ? sg4 : sg8;
              y[e] = __fmaf_rn(sg, p, q);
              y[e + h] = __fmaf_rn(-sg, q, p);
            } else {
              y[e] = __fadd_rn(p, q);
              y[e + h] = __fsub_rn(p, q);
            }
          }
      // Element i of y at the y row's float YB * (i / 16) + i % 16 (kStage: slot q holds unit q ^ rot).
#pragma unroll
      for (int q = 0; q < 4; ++q)
        reinterpret_cast<float4*>(ywr)[kStage ? q ^ rot : q] = make_float4(y[4 * q], y[4 * q + 1], y[4 * q + 2], y[4 * q + 3]);
      __syncwarp(smask);
      const detail::AppendSlot slot =
          detail::append_slot(kStage && v >= a.total ? a.total - 1 : v, a.div_heads, a.div_new, a.start, a.pages,
                              a.max_pages, a.page_shift);
      const int g = slot.g, page = slot.page, off = slot.off;
      float z[16];  // z[P * jb + q] = y[16 * jb + P * t + q]
#pragma unroll
      for (int jb = 0; jb < T; ++jb) {
        if constexpr (P == 4) {
          const float4 f = *reinterpret_cast<const float4*>(yrd + YB * jb);
          z[4 * jb] = f.x, z[4 * jb + 1] = f.y, z[4 * jb + 2] = f.z, z[4 * jb + 3] = f.w;
        } else if constexpr (P == 2) {
          const float2 f = *reinterpret_cast<const float2*>(yrd + YB * jb);
          z[2 * jb] = f.x, z[2 * jb + 1] = f.y;
        } else {
          z[jb] = yrd[YB * jb];
        }
      }
      // Stages h = 16 * hb: element 16 jb + P t + q pairs with 16 (jb + hb) + P t + q.
#pragma unroll
      for (int hb = 1; hb < T; hb <<= 1)
#pragma unroll
        for (int jb = 0; jb < T; ++jb)
          if ((jb & hb) == 0)
#pragma unroll
            for (int q = 0; q < P; ++q) {
              const float p = z[P * jb + q], r = z[P * (jb + hb) + q];
              z[P * jb + q] = __fadd_rn(p, r);
              z[P * (jb + hb) + q] = __fsub_rn(p, r);
            }
      // Sum of squares of x: acc[k] over i = k, k + 8, ... ascending (as v2).
      float acc;
      if constexpr (kPairX && T == 4) {  // chains t and t + 4
        float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
        for (int p = 0; p < T; ++p) {
          const float2 u = *reinterpret_cast<const float2*>(xrow + 20 * p + 2 * t);
          const float2 w = *reinterpret_cast<const float2*>(xrow + 20 * p + 2 * t + 8);
          a0 = __fadd_rn(__fadd_rn(a0, u.x), u.y);
          a1 = __fadd_rn(__fadd_rn(a1, w.x), w.y);
        }
        acc = __fadd_rn(a0, a1);
      } else if constexpr (kPairX) {
        const int k = t & 7;
        acc = 0.0f;
        // kStage: block p was stored by slot with rot(p) = (p >> 1) & 3: elements k, k + 8 (units k / 4 and
        // k / 4 + 2) are the pair at 2k ^ 8 (rot(p) & 1), in swapped order when rot(p) & 2.
        const int k2 = 2 * k, k2x = k2 ^ 8;
#pragma unroll
        for (int p = 0; p < T; ++p) {  // elements 16 p + k, 16 p + 8 + k
          const int rp = kStage ? stage_rot(p) : 0;
          const float2 v2 = *reinterpret_cast<const float2*>(xrow + 20 * p + ((rp & 1) ? k2x : k2));
          acc = (rp & 2) ? __fadd_rn(__fadd_rn(acc, v2.y), v2.x) : __fadd_rn(__fadd_rn(acc, v2.x), v2.y);
        }
        acc = __fadd_rn(acc, __shfl_xor_sync(gmask, acc, 4));  // a_k + a_{k+4}
      } else if constexpr (T >= 8) {
        // Element 8 m + k at 20 p + e, e = 8 (m & 1) + k (p = m / 2); kStage (stored by slot, rot(p) =
        // (p >> 1) & 3): at 20 p + (e ^ 4 rot(p)).
        const int k = t & 7, kx = k ^ 4;
        acc = 0.0f;
#pragma unroll
        for (int m = 0; m < D / 8; ++m) {
          const int p = m >> 1, rp = kStage ? stage_rot(p) : 0;
          acc = __fadd_rn(acc, xrow[20 * p + 8 * ((m & 1) ^ (rp >> 1)) + ((rp & 1) ? kx : k)]);
        }
        acc = __fadd_rn(acc, __shfl_xor_sync(gmask, acc, 4));  // a_k + a_{k+4}
      } else {
        float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
        for (int m = 0; m < D / 8; ++m) {
          a0 = __fadd_rn(a0, xrow[20 * (m >> 1) + 8 * (m & 1) + t]);
          a1 = __fadd_rn(a1, xrow[20 * (m >> 1) + 8 * (m & 1) + t + 4]);
        }
        acc = __fadd_rn(a0, a1);
      }
      acc = __fadd_rn(acc, __shfl_xor_sync(gmask, acc, 2));  // (a0 + a4) + (a2 + a6), (a1 + a5) + (a3 + a7)
      const float sum = __fadd_rn(acc, __shfl_xor_sync(gmask, acc, 1));
      const float norm = __fsqrt_rn(sum);
      const float inv = norm > 0.0f ? __fdiv_rn(1.0f, norm) : 0.0f;
      unsigned code[16];  // code of z[e]: number of boundaries strictly below u
#pragma unroll
      for (int e = 0; e < 16; ++e) z[e] = __fmul_rn(__fmul_rn(z[e], a.scale), inv);
      if constexpr (decltype(tab)::value) {
#pragma unroll
        for (int e = 0; e < 16; ++e) {
          const int c = cell_of(z[e], sa, sb);
          // T = 4, 16 (d64, d256: L1-bound): base from the occupancy mask; T = 8 (d128) the table.
          const unsigned base = T != 8 ? static_cast<unsigned>(__popc(shl_clamped(occ, 32 - c)))
                                       : static_cast<unsigned>(s_base[c]);
          code[e] = count_above(base, z[e], s_first[c]);
        }
      } else if constexpr (kTable) {  // fallback (a cell holds two boundaries): boundaries from shared memory
#pragma unroll
        for (int e = 0; e < 16; ++e) {
          unsigned idx = 0;
#pragma unroll 1
          for (int k = 0; k < NB; ++k) idx += z[e] > s_bnd[k] ? 1u : 0u;
          code[e] = idx;
        }
      } else {
#pragma unroll
        for (int e = 0; e < 16; ++e) {
          unsigned idx = 0;
#pragma unroll
          for (int k = 0; k < NB; ++k) idx = count_above(idx, z[e], bnd[k]);
          code[e] = idx;
        }
      }
      // Code byte of element 16 jb + P t + q at cwr[80 jb + q].
#pragma unroll
      for (int jb = 0; jb < T; ++jb) {
        if constexpr (P == 4) {
          *reinterpret_cast<std::uint32_t*>(cwr + 80 * jb) =
              code[4 * jb] | (code[4 * jb + 1] << 8) | (code[4 * jb + 2] << 16) | (code[4 * jb + 3] << 24);
        } else if constexpr (P == 2) {
          *reinterpret_cast<std::uint16_t*>(cwr + 80 * jb) =
              static_cast<std::uint16_t>(code[2 * jb] | (code[2 * jb + 1] << 8));
        } else {
          cwr[80 * jb] = static_cast<std::uint8_t>(code[jb]);
        }
      }
      __syncwarp(smask);
      const uint4 cv = *crd;  // byte r of word k: code of element 16 t + 4 k + r
      const unsigned w[4] = {cv.x, cv.y, cv.z, cv.w};
      if (kStage && v >= a.total) continue;  // a group past the end (kStage): nothing to store
      std::uint8_t* dst = a.pool + (static_cast<std::size_t>(page) * a.div_heads.d + g) * a.stride +
                          (SPLIT ? static_cast<std::size_t>(off) * a.row_bytes + a.code_off
                                 : static_cast<std::size_t>(off) * CB) +
                          2 * B * t;
      if constexpr (B == 4) {  // c0 | c1 << 4 in bytes 0 and 2 of w | w >> 4
        unsigned n[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) n[k] = w[k] | (w[k] >> 4);
        *reinterpret_cast<uint2*>(dst) = make_uint2(__byte_perm(n[0], n[1], 0x6420), __byte_perm(n[2], n[3], 0x6420));
      } else if constexpr (B == 2) {  // c0 | c1 << 2 | c2 << 4 | c3 << 6 in byte 0
        unsigned n[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          n[k] = w[k] | (w[k] >> 6);
          n[k] |= n[k] >> 12;
        }
        *reinterpret_cast<std::uint32_t*>(dst) =
            __byte_perm(__byte_perm(n[0], n[1], 0x0040), __byte_perm(n[2], n[3], 0x0040), 0x5410);
      } else if constexpr (B == 1) {  // (w * 0x01020408) >> 24 = c0 | c1 << 1 | c2 << 2 | c3 << 3
        unsigned bits = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) bits |= ((w[k] * 0x01020408u) >> 24) << (4 * k);
        *reinterpret_cast<std::uint16_t*>(dst) = static_cast<std::uint16_t>(bits);
      } else {  // B == 3: the 48-bit LSB-first stream of 16 codes as lo (bits 0..31) and hi (32..47)
        unsigned lo, hi;
        if constexpr (kPermute3) {  // T == 16: words (c0 c2 c4 c6) (c1 c3 c5 c7) (c8 ..) (c9 ..)
          // a: bytes p0 .. p3 (p_j = c_2j | c_2j+1 << 3); fields of 6 bits at byte j -> at bit 6 j
          const auto pairs24 = [](unsigned a) {
            const unsigned v = (a & 0x003F003Fu) | ((a >> 2) & 0x0FC00FC0u);  // p0 | p1 << 6, p2 | p3 << 6 at 16
            return (v & 0xFFFu) | ((v >> 4) & 0xFFF000u);
          };
          const unsigned ya = pairs24(w[0] | (w[1] << 3)), yb = pairs24(w[2] | (w[3] << 3));
          lo = ya | (yb << 24), hi = yb >> 8;
        } else {  // c0 | c1 << 3 in bits 0..5 and c2 | c3 << 3 in bits 16..21 of w | w >> 5
          unsigned f[4];  // 12 bits: codes 4k .. 4k + 3
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const unsigned n = w[k] | (w[k] >> 5);
            f[k] = (n & 0x3Fu) | ((n >> 10) & 0xFC0u);
          }
          lo = f[0] | (f[1] << 12) | (f[2] << 24), hi = (f[2] >> 8) | (f[3] << 4);
        }
        reinterpret_cast<std::uint16_t*>(dst)[0] = static_cast<std::uint16_t>(lo);
        reinterpret_cast<std::uint16_t*>(dst)[1] = static_cast<std::uint16_t>(lo >> 16);
        reinterpret_cast<std::uint16_t*>(dst)[2] = static_cast<std::uint16_t>(hi);
      }
      if (t == 0) {
        std::uint8_t* blk = a.pool + (static_cast<std::size_t>(page) * a.div_heads.d + g) * a.stride;
        const std::size_t nofs = SPLIT ? (static_cast<std::size_t>(1) << a.page_shift) * a.row_bytes + 2 * (2 * off + a.norm_idx)
                                       : (static_cast<std::size_t>(1) << a.page_shift) * CB + 2 * off;
        *reinterpret_cast<std::uint16_t*>(blk + nofs) = float_to_half(norm);
        // SPLIT: the reference tests the whole vector's norm; the second part (norm_idx 1, launched after
        // the first on the same stream) adds the first part's stored norm (fp16: vectors within about
        // 2^-12 relative of 32768 may be judged differently); the first part tests nothing.
        if (a.bad != nullptr && (!SPLIT || a.norm_idx == 1)) {
          float whole = norm;
          if constexpr (SPLIT) {
            const float n0 = half_to_float(*reinterpret_cast<const std::uint16_t*>(blk + nofs - 2));
            whole = __fsqrt_rn(__fmaf_rn(n0, n0, __fmul_rn(norm, norm)));
          }
          if (rejected_norm(whole)) atomicOr(a.bad, 1);
        }
      }
    }
  };
  if constexpr (kTable) {
    if (use_table)
      run(std::true_type{});
    else
      run(std::false_type{});
  } else {
    run(std::false_type{});
  }
}

template <int D, int B, class XT, bool SPLIT>
void launch_append(const AppendArgs& a, cudaStream_t s) {
  constexpr int VPB = kThreads / (D / 16);
  constexpr bool kTable = B >= 3;  // widths 3 and 4 (7 and 15 boundaries) use the cell table
  const int blocks_needed = (a.total + VPB - 1) / VPB;
  const int cap = detail::num_sms() * 4;  // 4 resident blocks per SM (64 registers)
  const int grid = blocks_needed < cap ? blocks_needed : cap;
  constexpr std::size_t dyn = kStagedInput<D, XT, SPLIT> ? std::size_t(VPB) * D * sizeof(XT) : 0;
  const auto kernel = append_kernel<D, B, kTable, XT, SPLIT>;
  if constexpr (dyn > 0) {
    // Static + dynamic shared memory is over 48 KB (four blocks of about 56 KB per SM): opt in once per
    // instance, and ask for the whole carveout as shared memory (the kernel reads no global data through L1).
    static const bool attr_set = [&] {
      TKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dyn)));
      TKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                          cudaSharedmemCarveoutMaxShared));
      return true;
    }();
    (void)attr_set;
  }
  kernel<<<grid, kThreads, dyn, s>>>(a);
  TKV_CHECK_LAUNCH();
}

template <int D, class XT, bool SPLIT>
void launch_append_d(int bits, const AppendArgs& a, cudaStream_t s) {
  switch (bits) {
    case 1: return launch_append<D, 1, XT, SPLIT>(a, s);
    case 2: return launch_append<D, 2, XT, SPLIT>(a, s);
    case 3: return launch_append<D, 3, XT, SPLIT>(a, s);
    case 4: return launch_append<D, 4, XT, SPLIT>(a, s);
  }
}

/// d: the rotation size (head_dim, or a part's head_dim / 2 for SPLIT).
template <class XT>
void launch_append_any(int d, int bits, bool split, const AppendArgs& a, cudaStream_t s) {
  if (split) {
    switch (d) {
      case 64: return launch_append_d<64, XT, true>(bits, a, s);
      case 128: return launch_append_d<128, XT, true>(bits, a, s);
    }
    return;
  }
  switch (d) {
    case 64: return launch_append_d<64, XT, false>(bits, a, s);
    case 128: return launch_append_d<128, XT, false>(bits, a, s);
    case 256: return launch_append_d<256, XT, false>(bits, a, s);
  }
}

// Dense (Haar) rotation: head_dim a multiple of 16 that is not a power of two (80, 96, 112, ...;
// rotation.h). The reference's y_i = sum_j Pi[i][j] x_j runs in ascending j, each product and sum
// rounded on its own (__fmul_rn, __fadd_rn: no FMA), so the codes and norms are bit-identical to it;
// then the same sum of squares (formats.h sumsq_spec: 8 interleaved chains + the fixed tree),
// norm, 1 / norm, t = y * (1 / norm) and code = #boundaries < t as the Hadamard kernel.
// The d^2 multiply-adds per vector bound it (the FWHT's d log d is not available at these sizes).
// Block: round-up-to-32(D) threads; each pass encodes kDenseV vectors: thread i < D accumulates
// coordinate i of all of them (Pi^T row j read once per pass, x_j of the kDenseV vectors in two
// broadcast LDS.128), then squares, quantize, pack (one output byte per thread and vector) and store.
constexpr int kDenseV = 8;

template <int B, class XT>
__global__ void __launch_bounds__(256) append_dense_kernel(const AppendArgs a) {
  extern __shared__ __align__(16) float sm[];
  const int D = a.dim, CB = D * B / 8, tid = threadIdx.x, nt = blockDim.x;
  float* xs = sm;                   // [D][kDenseV]: x_j of the pass's vectors
  float* ys = xs + D * kDenseV;     // [kDenseV][D]: Pi x
  float* chains = ys + kDenseV * D;  // [kDenseV][8]
  float* inv = chains + kDenseV * 8;  // [kDenseV]
  float* bnd = inv + kDenseV;         // [2^B - 1]
  std::size_t* blk = reinterpret_cast<std::size_t*>(bnd + 16);  // [kDenseV] block byte offsets
  int* off = reinterpret_cast<int*>(blk + kDenseV);             // [kDenseV] slots in the page
  std::uint8_t* cs = reinterpret_cast<std::uint8_t*>(off + kDenseV);  // [kDenseV][D] codes
  constexpr int NB = (1 << B) - 1;
  if (tid < NB) bnd[tid] = a.boundaries[tid];
  for (int v0 = blockIdx.x * kDenseV; v0 < a.total; v0 += gridDim.x * kDenseV) {
    const int nv = min(kDenseV, a.total - v0);
    for (int idx = tid; idx < kDenseV * D; idx += nt) {
      const int v = idx / D, j = idx - v * D;
      xs[j * kDenseV + v] = v < nv ? static_cast<float>(static_cast<const XT*>(a.x)[static_cast<std::size_t>(v0) * D + idx]) : 0.0f;
    }
    __syncthreads();
    for (int i = tid; i < D; i += nt) {
      float y[kDenseV];
#pragma unroll
      for (int v = 0; v < kDenseV; ++v) y[v] = 0.0f;
      const float* col = a.rot_t + i;
#pragma unroll 4
      for (int j = 0; j < D; ++j) {
        const float m = __ldg(col + static_cast<std::size_t>(j) * D);
        const float4 x0 = reinterpret_cast<const float4*>(xs)[2 * j], x1 = reinterpret_cast<const float4*>(xs)[2 * j + 1];
        const float xv[kDenseV] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
        for (int v = 0; v < kDenseV; ++v) y[v] = __fadd_rn(y[v], __fmul_rn(m, xv[v]));
      }
#pragma unroll
      for (int v = 0; v < kDenseV; ++v) ys[v * D + i] = y[v];
    }
    if (tid < kDenseV * 8) {  // chain k = i mod 8 of vector v, ascending i
      const int v = tid / 8, k = tid % 8;
      float acc = 0.0f;
      for (int i = k; i < D; i += 8) {
        const float x = xs[i * kDenseV + v];
        acc = __fadd_rn(acc, __fmul_rn(x, x));
      }
      chains[tid] = acc;
    }
    __syncthreads();
    if (tid < nv) {
      const float* c = chains + 8 * tid;
      const float sum = __fadd_rn(__fadd_rn(__fadd_rn(c[0], c[4]), __fadd_rn(c[2], c[6])),
                                  __fadd_rn(__fadd_rn(c[1], c[5]), __fadd_rn(c[3], c[7])));
      const float norm = __fsqrt_rn(sum);
      inv[tid] = norm > 0.0f ? __fdiv_rn(1.0f, norm) : 0.0f;
      const detail::AppendSlot sl =
          detail::append_slot(v0 + tid, a.div_heads, a.div_new, a.start, a.pages, a.max_pages, a.page_shift);
      blk[tid] = (static_cast<std::size_t>(sl.page) * a.div_heads.d + sl.g) * a.stride;
      off[tid] = sl.off;
      *reinterpret_cast<std::uint16_t*>(a.pool + blk[tid] + (static_cast<std::size_t>(1) << a.page_shift) * CB +
                                        2 * sl.off) = float_to_half(norm);
      if (a.bad != nullptr && rejected_norm(norm)) atomicOr(a.bad, 1);
    }
    __syncthreads();
    for (int idx = tid; idx < nv * D; idx += nt) {
      const float t = __fmul_rn(ys[idx], inv[idx / D]);
      int c = 0;
#pragma unroll
      for (int k = 0; k < NB; ++k) c += t > bnd[k];
      cs[idx] = static_cast<std::uint8_t>(c);
    }
    __syncthreads();
    for (int idx = tid; idx < nv * CB; idx += nt) {  // byte k of vector v: stream bits [8k, 8k + 8)
      const int v = idx / CB, k = idx - v * CB;
      const std::uint8_t* c = cs + v * D;
      unsigned w = 0;
      for (int i = 8 * k / B; i * B < 8 * k + 8; ++i) {
        const int sh = i * B - 8 * k;
        w |= sh >= 0 ? static_cast<unsigned>(c[i]) << sh : static_cast<unsigned>(c[i]) >> -sh;
      }
      a.pool[blk[v] + static_cast<std::size_t>(off[v]) * CB + k] = static_cast<std::uint8_t>(w);
    }
    __syncthreads();
  }
}

std::size_t dense_smem(int d) {
  return (2 * kDenseV * std::size_t(d) + kDenseV * 9 + 16) * sizeof(float) + kDenseV * (sizeof(std::size_t) + 4) +
         kDenseV * std::size_t(d);
}

template <class XT>
void launch_append_dense(int d, int bits, const AppendArgs& a, cudaStream_t s) {
  const int threads = (d + 31) / 32 * 32;
  const int blocks_needed = (a.total + kDenseV - 1) / kDenseV;
  const int cap = detail::num_sms() * 8;
  const int grid = blocks_needed < cap ? blocks_needed : cap;
  const std::size_t smem = dense_smem(d);
  switch (bits) {
    case 1: append_dense_kernel<1, XT><<<grid, threads, smem, s>>>(a); break;
    case 2: append_dense_kernel<2, XT><<<grid, threads, smem, s>>>(a); break;
    case 3: append_dense_kernel<3, XT><<<grid, threads, smem, s>>>(a); break;
    case 4: append_dense_kernel<4, XT><<<grid, threads, smem, s>>>(a); break;
  }
  TKV_CHECK_LAUNCH();
}

}  // namespace

void tq_mse_append(const TqMseTables& codec, const void* x, int batch, int num_new, int num_kv_heads,
                   const std::int32_t* start, const PageTable& table, PagedPool pool, Stream stream, IoType x_type,
                   std::int32_t* bad) {
  const char* where = "cuda::tq_mse_append";
  detail::check_page_size(where, table.page_size);  // before the stride: the error names this call
  const long long total = detail::check_append(
      where, x, batch, num_new, num_kv_heads, start, table, pool, x_type, codec.page_stride(table.page_size),
      "must equal codec.page_stride(page_size) (= tq_page_stride(page_size, code_bytes) for integer widths)");
  if (total == 0) return;
  if (!codec.dense() && !codec.split())  // the Hadamard kernel's 16-byte loads / bulk copies of x
    check_arg(reinterpret_cast<std::uintptr_t>(x) % 16 == 0, where, "x", reinterpret_cast<std::uintptr_t>(x),
              "must be 16-byte aligned (device pointer)");
  AppendArgs a{x, static_cast<int>(total), FastDiv(num_kv_heads), FastDiv(num_new), start,
               table.pages, table.max_pages,
               __builtin_ctz(static_cast<unsigned>(table.page_size)), pool.data, pool.page_stride,
               codec.signs(), codec.boundaries(), codec.hadamard_scale(),
               nullptr, codec.head_dim(), static_cast<int>(codec.code_bytes()), 0, 0, nullptr, 0, bad};
  const cudaStream_t s = detail::stream_of(stream);
  auto go = [&](int d, int bits, bool split) {
    switch (x_type) {
      case IoType::kF32: return launch_append_any<float>(d, bits, split, a, s);
      case IoType::kF16: return launch_append_any<__half>(d, bits, split, a, s);
      case IoType::kBf16: return launch_append_any<__nv_bfloat16>(d, bits, split, a, s);
    }
  };
  if (codec.dense()) {
    a.rot_t = codec.rotation_t();
    a.dim = codec.head_dim();
    switch (x_type) {
      case IoType::kF32: return launch_append_dense<float>(a.dim, codec.bits(), a, s);
      case IoType::kF16: return launch_append_dense<__half>(a.dim, codec.bits(), a, s);
      case IoType::kBf16: return launch_append_dense<__nv_bfloat16>(a.dim, codec.bits(), a, s);
    }
  }
  if (!codec.split()) return go(codec.head_dim(), codec.bits(), false);
  // Fractional width: each part as an integer-width encode of its gathered channels (part 0: the
  // outlier channels at bits + 1, its codes first; part 1: the rest at bits), as the reference does.
  const int h = codec.head_dim() / 2;
  a.chan = codec.channels();
  go(h, codec.bits() + 1, true);
  a.chan = codec.channels() + h;
  a.signs = codec.signs() + h;
  a.boundaries = codec.boundaries_lo();
  a.code_off = h * (codec.bits() + 1) / 8;
  a.norm_idx = 1;
  go(h, codec.bits(), true);
}

}  // namespace turbokv::cuda
