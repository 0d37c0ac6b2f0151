/* The column scan of sparse query vectors (_colscan.py). */
#include "speedups.h"
#include "clmul.h"

#define CHUNK 8192 /* rows scored at a time: their float32 sums (32 kB) stay in L1 */

/* ------------------------------------------------------------------------------ column scores */

/* out[j] = alive[j] ? scale[j] * (sum_i w[i] * cols[dims[i]][j] + slack) : -inf, the sum in float32
 * in the order of dims (what _colscan.ColumnScan.slack assumes). Four dimensions per pass keep a
 * row's running sum in a register; the order of the additions stays the same. With `crcs`, also
 * crcs[i] = the CRC-32 of column dims[i]'s n bytes continued from crcs[i] (where want[i], if want):
 * each chunk is checksummed as it is first read, then summed from the cache (a snapshot's columns,
 * checked by the query that first reads them: _colscan). */
static inline void chunk_crcs(uint32_t *crcs, const uint8_t *want, Py_ssize_t i, Py_ssize_t count,
                              const int8_t *const *c, Py_ssize_t m)
{
    for (Py_ssize_t t = 0; t < count; t++)
        if (!want || want[i + t])
            crcs[i + t] = crc32_zlib(crcs[i + t], (const uint8_t *)c[t], (size_t)m);
}

MULTIVERSION static void column_scores_i8(const int8_t *base, Py_ssize_t stride, Py_ssize_t n, const int64_t *dims,
                                          const float *w, Py_ssize_t nd, const float *scale, const uint8_t *alive,
                                          float slack, float *out, uint32_t *crcs, const uint8_t *want)
{
    for (Py_ssize_t lo = 0; lo < n; lo += CHUNK) {
        Py_ssize_t m = n - lo < CHUNK ? n - lo : CHUNK;
        float *o = out + lo;
        memset(o, 0, (size_t)m * sizeof(float));
        Py_ssize_t i = 0;
        for (; i + 4 <= nd; i += 4) {
            const int8_t *c0 = base + dims[i] * stride + lo, *c1 = base + dims[i + 1] * stride + lo;
            const int8_t *c2 = base + dims[i + 2] * stride + lo, *c3 = base + dims[i + 3] * stride + lo;
            if (crcs) {
                const int8_t *const c[4] = {c0, c1, c2, c3};
                chunk_crcs(crcs, want, i, 4, c, m);
            }
            const float w0 = w[i], w1 = w[i + 1], w2 = w[i + 2], w3 = w[i + 3];
            for (Py_ssize_t j = 0; j < m; j++) {
                float a = o[j];
                a += w0 * (float)c0[j];
                a += w1 * (float)c1[j];
                a += w2 * (float)c2[j];
                a += w3 * (float)c3[j];
                o[j] = a;
            }
        }
        for (; i < nd; i++) {
            const int8_t *c = base + dims[i] * stride + lo;
            if (crcs)
                chunk_crcs(crcs, want, i, 1, &c, m);
            const float wi = w[i];
            for (Py_ssize_t j = 0; j < m; j++)
                o[j] += wi * (float)c[j];
        }
        const float *s = scale + lo;
        for (Py_ssize_t j = 0; j < m; j++)
            o[j] = (o[j] + slack) * s[j];
        if (alive) {
            const uint8_t *a = alive + lo;
            for (Py_ssize_t j = 0; j < m; j++)
                if (!a[j])
                    o[j] = -INFINITY;
        }
    }
}

const char column_scores_doc[] = PyDoc_STR(
"column_scores(cols, dims, weights, scale, alive, slack, out, crcs=None, want=None)\n--\n\n"
"out[j] = scale[j] * (sum(weights[i] * cols[dims[i], j]) + slack) for the live rows j (alive[j]),\n"
"-inf for the others. cols: (dim, >= n) int8, rows contiguous; dims: int64; weights, scale, out:\n"
"float32; alive: bool or None; n = len(out). With crcs (uint32, one per dim), also crcs[i] =\n"
"zlib.crc32(cols[dims[i], :n], crcs[i]) for each i where want (bool, one per dim, or None: all),\n"
"computed in the same pass.");

