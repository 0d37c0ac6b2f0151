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

/* ------------------------------------------------------------------------------ BM25 */

/* Both loops below read indices out of the index's own arrays; an index out of range means a bug,
 * and is skipped and reported (IndexError) instead of read: the output is scratch the caller drops. */

PyDoc_STRVAR(bm25_add_doc,
"bm25_add(out, slots, tf, norm, lens, shared, flat, coef)\n--\n\n"
"out[slots[k]] += coef * tf[k] / (tf[k] + nm) for each posting k, nm = flat where shared[k], else\n"
"norm[lens[slots[k]]] (flat for all when norm is None). out, tf, norm: float32; slots, lens: int32;\n"
"shared: bool or None.");

static PyObject *bm25_add(PyObject *self, PyObject *args)
{
    PyObject *out_o, *slots_o, *tf_o, *norm_o, *lens_o, *shared_o;
    double flat, coef;
    if (!PyArg_ParseTuple(args, "OOOOOOdd:bm25_add", &out_o, &slots_o, &tf_o, &norm_o, &lens_o, &shared_o, &flat,
                          &coef))
        return NULL;
    Py_buffer out, slots, tf, norm, lens, shared;
    int have_norm = norm_o != Py_None, have_shared = shared_o != Py_None, ok = 0;
    Py_ssize_t bad = 0;
    if (get_buffer(out_o, &out, 1, "f", 1, "out") < 0)
        return NULL;
    if (get_buffer(slots_o, &slots, 1, "i", 0, "slots") < 0)
        goto release_out;
    if (get_buffer(tf_o, &tf, 1, "f", 0, "tf") < 0)
        goto release_slots;
    if (have_norm && get_buffer(norm_o, &norm, 1, "f", 0, "norm") < 0)
        goto release_tf;
    if (have_norm && get_buffer(lens_o, &lens, 1, "i", 0, "lens") < 0)
        goto release_norm;
    if (have_shared && get_buffer(shared_o, &shared, 1, "?", 0, "shared") < 0)
        goto release_lens;
    Py_ssize_t n = slots.shape[0];
    if (tf.shape[0] != n || (have_shared && shared.shape[0] != n)) {
        PyErr_SetString(PyExc_ValueError, "bm25_add: slots, tf and shared differ in length");
        goto release_shared;
    }
    {
        float *o = (float *)out.buf;
        const int32_t *s = (const int32_t *)slots.buf, *len = have_norm ? (const int32_t *)lens.buf : NULL;
        const float *t = (const float *)tf.buf, *nrm = have_norm ? (const float *)norm.buf : NULL;
        const uint8_t *sh = have_shared ? (const uint8_t *)shared.buf : NULL;
        const Py_ssize_t size = out.shape[0], nlens = have_norm ? lens.shape[0] : 0, nnorm = have_norm ? norm.shape[0] : 0;
        const float c = (float)coef, fl = (float)flat;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = 0; k < n; k++) {
            const int32_t x = s[k];
            if (x < 0 || x >= size || (nrm && (x >= nlens || len[x] < 0 || len[x] >= nnorm))) {
                bad++;
                continue;
            }
            const float nm = (sh && sh[k]) || !nrm ? fl : nrm[len[x]];
            o[x] += c * t[k] / (t[k] + nm);
        }
        Py_END_ALLOW_THREADS
    }
    if (bad)
        PyErr_Format(PyExc_IndexError, "bm25_add: %zd postings index past the arrays", bad);
    else
        ok = 1;
release_shared:
    if (have_shared)
        PyBuffer_Release(&shared);
release_lens:
    if (have_norm)
        PyBuffer_Release(&lens);
release_norm:
    if (have_norm)
        PyBuffer_Release(&norm);
release_tf:
    PyBuffer_Release(&tf);
release_slots:
    PyBuffer_Release(&slots);
release_out:
    PyBuffer_Release(&out);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(context_add_doc,
"context_add(score, tfc, around, slots, tf, dead, shared, flat, cols, norm, weight)\n--\n\n"
"One neighbour distance of a term's context columns (_lexscore.context_columns): the term's tf in\n"
"each posting's live slot goes to the two neighbours around[slot, cols[0]] and around[slot, cols[1]]\n"
"(-1: none); then each neighbour t scores weight * v / (v + nm) once, v its summed tf, nm = flat where\n"
"shared, else norm[around[slot, cols[2 or 3]]] (the context length on that side), and tfc is zeroed\n"
"again. score, tfc, tf, norm: float32; around: (rows, width) int32; slots: int32; dead, shared: bool.");

