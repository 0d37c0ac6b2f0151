/* A lexical shard's links between slots: the neighbour structure (_lexscore.build) and the reply
 * pass over its questions (_lexscore.scores). */
#include "speedups.h"

const char neighbours_doc[] = PyDoc_STR(
"neighbours(prev, next, length, distances, around, ctx)\n--\n\n"
"For every slot x of the padded link columns prev and next (int32, the last entry the sentinel's):\n"
"per distance d in `distances` (int32, ascending, >= 1), the slots d links back and forth (-1: none;\n"
"a link from -1 is the sentinel's) and the context length there, ctx[i, x] = int32(length[back] +\n"
"length[forth]) (float64 `length`, index -1 the sentinel's); then around[x] = (back, forth per\n"
"distance, then ctx[i] of each of those two, index -1 the sentinel's). around: (slots, 4 W) int32,\n"
"ctx: (W, slots) int32, W = len(distances). _lexscore._walk / _contexts / _around in one call.");

PyObject *neighbours(PyObject *self, PyObject *args)
{
    enum { PREV, NEXT, LENGTH, DISTANCES, AROUND, CTX, N };
    static const Spec specs[N] = {{"prev", 1, "i", 0}, {"next", 1, "i", 0}, {"length", 1, "d", 0},
                                  {"distances", 1, "i", 0}, {"around", 2, "i", WRITABLE}, {"ctx", 2, "i", WRITABLE}};
    PyObject *o[N];
    Arg a[N];
    if (!PyArg_ParseTuple(args, "OOOOOO:neighbours", &o[PREV], &o[NEXT], &o[LENGTH], &o[DISTANCES], &o[AROUND],
                          &o[CTX]))
        return NULL;
    if (take_all(a, o, specs, N) < 0)
        return release(a, N, 0);
    const Py_ssize_t n = LEN(a[PREV]), nw = LEN(a[DISTANCES]), width = a[AROUND].view.shape[1];
    const int32_t *prev = DATA(a[PREV], const int32_t), *next = DATA(a[NEXT], const int32_t);
    const int32_t *dist = DATA(a[DISTANCES], const int32_t);
    int ok = n > 0 && LEN(a[NEXT]) == n && LEN(a[LENGTH]) == n && LEN(a[AROUND]) == n && width == 4 * nw
             && LEN(a[CTX]) == nw && a[CTX].view.shape[1] == n && a[AROUND].view.strides[0] == width * 4
             && a[CTX].view.strides[0] == n * 4;
    for (Py_ssize_t i = 0; ok && i < nw; i++)
        ok = dist[i] >= 1 && (i == 0 || dist[i] > dist[i - 1]);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError,
                        "neighbours: mismatched lengths or shapes, or distances not ascending from 1");
        return release(a, N, 0);
    }
    const double *length = DATA(a[LENGTH], const double);
    int32_t *around = DATA(a[AROUND], int32_t), *ctx = DATA(a[CTX], int32_t);
    const int32_t last = nw ? dist[nw - 1] : 0;
    /* one pass over the slots per step of the walk: each pass's reads are independent of each other
     * (the memory system overlaps them), where walking slot by slot chains them */
    int32_t *back = PyMem_RawMalloc((size_t)n * 2 * sizeof(int32_t)), *forth = back + n;
    if (!back) {
        PyErr_NoMemory();
        return release(a, N, 0);
    }
    Py_ssize_t bad = 0;
#define AT(i) ((i) < 0 ? n - 1 : (i)) /* numpy's index -1: the sentinel */
    Py_BEGIN_ALLOW_THREADS
    for (int32_t d = 1, i = 0; d <= last; d++) {
        for (Py_ssize_t x = 0; x < n; x++) {
            int32_t b = prev[d == 1 ? x : AT(back[x])], f = next[d == 1 ? x : AT(forth[x])];
            if (b >= n || f >= n || b < -1 || f < -1) {
                bad++;
                b = f = -1;
            }
            back[x] = b;
            forth[x] = f;
        }
        if (d != dist[i])
            continue;
        for (Py_ssize_t x = 0; x < n; x++) {
            around[x * width + 2 * i] = back[x];
            around[x * width + 2 * i + 1] = forth[x];
            ctx[i * n + x] = (int32_t)(length[AT(back[x])] + length[AT(forth[x])]);
        }
        i++;
    }
    for (Py_ssize_t x = 0; x < n; x++) {          /* then the context lengths of those neighbours */
        int32_t *row = around + x * width;
        for (Py_ssize_t c = 0; c < 2 * nw; c++)
            row[2 * nw + c] = ctx[(c / 2) * n + AT(row[c])];
    }
    Py_END_ALLOW_THREADS
#undef AT
    PyMem_RawFree(back);
    return release_checked(a, N, bad, "neighbours", "links past the columns");
}

const char reply_add_doc[] = PyDoc_STR(
"reply_add(score, own, asking, answering, weight)\n--\n\n"
"score[answering[j]] += float32(weight) * own[asking[j]] for each question j whose own score is > 0\n"
"(answering -1: none), every own value read before any is added (score may be own). score, own:\n"
"float32 (same length); asking: int64, answering: int32 (as long).");

PyObject *reply_add(PyObject *self, PyObject *args)
{
    enum { SCORE, OWN, ASKING, ANSWERING, N };
    static const Spec specs[N] = {{"score", 1, "f", WRITABLE}, {"own", 1, "f", 0}, {"asking", 1, "lq", 0},
                                  {"answering", 1, "i", 0}};
    PyObject *o[N];
    Arg a[N];
    double weight;
    if (!PyArg_ParseTuple(args, "OOOOd:reply_add", &o[SCORE], &o[OWN], &o[ASKING], &o[ANSWERING], &weight))
        return NULL;
    if (take_all(a, o, specs, N) < 0)
        return release(a, N, 0);
    const Py_ssize_t n = LEN(a[ASKING]), size = LEN(a[SCORE]);
    if (LEN(a[ANSWERING]) != n || LEN(a[OWN]) != size || a[ASKING].view.itemsize != 8) {
        PyErr_SetString(PyExc_ValueError, "reply_add: mismatched lengths, or questions not int64");
        return release(a, N, 0);
    }
    float *score = DATA(a[SCORE], float);
    const float *own = DATA(a[OWN], const float), w = (float)weight;
    const int64_t *asking = DATA(a[ASKING], const int64_t);
    const int32_t *answering = DATA(a[ANSWERING], const int32_t);
    /* the answers' increments first, then added: an answer may itself be a question (pages of the
     * scratch past the hits are never touched) */
    int64_t *to = PyMem_RawMalloc((size_t)(n ? n : 1) * (sizeof(int64_t) + sizeof(float)));
    if (!to) {
        PyErr_NoMemory();
        return release(a, N, 0);
    }
    float *add = (float *)(to + n);
    Py_ssize_t h = 0, bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < n; j++) {
        if (asking[j] < 0 || asking[j] >= size) {
            bad++;
            continue;
        }
        const float v = own[asking[j]];
        if (v > 0) {
            add[h] = w * v;
            to[h++] = answering[j];
        }
    }
    for (Py_ssize_t k = 0; k < h && !bad; k++) {   /* nothing is added once a question is out of range */
        if (to[k] >= size)
            bad++;
        else if (to[k] >= 0)
            score[to[k]] += add[k];
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(to);
    return release_checked(a, N, bad, "reply_add", "questions or answers past the scores");
}
