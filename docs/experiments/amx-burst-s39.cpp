#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
struct alignas(64) Cfg { uint8_t palette; uint8_t start; uint8_t rsv[14]; uint16_t colsb[16]; uint8_t rows[16]; };
alignas(64) static uint8_t A[16 * 64], B[16 * 64]; alignas(64) static int32_t C[4][16*4];
int main() {
  if (syscall(SYS_arch_prctl, 0x1023, 18)) return 1;
  Cfg c{}; c.palette = 1;
  for (int t : {1, 4, 5, 6, 7}) { c.colsb[t] = 16; c.rows[t] = 16; }
  for (int t : {0, 2, 3}) { c.colsb[t] = 64; c.rows[t] = 16; }
  _tile_loadconfig(&c);
  for (int gap : {0, 100, 300, 1000, 3000}) {
    const int R = 200000;
    __m512 x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(1.0000001f);
    auto a = std::chrono::steady_clock::now();
    for (int i = 0; i < R; ++i) {
      _tile_zero(4); _tile_zero(5); _tile_zero(6); _tile_zero(7);
      for (int ch = 0; ch < 2; ++ch) {
        _tile_loadd(1, B, 16); _tile_loadd(0, A, 64); _tile_dpbusd(4, 0, 1);
        _tile_loadd(2, A, 64); _tile_dpbusd(5, 2, 1); _tile_loadd(3, A, 64); _tile_dpbusd(6, 3, 1);
        _tile_loadd(0, A, 64); _tile_dpbusd(7, 0, 1);
      }
      _tile_stored(4, C[0], 16); _tile_stored(5, C[1], 16); _tile_stored(6, C[2], 16); _tile_stored(7, C[3], 16);
      for (int k = 0; k < gap; ++k) { x = _mm512_fmadd_ps(x, y, y); asm volatile("" : "+v"(x)); }
    }
    double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - a).count() / R;
    // gap alone
    a = std::chrono::steady_clock::now();
    for (int i = 0; i < R; ++i) for (int k = 0; k < gap; ++k) { x = _mm512_fmadd_ps(x, y, y); asm volatile("" : "+v"(x)); }
    double g = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - a).count() / R;
    printf("gap %4d dependent fma: burst+gap %.1f ns, gap alone %.1f ns, burst cost %.1f ns (8 tdpbusd)\n", gap, ns, g, ns - g);
  }
  _tile_release();
}
