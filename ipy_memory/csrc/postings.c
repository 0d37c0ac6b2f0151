/* Postings runs (_postings.py): a write's postings sorted by term, and runs merged into one.
 *
 * numpy sorted a run with a stable argsort (timsort on 64-bit keys) and gathered three arrays by
 * it, and merged two runs with a binary search per newer posting and three boolean / fancy
 * scatters: ~7 ms of every 1,000-memory write at 100k memories. Here a run is sorted by a stable
 * LSD radix sort of (term, slot, tf) records and runs (several at once) are merged in one pass, with
 * the GIL released. */
#include "speedups.h"

typedef struct {
    uint64_t key; /* the term hash with its sign bit flipped: unsigned order is int64 order */
    int32_t slot;
    float tf;
} Posting;

enum { DIGIT = 11, BUCKETS = 1 << DIGIT, PASSES = (64 + DIGIT - 1) / DIGIT };
#define SIGN (1ull << 63)

/* Stable sort of the n records of a by key, passing them between a and b (n records each); returns
 * whichever holds them sorted. count: PASSES * BUCKETS scratch. */
static Posting *radix_sort(Posting *a, Posting *b, Py_ssize_t n, Py_ssize_t (*count)[BUCKETS])
{
    memset(count, 0, PASSES * sizeof *count);
    for (Py_ssize_t i = 0; i < n; i++)
        for (int p = 0; p < PASSES; p++)
            count[p][(a[i].key >> (p * DIGIT)) & (BUCKETS - 1)]++;
    for (int p = 0; p < PASSES; p++) {
        if (count[p][(a[0].key >> (p * DIGIT)) & (BUCKETS - 1)] == n)
            continue;                 /* every key has this digit: the pass would change nothing */
        Py_ssize_t at = 0;
        for (int d = 0; d < BUCKETS; d++) {
            const Py_ssize_t c = count[p][d];
            count[p][d] = at;
            at += c;
        }
        for (Py_ssize_t i = 0; i < n; i++)
            b[count[p][(a[i].key >> (p * DIGIT)) & (BUCKETS - 1)]++] = a[i];
        Posting *swap = a;
        a = b;
        b = swap;
    }
    return a;
}

const char sort_postings_doc[] = PyDoc_STR(
"sort_postings(hashes, slots, tfs, out_hashes, out_slots, out_tfs)\n--\n\n"
"The postings (int64 term hashes, int32 slots, float32 tfs, as long as one another) sorted by term\n"
"hash into the out arrays (as long), a term's postings in the order given: a stable sort\n"
"(_kernels.sort_postings_numpy).");

