/* int8 columns of float16 rows (_colscan.ColumnScan): each row scaled so that its largest |value|
 * is 127, rounded, and written transposed (a column per dimension). */
#include "speedups.h"

#define TILE 64 /* rows quantized before their columns are written: 64 bytes of each column at a time */

/* _kernels.quantize_rows_numpy's arithmetic in float32, step for step: scale = max|x| / 127, x / scale
 * rounded half to even (rintf, the default rounding mode) and clipped to [-127, 127]; a row of
 * zeros keeps scale 0 and zeros. Non-finite values (a float32 of 65520 or more is inf in float16):
 * the scale is the finite values', +-inf saturates to +-127 and NaN is 0 (casting it is undefined). */
static inline int8_t quantized(float x, float scale)
{
    float v = scale > 0.0f ? rintf(x / scale) : x;
    if (v != v)
        return 0;
    return (int8_t)(v < -127.0f ? -127.0f : v > 127.0f ? 127.0f : v);
}

/* One row into t[0:dim]; returns its scale. x: dim floats of scratch. */
static float quantize_row(const uint16_t *row, Py_ssize_t dim, float *x, int8_t *t)
{
    float top = 0.0f;
    for (Py_ssize_t i = 0; i < dim; i++) {
        x[i] = half_to_float(row[i]);
        const float a = fabsf(x[i]);
        top = a > top && a < INFINITY ? a : top;     /* (NaN is neither) */
    }
    const float scale = top / 127.0f;
    for (Py_ssize_t i = 0; i < dim; i++)
        t[i] = quantized(x[i], scale);
    return scale;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_F16C_ROWS 1

/* The same with F16C conversions, eight values at a time (max is exact in any order; the division
 * and the rounding to nearest even are IEEE's in each lane: the same results). Non-finite lanes are
 * masked out of the max and NaN zeroed before the clip, whose max would make it -127. */
__attribute__((target("avx2,f16c"))) static float quantize_row_f16c(const uint16_t *row, Py_ssize_t dim, float *x,
                                                                    int8_t *t)
{
    const Py_ssize_t whole = dim - dim % 8;
    const __m256 sign = _mm256_set1_ps(-0.0f), inf = _mm256_set1_ps(INFINITY);
    __m256 top8 = _mm256_setzero_ps();
    for (Py_ssize_t i = 0; i < whole; i += 8) {
        const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + i)));
        _mm256_storeu_ps(x + i, v);
        const __m256 a = _mm256_andnot_ps(sign, v);
        top8 = _mm256_max_ps(top8, _mm256_and_ps(a, _mm256_cmp_ps(a, inf, _CMP_LT_OQ)));
    }
    float lanes[8], top = 0.0f;
    _mm256_storeu_ps(lanes, top8);
    for (int l = 0; l < 8; l++)
        top = lanes[l] > top ? lanes[l] : top;
    for (Py_ssize_t i = whole; i < dim; i++) {
        x[i] = _cvtsh_ss(row[i]);
        const float a = fabsf(x[i]);
        top = a > top && a < INFINITY ? a : top;
    }
    const float scale = top / 127.0f;
    if (!(scale > 0.0f)) {
        for (Py_ssize_t i = 0; i < dim; i++)
            t[i] = quantized(x[i], scale);
        return scale;
    }
    const __m256 s8 = _mm256_set1_ps(scale), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    for (Py_ssize_t i = 0; i < whole; i += 8) {
        __m256 v = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), s8), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
        const __m256i q = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, lo), hi));
        const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
        _mm_storel_epi64((__m128i *)(t + i), _mm_packs_epi16(w, w));
    }
    for (Py_ssize_t i = whole; i < dim; i++)
        t[i] = quantized(x[i], scale);
    return scale;
}
#endif

static void quantize(const uint16_t *rows, Py_ssize_t rstride, Py_ssize_t n, Py_ssize_t dim, int8_t *cols,
                     Py_ssize_t cstride, float *scales, float *x, int8_t *tile, int simd)
{
#ifdef HAVE_F16C_ROWS
    const int f16c = simd && half_dots_fast();
#endif
    for (Py_ssize_t lo = 0; lo < n; lo += TILE) {
        const Py_ssize_t m = n - lo < TILE ? n - lo : TILE;
        for (Py_ssize_t r = 0; r < m; r++) {
            const uint16_t *row = rows + (lo + r) * rstride;
#ifdef HAVE_F16C_ROWS
            if (f16c) {
                scales[lo + r] = quantize_row_f16c(row, dim, x, tile + r * dim);
                continue;
            }
#endif
            scales[lo + r] = quantize_row(row, dim, x, tile + r * dim);
        }
        for (Py_ssize_t d = 0; d < dim; d++) {
            int8_t *c = cols + d * cstride + lo;
            for (Py_ssize_t r = 0; r < m; r++)
                c[r] = tile[r * dim + d];
        }
    }
}

const char quantize_rows_doc[] = PyDoc_STR(
"quantize_rows(rows, cols, scales, simd=True, /)\n--\n\n"
"The int8 columns of float16 rows: scales[j] = max|rows[j]| / 127 (float32) and cols[:, j] =\n"
"rint(rows[j] / scales[j]) clipped to +-127 (zeros for a row of zeros; the max of the finite\n"
"values, NaN 0 and +-inf +-127), in float32 as\n"
"_kernels.quantize_rows_numpy computes them. rows: (n, dim) float16; cols: (dim, n) int8, any row\n"
"stride (a slice of a block's columns); scales: (n,) float32. One pass, no temporaries (numpy's\n"
"needed 37 MB a chunk: 100k memories' columns took 0.4 s, mostly in fresh pages). A false simd\n"
"forces the portable path (the F16C one runs where the CPU has it): the tests compare both.");

PyObject *quantize_rows(PyObject *self, PyObject *args)
{
    enum { ROWS, COLS, SCALES, N };
    static const Spec specs[N] = {{"rows", 2, "e", 0}, {"cols", 2, "b", WRITABLE}, {"scales", 1, "f", WRITABLE}};
    PyObject *o[N];
    Arg a[N];
    int simd = 1;
    if (!PyArg_ParseTuple(args, "OOO|p:quantize_rows", &o[ROWS], &o[COLS], &o[SCALES], &simd))
        return NULL;
    if (take_all(a, o, specs, N) < 0)
        return release(a, N, 0);
    const Py_ssize_t n = LEN(a[ROWS]), dim = a[ROWS].view.shape[1];
    if (a[COLS].view.shape[0] != dim || a[COLS].view.shape[1] != n || LEN(a[SCALES]) != n
        || a[SCALES].view.strides[0] != 4) {
        PyErr_SetString(PyExc_ValueError, "quantize_rows: mismatched shapes (cols (dim, n) for rows (n, dim), "
                                          "scales (n,) contiguous)");
        return release(a, N, 0);
    }
    float *x = PyMem_Malloc(sizeof(float) * (size_t)(dim ? dim : 1));
    int8_t *tile = PyMem_Malloc((size_t)TILE * (size_t)(dim ? dim : 1));
    if (!x || !tile) {
        PyMem_Free(x);
        PyMem_Free(tile);
        PyErr_NoMemory();
        return release(a, N, 0);
    }
    Py_BEGIN_ALLOW_THREADS
    quantize(DATA(a[ROWS], const uint16_t), a[ROWS].view.strides[0] / 2, n, dim, DATA(a[COLS], int8_t),
             a[COLS].view.strides[0], DATA(a[SCALES], float), x, tile, simd);
    Py_END_ALLOW_THREADS
    PyMem_Free(x);
    PyMem_Free(tile);
    return release(a, N, 1);
}
