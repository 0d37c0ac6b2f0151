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
#define PREFETCH 32 /* postings ahead whose random reads are started early (1M memories: 5.3 -> 3.3 ms a query) */

/* ------------------------------------------------------------------------------ arguments */

/* A kernel's array arguments: each described by a Spec, acquired through the buffer protocol by
 * take_all, and all released by release whatever happened in between. */
typedef struct {
    Py_buffer view;
    int held;
} Arg;

typedef struct {
    const char *name;
    int ndim;
    const char *formats; /* the struct codes accepted */
    int flags;
} Spec;

#define NONE_OK 1 /* None is accepted (the argument is then not held: DATA gives NULL) */
#define WRITABLE 2

#define DATA(arg, type) ((arg).held ? (type *)(arg).view.buf : NULL)
#define LEN(arg) ((arg).held ? (arg).view.shape[0] : 0)

/* Acquire `obj` as `spec` says, its last axis contiguous. Returns 0, or -1 with TypeError /
 * ValueError set. */
static int take(Arg *arg, PyObject *obj, const Spec *spec)
{
    if (obj == Py_None && (spec->flags & NONE_OK))
        return 0;
    Py_buffer *view = &arg->view;
    if (PyObject_GetBuffer(obj, view, PyBUF_STRIDES | PyBUF_FORMAT | (spec->flags & WRITABLE ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    arg->held = 1;
    const char *fmt = view->format ? view->format : "B";
    if (*fmt == '=' || *fmt == '<' || *fmt == '@')
        fmt++;
    if (view->ndim != spec->ndim || strlen(fmt) != 1 || !strchr(spec->formats, *fmt)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a %d-d array of format '%s', got %d-d '%s'", spec->name,
                     spec->ndim, spec->formats, view->ndim, view->format ? view->format : "B");
        return -1;
    }
    if (view->strides[view->ndim - 1] != view->itemsize || (view->ndim == 2 && view->strides[0] % view->itemsize)) {
        PyErr_Format(PyExc_ValueError, "%s: its last axis must be contiguous", spec->name);
        return -1;
    }
    return 0;
}

static int take_all(Arg *args, PyObject *const *objs, const Spec *specs, int n)
{
    for (int i = 0; i < n; i++)
        args[i].held = 0;
    for (int i = 0; i < n; i++)
        if (take(&args[i], objs[i], &specs[i]) < 0)
            return -1;
    return 0;
}

/* Release every held argument; return None when `ok`, else NULL (the error is set). */
static PyObject *release(Arg *args, int n, int ok)
{
    for (int i = 0; i < n; i++)
        if (args[i].held)
            PyBuffer_Release(&args[i].view);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
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
    enum { OUT, SLOTS, TF, NORM, LENS, SHARED, N };
    static const Spec specs[N] = {{"out", 1, "f", WRITABLE}, {"slots", 1, "i", 0}, {"tf", 1, "f", 0},
                                  {"norm", 1, "f", NONE_OK}, {"lens", 1, "i", NONE_OK}, {"shared", 1, "?", NONE_OK}};
    PyObject *o[N];
    Arg a[N];
    double flat, coef;
    if (!PyArg_ParseTuple(args, "OOOOOOdd:bm25_add", &o[OUT], &o[SLOTS], &o[TF], &o[NORM], &o[LENS], &o[SHARED],
                          &flat, &coef))
        return NULL;
    if (take_all(a, o, specs, N) < 0)
        return release(a, N, 0);
    const Py_ssize_t n = LEN(a[SLOTS]), size = LEN(a[OUT]), nlens = LEN(a[LENS]), nnorm = LEN(a[NORM]);
    if (LEN(a[TF]) != n || (a[SHARED].held && LEN(a[SHARED]) != n) || a[NORM].held != a[LENS].held) {
        PyErr_SetString(PyExc_ValueError, "bm25_add: slots, tf and shared differ in length, or norm comes without lens");
        return release(a, N, 0);
    }
    float *out = DATA(a[OUT], float);
    const int32_t *slots = DATA(a[SLOTS], const int32_t), *lens = DATA(a[LENS], const int32_t);
    const float *tf = DATA(a[TF], const float), *norm = DATA(a[NORM], const float);
    const uint8_t *shared = DATA(a[SHARED], const uint8_t);
    const float c = (float)coef, fl = (float)flat;
    Py_ssize_t bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        if (k + PREFETCH < n && slots[k + PREFETCH] >= 0 && slots[k + PREFETCH] < size) {
            __builtin_prefetch(out + slots[k + PREFETCH], 1);
            if (lens && slots[k + PREFETCH] < nlens)
                __builtin_prefetch(lens + slots[k + PREFETCH]);
        }
        const int32_t x = slots[k];
        if (x < 0 || x >= size || (norm && (x >= nlens || lens[x] < 0 || lens[x] >= nnorm))) {
            bad++;
            continue;
        }
        const float nm = (shared && shared[k]) || !norm ? fl : norm[lens[x]];
        out[x] += c * tf[k] / (tf[k] + nm);
    }
    Py_END_ALLOW_THREADS
    if (bad)
        PyErr_Format(PyExc_IndexError, "bm25_add: %zd postings index past the arrays", bad);
    return release(a, N, !bad);
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
    enum { SCORE, TFC, AROUND, SLOTS, TF, DEAD, SHARED, NORM, N };
    static const Spec specs[N] = {{"score", 1, "f", WRITABLE}, {"tfc", 1, "f", WRITABLE}, {"around", 2, "i", 0},
                                  {"slots", 1, "i", 0}, {"tf", 1, "f", 0}, {"dead", 1, "?", 0},
                                  {"shared", 1, "?", NONE_OK}, {"norm", 1, "f", 0}};
    PyObject *o[N];
    Arg a[N];
    double flat, weight;
    Py_ssize_t cols[2], lcols[2];
    if (!PyArg_ParseTuple(args, "OOOOOOOd(nnnn)Od:context_add", &o[SCORE], &o[TFC], &o[AROUND], &o[SLOTS], &o[TF],
                          &o[DEAD], &o[SHARED], &flat, &cols[0], &cols[1], &lcols[0], &lcols[1], &o[NORM], &weight))
        return NULL;
    if (take_all(a, o, specs, N) < 0)
        return release(a, N, 0);
    const Py_ssize_t n = LEN(a[SLOTS]), size = LEN(a[SCORE]), width = a[AROUND].view.shape[1];
    const Py_ssize_t rows = LEN(a[AROUND]) < LEN(a[DEAD]) ? LEN(a[AROUND]) : LEN(a[DEAD]), nnorm = LEN(a[NORM]);
    int cols_ok = 1;
    for (int i = 0; i < 2; i++)
        cols_ok &= cols[i] >= 0 && cols[i] < width && lcols[i] >= 0 && lcols[i] < width;
    if (LEN(a[TF]) != n || (a[SHARED].held && LEN(a[SHARED]) != n) || LEN(a[TFC]) < size || !cols_ok
        || a[AROUND].view.strides[0] != width * 4) {
        PyErr_SetString(PyExc_ValueError, "context_add: mismatched lengths or columns");
        return release(a, N, 0);
    }
    float *score = DATA(a[SCORE], float), *acc = DATA(a[TFC], float);
    const int32_t *around = DATA(a[AROUND], const int32_t), *slots = DATA(a[SLOTS], const int32_t);
    const float *tf = DATA(a[TF], const float), *norm = DATA(a[NORM], const float);
    const uint8_t *dead = DATA(a[DEAD], const uint8_t), *shared = DATA(a[SHARED], const uint8_t);
    const float w = (float)weight, fl = (float)flat;
    /* each posting's two neighbours and their context lengths, read once from `around` (random
     * rows: prefetched ahead) into a sequential scratch that the second pass reads */
    int32_t *near = PyMem_RawMalloc((size_t)(n ? n : 1) * 4 * sizeof(int32_t));
    if (!near) {
        PyErr_NoMemory();
        return release(a, N, 0);
    }
    Py_ssize_t bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {          /* each side's neighbour gets the posting's tf */
        if (k + PREFETCH < n && slots[k + PREFETCH] >= 0 && slots[k + PREFETCH] < rows)
            __builtin_prefetch(around + (Py_ssize_t)slots[k + PREFETCH] * width);
        int32_t *nk = near + 4 * k;
        nk[0] = nk[1] = -1;
        const int32_t x = slots[k];
        if (x < 0 || x >= rows) {
            bad++;
            continue;
        }
        for (int side = 0; side < 2; side++) {
            nk[side] = around[x * width + cols[side]];
            nk[2 + side] = around[x * width + lcols[side]];
        }
        if (dead[x])
            continue;                              /* forgotten text lends no context */
        for (int side = 0; side < 2; side++) {
            const int32_t y = nk[side];
            if (y >= size)
                bad++;
            else if (y >= 0)
                acc[y] += tf[k];
        }
    }
    for (int side = 0; side < 2; side++)           /* then each neighbour scores its sum once */
        for (Py_ssize_t k = 0; k < n; k++) {
            if (k + PREFETCH < n) {
                const int32_t z = near[4 * (k + PREFETCH) + side];
                if (z >= 0 && z < size) {
                    __builtin_prefetch(acc + z, 1);
                    __builtin_prefetch(score + z, 1);
                }
            }
            const int32_t y = near[4 * k + side];
            if (y < 0 || y >= size || acc[y] == 0)
                continue;
            const int32_t len = near[4 * k + 2 + side];
            const float v = acc[y];
            acc[y] = 0;
            if (!(shared && shared[k]) && (len < 0 || len >= nnorm)) {
                bad++;
                continue;
            }
            score[y] += w * v / (v + (shared && shared[k] ? fl : norm[len]));
        }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(near);
    if (bad)
        PyErr_Format(PyExc_IndexError, "context_add: %zd postings index past the arrays", bad);
    return release(a, N, !bad);
}

/* ------------------------------------------------------------------------------ whole-array passes */

PyDoc_STRVAR(priors_doc,
"priors(score, keep, cues, asked, boost)\n--\n\n"
"score *= keep, then score *= boost where cues & asked: one pass (numpy needs three and a mask).\n"
"score, keep: float32; cues: uint8 (n >= len(score)).");

/* A multiplier chosen per value (times 1 is exact), not a branch: cue bits are too random to predict. */
MULTIVERSION static void priors_loop(float *score, const float *keep, const uint8_t *cues, uint8_t q, float b,
                                     Py_ssize_t n)
{
    for (Py_ssize_t j = 0; j < n; j++)
        score[j] = score[j] * keep[j] * ((cues[j] & q) ? b : 1.0f);
}

static PyObject *priors(PyObject *self, PyObject *args)
{
    enum { SCORE, KEEP, CUES, N };
    static const Spec specs[N] = {{"score", 1, "f", WRITABLE}, {"keep", 1, "f", 0}, {"cues", 1, "B", 0}};
    PyObject *o[N];
    Arg a[N];
    unsigned int asked;
    double boost;
    if (!PyArg_ParseTuple(args, "OOOId:priors", &o[SCORE], &o[KEEP], &o[CUES], &asked, &boost))
        return NULL;
    if (take_all(a, o, specs, N) < 0)
        return release(a, N, 0);
    const Py_ssize_t n = LEN(a[SCORE]);
    if (LEN(a[KEEP]) < n || LEN(a[CUES]) < n) {
        PyErr_SetString(PyExc_ValueError, "priors: keep and cues must cover every score");
        return release(a, N, 0);
    }
    float *score = DATA(a[SCORE], float);
    const float *keep = DATA(a[KEEP], const float), b = (float)boost;
    const uint8_t *cues = DATA(a[CUES], const uint8_t), q = (uint8_t)asked;
    Py_BEGIN_ALLOW_THREADS
    priors_loop(score, keep, cues, q, b, n);
    Py_END_ALLOW_THREADS
    return release(a, N, 1);
}

PyDoc_STRVAR(nonzero_doc,
"nonzero(values, out) -> count\n--\n\n"
"Write the indices of the non-zero float32 `values` to the int64 `out` (as long), in order; return\n"
"how many: np.flatnonzero in one pass.");

static PyObject *nonzero(PyObject *self, PyObject *args)
{
    enum { VALUES, OUT, N };
    static const Spec specs[N] = {{"values", 1, "f", 0}, {"out", 1, "lq", WRITABLE}};
    PyObject *o[N];
    Arg a[N];
    if (!PyArg_ParseTuple(args, "OO:nonzero", &o[VALUES], &o[OUT]))
        return NULL;
    if (take_all(a, o, specs, N) < 0)
        return release(a, N, 0);
    const Py_ssize_t n = LEN(a[VALUES]);
    if (LEN(a[OUT]) < n || a[OUT].view.itemsize != 8) {
        PyErr_SetString(PyExc_ValueError, "nonzero: out must be int64 and as long as values");
        return release(a, N, 0);
    }
    const float *v = DATA(a[VALUES], const float);
    int64_t *out = DATA(a[OUT], int64_t);
    Py_ssize_t count = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < n; j++) {
        out[count] = j;              /* written always, kept when non-zero: no branch to mispredict */
        count += v[j] != 0;
    }
    Py_END_ALLOW_THREADS
    release(a, N, 1);
    return PyLong_FromSsize_t(count);
}

