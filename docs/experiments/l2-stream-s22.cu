// Micro-benchmark (session 22): the candidate page layout of docs/DESIGN.md's open question, streamed by TMA
// bulk copies next to session 21's two reference layouts, in one run (l2-stream-s21.cu's k_bulk, unchanged).
//   split: per page [codes of head 0 .. KVH-1, 1024 bytes each][scalars of head 0 .. KVH-1, 32 bytes each]
//          (page stride KVH * 1056 bytes, no padding): four bulk copies per step (K codes, K scalars, V
//          codes, V scalars).
//   1056 @ 1056: today's (page, head) blocks; 1024 @ 1024: codes only (the floor).
// Standalone; build and run on an sm_90 GPU:
//   nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/stream22 docs/experiments/l2-stream-s22.cu && /tmp/stream22
// The XOR sums only keep the loads alive.
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
__device__ __forceinline__ void bulk1(uint32_t bar, uint32_t d, const void* s, unsigned n) {
  asm volatile("{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n"
    " @p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n}" ::"r"(d), "l"(s), "r"(n), "r"(bar) : "memory"); }
__device__ __forceinline__ void expect(uint32_t bar, unsigned tx) {
  asm volatile("{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n @p mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n}" ::"r"(bar), "r"(tx) : "memory"); }
// The split layout: page p of sequence b at (b * PAGES + p) * KVH * 1056; head g's codes at + 1024 g, its
// scalars at + 1024 KVH + 32 g.
__global__ void __launch_bounds__(512, 1) k_split(const uint8_t* K, const uint8_t* V, unsigned* out) {
  extern __shared__ __align__(128) uint8_t sm[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row = blockIdx.x, b = row / KVH, g = row % KVH;
  uint8_t* wst = sm + 1024 + warp * STAGES * 2 * 1152;
  uint32_t bars = (uint32_t)__cvta_generic_to_shared(sm) + warp * 64;
  if (lane == 0) for (int s = 0; s < STAGES; ++s) mbar_init(bars + 8 * s, 1);
  __syncwarp(); asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); __syncwarp();
  auto page = [&](const uint8_t* P, int p) { return P + (size_t)(b * PAGES + p) * KVH * 1056; };
  auto issue = [&](int i, int s) {
    const int p = warp + NW * i; const uint32_t d = (uint32_t)__cvta_generic_to_shared(wst + s * 2 * 1152);
    expect(bars + 8 * s, 2 * 1056);
    bulk1(bars + 8 * s, d, page(K, p) + 1024 * g, 1024);
    bulk1(bars + 8 * s, d + 1024, page(K, p) + 1024 * KVH + 32 * g, 32);
    bulk1(bars + 8 * s, d + 1152, page(V, p) + 1024 * g, 1024);
    bulk1(bars + 8 * s, d + 1152 + 1024, page(V, p) + 1024 * KVH + 32 * g, 32); };
  const int n = PAGES / NW;
  for (int i = 0; i < STAGES && i < n; ++i) issue(i, i);
  unsigned acc = 0;
  for (int i = 0; i < n; ++i) { int s = i % STAGES; mbar_wait(bars + 8 * s, (i / STAGES) & 1);
    acc ^= reinterpret_cast<const unsigned*>(wst + s * 2 * 1152)[lane] ^ reinterpret_cast<const unsigned*>(wst + s * 2 * 1152 + 1152)[lane];
    __syncwarp();
    if (i + STAGES < n) issue(i + STAGES, s); }
  if (acc == 0x12345678u) out[0] = acc;
}
int main() {
  const size_t bytes = (size_t)BATCH * PAGES * KVH * 1056;
  uint8_t *K, *V; unsigned* out; cudaMalloc(&K, bytes); cudaMalloc(&V, bytes); cudaMalloc(&out, 4);
  cudaMemset(K, 1, bytes); cudaMemset(V, 2, bytes);
  const int smem = 1024 + NW * STAGES * 2 * 1152;
  cudaFuncSetAttribute(k_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(k_split, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  const char* names[] = {"split", "1056@1056", "1024@1024"};
  for (int pass = 0; pass < 2; ++pass)
    for (int v = 0; v < 3; ++v) {
      float best = 1e9;
      for (int r = 0; r < 12; ++r) {
        cudaEventRecord(e0);
        if (v == 0) k_split<<<BATCH * KVH, 512, smem>>>(K, V, out);
        else if (v == 1) k_bulk<<<BATCH * KVH, 512, smem>>>(K, V, 1056, 1056, out);
        else k_bulk<<<BATCH * KVH, 512, smem>>>(K, V, 1024, 1024, out);
        cudaEventRecord(e1); cudaEventSynchronize(e1);
        float ms; cudaEventElapsedTime(&ms, e0, e1); if (r >= 2 && ms < best) best = ms;
      }
      const double rd = 2.0 * BATCH * PAGES * KVH * (v == 2 ? 1024 : 1056);
      printf("pass %d %-10s %8.1f us  %6.0f GB/s  (%s)\n", pass, names[v], best * 1e3, rd / (best * 1e-3) / 1e9, cudaGetErrorString(cudaGetLastError()));
    }
}