PyObject *column_scores(PyObject *self, PyObject *args)
{
    enum { COLS, DIMS, W, SCALE, ALIVE, OUT, CRCS, WANT, N };
    static const Spec specs[N] = {{"cols", 2, "b", 0},          {"dims", 1, "lq", 0},
                                  {"weights", 1, "f", 0},       {"scale", 1, "f", 0},
                                  {"alive", 1, "?B", NONE_OK},  {"out", 1, "f", WRITABLE},
                                  {"crcs", 1, "IL", NONE_OK | WRITABLE}, {"want", 1, "?B", NONE_OK}};
    PyObject *o[N];
    Arg a[N];
    float slack;
    o[CRCS] = o[WANT] = Py_None;
    if (!PyArg_ParseTuple(args, "OOOOOfO|OO:column_scores", &o[COLS], &o[DIMS], &o[W], &o[SCALE], &o[ALIVE], &slack,
                          &o[OUT], &o[CRCS], &o[WANT]))
        return NULL;
    if (take_all(a, o, specs, N) < 0)
        return release(a, N, 0);
    const Py_ssize_t n = LEN(a[OUT]), nd = LEN(a[DIMS]), dim = a[COLS].view.shape[0];
    if (a[DIMS].view.itemsize != 8 || LEN(a[W]) != nd || LEN(a[SCALE]) != n || (a[ALIVE].held && LEN(a[ALIVE]) != n)
        || a[COLS].view.shape[1] < n || (a[CRCS].held && (LEN(a[CRCS]) != nd || a[CRCS].view.itemsize != 4))
        || (a[WANT].held && (!a[CRCS].held || LEN(a[WANT]) != nd))) {
        PyErr_SetString(PyExc_ValueError, "column_scores: mismatched lengths (weights = dims, scale = alive = out <= "
                                          "columns' rows; crcs uint32 and want as long as dims, want only with crcs)");
        return release(a, N, 0);
    }
    const int64_t *d = DATA(a[DIMS], const int64_t);
    for (Py_ssize_t i = 0; i < nd; i++)
        if (d[i] < 0 || d[i] >= dim) {
            PyErr_Format(PyExc_IndexError, "column_scores: dimension %lld is not in [0, %zd)", (long long)d[i], dim);
            return release(a, N, 0);
        }
    Py_BEGIN_ALLOW_THREADS
    column_scores_i8(DATA(a[COLS], const int8_t), a[COLS].view.strides[0], n, d, DATA(a[W], const float), nd,
                     DATA(a[SCALE], const float), DATA(a[ALIVE], const uint8_t), slack, DATA(a[OUT], float),
                     DATA(a[CRCS], uint32_t), DATA(a[WANT], const uint8_t));
    Py_END_ALLOW_THREADS
    return release(a, N, 1);
}

/* ------------------------------------------------------------------------------ float16 dots */