static PyObject *context_add(PyObject *self, PyObject *args)
{
    PyObject *score_o, *tfc_o, *around_o, *slots_o, *tf_o, *dead_o, *shared_o, *norm_o;
    double flat, weight;
    Py_ssize_t ca, cb, la, lb;
    if (!PyArg_ParseTuple(args, "OOOOOOOd(nnnn)Od:context_add", &score_o, &tfc_o, &around_o, &slots_o, &tf_o,
                          &dead_o, &shared_o, &flat, &ca, &cb, &la, &lb, &norm_o, &weight))
        return NULL;
    Py_buffer score, tfc, around, slots, tf, dead, shared, norm;
    int have_shared = shared_o != Py_None, ok = 0;
    Py_ssize_t bad = 0;
    if (get_buffer(score_o, &score, 1, "f", 1, "score") < 0)
        return NULL;
    if (get_buffer(tfc_o, &tfc, 1, "f", 1, "tfc") < 0)
        goto release_score;
    if (get_buffer(around_o, &around, 2, "i", 0, "around") < 0)
        goto release_tfc;
    if (get_buffer(slots_o, &slots, 1, "i", 0, "slots") < 0)
        goto release_around;
    if (get_buffer(tf_o, &tf, 1, "f", 0, "tf") < 0)
        goto release_slots;
    if (get_buffer(dead_o, &dead, 1, "?", 0, "dead") < 0)
        goto release_tf;
    if (have_shared && get_buffer(shared_o, &shared, 1, "?", 0, "shared") < 0)
        goto release_dead;
    if (get_buffer(norm_o, &norm, 1, "f", 0, "norm") < 0)
        goto release_shared;
    const Py_ssize_t n = slots.shape[0], width = around.shape[1];
    if (tf.shape[0] != n || (have_shared && shared.shape[0] != n) || tfc.shape[0] < score.shape[0]
        || ca < 0 || cb < 0 || la < 0 || lb < 0 || ca >= width || cb >= width || la >= width || lb >= width
        || around.strides[0] != width * 4) {
        PyErr_SetString(PyExc_ValueError, "context_add: mismatched lengths or columns");
        goto release_norm;
    }
    {
        float *sc = (float *)score.buf, *acc = (float *)tfc.buf;
        const int32_t *ar = (const int32_t *)around.buf, *s = (const int32_t *)slots.buf;
        const float *t = (const float *)tf.buf, *nrm = (const float *)norm.buf;
        const uint8_t *dd = (const uint8_t *)dead.buf, *sh = have_shared ? (const uint8_t *)shared.buf : NULL;
        const Py_ssize_t size = score.shape[0], rows = around.shape[0] < dead.shape[0] ? around.shape[0] : dead.shape[0];
        const Py_ssize_t nnorm = norm.shape[0];
        const float w = (float)weight, fl = (float)flat;
        const Py_ssize_t cols[2] = {ca, cb}, lcols[2] = {la, lb};
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = 0; k < n; k++) {          /* each side's neighbours get the posting's tf */
            const int32_t x = s[k];
            if (x < 0 || x >= rows) {
                bad++;
                continue;
            }
            if (dd[x])
                continue;                              /* forgotten text lends no context */
            for (int side = 0; side < 2; side++) {
                const int32_t y = ar[x * width + cols[side]];
                if (y >= size)
                    bad++;
                else if (y >= 0)
                    acc[y] += t[k];
            }
        }
        for (int side = 0; side < 2; side++)           /* then each neighbour scores its sum once */
            for (Py_ssize_t k = 0; k < n; k++) {
                const int32_t x = s[k];
                if (x < 0 || x >= rows)
                    continue;
                const int32_t y = ar[x * width + cols[side]];
                if (y < 0 || y >= size || acc[y] == 0)
                    continue;
                const int32_t len = ar[x * width + lcols[side]];
                float nm;
                if (sh && sh[k])
                    nm = fl;
                else if (len < 0 || len >= nnorm) {
                    bad++;
                    acc[y] = 0;
                    continue;
                } else
                    nm = nrm[len];
                const float v = acc[y];
                sc[y] += w * v / (v + nm);
                acc[y] = 0;
            }
        Py_END_ALLOW_THREADS
    }
    if (bad)
        PyErr_Format(PyExc_IndexError, "context_add: %zd postings index past the arrays", bad);
    else
        ok = 1;
release_norm:
    PyBuffer_Release(&norm);
release_shared:
    if (have_shared)
        PyBuffer_Release(&shared);
release_dead:
    PyBuffer_Release(&dead);
release_tf:
    PyBuffer_Release(&tf);
release_slots:
    PyBuffer_Release(&slots);
release_around:
    PyBuffer_Release(&around);
release_tfc:
    PyBuffer_Release(&tfc);
release_score:
    PyBuffer_Release(&score);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"column_scores", column_scores, METH_VARARGS, column_scores_doc},
    {"bm25_add", bm25_add, METH_VARARGS, bm25_add_doc},
    {"context_add", context_add, METH_VARARGS, context_add_doc},
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
