/* CRC-32 of index snapshots (_crc.py, _npz.py). */
#include "speedups.h"
#include "clmul.h"

/* ------------------------------------------------------------------------------ CRC-32 */

/* zlib's CRC-32 (the zip polynomial, bit-reflected), by carry-less multiplication where the CPU has
 * PCLMULQDQ: 64 bytes folded per step in four 128-bit lanes, then folded to one and reduced by
 * Barrett's method (Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ"; the
 * constants are x^k mod P for the fold distances, bit-reflected); with AVX-512 VPCLMULQDQ, 256
 * bytes per step in four 512-bit registers (clmul.h). Tails go through a byte table. Here ~27 GB/s
 * (~20 with 128-bit folds) against zlib 1.2.13's ~3.5; snapshots are checked on every cold open. */

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

#ifdef HAVE_CLMUL
/* n >= 64 and a multiple of 16 */
CLMUL_TARGET static uint32_t crc_clmul(uint32_t crc, const uint8_t *p, size_t n)
{
    __m128i x1 = _mm_loadu_si128((const __m128i *)p), x2 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 32)), x4 = _mm_loadu_si128((const __m128i *)(p + 48));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    for (p += 64, n -= 64; n >= 64; p += 64, n -= 64) {
        x1 = clmul_fold(x1, CLMUL_K2K1, _mm_loadu_si128((const __m128i *)p));
        x2 = clmul_fold(x2, CLMUL_K2K1, _mm_loadu_si128((const __m128i *)(p + 16)));
        x3 = clmul_fold(x3, CLMUL_K2K1, _mm_loadu_si128((const __m128i *)(p + 32)));
        x4 = clmul_fold(x4, CLMUL_K2K1, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    return clmul_finish(x1, x2, x3, x4, p, n);
}
#endif

#ifdef HAVE_VPCLMUL
/* The same, 256 bytes a step in four 512-bit registers of lanes. n >= 256 and a multiple of 16 */
VPCLMUL_TARGET static uint32_t crc_vpclmul(uint32_t crc, const uint8_t *p, size_t n)
{
    const __m512i k256 = VPCLMUL_K256;
    __m512i x0 = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)crc)));
    __m512i x1 = _mm512_loadu_si512(p + 64), x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
    for (p += 256, n -= 256; n >= 256; p += 256, n -= 256) {
        x0 = fold512(x0, k256, _mm512_loadu_si512(p));
        x1 = fold512(x1, k256, _mm512_loadu_si512(p + 64));
        x2 = fold512(x2, k256, _mm512_loadu_si512(p + 128));
        x3 = fold512(x3, k256, _mm512_loadu_si512(p + 192));
    }
    return fold512_finish(x0, x1, x2, x3, p, n);
}
#endif

int crc32_fast = 0; /* the CPU has PCLMULQDQ (crc32_init) */
int crc32_wide = 0; /* ... and AVX-512 with VPCLMULQDQ */

/* wide: by 512-bit folds where the CPU has them (crc32_wide), else 128-bit ones */
static uint32_t crc32_folded(uint32_t value, const uint8_t *p, size_t n, int wide)
{
    uint32_t crc = ~value;
#ifdef HAVE_CLMUL
    const size_t m = n & ~(size_t)15;
    if (crc32_fast && m >= 64) {
#ifdef HAVE_VPCLMUL
        crc = wide && crc32_wide && m >= 256 ? crc_vpclmul(crc, p, m) : crc_clmul(crc, p, m);
#else
        crc = crc_clmul(crc, p, m);
#endif
        p += m;
        n -= m;
    }
#endif
    return ~crc_bytes(crc, p, n);
}

uint32_t crc32_zlib(uint32_t value, const uint8_t *p, size_t n)
{
    return crc32_folded(value, p, n, 1);
}

const char crc32_doc[] = PyDoc_STR(
"crc32(data, value=0, wide=True) -> int\n--\n\n"
"zlib.crc32(data, value), by carry-less multiplication where the CPU has it (see FAST_CRC32): in\n"
"512-bit registers where it also has AVX-512 with VPCLMULQDQ (WIDE_CRC32), unless wide is false\n"
"(the tests and benchmarks/kernels.py compare both).");

PyObject *crc32(PyObject *self, PyObject *args)
{
    Py_buffer data;
    unsigned int value = 0;
    int wide = 1;
    if (!PyArg_ParseTuple(args, "y*|Ip:crc32", &data, &value, &wide))
        return NULL;
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = crc32_folded(value, (const uint8_t *)data.buf, (size_t)data.len, wide);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

const char crc32_rows_doc[] = PyDoc_STR(
"crc32_rows(mat, rows, out)\n--\n\n"
"out[j] = zlib.crc32 of the bytes of row rows[j] of the 2-d `mat` (its rows contiguous, any dtype),\n"
"for each j: the pieces a snapshot member is checked in (_npz.PieceChecks), in one call.");

PyObject *crc32_rows(PyObject *self, PyObject *args)
{
    enum { MAT, ROWS, OUT, N };
    static const Spec specs[N] = {{"mat", 2, "bBhHiIlLqQefd", 0}, {"rows", 1, "lq", 0}, {"out", 1, "IL", WRITABLE}};
    PyObject *o[N];
    Arg a[N];
    if (!PyArg_ParseTuple(args, "OOO:crc32_rows", &o[MAT], &o[ROWS], &o[OUT]))
        return NULL;
    if (take_all(a, o, specs, N) < 0)
        return release(a, N, 0);
    const Py_ssize_t m = LEN(a[ROWS]), n = LEN(a[MAT]);
    if (LEN(a[OUT]) < m || a[ROWS].view.itemsize != 8 || a[OUT].view.itemsize != 4) {
        PyErr_SetString(PyExc_ValueError, "crc32_rows: rows must be int64, out uint32 and as long as rows");
        return release(a, N, 0);
    }
    const uint8_t *base = (const uint8_t *)a[MAT].view.buf;
    const Py_ssize_t stride = a[MAT].view.strides[0];
    const size_t width = (size_t)(a[MAT].view.shape[1] * a[MAT].view.itemsize);
    const int64_t *rows = DATA(a[ROWS], const int64_t);
    uint32_t *out = DATA(a[OUT], uint32_t);
    Py_ssize_t bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < m; j++) {
        if (rows[j] < 0 || rows[j] >= n) {
            bad++;
            continue;
        }
        out[j] = crc32_zlib(0, base + rows[j] * stride, width);
    }
    Py_END_ALLOW_THREADS
    return release_checked(a, N, bad, "crc32_rows", "rows out of range");
}

void crc32_init(void)
{
    crc_table_init();
#ifdef HAVE_CLMUL
    __builtin_cpu_init();
    crc32_fast = __builtin_cpu_supports("pclmul") != 0;
#endif
#ifdef HAVE_VPCLMUL
    crc32_wide = crc32_fast && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
#endif
}