PyObject *sort_postings(PyObject *self, PyObject *args)
{
    enum { H, S, T, OH, OS, OT, N };
    static const Spec specs[N] = {{"hashes", 1, "lq", 0}, {"slots", 1, "i", 0}, {"tfs", 1, "f", 0},
                                  {"out_hashes", 1, "lq", WRITABLE}, {"out_slots", 1, "i", WRITABLE},
                                  {"out_tfs", 1, "f", WRITABLE}};
    PyObject *o[N];
    Arg a[N];
    if (!PyArg_ParseTuple(args, "OOOOOO:sort_postings", &o[H], &o[S], &o[T], &o[OH], &o[OS], &o[OT]))
        return NULL;
    if (take_all(a, o, specs, N) < 0)
        return release(a, N, 0);
    const Py_ssize_t n = LEN(a[H]);
    for (int i = 0; i < N; i++)
        if (LEN(a[i]) != n || ((i == H || i == OH) && a[i].view.itemsize != 8)) {
            PyErr_SetString(PyExc_ValueError, "sort_postings: int64 hashes, int32 slots and float32 tfs, all as long");
            return release(a, N, 0);
        }
    Posting *buf = n ? PyMem_RawMalloc(2 * (size_t)n * sizeof(Posting)) : NULL;
    Py_ssize_t (*count)[BUCKETS] = n ? PyMem_RawMalloc(PASSES * sizeof *count) : NULL;
    if (n && (!buf || !count)) {
        PyMem_RawFree(buf);
        PyMem_RawFree(count);
        PyErr_NoMemory();
        return release(a, N, 0);
    }
    const int64_t *h = DATA(a[H], int64_t);
    const int32_t *s = DATA(a[S], int32_t);
    const float *t = DATA(a[T], float);
    int64_t *oh = DATA(a[OH], int64_t);
    int32_t *os = DATA(a[OS], int32_t);
    float *ot = DATA(a[OT], float);
    Py_BEGIN_ALLOW_THREADS
    if (n) {
        for (Py_ssize_t i = 0; i < n; i++)
            buf[i] = (Posting){(uint64_t)h[i] ^ SIGN, s[i], t[i]};
        const Posting *sorted = radix_sort(buf, buf + n, n, count);
        for (Py_ssize_t i = 0; i < n; i++) {
            oh[i] = (int64_t)(sorted[i].key ^ SIGN);
            os[i] = sorted[i].slot;
            ot[i] = sorted[i].tf;
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(buf);
    PyMem_RawFree(count);
    return release(a, N, 1);
}

#define MAX_RUNS 64

const char merge_postings_doc[] = PyDoc_STR(
"merge_postings(runs, out_hashes, out_slots, out_tfs)\n--\n\n"
"Runs of postings, each a (hashes, slots, tfs) tuple sorted by term hash (int64 hashes, int32 slots,\n"
"float32 tfs), merged into the out arrays (as long as all of them): one run sorted by term hash, a\n"
"term's postings in the order of the runs (_kernels.merge_postings_numpy). At most 64 runs.");

PyObject *merge_postings(PyObject *self, PyObject *args)
{
    enum { H, S, T, N };
    static const Spec specs[N] = {{"hashes", 1, "lq", 0}, {"slots", 1, "i", 0}, {"tfs", 1, "f", 0}};
    static const Spec out_specs[N] = {{"out_hashes", 1, "lq", WRITABLE}, {"out_slots", 1, "i", WRITABLE},
                                      {"out_tfs", 1, "f", WRITABLE}};
    PyObject *seq, *o[N];
    if (!PyArg_ParseTuple(args, "OOOO:merge_postings", &seq, &o[H], &o[S], &o[T]))
        return NULL;
    PyObject *runs = PySequence_Fast(seq, "merge_postings: runs must be a sequence of (hashes, slots, tfs)");
    if (!runs)
        return NULL;
    const Py_ssize_t k = PySequence_Fast_GET_SIZE(runs);
    Arg a[(MAX_RUNS + 1) * N];
    for (Py_ssize_t i = 0; i < (MAX_RUNS + 1) * N; i++)
        a[i].held = 0;
    Py_ssize_t taken = 0; /* Args acquired so far (each run's three, then the out arrays') */
    int ok = k <= MAX_RUNS;
    if (!ok)
        PyErr_SetString(PyExc_ValueError, "merge_postings: at most 64 runs");
    for (Py_ssize_t r = 0; ok && r < k; r++) {
        PyObject *run = PySequence_Fast_GET_ITEM(runs, r);
        if (!PyTuple_Check(run) || PyTuple_GET_SIZE(run) != N) {
            PyErr_SetString(PyExc_TypeError, "merge_postings: each run is a (hashes, slots, tfs) tuple");
            ok = 0;
            break;
        }
        ok = take_all(a + r * N, &PyTuple_GET_ITEM(run, 0), specs, N) == 0;
        taken = (r + 1) * N;
    }
    if (ok) {
        ok = take_all(a + k * N, o, out_specs, N) == 0;
        taken = (k + 1) * N;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t r = 0; ok && r < k; r++) {
        const Py_ssize_t n = LEN(a[r * N + H]);
        total += n;
        if (LEN(a[r * N + S]) != n || LEN(a[r * N + T]) != n || a[r * N + H].view.itemsize != 8) {
            PyErr_SetString(PyExc_ValueError, "merge_postings: int64 hashes, int32 slots and float32 tfs, each "
                                              "run's arrays as long as one another");
            ok = 0;
        }
    }
    Arg *out = a + k * N;
    if (ok && (LEN(out[H]) != total || LEN(out[S]) != total || LEN(out[T]) != total || out[H].view.itemsize != 8)) {
        PyErr_SetString(PyExc_ValueError, "merge_postings: the out arrays (int64, int32, float32) as long as the "
                                          "runs together");
        ok = 0;
    }
    if (!ok) {
        release(a, (int)taken, 0);
        Py_DECREF(runs);
        return NULL;
    }
    /* the runs not yet used up, in run order (ties go to the first), each with its next key */
    const int64_t *h[MAX_RUNS], *end[MAX_RUNS];
    const int32_t *s[MAX_RUNS];
    const float *t[MAX_RUNS];
    int64_t key[MAX_RUNS];
    int na = 0;
    for (Py_ssize_t r = 0; r < k; r++) {
        const Py_ssize_t n = LEN(a[r * N + H]);
        if (!n)
            continue;
        h[na] = DATA(a[r * N + H], const int64_t);
        end[na] = h[na] + n;
        s[na] = DATA(a[r * N + S], const int32_t);
        t[na] = DATA(a[r * N + T], const float);
        key[na] = h[na][0];
        na++;
    }
    int64_t *oh = DATA(out[H], int64_t);
    int32_t *os = DATA(out[S], int32_t);
    float *ot = DATA(out[T], float);
    Py_BEGIN_ALLOW_THREADS
    while (na > 1) {
        int best = 0;
        for (int q = 1; q < na; q++)
            best = key[q] < key[best] ? q : best;       /* (equal: the earlier run's posting goes first) */
        *oh++ = key[best], *os++ = *s[best]++, *ot++ = *t[best]++;
        if (++h[best] < end[best]) {
            key[best] = *h[best];
            continue;
        }
        for (int q = best; q + 1 < na; q++) {          /* used up: the others move down, in order */
            h[q] = h[q + 1], end[q] = end[q + 1], s[q] = s[q + 1], t[q] = t[q + 1], key[q] = key[q + 1];
        }
        na--;
    }
    if (na) {                           /* the last run's rest, as it is */
        const size_t m = (size_t)(end[0] - h[0]);
        memcpy(oh, h[0], m * sizeof *oh);
        memcpy(os, s[0], m * sizeof *os);
        memcpy(ot, t[0], m * sizeof *ot);
    }
    Py_END_ALLOW_THREADS
    Py_DECREF(runs);
    return release(a, (int)taken, 1);
}
