/* Postings runs (_postings.py): a write's postings sorted by term, and two runs merged into one.
 *
 * numpy sorted a run with a stable argsort (timsort on 64-bit keys) and gathered three arrays by
 * it, and merged two runs with a binary search per newer posting and three boolean / fancy
 * scatters: ~7 ms of every 1,000-memory write at 100k memories. Here a run is sorted by a stable
 * LSD radix sort of (term, slot, tf) records and runs are merged in one pass, with the GIL released. */
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
        return NULL;
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

const char merge_postings_doc[] = PyDoc_STR(
"merge_postings(hashes, slots, tfs, new_hashes, new_slots, new_tfs, out_hashes, out_slots, out_tfs)\n--\n\n"
"Two runs of postings, each sorted by term hash (int64 hashes, int32 slots, float32 tfs), merged\n"
"into the out arrays (as long as both): one run sorted by term hash, a term's postings of the first\n"
"run before those of the second (_kernels.merge_postings_numpy).");

PyObject *merge_postings(PyObject *self, PyObject *args)
{
    enum { H, S, T, NH, NS, NT, OH, OS, OT, N };
    static const Spec specs[N] = {{"hashes", 1, "lq", 0}, {"slots", 1, "i", 0}, {"tfs", 1, "f", 0},
                                  {"new_hashes", 1, "lq", 0}, {"new_slots", 1, "i", 0}, {"new_tfs", 1, "f", 0},
                                  {"out_hashes", 1, "lq", WRITABLE}, {"out_slots", 1, "i", WRITABLE},
                                  {"out_tfs", 1, "f", WRITABLE}};
    PyObject *o[N];
    Arg a[N];
    if (!PyArg_ParseTuple(args, "OOOOOOOOO:merge_postings", &o[H], &o[S], &o[T], &o[NH], &o[NS], &o[NT], &o[OH],
                          &o[OS], &o[OT]))
        return NULL;
    if (take_all(a, o, specs, N) < 0)
        return NULL;
    const Py_ssize_t n = LEN(a[H]), m = LEN(a[NH]);
    int bad = LEN(a[S]) != n || LEN(a[T]) != n || LEN(a[NS]) != m || LEN(a[NT]) != m;
    for (int i = OH; i <= OT; i++)
        bad |= LEN(a[i]) != n + m;
    for (int i = H; i <= OH; i += NH - H)
        bad |= a[i].view.itemsize != 8;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "merge_postings: int64 hashes, int32 slots and float32 tfs; each run's "
                                          "arrays as long as one another, the out arrays as long as both");
        return release(a, N, 0);
    }
    const int64_t *h = DATA(a[H], int64_t), *nh = DATA(a[NH], int64_t);
    const int32_t *s = DATA(a[S], int32_t), *ns = DATA(a[NS], int32_t);
    const float *t = DATA(a[T], float), *nt = DATA(a[NT], float);
    int64_t *oh = DATA(a[OH], int64_t);
    int32_t *os = DATA(a[OS], int32_t);
    float *ot = DATA(a[OT], float);
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t i = 0, j = 0, k = 0;
    while (i < n && j < m) {
        if (nh[j] < h[i]) {           /* (equal: the first run's posting goes first) */
            oh[k] = nh[j], os[k] = ns[j], ot[k++] = nt[j++];
        } else {
            oh[k] = h[i], os[k] = s[i], ot[k++] = t[i++];
        }
    }
    for (; i < n; i++, k++)
        oh[k] = h[i], os[k] = s[i], ot[k] = t[i];
    for (; j < m; j++, k++)
        oh[k] = nh[j], os[k] = ns[j], ot[k] = nt[j];
    Py_END_ALLOW_THREADS
    return release(a, N, 1);
}
