/* The hashing embedder's summing pass (embeddings/hashing.py; its word lookup is in words.c). */
#include "speedups.h"

/* ------------------------------------------------------------------------------ hashing embedder */

const char hash_rows_doc[] = PyDoc_STR(
"hash_rows(ids, per_text, starts, lens, hashes, slots, signs, log_tf, out)\n--\n\n"
"The HashEmbedder's vectors before normalisation (embeddings/hashing.py; _kernels.hash_rows_numpy is\n"
"the same in numpy): text t holds the words ids[sum(per_text[:t]):][:per_text[t]] (int64, indices into\n"
"starts / lens / hashes); each distinct word, in the order the text first uses it, adds\n"
"signs[f] * log_tf[count - 1] at slots[f] for its features f in starts..starts+lens; each pair of\n"
"consecutive words adds +-1 at (hash[a] * golden ^ hash[b]) % dim. Sums in float64 in that order,\n"
"then word and pair sums added, then float32 into out (n, dim).");

PyObject *hash_rows(PyObject *self, PyObject *args)
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
        ok = starts[e] >= 0 && lens[e] >= 0 && lens[e] <= nfeat - starts[e];   /* (the sum could overflow) */
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
    return release_checked(a, N, bad, "hash_rows", "features' slots are not below dim");
}
