#include <immintrin.h>
#include <chrono>
#include <cstdio>
int main() {
  __m512i a[12]; for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_epi32(i);
  __m512i b = _mm512_set1_epi32(0x01010101), c = _mm512_set1_epi32(0x02020202);
  __m512 f[12]; for (int i = 0; i < 12; ++i) f[i] = _mm512_set1_ps(i);
  __m512 fb = _mm512_set1_ps(1.0000001f);
  const long R = 20000000;
  auto t = std::chrono::steady_clock::now();
  for (long r = 0; r < R; ++r) { for (int i = 0; i < 12; ++i) { a[i] = _mm512_dpbusd_epi32(a[i], b, c); } asm volatile("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(a[4]), "+v"(a[5]), "+v"(a[6]), "+v"(a[7]), "+v"(a[8]), "+v"(a[9]), "+v"(a[10]), "+v"(a[11])); }
  double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t).count() / (12.0 * R);
  t = std::chrono::steady_clock::now();
  for (long r = 0; r < R; ++r) { for (int i = 0; i < 12; ++i) { f[i] = _mm512_fmadd_ps(f[i], fb, fb); } asm volatile("" : "+v"(f[0]), "+v"(f[1]), "+v"(f[2]), "+v"(f[3]), "+v"(f[4]), "+v"(f[5]), "+v"(f[6]), "+v"(f[7]), "+v"(f[8]), "+v"(f[9]), "+v"(f[10]), "+v"(f[11])); }
  double nf = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t).count() / (12.0 * R);
  t = std::chrono::steady_clock::now();
  __m512i s[12]; for (int i = 0; i < 12; ++i) s[i] = a[i];
  for (long r = 0; r < R; ++r) { for (int i = 0; i < 12; ++i) { s[i] = _mm512_shuffle_epi8(c, s[i]); } asm volatile("" : "+v"(s[0]), "+v"(s[1]), "+v"(s[2]), "+v"(s[3]), "+v"(s[4]), "+v"(s[5]), "+v"(s[6]), "+v"(s[7]), "+v"(s[8]), "+v"(s[9]), "+v"(s[10]), "+v"(s[11])); }
  double np = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t).count() / (12.0 * R);
  int x = _mm512_reduce_add_epi32(a[0]) + (int)_mm512_reduce_add_ps(f[0]) + _mm512_reduce_add_epi32(s[0]);
  printf("vpdpbusd zmm %.3f ns each, vfmadd zmm %.3f ns, vpshufb zmm %.3f ns (12 chains) %d\n", ns, nf, np, x & 1);
}
