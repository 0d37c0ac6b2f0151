/* The column scan of sparse query vectors (_colscan.py). */
#include "speedups.h"

#define CHUNK 8192 /* rows scored at a time: their float32 sums (32 kB) stay in L1 */

/* ------------------------------------------------------------------------------ column scores */

/* out[j] = alive[j] ? scale[j] * (sum_i w[i] * cols[dims[i]][j] + slack) : -inf, the sum in float32
 * in the order of dims (what _colscan.ColumnScan.slack assumes). Four dimensions per pass keep a
 * row's running sum in a register; the order of the additions stays the same. */
MULTIVERSION static void column_scores_i8(const int8_t *base, Py_ssize_t stride, Py_ssize_t n, const int64_t *dims,
                                          const float *w, Py_ssize_t nd, const float *scale, const uint8_t *alive,
                                          float slack, float *out)
{
    for (Py_ssize_t lo = 0; lo < n; lo += CHUNK) {
        Py_ssize_t m = n - lo < CHUNK ? n - lo : CHUNK;
        float *o = out + lo;
        memset(o, 0, (size_t)m * sizeof(float));
        Py_ssize_t i = 0;
        for (; i + 4 <= nd; i += 4) {
            const int8_t *c0 = base + dims[i] * stride + lo, *c1 = base + dims[i + 1] * stride + lo;
            const int8_t *c2 = base + dims[i + 2] * stride + lo, *c3 = base + dims[i + 3] * stride + lo;
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
"column_scores(cols, dims, weights, scale, alive, slack, out)\n--\n\n"
"out[j] = scale[j] * (sum(weights[i] * cols[dims[i], j]) + slack) for the live rows j (alive[j]),\n"
"-inf for the others. cols: (dim, >= n) int8, rows contiguous; dims: int64; weights, scale, out:\n"
"float32; alive: bool or None; n = len(out).");

PyObject *column_scores(PyObject *self, PyObject *args)
{
    enum { COLS, DIMS, W, SCALE, ALIVE, OUT, N };
    static const Spec specs[N] = {{"cols", 2, "b", 0}, {"dims", 1, "lq", 0}, {"weights", 1, "f", 0},
                                  {"scale", 1, "f", 0}, {"alive", 1, "?B", NONE_OK}, {"out", 1, "f", WRITABLE}};
    PyObject *o[N];
    Arg a[N];
    float slack;
    if (!PyArg_ParseTuple(args, "OOOOOfO:column_scores", &o[COLS], &o[DIMS], &o[W], &o[SCALE], &o[ALIVE], &slack,
                          &o[OUT]))
        return NULL;
    if (take_all(a, o, specs, N) < 0)
        return release(a, N, 0);
    const Py_ssize_t n = LEN(a[OUT]), nd = LEN(a[DIMS]), dim = a[COLS].view.shape[0];
    if (a[DIMS].view.itemsize != 8 || LEN(a[W]) != nd || LEN(a[SCALE]) != n || (a[ALIVE].held && LEN(a[ALIVE]) != n)
        || a[COLS].view.shape[1] < n) {
        PyErr_SetString(PyExc_ValueError, "column_scores: mismatched lengths (weights = dims, scale = alive = out <= "
                                          "columns' rows)");
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
                     DATA(a[SCALE], const float), DATA(a[ALIVE], const uint8_t), slack, DATA(a[OUT], float));
    Py_END_ALLOW_THREADS
    return release(a, N, 1);
}

/* ------------------------------------------------------------------------------ float16 dots */

/* float16 bits -> float32, exact for every value (Giesen's method: the exponent is rebased by one
 * multiplication by 2^112, which is exact and also normalises subnormals; inf and NaN get an all-ones
 * exponent). The portable path; x86 CPUs with F16C convert eight at a time instead. */
static inline float half_to_float(uint16_t h)
{
    union { uint32_t u; float f; } v = {.u = (uint32_t)(h & 0x7fff) << 13};
    v.f *= 0x1p112f;
    if (v.f >= 65536.0f)
        v.u |= 0xffu << 23;
    v.u |= (uint32_t)(h & 0x8000) << 16;
    return v.f;
}

/* out[k * n + j] = qs[k] . row j, or -inf where alive[j] is false. Eight partial sums per dot. */
static void half_dots_portable(const uint16_t *mat, Py_ssize_t stride, Py_ssize_t n, Py_ssize_t dim,
                               const float *qs, Py_ssize_t nq, const uint8_t *alive, float *out)
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
            out[k * n + j] = (alive && !alive[j]) ? -INFINITY : s;
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
                                                                     Py_ssize_t nq, const uint8_t *alive, float *out)
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
            out[k * n + j] = (alive && !alive[j]) ? -INFINITY : s;
        }
    }
}
#endif

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
                           Py_ssize_t nq, const uint8_t *alive, float *out, int simd)
{
#ifdef HAVE_F16C_PATH
    if (simd && half_dots_fast()) {
        half_dots_f16c(mat, stride, n, dim, qs, nq, alive, out);
        return;
    }
#endif
    half_dots_portable(mat, stride, n, dim, qs, nq, alive, out);
}

const char half_dots_doc[] = PyDoc_STR(
"half_dots(mat, queries, alive, out, simd=True, /)\n--\n\n"
"out[k, j] = queries[k] . mat[j] in float32 for the (n, dim) float16 rows of mat and the (q, dim)\n"
"float32 queries, -inf where alive (bool, n, or None) is false; out: (q, n) float32, C-contiguous\n"
"(_kernels.half_dots_numpy). The exact scan of a vector search before its columns are built. Sums\n"
"in float32 in partial sums (the order differs between the F16C path and the portable one, which\n"
"a false simd forces: the tests compare both).");

PyObject *half_dots(PyObject *self, PyObject *args)
{
    enum { MAT, QS, ALIVE, OUT, N };
    static const Spec specs[N] = {{"mat", 2, "e", 0}, {"queries", 2, "f", 0}, {"alive", 1, "?B", NONE_OK},
                                  {"out", 2, "f", WRITABLE}};
    PyObject *o[N];
    Arg a[N];
    int simd = 1;
    if (!PyArg_ParseTuple(args, "OOOO|p:half_dots", &o[MAT], &o[QS], &o[ALIVE], &o[OUT], &simd))
        return NULL;
    if (take_all(a, o, specs, N) < 0)
        return release(a, N, 0);
    const Py_ssize_t n = LEN(a[MAT]), dim = a[MAT].view.shape[1], nq = LEN(a[QS]);
    if (a[QS].view.shape[1] != dim || a[QS].view.strides[0] != dim * 4 || LEN(a[OUT]) != nq
        || a[OUT].view.shape[1] != n || a[OUT].view.strides[0] != n * 4 || (a[ALIVE].held && LEN(a[ALIVE]) != n)) {
        PyErr_SetString(PyExc_ValueError, "half_dots: mismatched shapes (queries (q, dim) contiguous, alive (n,), "
                                          "out (q, n) contiguous for mat (n, dim))");
        return release(a, N, 0);
    }
    Py_BEGIN_ALLOW_THREADS
    half_dots_rows(DATA(a[MAT], const uint16_t), a[MAT].view.strides[0] / 2, n, dim, DATA(a[QS], const float), nq,
                   DATA(a[ALIVE], const uint8_t), DATA(a[OUT], float), simd);
    Py_END_ALLOW_THREADS
    return release(a, N, 1);
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
