/* CRC-32 of index snapshots (_crc.py, _npz.py). */
#include "speedups.h"

/* ------------------------------------------------------------------------------ CRC-32 */

/* zlib's CRC-32 (the zip polynomial, bit-reflected), by carry-less multiplication where the CPU has
 * PCLMULQDQ: 64 bytes folded per step in four 128-bit lanes, then folded to one and reduced by
 * Barrett's method (Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ"; the
 * constants are x^k mod P for the fold distances, bit-reflected). Tails go through a byte table.
 * zlib 1.2.13 checks about 2 GB/s here; snapshots are checked on every cold open. */

static uint32_t crc_table[256];

static void crc_table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc_bytes(uint32_t crc, const uint8_t *p, size_t n) /* crc without zlib's inversions */
{
    while (n--)
        crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_CLMUL 1

__attribute__((target("pclmul,sse2"))) static inline __m128i fold(__m128i x, __m128i k, __m128i data)
{
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), data);
}

/* n >= 64 and a multiple of 16 */
__attribute__((target("pclmul,sse2"))) static uint32_t crc_clmul(uint32_t crc, const uint8_t *p, size_t n)
{
    const __m128i k2k1 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL); /* fold by 512 bits */
    const __m128i k4k3 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL); /* fold by 128 bits */
    const __m128i k5 = _mm_set_epi64x(0, 0x163cd6124LL);                /* 64 -> 32 bits */
    const __m128i poly = _mm_set_epi64x(0x1F7011641LL, 0x1DB710641LL);  /* Barrett: u', P' */
    const __m128i low32 = _mm_set_epi32(0, 0, 0, -1);
    __m128i x1 = _mm_loadu_si128((const __m128i *)p), x2 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 32)), x4 = _mm_loadu_si128((const __m128i *)(p + 48));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    for (p += 64, n -= 64; n >= 64; p += 64, n -= 64) {
        x1 = fold(x1, k2k1, _mm_loadu_si128((const __m128i *)p));
        x2 = fold(x2, k2k1, _mm_loadu_si128((const __m128i *)(p + 16)));
        x3 = fold(x3, k2k1, _mm_loadu_si128((const __m128i *)(p + 32)));
        x4 = fold(x4, k2k1, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    x1 = fold(fold(fold(x1, k4k3, x2), k4k3, x3), k4k3, x4);
    for (; n >= 16; p += 16, n -= 16)
        x1 = fold(x1, k4k3, _mm_loadu_si128((const __m128i *)p));
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), _mm_clmulepi64_si128(k4k3, x1, 0x01)); /* 128 -> 64 */
    __m128i t = _mm_srli_si128(x1, 4);                                                 /* 64 -> 32 */
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5, 0x00), t);
    t = x1;                                                                            /* Barrett */
    x1 = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), poly, 0x10), low32);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(x1, poly, 0x00), t);
    return (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(x1, 4));
}
#endif

int crc32_fast = 0; /* the CPU has PCLMULQDQ (crc32_init) */

static uint32_t crc32_zlib(uint32_t value, const uint8_t *p, size_t n)
{
    uint32_t crc = ~value;
#ifdef HAVE_CLMUL
    size_t m = n & ~(size_t)15;
    if (crc32_fast && m >= 64) {
        crc = crc_clmul(crc, p, m);
        p += m;
        n -= m;
    }
#endif
    return ~crc_bytes(crc, p, n);
}

const char crc32_doc[] = PyDoc_STR(
"crc32(data, value=0) -> int\n--\n\n"
"zlib.crc32(data, value), by carry-less multiplication where the CPU has it (see FAST_CRC32).");

PyObject *crc32(PyObject *self, PyObject *args)
{
    Py_buffer data;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I:crc32", &data, &value))
        return NULL;
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = crc32_zlib(value, (const uint8_t *)data.buf, (size_t)data.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

void crc32_init(void)
{
    crc_table_init();
#ifdef HAVE_CLMUL
    __builtin_cpu_init();
    crc32_fast = __builtin_cpu_supports("pclmul") != 0;
#endif
}
