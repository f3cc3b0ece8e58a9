#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
struct alignas(64) Cfg { uint8_t palette; uint8_t start; uint8_t rsv[14]; uint16_t colsb[16]; uint8_t rows[16]; };
int main() {
  long r = syscall(SYS_arch_prctl, 0x1023 /*ARCH_REQ_XCOMP_PERM*/, 18 /*XTILEDATA*/);
  printf("arch_prctl rc %ld\n", r);
  if (r) return 1;
  Cfg c{}; c.palette = 1;
  for (int t = 0; t < 8; ++t) { c.colsb[t] = 64; c.rows[t] = 16; }
  _tile_loadconfig(&c);
  alignas(64) static uint8_t A[16 * 64], B[16 * 64]; alignas(64) static int32_t C[16 * 16];
  for (int i = 0; i < 1024; ++i) { A[i] = i * 7; B[i] = i * 13; }
  _tile_loadd(1, A, 64); _tile_loadd(2, B, 64); _tile_zero(0);
  _tile_dpbusd(0, 1, 2);
  _tile_stored(0, C, 64);
  // check against scalar
  long bad = 0;
  for (int m = 0; m < 16; ++m) for (int n = 0; n < 16; ++n) { int32_t s = 0; for (int k = 0; k < 64; ++k) s += (int)A[m*64+k] * (int)(int8_t)B[(k/4)*64 + n*4 + k%4]; bad += s != C[m*16+n]; }
  printf("mismatch %ld\n", bad);
  const int N = 10000000;
  auto a = std::chrono::steady_clock::now();
  for (int i = 0; i < N; ++i) { _tile_dpbusd(0, 1, 2); _tile_dpbusd(3, 1, 2); _tile_dpbusd(4, 1, 2); _tile_dpbusd(5, 1, 2); }
  double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - a).count();
  printf("tdpbusd: %.2f ns each (4 independent chains)\n", ns / (4.0 * N));
  // tile load+dp+store round trip as the value pass would do
  a = std::chrono::steady_clock::now();
  for (int i = 0; i < N / 10; ++i) { _tile_loadd(2, B, 64); _tile_zero(0); _tile_dpbusd(0, 1, 2); _tile_stored(0, C, 64); }
  ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - a).count();
  printf("load+zero+dp+store: %.2f ns each\n", ns / (N / 10));
  _tile_release();
}
