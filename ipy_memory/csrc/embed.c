/* The hashing embedder's summing pass (embeddings/hashing.py). */
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
    return release_checked(a, N, bad, "hash_rows", "features' slots are not below dim");
}

const char word_ids_doc[] = PyDoc_STR(
"word_ids(per_text, cache, ids, distinct) -> int | list\n--\n\n"
"The HashEmbedder's word lookup (_kernels.word_ids_python): per_text is a list of tuples of words and\n"
"cache a dict word -> entry (int). If every word is in cache: fills ids (int64, one per word in\n"
"order, as long as all the tuples together) with each word's index into distinct, distinct (int64,\n"
"as long) with the entries in the order the batch first uses them, and returns how many there\n"
"are. Else returns the words missing from cache, each once, in the order first met (ids and\n"
"distinct then hold nothing of use).");

/* An open-addressing table entry -> local index, sized to a power of two above twice the words. */
static int64_t local_index(int64_t *table, size_t mask, int64_t entry, int64_t *next)
{
    size_t at = (size_t)((uint64_t)entry * 0x9E3779B97F4A7C15ull >> 17) & mask;
    while (table[2 * at] >= 0 && table[2 * at] != entry)
        at = (at + 1) & mask;
    if (table[2 * at] < 0) {
        table[2 * at] = entry;
        table[2 * at + 1] = (*next)++;
    }
    return table[2 * at + 1];
}

/* Add w to the missing words (each once, in the order first met; `seen` makes them unique). */
static int note_missing(PyObject **missing, PyObject **seen, PyObject *w)
{
    if (!*missing && (!(*missing = PyList_New(0)) || !(*seen = PyDict_New())))
        return -1;
    int met = PyDict_Contains(*seen, w);
    if (met < 0)
        return -1;
    return met ? 0 : (PyDict_SetItem(*seen, w, Py_None) < 0 || PyList_Append(*missing, w) < 0) ? -1 : 0;
}

PyObject *word_ids(PyObject *self, PyObject *args)
{
    enum { IDS, DISTINCT, N };
    static const Spec specs[N] = {{"ids", 1, "lq", WRITABLE}, {"distinct", 1, "lq", WRITABLE}};
    PyObject *per_text, *cache, *o[N];
    Arg a[N];
    if (!PyArg_ParseTuple(args, "O!O!OO:word_ids", &PyList_Type, &per_text, &PyDict_Type, &cache, &o[IDS],
                          &o[DISTINCT]))
        return NULL;
    Py_ssize_t total = 0;
    for (Py_ssize_t t = 0; t < PyList_GET_SIZE(per_text); t++) {
        if (!PyTuple_Check(PyList_GET_ITEM(per_text, t))) {
            PyErr_SetString(PyExc_TypeError, "word_ids: per_text must be a list of tuples of words");
            return NULL;
        }
        total += PyTuple_GET_SIZE(PyList_GET_ITEM(per_text, t));
    }
    if (take_all(a, o, specs, N) < 0)
        return release(a, N, 0);
    if (LEN(a[IDS]) != total || LEN(a[DISTINCT]) != total || a[IDS].view.itemsize != 8
        || a[DISTINCT].view.itemsize != 8) {
        PyErr_SetString(PyExc_ValueError, "word_ids: ids and distinct must be int64, one per word");
        return release(a, N, 0);
    }
    size_t cap = 16;
    while (cap < 2 * (size_t)total)
        cap <<= 1;
    int64_t *table = PyMem_Malloc(cap * 2 * sizeof(int64_t));
    if (!table) {
        PyErr_NoMemory();
        return release(a, N, 0);
    }
    memset(table, 0xff, cap * 2 * sizeof(int64_t)); /* entry -1: free */
    int64_t *ids = DATA(a[IDS], int64_t), *distinct = DATA(a[DISTINCT], int64_t), next = 0;
    Py_ssize_t k = 0;
    PyObject *result = NULL, *missing = NULL, *seen = NULL;
    for (Py_ssize_t t = 0; t < PyList_GET_SIZE(per_text); t++) {
        PyObject *words = PyList_GET_ITEM(per_text, t);
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(words); j++, k++) {
            PyObject *w = PyTuple_GET_ITEM(words, j), *e = PyDict_GetItemWithError(cache, w); /* borrowed */
            if (!e) {                        /* one pass: the missing words are listed on the way */
                if (PyErr_Occurred() || note_missing(&missing, &seen, w) < 0)
                    goto done;
                continue;
            }
            if (missing)
                continue;                    /* the ids are of no use now */
            const long long entry = PyLong_AsLongLong(e);
            if (entry < 0) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "word_ids: cache entries must be ints >= 0");
                goto done;
            }
            const int64_t before = next, at = local_index(table, cap - 1, entry, &next);
            if (next > before)
                distinct[at] = entry;
            ids[k] = at;
        }
    }
    if (missing) {
        result = missing;
        missing = NULL;
    } else
        result = PyLong_FromLongLong(next);
done:
    Py_XDECREF(missing);
    Py_XDECREF(seen);
    PyMem_Free(table);
    release(a, N, 0);
    return result;
}