/* out[k * n + j] = qs[k] . row j, or -inf where alive[j] is false. Eight partial sums per dot. */
static void half_dots_portable(const uint16_t *mat, Py_ssize_t stride, Py_ssize_t n, Py_ssize_t dim,
                               const float *qs, Py_ssize_t nq, const uint8_t *alive, float *out, Py_ssize_t ostride)
{
    for (Py_ssize_t j = 0; j < n; j++) {
        const uint16_t *row = mat + j * stride;
        for (Py_ssize_t k = 0; k < nq; k++) {
            const float *q = qs + k * dim;
            float acc[8] = {0}, s = 0.0f;
            for (Py_ssize_t i = 0; i < dim; i++)
                acc[i & 7] += q[i] * half_to_float(row[i]);
            for (int l = 0; l < 8; l++)
                s += acc[l];
            out[k * ostride + j] = (alive && !alive[j]) ? -INFINITY : s;
        }
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_F16C_PATH 1

/* The same with F16C conversions and FMA (3.5x faster than the portable loop here; the scan is then
 * bound by reading the rows): two eight-lane sums per dot, the last dim % 16 values added singly. */
__attribute__((target("avx2,f16c,fma"))) static void half_dots_f16c(const uint16_t *mat, Py_ssize_t stride,
                                                                     Py_ssize_t n, Py_ssize_t dim, const float *qs,
                                                                     Py_ssize_t nq, const uint8_t *alive, float *out,
                                                                     Py_ssize_t ostride)
{
    const Py_ssize_t whole = dim - dim % 16;
    for (Py_ssize_t j = 0; j < n; j++) {
        const uint16_t *row = mat + j * stride;
        for (Py_ssize_t k = 0; k < nq; k++) {
            const float *q = qs + k * dim;
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
            for (Py_ssize_t i = 0; i < whole; i += 16) {
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + i))), a0);
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8),
                                     _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + i + 8))), a1);
            }
            float lanes[8], s = 0.0f;
            _mm256_storeu_ps(lanes, _mm256_add_ps(a0, a1));
            for (int l = 0; l < 8; l++)
                s += lanes[l];
            for (Py_ssize_t i = whole; i < dim; i++)
                s += q[i] * _cvtsh_ss(row[i]);
            out[k * ostride + j] = (alive && !alive[j]) ? -INFINITY : s;
        }
    }
}
#endif

#if defined(HAVE_F16C_PATH) && defined(HAVE_VPCLMUL)
#define HAVE_FUSED 1
#define FUSED_TARGET __attribute__((target("avx512f,vpclmulqdq,pclmul,avx2,f16c,fma")))

/* One query's dots and the CRC of the rows' bytes in one pass: every 256 bytes loaded go to
 * half_dots_f16c's two sums (the same additions in the same order: the same results) and, as four
 * 512-bit registers, to sixteen folding lanes (clmul.h's four, four times over; each register folds
 * over 256 bytes: x^2080 and x^2016 mod P), so the checksum costs no second read of the rows (152k
 * rows: 9.5 ms against 17.8 for the scan, then the CRC of each part). Measured slower here: one
 * register of lanes (its folds wait on each other), 128-bit folds (they share a port with the
 * conversions) and 512-bit dots (half the speed of the 256-bit ones). Rows back to back, dim a
 * multiple of 128 (not 0), n >= 1. Returns the CRC without zlib's inversions. */
FUSED_TARGET static uint32_t half_dots_crc_avx512(const uint16_t *mat, Py_ssize_t n, Py_ssize_t dim, const float *q,
                                                  const uint8_t *alive, float *out, uint32_t crc)
{
    const __m512i k256 = VPCLMUL_K256;
    __m512i x0 = _mm512_xor_si512(_mm512_loadu_si512(mat), _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)crc)));
    __m512i x1 = _mm512_loadu_si512(mat + 32), x2 = _mm512_loadu_si512(mat + 64), x3 = _mm512_loadu_si512(mat + 96);
    for (Py_ssize_t j = 0; j < n; j++) {
        const uint16_t *row = mat + j * dim;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        for (Py_ssize_t i = 0; i < dim; i += 128) {
            for (int h = 0; h < 128; h += 16) {
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + h), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + i + h))), a0);
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + h + 8),
                                     _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + i + h + 8))), a1);
            }
            if (j || i) {             /* (the first 256 bytes started the lanes) */
                x0 = fold512(x0, k256, _mm512_loadu_si512(row + i));
                x1 = fold512(x1, k256, _mm512_loadu_si512(row + i + 32));
                x2 = fold512(x2, k256, _mm512_loadu_si512(row + i + 64));
                x3 = fold512(x3, k256, _mm512_loadu_si512(row + i + 96));
            }
        }
        float lanes[8], s = 0.0f;
        _mm256_storeu_ps(lanes, _mm256_add_ps(a0, a1));
        for (int l = 0; l < 8; l++)
            s += lanes[l];
        out[j] = (alive && !alive[j]) ? -INFINITY : s;
    }
    return fold512_finish(x0, x1, x2, x3, NULL, 0);
}

#endif