/* ------------------------------------------------------------------------------ hashing embedder */

PyDoc_STRVAR(hash_rows_doc,
"hash_rows(ids, per_text, starts, lens, hashes, slots, signs, log_tf, out)\n--\n\n"
"The HashEmbedder's vectors before normalisation (embeddings/hashing.py; _kernels.hash_rows_numpy is\n"
"the same in numpy): text t holds the words ids[sum(per_text[:t]):][:per_text[t]] (int64, indices into\n"
"starts / lens / hashes); each distinct word, in the order the text first uses it, adds\n"
"signs[f] * log_tf[count - 1] at slots[f] for its features f in starts..starts+lens; each pair of\n"
"consecutive words adds +-1 at (hash[a] * golden ^ hash[b]) % dim. Sums in float64 in that order,\n"
"then word and pair sums added, then float32 into out (n, dim).");

static PyObject *hash_rows(PyObject *self, PyObject *args)
{
    enum { IDS, PER, STARTS, LENS, HASHES, SLOTS, SIGNS, LOGTF, OUT, N };
    static const Spec specs[N] = {{"ids", 1, "lq", 0},     {"per_text", 1, "lq", 0}, {"starts", 1, "lq", 0},
                                  {"lens", 1, "lq", 0},    {"hashes", 1, "LQ", 0},   {"slots", 1, "i", 0},
                                  {"signs", 1, "b", 0},    {"log_tf", 1, "f", 0},    {"out", 2, "f", WRITABLE}};
    PyObject *o[N];
    Arg a[N];
    if (!PyArg_ParseTuple(args, "OOOOOOOOO:hash_rows", &o[IDS], &o[PER], &o[STARTS], &o[LENS], &o[HASHES], &o[SLOTS],
                          &o[SIGNS], &o[LOGTF], &o[OUT]))
        return NULL;
    if (take_all(a, o, specs, N) < 0)
        return release(a, N, 0);
    const Py_ssize_t n = LEN(a[PER]), words = LEN(a[IDS]), entries = LEN(a[STARTS]), nfeat = LEN(a[SLOTS]);
    const Py_ssize_t dim = a[OUT].view.ndim == 2 ? a[OUT].view.shape[1] : 0, ntf = LEN(a[LOGTF]);
    const int64_t *ids = DATA(a[IDS], const int64_t), *per = DATA(a[PER], const int64_t);
    const int64_t *starts = DATA(a[STARTS], const int64_t), *lens = DATA(a[LENS], const int64_t);
    const uint64_t *hashes = DATA(a[HASHES], const uint64_t);
    const int32_t *slots = DATA(a[SLOTS], const int32_t);
    const int8_t *signs = DATA(a[SIGNS], const int8_t);
    int ok = LEN(a[OUT]) == n && dim > 0 && a[OUT].view.strides[0] == dim * 4 && LEN(a[LENS]) == entries
             && LEN(a[HASHES]) == entries && LEN(a[SIGNS]) == nfeat && a[IDS].view.itemsize == 8;
    Py_ssize_t total = 0;
    for (Py_ssize_t t = 0; ok && t < n; t++) {
        ok = per[t] >= 0 && per[t] <= ntf;              /* a word occurs at most per[t] times */
        total += per[t];
    }
    ok = ok && total == words;
    for (Py_ssize_t e = 0; ok && e < entries; e++)
        ok = starts[e] >= 0 && lens[e] >= 0 && starts[e] + lens[e] <= nfeat;
    for (Py_ssize_t k = 0; ok && k < words; k++)
        ok = ids[k] >= 0 && ids[k] < entries;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "hash_rows: inconsistent arrays (lengths, word ids, feature ranges or slots)");
        return release(a, N, 0);
    }
    /* per entry: the text that last met it, and its place in that text's list of distinct words */
    int64_t *stamp = PyMem_RawMalloc((size_t)(entries ? entries : 1) * 2 * sizeof(int64_t));
    int64_t *order = PyMem_RawMalloc((size_t)(words ? words : 1) * 2 * sizeof(int64_t));
    double *acc = PyMem_RawMalloc((size_t)dim * 2 * sizeof(double));
    if (!stamp || !order || !acc) {
        PyMem_RawFree(stamp);
        PyMem_RawFree(order);
        PyMem_RawFree(acc);
        PyErr_NoMemory();
        return release(a, N, 0);
    }
    const float *log_tf = DATA(a[LOGTF], const float);
    float *out = DATA(a[OUT], float);
    const uint64_t golden = 0x9E3779B97F4A7C15ull;
    Py_ssize_t bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t e = 0; e < entries; e++)
        stamp[2 * e] = -1;
    double *uni = acc, *bi = acc + dim;
    const int64_t *w = ids;
    for (Py_ssize_t t = 0; t < n; w += per[t], t++) {
        const int64_t m = per[t];
        int64_t distinct = 0;                             /* order[2j]: entry, order[2j + 1]: count */
        for (int64_t j = 0; j < m; j++) {
            const int64_t e = w[j];
            if (stamp[2 * e] != t) {
                stamp[2 * e] = t;
                stamp[2 * e + 1] = distinct;
                order[2 * distinct] = e;
                order[2 * distinct + 1] = 0;
                distinct++;
            }
            order[2 * stamp[2 * e + 1] + 1]++;
        }
        memset(acc, 0, (size_t)dim * 2 * sizeof(double));
        for (int64_t j = 0; j < distinct; j++) {
            const int64_t e = order[2 * j];
            const float weight = log_tf[order[2 * j + 1] - 1];
            for (int64_t f = starts[e]; f < starts[e] + lens[e]; f++) {
                if (slots[f] < 0 || slots[f] >= dim) {   /* checked where read: the cache's arrays are long */
                    bad++;
                    continue;
                }
                uni[slots[f]] += (double)((float)signs[f] * weight);
            }
        }
        for (int64_t j = 0; j + 1 < m; j++) {
            const uint64_t h = hashes[w[j]] * golden ^ hashes[w[j + 1]];
            bi[h % (uint64_t)dim] += (h >> 63) ? 1.0 : -1.0;
        }
        float *row = out + t * dim;
        for (Py_ssize_t s = 0; s < dim; s++)
            row[s] = (float)(uni[s] + bi[s]);
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(stamp);
    PyMem_RawFree(order);
    PyMem_RawFree(acc);
    if (bad)
        PyErr_Format(PyExc_IndexError, "hash_rows: %zd features' slots are not below dim", bad);
    return release(a, N, !bad);
}

