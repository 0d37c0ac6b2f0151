/* Optional compiled kernels for ipy_memory's hottest loops.
 *
 * Every function here has a numpy twin in _kernels.py that computes the same thing; the package
 * works without this extension (a build without a C compiler skips it), and the tests run both.
 * Arguments arrive through the buffer protocol (numpy arrays, no numpy headers needed to build),
 * are checked here (a wrong shape raises, it never reads out of bounds), and the loops run with
 * the GIL released, so two threads can scan two parts of one query at once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Function multi-versioning: one build runs AVX-512 (x86-64-v4) or AVX2 + FMA (x86-64-v3) code
 * where the CPU has it, baseline SSE2 elsewhere. (Plain "avx512f" lacks FMA and AVX512BW's byte
 * conversions: 1.8x slower here.) ifuncs need glibc and GCC 12 names these levels; other
 * compilers and platforms get the baseline loop, still auto-vectorised. */
#if defined(__x86_64__) && defined(__GLIBC__) && !defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 12
#define MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MULTIVERSION
#endif

#define CHUNK 8192 /* rows scored at a time: their float32 sums (32 kB) stay in L1 */

/* ------------------------------------------------------------------------------ buffers */

/* Acquire `obj` as a buffer of `ndim` dimensions whose format is one of `formats` (struct codes)
 * and whose last axis is contiguous. Returns 0, or -1 with TypeError / ValueError set. */
static int get_buffer(PyObject *obj, Py_buffer *view, int ndim, const char *formats, int writable, const char *name)
{
    int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    const char *fmt = view->format ? view->format : "B";
    if (*fmt == '=' || *fmt == '<' || *fmt == '@')
        fmt++;
    if (view->ndim != ndim || strlen(fmt) != 1 || !strchr(formats, *fmt)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a %d-d array of format '%s', got %d-d '%s'", name, ndim,
                     formats, view->ndim, view->format ? view->format : "B");
        PyBuffer_Release(view);
        return -1;
    }
    if (view->strides[ndim - 1] != view->itemsize || (ndim == 2 && view->strides[0] % view->itemsize)) {
        PyErr_Format(PyExc_ValueError, "%s: its last axis must be contiguous", name);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

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

PyDoc_STRVAR(column_scores_doc,
"column_scores(cols, dims, weights, scale, alive, slack, out)\n--\n\n"
"out[j] = scale[j] * (sum(weights[i] * cols[dims[i], j]) + slack) for the live rows j (alive[j]),\n"
"-inf for the others. cols: (dim, >= n) int8, rows contiguous; dims: int64; weights, scale, out:\n"
"float32; alive: bool or None; n = len(out).");

static PyObject *column_scores(PyObject *self, PyObject *args)
{
    PyObject *cols_o, *dims_o, *w_o, *scale_o, *alive_o, *out_o;
    float slack;
    if (!PyArg_ParseTuple(args, "OOOOOfO:column_scores", &cols_o, &dims_o, &w_o, &scale_o, &alive_o, &slack, &out_o))
        return NULL;
    Py_buffer cols, dims, w, scale, alive, out;
    int have_alive = alive_o != Py_None, ok = 0;
    if (get_buffer(cols_o, &cols, 2, "b", 0, "cols") < 0)
        return NULL;
    if (get_buffer(dims_o, &dims, 1, "lq", 0, "dims") < 0)
        goto release_cols;
    if (get_buffer(w_o, &w, 1, "f", 0, "weights") < 0)
        goto release_dims;
    if (get_buffer(scale_o, &scale, 1, "f", 0, "scale") < 0)
        goto release_w;
    if (have_alive && get_buffer(alive_o, &alive, 1, "?B", 0, "alive") < 0)
        goto release_scale;
    if (get_buffer(out_o, &out, 1, "f", 1, "out") < 0)
        goto release_alive;

    Py_ssize_t n = out.shape[0], nd = dims.shape[0], dim = cols.shape[0];
    if (dims.itemsize != 8 || w.shape[0] != nd || scale.shape[0] != n || (have_alive && alive.shape[0] != n)
        || cols.shape[1] < n) {
        PyErr_SetString(PyExc_ValueError, "column_scores: mismatched lengths (weights = dims, scale = alive = out <= "
                                          "columns' rows)");
        goto release_out;
    }
    const int64_t *d = (const int64_t *)dims.buf;
    for (Py_ssize_t i = 0; i < nd; i++)
        if (d[i] < 0 || d[i] >= dim) {
            PyErr_Format(PyExc_IndexError, "column_scores: dimension %lld is not in [0, %zd)", (long long)d[i], dim);
            goto release_out;
        }
    const uint8_t *a = have_alive ? (const uint8_t *)alive.buf : NULL;
    Py_BEGIN_ALLOW_THREADS
    column_scores_i8((const int8_t *)cols.buf, cols.strides[0], n, d, (const float *)w.buf, nd,
                     (const float *)scale.buf, a, slack, (float *)out.buf);
    Py_END_ALLOW_THREADS
    ok = 1;

release_out:
    PyBuffer_Release(&out);
release_alive:
    if (have_alive)
        PyBuffer_Release(&alive);
release_scale:
    PyBuffer_Release(&scale);
release_w:
    PyBuffer_Release(&w);
release_dims:
    PyBuffer_Release(&dims);
release_cols:
    PyBuffer_Release(&cols);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"column_scores", column_scores, METH_VARARGS, column_scores_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ipy_memory._speedups",
    "Compiled kernels of ipy_memory (optional): see _kernels.py for their numpy twins.", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    return PyModule_Create(&module);
}