int half_dots_crc_fused(void)
{
#ifdef HAVE_FUSED
    __builtin_cpu_init();
    return half_dots_fast() && crc32_wide;
#else
    return 0;
#endif
}


int half_dots_fast(void)
{
#ifdef HAVE_F16C_PATH
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

static void half_dots_rows(const uint16_t *mat, Py_ssize_t stride, Py_ssize_t n, Py_ssize_t dim, const float *qs,
                           Py_ssize_t nq, const uint8_t *alive, float *out, Py_ssize_t ostride, int simd)
{
#ifdef HAVE_F16C_PATH
    if (simd && half_dots_fast()) {
        half_dots_f16c(mat, stride, n, dim, qs, nq, alive, out, ostride);
        return;
    }
#endif
    half_dots_portable(mat, stride, n, dim, qs, nq, alive, out, ostride);
}

const char half_dots_doc[] = PyDoc_STR(
"half_dots(mat, queries, alive, out, simd=True, /)\n--\n\n"
"out[k, j] = queries[k] . mat[j] in float32 for the (n, dim) float16 rows of mat and the (q, dim)\n"
"float32 queries, -inf where alive (bool, n, or None) is false; out: (q, n) float32, C-contiguous\n"
"(_kernels.half_dots_numpy). The exact scan of a vector search before its columns are built. Sums\n"
"in float32 in partial sums (the order differs between the F16C path and the portable one, which\n"
"a false simd forces: the tests compare both).");

enum { MAT, QS, ALIVE, OUT, N_HALF };

/* half_dots' and half_dots_crc's arrays taken and their shapes checked (rows back to back too, if
 * `back_to_back`): 1, or 0 with the error set and nothing held */
static int take_half_dots(PyObject *const *o, Arg *a, const char *kernel, int back_to_back)
{
    static const Spec specs[N_HALF] = {{"mat", 2, "e", 0}, {"queries", 2, "f", 0}, {"alive", 1, "?B", NONE_OK},
                                       {"out", 2, "f", WRITABLE}};
    if (take_all(a, o, specs, N_HALF) < 0) {
        release(a, N_HALF, 0);
        return 0;
    }
    const Py_ssize_t n = LEN(a[MAT]), dim = a[MAT].view.shape[1], nq = LEN(a[QS]);
    if (a[QS].view.shape[1] != dim || a[QS].view.strides[0] != dim * 4 || LEN(a[OUT]) != nq
        || a[OUT].view.shape[1] != n || a[OUT].view.strides[0] != n * 4 || (a[ALIVE].held && LEN(a[ALIVE]) != n)
        || (back_to_back && n > 1 && a[MAT].view.strides[0] != dim * 2)) {
        PyErr_Format(PyExc_ValueError, "%s: mismatched shapes (queries (q, dim) contiguous, alive (n,), out (q, n) "
                     "contiguous for mat (n, dim)%s)", kernel, back_to_back ? ", its rows back to back" : "");
        release(a, N_HALF, 0);
        return 0;
    }
    return 1;
}

PyObject *half_dots(PyObject *self, PyObject *args)
{
    PyObject *o[N_HALF];
    Arg a[N_HALF];
    int simd = 1;
    if (!PyArg_ParseTuple(args, "OOOO|p:half_dots", &o[MAT], &o[QS], &o[ALIVE], &o[OUT], &simd)
        || !take_half_dots(o, a, "half_dots", 0))
        return NULL;
    const Py_ssize_t n = LEN(a[MAT]);
    Py_BEGIN_ALLOW_THREADS
    half_dots_rows(DATA(a[MAT], const uint16_t), a[MAT].view.strides[0] / 2, n, a[MAT].view.shape[1],
                   DATA(a[QS], const float), LEN(a[QS]), DATA(a[ALIVE], const uint8_t), DATA(a[OUT], float), n, simd);
    Py_END_ALLOW_THREADS
    return release(a, N_HALF, 1);
}

/* Rows of a block of half_dots_crc's portable path (12 kB at 384 dimensions, checksummed from L1) */
#define CRC_BLOCK 16

const char half_dots_crc_doc[] = PyDoc_STR(
"half_dots_crc(mat, queries, alive, out, /) -> int\n--\n\n"
"half_dots, and the zlib CRC-32 of mat's bytes (C-contiguous rows) computed in the same pass: a\n"
"block of rows is checksummed while it is in L1, so a snapshot's rows are read from memory once\n"
"for the scan and its check (_npz.LaterChecks).");

PyObject *half_dots_crc(PyObject *self, PyObject *args)
{
    PyObject *o[N_HALF];
    Arg a[N_HALF];
    if (!PyArg_ParseTuple(args, "OOOO:half_dots_crc", &o[MAT], &o[QS], &o[ALIVE], &o[OUT])
        || !take_half_dots(o, a, "half_dots_crc", 1))
        return NULL;
    const Py_ssize_t n = LEN(a[MAT]), dim = a[MAT].view.shape[1], nq = LEN(a[QS]);
    const uint16_t *mat = DATA(a[MAT], const uint16_t);
    const uint8_t *alive = DATA(a[ALIVE], const uint8_t);
    const float *qs = DATA(a[QS], const float);
    float *out = DATA(a[OUT], float);
    uint32_t crc = 0;
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_FUSED
    if (nq == 1 && n && dim && dim % 128 == 0 && half_dots_crc_fused())   /* (it starts on the first 256 bytes) */
        crc = ~half_dots_crc_avx512(mat, n, dim, qs, alive, out, ~0u);
    else
#endif
        for (Py_ssize_t lo = 0; lo < n; lo += CRC_BLOCK) {     /* each block checksummed from L1 */
            const Py_ssize_t m = n - lo < CRC_BLOCK ? n - lo : CRC_BLOCK;
            half_dots_rows(mat + lo * dim, dim, m, dim, qs, nq, alive ? alive + lo : NULL, out + lo, n, 1);
            crc = crc32_zlib(crc, (const uint8_t *)(mat + lo * dim), (size_t)(m * dim * 2));
        }
    Py_END_ALLOW_THREADS
    Py_DECREF(release(a, N_HALF, 1));
    return PyLong_FromUnsignedLong(crc);
}

/* ------------------------------------------------------------------------------ float32 -> float16 */

#ifdef HAVE_F16C_PATH
/* Rounded to nearest even, as numpy's astype (numpy converted one value at a time here: ~3 us of a
 * memory's bulk insert for its 1.5 rows of 384). */
__attribute__((target("avx2,f16c"))) static void to_half_f16c(const float *in, uint16_t *out, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        out[i] = _cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT);
}
#endif