/* ------------------------------------------------------------------------------ indexing words */

PyDoc_STRVAR(index_terms_doc,
"index_terms(words, cache, miss, vocab) -> (terms, counts)\n--\n\n"
"Each word's (term hash, expandable) from the dict `cache`, or from miss(word), which is then cached;\n"
"an expandable word is the word of its term in `vocab` unless one is there already; the distinct\n"
"term hashes in order of first use, and how often each occurs (_kernels.index_terms_python).");

static PyObject *index_terms(PyObject *self, PyObject *args)
{
    PyObject *words, *cache, *miss, *vocab;
    if (!PyArg_ParseTuple(args, "OO!OO!:index_terms", &words, &PyDict_Type, &cache, &miss, &PyDict_Type, &vocab))
        return NULL;
    PyObject *seq = PySequence_Fast(words, "index_terms: words must be a sequence");
    if (!seq)
        return NULL;
    PyObject *tf = PyDict_New(), *result = NULL;
    if (!tf)
        goto done;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *word = items[i], *entry = PyDict_GetItemWithError(cache, word);     /* borrowed */
        if (entry)
            Py_INCREF(entry);
        else if (PyErr_Occurred() || !(entry = PyObject_CallOneArg(miss, word)) || PyDict_SetItem(cache, word, entry) < 0) {
            Py_XDECREF(entry);
            goto done;
        }
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
            PyErr_SetString(PyExc_TypeError, "index_terms: cache entries must be (term hash, expandable) tuples");
            Py_DECREF(entry);
            goto done;
        }
        PyObject *term = PyTuple_GET_ITEM(entry, 0);
        int expandable = PyObject_IsTrue(PyTuple_GET_ITEM(entry, 1)), ok = expandable >= 0;
        if (ok && expandable) {
            int known = PyDict_Contains(vocab, term);
            ok = known >= 0 && (known || PyDict_SetItem(vocab, term, word) == 0);
        }
        if (ok) {
            PyObject *count = PyDict_GetItemWithError(tf, term);
            long c = count ? PyLong_AsLong(count) : 0;
            PyObject *next = (c >= 0 && !PyErr_Occurred()) ? PyLong_FromLong(c + 1) : NULL;
            ok = next && PyDict_SetItem(tf, term, next) == 0;
            Py_XDECREF(next);
        }
        Py_DECREF(entry);
        if (!ok)
            goto done;
    }
    PyObject *terms = PyDict_Keys(tf), *counts = terms ? PyDict_Values(tf) : NULL;
    if (terms && counts)
        result = PyTuple_Pack(2, terms, counts);
    Py_XDECREF(terms);
    Py_XDECREF(counts);
