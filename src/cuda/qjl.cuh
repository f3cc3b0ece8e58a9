// Shared device code of the QJL and TurboQuant-Prod kernels (not public API).
//
// Encode blocks: kThreads = 128 threads (4 warps) own a tile of kVecs = 32
// vectors held in shared memory (row stride ld = head_dim + 4 floats); warp w
// owns vectors [8w, 8w + 8). The sketch S x of the tile is a small fp32 GEMM
// whose accumulation order is fixed by formats.h (acc_i += S[i][j] * x_j in
// ascending j, multiply then add, each rounded): no tensor cores, no fma. It
// runs in passes of kRowTile = 128 sketch rows; lane l holds rows l + 32k
// (k < 4) for the warp's 8 vectors (32 accumulators) while the columns of S^T
// are staged kJChunk = 32 at a time in shared memory (conflict-free row reads,
// broadcast float4 reads of x). The sign bits of 32 consecutive rows are one
// __ballot_sync word, which is the formats.h LSB-first stream (row i -> bit i % 8
// of byte i / 8) read as a little-endian 32-bit word; lane l stores byte l % 4
// of vector l / 4's word.
// Also the small encode helpers that the RVQ and PolarQuant encoders share
// (fp16 little-endian loads and stores, warp_pack_n).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common.cuh"
#include "turbokv/half.h"

namespace turbokv::cuda::detail::qjl {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kVecs = 32;
constexpr int kVecsPerWarp = kVecs / kWarps;
constexpr int kRowTile = 128;
constexpr int kJChunk = 32;
static_assert(kVecsPerWarp * 4 == 32, "one ballot word byte per lane: 8 vectors x 4 bytes");

/// Shared-memory row stride of the vector tile (floats; multiple of 4 for float4 reads).
__host__ __device__ constexpr int tile_ld(int d) { return d + 4; }
/// Bytes of shared memory: the vector tile, the staged S^T chunk, extra bytes.
constexpr std::size_t smem_bytes(int d, std::size_t extra) {
  return sizeof(float) * (static_cast<std::size_t>(kVecs) * tile_ld(d) + kJChunk * kRowTile) + extra;
}

/// Stores fp16(v) little-endian at p (any alignment).
__device__ __forceinline__ void store_half_le(std::uint8_t* p, float v) {
  const std::uint16_t h = float_to_half(v);
  p[0] = static_cast<std::uint8_t>(h & 0xff);
  p[1] = static_cast<std::uint8_t>(h >> 8);
}
/// fp16 little-endian at p (any alignment) as fp32.
__device__ __forceinline__ float load_half_le(const std::uint8_t* p) {
  return half_to_float(static_cast<std::uint16_t>(__ldg(p) | (__ldg(p + 1) << 8)));
}

/// Packs count codes of B bits (cw[0..count), the low B bits of each byte) into the LSB-first stream at dst
/// (ceil(count * B / 8) bytes, bits past count * B zero), one warp: lane k builds byte k from the codes that
/// touch its 8 bits (a window of at most 1 + ceil(7 / B) codes from code 8k / B, shifted by 8k mod B).
template <int B>
__device__ __forceinline__ void warp_pack_b(const std::uint8_t* cw, int count, std::uint8_t* dst) {
  static_assert(B >= 1 && B <= 8, "code width");
  constexpr int kN = 1 + (7 + B - 1) / B;  // codes a byte can touch (offset <= B - 1, 8 bits)
  const int lane = threadIdx.x & 31, nbytes = (count * B + 7) / 8;
  for (int k = lane; k < nbytes; k += 32) {
    const int c0 = 8 * k / B, o = 8 * k % B;
    unsigned v = 0;
#pragma unroll
    for (int j = 0; j < kN; ++j)
      if (c0 + j < count) v |= (static_cast<unsigned>(cw[c0 + j]) & ((1u << B) - 1u)) << (B * j);
    dst[k] = static_cast<std::uint8_t>(v >> o);
  }
}
/// warp_pack_b for a run-time B (1..8): the same bytes (a bit-by-bit loop with a division per bit until
/// session 46: ~40% of PolarQuant's encode time at head_dim 64, H100 run s46-2).
__device__ __forceinline__ void warp_pack_n(const std::uint8_t* cw, int count, int B, std::uint8_t* dst) {
  switch (B) {
    case 1: return warp_pack_b<1>(cw, count, dst);
    case 2: return warp_pack_b<2>(cw, count, dst);
    case 3: return warp_pack_b<3>(cw, count, dst);
    case 4: return warp_pack_b<4>(cw, count, dst);
    case 5: return warp_pack_b<5>(cw, count, dst);
    case 6: return warp_pack_b<6>(cw, count, dst);
    case 7: return warp_pack_b<7>(cw, count, dst);
    default: return warp_pack_b<8>(cw, count, dst);
  }
}

/// Loads vectors [v0, v0 + nv) of x ([*, d] of type XT: fp32, or fp16 / bf16 widened exactly) into the
/// tile; rows nv.. are zero.
template <class XT = float>
__device__ __forceinline__ void load_tile(const void* __restrict__ x, std::size_t v0, int nv, int d, float* xs) {
  const int ld = tile_ld(d);
  const XT* xt = static_cast<const XT*>(x) + v0 * static_cast<std::size_t>(d);
  for (int idx = threadIdx.x; idx < kVecs * d; idx += kThreads) {
    const int v = idx / d, j = idx - v * d;
    xs[v * ld + j] = v < nv ? static_cast<float>(__ldcs(xt + idx)) : 0.0f;
  }
}

/// sumsq_spec (formats.h) of row[0..d) by one warp: lane l runs chain l % 8
/// (lanes l, l ^ 8, ... duplicate it), then the fixed tree by xor 4, 2, 1.
/// Every lane returns the sum.
__device__ __forceinline__ float sumsq_row(const float* row, int d) {
  const int k = threadIdx.x & 7;
  float a = 0.0f;
  for (int i = k; i < d; i += 8) a = __fadd_rn(a, __fmul_rn(row[i], row[i]));
  a = __fadd_rn(a, __shfl_xor_sync(0xffffffffu, a, 4));  // a0 + a4, a1 + a5, a2 + a6, a3 + a7
  a = __fadd_rn(a, __shfl_xor_sync(0xffffffffu, a, 2));  // (a0 + a4) + (a2 + a6), (a1 + a5) + (a3 + a7)
  return __fadd_rn(a, __shfl_xor_sync(0xffffffffu, a, 1));
}

/// Sign bits of S r for the tile's vectors r (see the file comment). st: device
/// S^T [d][m]; sst: shared [kJChunk][kRowTile]. Vector v's m/8 sign bytes go to
/// dst.at(v0 + v).codes + sign_off (Dst: BlockDst or PagedDst, common.cuh). Called by all threads of the block.
template <class Dst>
__device__ __forceinline__ void sketch_signs(const float* xs, int nv, int d, int m, const float* __restrict__ st,
                                             float* sst, const Dst& dst, std::size_t v0, std::size_t sign_off) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int ld = tile_ld(d);
  const float* xw = xs + w * kVecsPerWarp * ld;
  for (int r0 = 0; r0 < m; r0 += kRowTile) {
    float acc[kVecsPerWarp][4];
#pragma unroll
    for (int v = 0; v < kVecsPerWarp; ++v)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[v][k] = 0.0f;
    for (int j0 = 0; j0 < d; j0 += kJChunk) {
      const int jn = d - j0 < kJChunk ? d - j0 : kJChunk;  // multiple of 8
      __syncthreads();  // the previous chunk (or the tile's producer) is done
      for (int idx = threadIdx.x; idx < kJChunk * kRowTile / 4; idx += kThreads) {
        const int jj = idx / (kRowTile / 4), row = r0 + 4 * (idx % (kRowTile / 4));
        float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (jj < jn && row < m)  // m % 8 == 0: a float4 is wholly inside or outside
          s = __ldg(reinterpret_cast<const float4*>(st + static_cast<std::size_t>(j0 + jj) * m + row));
        reinterpret_cast<float4*>(sst)[idx] = s;
      }
      __syncthreads();
#pragma unroll 2
      for (int jj = 0; jj < jn; jj += 4) {
        float s[4][4];
#pragma unroll
        for (int js = 0; js < 4; ++js)
#pragma unroll
          for (int k = 0; k < 4; ++k) s[js][k] = sst[(jj + js) * kRowTile + lane + 32 * k];
#pragma unroll
        for (int v = 0; v < kVecsPerWarp; ++v) {
          const float4 xv = *reinterpret_cast<const float4*>(xw + v * ld + j0 + jj);
          const float xa[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
          for (int js = 0; js < 4; ++js)
#pragma unroll
            for (int k = 0; k < 4; ++k) acc[v][k] = __fadd_rn(acc[v][k], __fmul_rn(s[js][k], xa[js]));
        }
      }
    }
    const int vv = w * kVecsPerWarp + (lane >> 2), b = lane & 3;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      unsigned mine = 0;
#pragma unroll
      for (int v = 0; v < kVecsPerWarp; ++v) {
        const unsigned word = __ballot_sync(0xffffffffu, acc[v][k] >= 0.0f);  // bit 1 = (S r)_i >= 0
        mine = (lane >> 2) == v ? word : mine;
      }
      const int row = r0 + 32 * k + 8 * b;
      if (vv < nv && row < m) dst.at(v0 + vv).codes[sign_off + row / 8] = static_cast<std::uint8_t>(mine >> (8 * b));
    }
  }
}

