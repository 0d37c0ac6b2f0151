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