done:
    Py_XDECREF(tf);
    Py_DECREF(seq);
    return result;
}

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

static int clmul_ok = 0; /* the CPU has PCLMULQDQ (set at import) */

static uint32_t crc32_zlib(uint32_t value, const uint8_t *p, size_t n)
{
    uint32_t crc = ~value;
#ifdef HAVE_CLMUL
    size_t m = n & ~(size_t)15;
    if (clmul_ok && m >= 64) {
        crc = crc_clmul(crc, p, m);
        p += m;
        n -= m;
    }
#endif
    return ~crc_bytes(crc, p, n);
}

PyDoc_STRVAR(crc32_doc,
"crc32(data, value=0) -> int\n--\n\n"
"zlib.crc32(data, value), by carry-less multiplication where the CPU has it (see FAST_CRC32).");

static PyObject *crc32(PyObject *self, PyObject *args)
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

/* ------------------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"column_scores", column_scores, METH_VARARGS, column_scores_doc},
    {"bm25_add", bm25_add, METH_VARARGS, bm25_add_doc},
    {"context_add", context_add, METH_VARARGS, context_add_doc},
    {"priors", priors, METH_VARARGS, priors_doc},
    {"nonzero", nonzero, METH_VARARGS, nonzero_doc},
    {"crc32", crc32, METH_VARARGS, crc32_doc},
    {"hash_rows", hash_rows, METH_VARARGS, hash_rows_doc},
    {"index_terms", index_terms, METH_VARARGS, index_terms_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ipy_memory._speedups",
    .m_doc = "Compiled kernels of ipy_memory (optional): see _kernels.py for their numpy twins.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    crc_table_init();
#ifdef HAVE_CLMUL
    __builtin_cpu_init();
    clmul_ok = __builtin_cpu_supports("pclmul") != 0;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "FAST_CRC32", clmul_ok) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