const char to_half_doc[] = PyDoc_STR(
"to_half(values, out, /)\n--\n\n"
"out[i] = values[i] as float16, rounded to nearest even (numpy's astype; _kernels.to_half_numpy),\n"
"for float32 values and float16 out of one length, with F16C: RuntimeError where FAST_HALF_DOTS is\n"
"false (that CPU's conversions are numpy's).");

PyObject *to_half(PyObject *self, PyObject *args)
{
    enum { IN, OUT, N };
    static const Spec specs[N] = {{"values", 1, "f", 0}, {"out", 1, "e", WRITABLE}};
    PyObject *o[N];
    Arg a[N];
    if (!PyArg_ParseTuple(args, "OO:to_half", &o[IN], &o[OUT]))
        return NULL;
    if (take_all(a, o, specs, N) < 0)
        return release(a, N, 0);
    if (LEN(a[IN]) != LEN(a[OUT])) {
        PyErr_SetString(PyExc_ValueError, "to_half: values and out must be as long");
        return release(a, N, 0);
    }
#ifdef HAVE_F16C_PATH
    if (half_dots_fast()) {
        Py_BEGIN_ALLOW_THREADS
        to_half_f16c(DATA(a[IN], const float), DATA(a[OUT], uint16_t), LEN(a[IN]));
        Py_END_ALLOW_THREADS
        return release(a, N, 1);
    }
#endif
    PyErr_SetString(PyExc_RuntimeError, "to_half: this CPU has no F16C (use _kernels.to_half)");
    return release(a, N, 0);
}
