// Micro-benchmark (session 21): streaming the decode's (page, head) blocks by TMA bulk copies, LDG.128 and cp.async.
// This is the file of run s21-7 as it ran (s21-6 ran the pairs 1056 @ 1056 and 1024 @ 1024, two passes).
// Standalone on purpose, so it builds without the project: mbar_init / mbar_wait / bulk2 mirror
// decode_h16.cuh's mbar_init, mbar_wait and elect_bulk2. Build and run on an sm_90 GPU:
//   nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/stream docs/experiments/l2-stream-s21.cu && /tmp/stream
// Results: docs/RESULTS.md "Session 21". The XOR sums only keep the loads alive.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
constexpr int NW = 16, STAGES = 4, PAGES = 4096, KVH = 8, BATCH = 16;
__device__ __forceinline__ void mbar_init(uint32_t bar, unsigned c) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(c) : "memory"); }
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t par) {
  asm volatile("{\n .reg .pred p;\n W:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(bar), "r"(par) : "memory"); }
__device__ __forceinline__ void bulk2(uint32_t bar, unsigned tx, uint32_t d0, const void* s0, uint32_t d1, const void* s1, unsigned n) {
  asm volatile("{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n @p mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
    " @p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%2], [%3], %6, [%0];\n"
    " @p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%4], [%5], %6, [%0];\n}" ::"r"(bar), "r"(tx), "r"(d0), "l"(s0), "r"(d1), "l"(s1), "r"(n) : "memory"); }
__global__ void __launch_bounds__(512, 1) k_bulk(const uint8_t* K, const uint8_t* V, int stride, int chunk, unsigned* out) {
  extern __shared__ __align__(128) uint8_t sm[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row = blockIdx.x, b = row / KVH, g = row % KVH;
  uint8_t* wst = sm + 1024 + warp * STAGES * 2 * 1152;
  uint32_t bars = (uint32_t)__cvta_generic_to_shared(sm) + warp * 64;
  if (lane == 0) for (int s = 0; s < STAGES; ++s) mbar_init(bars + 8 * s, 1);
  __syncwarp(); asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); __syncwarp();
  auto src = [&](const uint8_t* P, int p) { return P + ((size_t)(b * PAGES + p) * KVH + g) * stride; };
  const int n = PAGES / NW;
  for (int i = 0; i < STAGES && i < n; ++i) { int p = warp + NW * i; uint32_t d = (uint32_t)__cvta_generic_to_shared(wst + i * 2 * 1152);
    bulk2(bars + 8 * i, 2 * chunk, d, src(K, p), d + 1152, src(V, p), chunk); }
  unsigned acc = 0;
  for (int i = 0; i < n; ++i) { int s = i % STAGES; mbar_wait(bars + 8 * s, (i / STAGES) & 1);
    acc ^= reinterpret_cast<const unsigned*>(wst + s * 2 * 1152)[lane] ^ reinterpret_cast<const unsigned*>(wst + s * 2 * 1152 + 1152)[lane];
    __syncwarp();
    if (i + STAGES < n) { int p = warp + NW * (i + STAGES); uint32_t d = (uint32_t)__cvta_generic_to_shared(wst + s * 2 * 1152);
      bulk2(bars + 8 * s, 2 * chunk, d, src(K, p), d + 1152, src(V, p), chunk); } }
  if (acc == 0x12345678u) out[0] = acc;
}
__global__ void __launch_bounds__(512, 1) k_ldg(const uint8_t* K, const uint8_t* V, int stride, int chunk, unsigned* out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row = blockIdx.x, b = row / KVH, g = row % KVH;
  auto src = [&](const uint8_t* P, int p) { return P + ((size_t)(b * PAGES + p) * KVH + g) * stride; };
  const int n = PAGES / NW, nv = chunk / 16;
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (int i = 0; i < n; i += 4) {
    uint4 r[4][2][3];
#pragma unroll
    for (int u = 0; u < 4; ++u) { int p = warp + NW * (i + u);
      const uint4* k = reinterpret_cast<const uint4*>(src(K, p)); const uint4* v = reinterpret_cast<const uint4*>(src(V, p));
#pragma unroll
      for (int j = 0; j < 3; ++j) { int e = lane + 32 * j; r[u][0][j] = e < nv ? __ldcs(k + e) : make_uint4(0,0,0,0); r[u][1][j] = e < nv ? __ldcs(v + e) : make_uint4(0,0,0,0); } }
#pragma unroll
    for (int u = 0; u < 4; ++u)
#pragma unroll
      for (int j = 0; j < 3; ++j) { acc.x ^= r[u][0][j].x ^ r[u][1][j].x; acc.y ^= r[u][0][j].y ^ r[u][1][j].w; }
  }
  if (acc.x == 0x12345678u) out[0] = acc.y;
}
__global__ void __launch_bounds__(512, 1) k_cpasync(const uint8_t* K, const uint8_t* V, int stride, int chunk, unsigned* out) {
  extern __shared__ __align__(128) uint8_t sm[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row = blockIdx.x, b = row / KVH, g = row % KVH;
  uint8_t* wst = sm + warp * STAGES * 2 * 1152;
  auto src = [&](const uint8_t* P, int p) { return P + ((size_t)(b * PAGES + p) * KVH + g) * stride; };
  const int n = PAGES / NW, nv = chunk / 16;
  auto issue = [&](int i, int s) { int p = warp + NW * i;
    for (int j = lane; j < nv; j += 32) {
      uint32_t d = (uint32_t)__cvta_generic_to_shared(wst + s * 2 * 1152 + 16 * j);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src(K, p) + 16 * j));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d + 1152), "l"(src(V, p) + 16 * j)); }
    asm volatile("cp.async.commit_group;"); };
  for (int i = 0; i < STAGES - 1; ++i) issue(i, i);
  unsigned acc = 0;
  for (int i = 0; i < n; ++i) { int s = i % STAGES;
    asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 2)); __syncwarp();
    acc ^= reinterpret_cast<const unsigned*>(wst + s * 2 * 1152)[lane];
    if (i + STAGES - 1 < n) issue(i + STAGES - 1, (i + STAGES - 1) % STAGES); else asm volatile("cp.async.commit_group;"); }
  if (acc == 0x12345678u) out[0] = acc;
}
int main() {
  const int cs[][2] = {{1024, 1056}, {1056, 1152}, {1024, 1152}, {1056, 1056}, {1024, 1024}};
  for (auto& c : cs) {
    const int chunk = c[0], stride = c[1];
    size_t bytes = (size_t)BATCH * PAGES * KVH * stride;
    uint8_t *K, *V; unsigned* out; cudaMalloc(&K, bytes); cudaMalloc(&V, bytes); cudaMalloc(&out, 4);
    cudaMemset(K, 1, bytes); cudaMemset(V, 2, bytes);
    int smem = 1024 + NW * STAGES * 2 * 1152;
    cudaFuncSetAttribute(k_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaFuncSetAttribute(k_cpasync, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    const char* names[] = {"bulk", "ldg", "cpasync"};
    for (int pass = 0; pass < 1; ++pass)
    for (int v = 0; v < 3; ++v) {
      float best = 1e9;
      for (int r = 0; r < 12; ++r) {
        cudaEventRecord(e0);
        if (v == 0) k_bulk<<<BATCH * KVH, 512, smem>>>(K, V, stride, chunk, out);
        else if (v == 1) k_ldg<<<BATCH * KVH, 512>>>(K, V, stride, chunk, out);
        else k_cpasync<<<BATCH * KVH, 512, smem>>>(K, V, stride, chunk, out);
        cudaEventRecord(e1); cudaEventSynchronize(e1);
        float ms; cudaEventElapsedTime(&ms, e0, e1); if (r >= 2 && ms < best) best = ms;
      }
      double rd = 2.0 * BATCH * PAGES * KVH * chunk;
      printf("chunk %d stride %d %-8s %8.1f us  %6.0f GB/s  (%s)\n", chunk, stride, names[v], best * 1e3, rd / (best * 1e-3) / 1e9, cudaGetErrorString(cudaGetLastError()));
    }
    cudaFree(K); cudaFree(V); cudaFree(out);
  }
}