/// Opts a kernel into more than 48 KiB of dynamic shared memory when needed.
template <class K>
inline void allow_smem(K kernel, std::size_t bytes) {
  if (bytes > 48 * 1024)
    TKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

/// Sum of 8 floats as a balanced tree (error bound 3 ulps of the magnitudes' sum).
__device__ __forceinline__ float tree8(const float* v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

/// Signed sum sum_i (bit_i ? sq[i] : -sq[i]) over m bits (LSB-first) at p: the
/// sign is xor-ed into the float (no per-element branch); each byte's 8 terms
/// are summed as a tree, bytes go round-robin into 4 accumulators, so the fp32
/// error stays near (m/32 + 5) ulps of sum_i |sq_i| in the worst case. sq: shared, size m.
__device__ __forceinline__ float signed_sum(const float* sq, const std::uint8_t* p, int m) {
  float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
  for (int k = 0; k < m / 8; ++k) {
    const unsigned neg = ~static_cast<unsigned>(__ldg(p + k));  // bit clear -> flip the sign
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = __uint_as_float(__float_as_uint(sq[8 * k + e]) ^ (((neg >> e) & 1u) << 31));
    const float sum = a0 + tree8(v);  // rotate the accumulators (registers, no indexing)
    a0 = a1, a1 = a2, a2 = a3, a3 = sum;
  }
  return (a0 + a1) + (a2 + a3);
}

}  // namespace turbokv::cuda::detail::qjl
