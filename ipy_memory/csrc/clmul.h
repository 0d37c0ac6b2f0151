/* CRC-32 (the zip polynomial) by carry-less multiplication: the folding steps that crc.c's checksum
 * and scan.c's float16 scan with its checksum share (Intel's "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ"; the constants are x^k mod P for the fold distances, bit-reflected).
 * A message is loaded into four 128-bit lanes, 64 bytes at a time (the first 16 xored with the
 * running CRC), each lane then folded over the next 64 bytes; clmul_finish reduces them to 32 bits. */
#ifndef IPY_MEMORY_CLMUL_H
#define IPY_MEMORY_CLMUL_H

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_CLMUL 1
#define CLMUL_TARGET __attribute__((target("pclmul,sse2")))

#define CLMUL_K2K1 _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL) /* fold by 512 bits */
#define CLMUL_K4K3 _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL) /* fold by 128 bits */

CLMUL_TARGET static inline __m128i clmul_fold(__m128i x, __m128i k, __m128i data)
{
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), data);
}

/* The CRC (without zlib's final inversion) of the folded lanes and then p[:n], n a multiple of 16 */
CLMUL_TARGET static inline uint32_t clmul_finish(__m128i x1, __m128i x2, __m128i x3, __m128i x4, const uint8_t *p,
                                                 size_t n)
{
    const __m128i k4k3 = CLMUL_K4K3;
    const __m128i k5 = _mm_set_epi64x(0, 0x163cd6124LL);               /* 64 -> 32 bits */
    const __m128i poly = _mm_set_epi64x(0x1F7011641LL, 0x1DB710641LL); /* Barrett: u', P' */
    const __m128i low32 = _mm_set_epi32(0, 0, 0, -1);
    x1 = clmul_fold(clmul_fold(clmul_fold(x1, k4k3, x2), k4k3, x3), k4k3, x4);
    for (; n >= 16; p += 16, n -= 16)
        x1 = clmul_fold(x1, k4k3, _mm_loadu_si128((const __m128i *)p));
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), _mm_clmulepi64_si128(k4k3, x1, 0x01)); /* 128 -> 64 */
    __m128i t = _mm_srli_si128(x1, 4);                                                 /* 64 -> 32 */
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5, 0x00), t);
    t = x1;                                                                            /* Barrett */
    x1 = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), poly, 0x10), low32);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(x1, poly, 0x00), t);
    return (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(x1, 4));
}

#if defined(__clang__) || __GNUC__ >= 10
/* The same folds on four 128-bit lanes at once, in one 512-bit register (AVX-512 VPCLMULQDQ): four
 * registers fold 256 bytes a step (crc.c's checksum, scan.c's scan with its checksum). */
#define HAVE_VPCLMUL 1
#define VPCLMUL_TARGET __attribute__((target("avx512f,vpclmulqdq,pclmul,sse2")))
#define VPCLMUL_K256 _mm512_broadcast_i32x4(_mm_set_epi64x(0x1322d1430LL, 0x11542778aLL)) /* by 2048 bits */
#define VPCLMUL_K64 _mm512_broadcast_i32x4(CLMUL_K2K1)                                     /* by 512 */

/* clmul_fold on four 128-bit lanes at once (k: the fold distance's constants in each lane) */
VPCLMUL_TARGET static inline __m512i fold512(__m512i x, __m512i k, __m512i data)
{
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11), data,
                                     0x96); /* a ^ b ^ c */
}

/* clmul_finish of the four registers of lanes (in message order) folded into one, then p[:n] */
VPCLMUL_TARGET static inline uint32_t fold512_finish(__m512i x0, __m512i x1, __m512i x2, __m512i x3, const uint8_t *p,
                                                     size_t n)
{
    const __m512i k64 = VPCLMUL_K64;
    __m512i x = fold512(fold512(fold512(x0, k64, x1), k64, x2), k64, x3);
    for (; n >= 64; p += 64, n -= 64)
        x = fold512(x, k64, _mm512_loadu_si512(p));
    return clmul_finish(_mm512_extracti32x4_epi32(x, 0), _mm512_extracti32x4_epi32(x, 1),
                        _mm512_extracti32x4_epi32(x, 2), _mm512_extracti32x4_epi32(x, 3), p, n);
}
#endif
#endif

#endif
