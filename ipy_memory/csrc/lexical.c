/* BM25 scoring loops (_lexscore.py). */
#include "speedups.h"

#define PREFETCH 32 /* postings ahead whose random reads are started early (1M memories: 5.3 -> 3.3 ms a query) */

/* ------------------------------------------------------------------------------ BM25 */

/* Both loops below read indices out of the index's own arrays; an index out of range means a bug,
 * and is skipped and reported (IndexError) instead of read: the output is scratch the caller drops. */

const char bm25_add_doc[] = PyDoc_STR(
"bm25_add(out, slots, tf, norm, lens, shared, flat, coef)\n--\n\n"
"out[slots[k]] += coef * tf[k] / (tf[k] + nm) for each posting k, nm = flat where shared[k], else\n"
"norm[lens[slots[k]]] (flat for all when norm is None). out, tf, norm: float32; slots, lens: int32;\n"
"shared: bool or None.");

PyObject *bm25_add(PyObject *self, PyObject *args)
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
    return release_checked(a, N, bad, "bm25_add", "postings index past the arrays");
}

const char context_add_doc[] = PyDoc_STR(
"context_add(score, tfc, around, slots, tf, dead, shared, flat, cols, norm, weight)\n--\n\n"
"One neighbour distance of a term's context columns (_lexscore.context_columns): the term's tf in\n"
"each posting's live slot goes to the two neighbours around[slot, cols[0]] and around[slot, cols[1]]\n"
"(-1: none); then each neighbour t scores weight * v / (v + nm) once, v its summed tf, nm = flat where\n"
"shared, else norm[around[slot, cols[2 or 3]]] (the context length on that side), and tfc is zeroed\n"
"again. score, tfc, tf, norm: float32; around: (rows, width) int32; slots: int32; dead, shared: bool.");

PyObject *context_add(PyObject *self, PyObject *args)
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
    return release_checked(a, N, bad, "context_add", "postings index past the arrays");
}

/* ------------------------------------------------------------------------------ whole-array passes */

const char priors_doc[] = PyDoc_STR(
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

PyObject *priors(PyObject *self, PyObject *args)
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

const char add_runs_doc[] = PyDoc_STR(
"add_runs(score, first, count, values, weight)\n--\n\n"
"score[first[j] : first[j] + count[j]] += float32(weight) * values[j] for each j, in order: a\n"
"multi-section document's own BM25 added to its sections (_kernels.add_runs_numpy). score, values:\n"
"float32; first, count: int64.");

PyObject *add_runs(PyObject *self, PyObject *args)
{
    enum { SCORE, FIRST, COUNT, VALUES, N };
    static const Spec specs[N] = {{"score", 1, "f", WRITABLE}, {"first", 1, "lq", 0}, {"count", 1, "lq", 0},
                                  {"values", 1, "f", 0}};
    PyObject *o[N];
    Arg a[N];
    double weight;
    if (!PyArg_ParseTuple(args, "OOOOd:add_runs", &o[SCORE], &o[FIRST], &o[COUNT], &o[VALUES], &weight))
        return NULL;
    if (take_all(a, o, specs, N) < 0)
        return release(a, N, 0);
    const Py_ssize_t n = LEN(a[SCORE]), runs = LEN(a[FIRST]);
    if (a[FIRST].view.itemsize != 8 || a[COUNT].view.itemsize != 8 || LEN(a[COUNT]) != runs || LEN(a[VALUES]) != runs) {
        PyErr_SetString(PyExc_ValueError, "add_runs: first, count (int64) and values must have one item per run");
        return release(a, N, 0);
    }
    float *score = DATA(a[SCORE], float);
    const int64_t *first = DATA(a[FIRST], const int64_t), *count = DATA(a[COUNT], const int64_t);
    const float *values = DATA(a[VALUES], const float), w = (float)weight;
    Py_ssize_t bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < runs; j++) {
        if (first[j] < 0 || count[j] < 0 || first[j] > n - count[j]) {
            bad++;                  /* skipped, then reported: never written out of bounds */
            continue;
        }
        const float v = w * values[j];
        float *s = score + first[j];
        for (int64_t i = 0; i < count[j]; i++)
            s[i] += v;
    }
    Py_END_ALLOW_THREADS
    return release_checked(a, N, bad, "add_runs", "runs reach past the scores");
}

const char nonzero_doc[] = PyDoc_STR(
"nonzero(values, out, floor=-inf) -> count\n--\n\n"
"Write the indices of the non-zero float32 `values` that are >= floor to the int64 `out` (as long),\n"
"in order; return how many: np.flatnonzero((values != 0) & (values >= floor)) in one pass.");

/* Blocks of 32 values are first tested as a whole (a loop the compiler vectorises), and only a block
 * holding a value kept is listed one by one: a high floor keeps a few hundred of a million values. */
#define KEPT(x) (((x) != 0) & (all | ((x) >= f)))
#define SELECT_BLOCK 32

MULTIVERSION static Py_ssize_t select_loop(const float *v, Py_ssize_t n, int all, float f, int64_t *out)
{
    Py_ssize_t count = 0, j = 0;
    for (; j + SELECT_BLOCK <= n; j += SELECT_BLOCK) {
        int any = 0;
        for (int i = 0; i < SELECT_BLOCK; i++)
            any |= KEPT(v[j + i]);
        if (any)
            for (int i = 0; i < SELECT_BLOCK; i++) {
                out[count] = j + i;  /* written always, kept when chosen: no branch to mispredict */
                count += KEPT(v[j + i]);
            }
    }
    for (; j < n; j++) {
        out[count] = j;
        count += KEPT(v[j]);
    }
    return count;
}

PyObject *nonzero(PyObject *self, PyObject *args)
{
    enum { VALUES, OUT, N };
    static const Spec specs[N] = {{"values", 1, "f", 0}, {"out", 1, "lq", WRITABLE}};
    PyObject *o[N];
    Arg a[N];
    double floor_ = -INFINITY;
    if (!PyArg_ParseTuple(args, "OO|d:nonzero", &o[VALUES], &o[OUT], &floor_))
        return NULL;
    if (take_all(a, o, specs, N) < 0)
        return release(a, N, 0);
    const Py_ssize_t n = LEN(a[VALUES]);
    if (LEN(a[OUT]) < n || a[OUT].view.itemsize != 8 || isnan(floor_)) {
        PyErr_SetString(PyExc_ValueError, "nonzero: out must be int64 and as long as values, floor a number");
        return release(a, N, 0);
    }
    /* the least float32 >= floor: a float value is >= floor exactly when it is >= that */
    float f = (float)floor_;
    if ((double)f < floor_)
        f = nextafterf(f, INFINITY);
    Py_ssize_t count;
    Py_BEGIN_ALLOW_THREADS
    count = select_loop(DATA(a[VALUES], const float), n, floor_ == -INFINITY, f, DATA(a[OUT], int64_t));
    Py_END_ALLOW_THREADS
    release(a, N, 0);                /* (releases the buffers; the NULL it returns is not an error) */
    return PyLong_FromSsize_t(count);
}
