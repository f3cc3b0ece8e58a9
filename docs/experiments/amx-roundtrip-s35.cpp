#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
int main() {
  syscall(SYS_arch_prctl, 0x1023, 18);
  alignas(64) uint8_t cfg[64] = {}; cfg[0] = 1;
  for (int t = 0; t < 8; ++t) { cfg[16 + 2 * t] = 64; cfg[48 + t] = t == 0 || t == 1 ? 4 : 16; }
  _tile_loadconfig(cfg);
  alignas(64) static uint8_t B[8][1024], A[4 * 64]; alignas(64) static int32_t C[8][64];
  _tile_loadd(1, A, 64);
  __m512i x = _mm512_set1_epi8(3);
  const int N = 200000;
  // dependent round trip: 16 vector stores -> tileload -> dp -> tilestore -> vector load feeding next stores
  auto a = std::chrono::steady_clock::now();
  for (int i = 0; i < N; ++i) {
    for (int r = 0; r < 16; ++r) _mm512_store_si512(B[0] + r * 64, _mm512_add_epi8(x, _mm512_set1_epi8(r)));
    _tile_loadd(2, B[0], 64); _tile_zero(0); _tile_dpbsud(0, 1, 2); _tile_stored(0, C[0], 64);
    x = _mm512_add_epi8(x, _mm512_load_si512(C[0]));
  }
  double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - a).count() / N;
  printf("dependent round trip: %.1f ns\n", ns);
  // independent: stores + tile ops, result not fed back
  a = std::chrono::steady_clock::now();
  for (int i = 0; i < N; ++i) {
    for (int r = 0; r < 16; ++r) _mm512_store_si512(B[i & 7] + r * 64, _mm512_add_epi8(x, _mm512_set1_epi8(r)));
    _tile_loadd(2, B[i & 7], 64); _tile_zero(0); _tile_dpbsud(0, 1, 2); _tile_stored(0, C[i & 7], 64);
  }
  ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - a).count() / N;
  printf("independent (8 buffers): %.1f ns\n", ns);
  a = std::chrono::steady_clock::now();
  for (int i = 0; i < N; ++i) {
    for (int r = 0; r < 16; ++r) _mm512_store_si512(B[i & 7] + r * 64, _mm512_add_epi8(x, _mm512_set1_epi8(r)));
  }
  ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - a).count() / N;
  printf("16 stores only: %.1f ns\n", ns);
  a = std::chrono::steady_clock::now();
  for (int i = 0; i < N; ++i) {
    for (int r = 0; r < 16; ++r) _mm512_store_si512(B[i & 7] + r * 64, _mm512_add_epi8(x, _mm512_set1_epi8(r)));
    _tile_loadd(2, B[(i + 4) & 7], 64); _tile_zero(0); _tile_dpbsud(0, 1, 2); _tile_stored(0, C[i & 7], 64);
  }
  ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - a).count() / N;
  printf("tileload of data stored 4 iterations earlier: %.1f ns\n", ns);
  a = std::chrono::steady_clock::now();
  for (int i = 0; i < N; ++i) {
    for (int r = 0; r < 16; ++r) _mm512_store_si512(B[i & 7] + r * 64, _mm512_add_epi8(x, _mm512_set1_epi8(r)));
    _tile_loadd(2, B[(i + 4) & 7], 64); _tile_zero(0); _tile_dpbsud(0, 1, 2); _tile_stored(0, C[i & 7], 64);
    x = _mm512_add_epi8(x, _mm512_load_si512(C[(i + 4) & 7]));
  }
  ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - a).count() / N;
  printf("+ vector load of C stored 4 iterations earlier: %.1f ns\n", ns);
  _tile_release();
}
