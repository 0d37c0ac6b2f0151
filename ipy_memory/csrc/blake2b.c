/* BLAKE2b with an 8-byte digest (RFC 7693), the hash of the hashing embedder's features and of the
 * lexical index's terms: what hashlib.blake2b(text.encode(), digest_size=8) gives, read as a
 * little-endian integer, without the ~0.7 us of Python calls around each hash. Unkeyed, sequential
 * mode only; tests/test_kernels.py compares it with hashlib on random and edge-length inputs. */
#include "speedups.h"

static const uint64_t IV[8] = {0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL,
                               0xa54ff53a5f1d36f1ULL, 0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL,
                               0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};

static const uint8_t SIGMA[10][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
};

static inline uint64_t rotr(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

static inline uint64_t load64(const uint8_t *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t x;
    memcpy(&x, p, 8);       /* (one load) */
    return x;
#else
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--)
        x = (x << 8) | p[i];
    return x;
#endif
}

#define G(a, b, c, d, x, y)                                                                                          \
    do {                                                                                                             \
        v[a] += v[b] + (x);                                                                                          \
        v[d] = rotr(v[d] ^ v[a], 32);                                                                                \
        v[c] += v[d];                                                                                                \
        v[b] = rotr(v[b] ^ v[c], 24);                                                                                \
        v[a] += v[b] + (y);                                                                                          \
        v[d] = rotr(v[d] ^ v[a], 16);                                                                                \
        v[c] += v[d];                                                                                                \
        v[b] = rotr(v[b] ^ v[c], 63);                                                                                \
    } while (0)

/* One round, r a constant: the message words it takes are known at compile time (a loop over the
 * rounds read them through SIGMA, ~2x the instructions of a hash). */
#define ROUND(r)                                                                                                     \
    do {                                                                                                             \
        G(0, 4, 8, 12, m[SIGMA[r][0]], m[SIGMA[r][1]]);                                                              \
        G(1, 5, 9, 13, m[SIGMA[r][2]], m[SIGMA[r][3]]);                                                              \
        G(2, 6, 10, 14, m[SIGMA[r][4]], m[SIGMA[r][5]]);                                                             \
        G(3, 7, 11, 15, m[SIGMA[r][6]], m[SIGMA[r][7]]);                                                             \
        G(0, 5, 10, 15, m[SIGMA[r][8]], m[SIGMA[r][9]]);                                                             \
        G(1, 6, 11, 12, m[SIGMA[r][10]], m[SIGMA[r][11]]);                                                           \
        G(2, 7, 8, 13, m[SIGMA[r][12]], m[SIGMA[r][13]]);                                                            \
        G(3, 4, 9, 14, m[SIGMA[r][14]], m[SIGMA[r][15]]);                                                            \
    } while (0)

/* The compression function F on one 128-byte block; `counted` is the number of bytes hashed so far
 * including this block (inputs here are far below 2^64 bytes: the counter's high word stays 0). */
static inline void compress(uint64_t h[8], const uint8_t block[128], uint64_t counted, int last)
{
    uint64_t v[16], m[16];
    for (int i = 0; i < 16; i++)
        m[i] = load64(block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = IV[i];
    }
    v[12] ^= counted;
    if (last)
        v[14] = ~v[14];
    ROUND(0);
    ROUND(1);
    ROUND(2);
    ROUND(3);
    ROUND(4);
    ROUND(5);
    ROUND(6);
    ROUND(7);
    ROUND(8);
    ROUND(9);
    ROUND(0);        /* rounds 10 and 11 take SIGMA[0] and SIGMA[1] again */
    ROUND(1);
    for (int i = 0; i < 8; i++)
        h[i] ^= v[i] ^ v[i + 8];
}

/* The first 8 digest bytes of BLAKE2b-64 of data[0..n), as a little-endian integer: h[0]. */
uint64_t blake2b_64(const uint8_t *data, Py_ssize_t n)
{
    uint64_t h[8];
    memcpy(h, IV, sizeof h);
    h[0] ^= 0x01010000ULL ^ 8; /* depth 1, fanout 1, no key, digest length 8 */
    Py_ssize_t done = 0;
    while (n - done > 128) {
        compress(h, data + done, (uint64_t)(done + 128), 0);
        done += 128;
    }
    uint8_t last[128] = {0};
    memcpy(last, data + done, (size_t)(n - done));
    compress(h, last, (uint64_t)n, 1);
    return h[0];
}

const char blake2b64_doc[] = PyDoc_STR(
"blake2b64(text) -> int\n--\n\n"
"int.from_bytes(hashlib.blake2b(text.encode('utf-8'), digest_size=8).digest(), 'little')\n"
"(_wordkernels.blake2b64_python).");

PyObject *blake2b64(PyObject *self, PyObject *arg)
{
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "blake2b64: text must be a str");
        return NULL;
    }
    uint64_t h;
    return utf8_hash("", arg, &h) == 0 ? PyLong_FromUnsignedLongLong(h) : NULL;
}

const char gram_hashes_doc[] = PyDoc_STR(
"gram_hashes(marked, grams, sizes) -> list[int]\n--\n\n"
"For each n in sizes and each n-character slice g of marked (in that order): grams[g], or\n"
"blake2b64('c|' + g), which is then stored in the dict grams (_wordkernels.gram_hashes_python).");

/* blake2b_64 of prefix (0-2 bytes) + the UTF-8 of text: 0, or -1 with an exception set. An ASCII
 * text is read where it lies; another is encoded into a temporary (PyUnicode_AsUTF8 would keep
 * the encoding with the str for its life: the caches' keys would each carry a copy). */
int utf8_hash(const char *prefix, PyObject *text, uint64_t *out)
{
    PyObject *encoded = NULL;
    const char *utf8;
    Py_ssize_t m;
    if (PyUnicode_IS_ASCII(text)) {
        utf8 = (const char *)PyUnicode_DATA(text);
        m = PyUnicode_GET_LENGTH(text);
    } else {
        if (!(encoded = PyUnicode_AsUTF8String(text)))  /* UnicodeEncodeError for lone surrogates */
            return -1;
        utf8 = PyBytes_AS_STRING(encoded);
        m = PyBytes_GET_SIZE(encoded);
    }
    const size_t p = strlen(prefix);
    uint8_t stack[128], *buf = m + (Py_ssize_t)p > (Py_ssize_t)sizeof stack ? PyMem_Malloc((size_t)m + p) : stack;
    if (buf) {
        memcpy(buf, prefix, p);
        memcpy(buf + p, utf8, (size_t)m);
        *out = blake2b_64(buf, m + (Py_ssize_t)p);
        if (buf != stack)
            PyMem_Free(buf);
    } else
        PyErr_NoMemory();
    Py_XDECREF(encoded);
    return buf ? 0 : -1;
}

/* An int of grams as a uint64 (PyLong_AsUnsignedLongLong's value and errors). A gram's hash has
 * three 30-bit digits, for which CPython before 3.12 goes through _PyLong_AsByteArray (~200
 * instructions): read here from the digits when they fit, as it would read them. */
static int gram_value(PyObject *v, uint64_t *out)
{
#if PY_VERSION_HEX < 0x030C0000 && !defined(Py_LIMITED_API) && PYLONG_BITS_IN_DIGIT == 30
    const Py_ssize_t n = PyLong_CheckExact(v) ? Py_SIZE(v) : -1;
    const digit *d = ((PyLongObject *)v)->ob_digit;
    if (n >= 0 && n <= 3 && (n < 3 || d[2] < 16)) {
        uint64_t x = 0;
        for (Py_ssize_t i = n - 1; i >= 0; i--)
            x = x << 30 | d[i];
        *out = x;
        return 0;
    }
#endif
    *out = PyLong_AsUnsignedLongLong(v);
    return *out == (uint64_t)-1 && PyErr_Occurred() ? -1 : 0;
}

/* Call each(hash, ctx) for the hash of every n-gram of marked, n in sizes, in that order (cached
 * in grams): 0, or -1 with an exception set. */
static int each_gram(PyObject *marked, PyObject *grams, PyObject *sizes, int (*each)(uint64_t, void *), void *ctx)
{
    const Py_ssize_t len = PyUnicode_GET_LENGTH(marked);
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(sizes); k++) {
        const Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(sizes, k));
        if (n < 1) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "gram_hashes: sizes must be positive integers");
            return -1;
        }
        for (Py_ssize_t i = 0; i + n <= len; i++) {
            PyObject *g = PyUnicode_Substring(marked, i, i + n);
            if (!g)
                return -1;
            PyObject *v = PyDict_GetItemWithError(grams, g); /* borrowed */
            uint64_t h = 0;
            int ok = v != NULL;
            if (v)
                ok = gram_value(v, &h) == 0;
            else if (!PyErr_Occurred() && utf8_hash("c|", g, &h) == 0) {
                v = PyLong_FromUnsignedLongLong(h);
                ok = v && PyDict_SetItem(grams, g, v) == 0;
                Py_XDECREF(v);
            }
            Py_DECREF(g);
            if (!ok || each(h, ctx) < 0)
                return -1;
        }
    }
    return 0;
}

static int append_hash(uint64_t h, void *list)
{
    PyObject *v = PyLong_FromUnsignedLongLong(h);
    const int r = v ? PyList_Append((PyObject *)list, v) : -1;
    Py_XDECREF(v);
    return r;
}

PyObject *gram_hashes(PyObject *self, PyObject *args)
{
    PyObject *marked, *grams, *sizes;
    if (!PyArg_ParseTuple(args, "UO!O!:gram_hashes", &marked, &PyDict_Type, &grams, &PyTuple_Type, &sizes))
        return NULL;
    PyObject *out = PyList_New(0);
    if (out && each_gram(marked, grams, sizes, append_hash, out) < 0)
        Py_CLEAR(out);
    return out;
}

const char word_features_doc[] = PyDoc_STR(
"word_features(words, grams, sizes, dim, hashes, counts, slots, signs) -> int\n--\n\n"
"The HashEmbedder's features of new words (_wordkernels.word_features_python): for word i,\n"
"hashes[i] = blake2b64('w|' + word) and its features, that hash followed (unless the word is a CJK\n"
"gram) by gram_hashes('<' + word + '>', grams, sizes), stored one after another from the start of\n"
"slots (hash % dim, int32) and signs (+1 where bit 63 is set, else -1, int8); counts[i] (int64)\n"
"is how many. Returns the number of features stored; ValueError if slots or signs are too short.\n"
"The words are the list as it is at the call (a key of grams that changes it does not change them).");

typedef struct {
    int32_t *slots;
    int8_t *signs;
    Py_ssize_t used, room;
    uint64_t dim;
} Features;

static int store_feature(uint64_t h, void *ctx)
{
    Features *f = ctx;
    if (f->used >= f->room) {
        PyErr_SetString(PyExc_ValueError, "word_features: slots and signs are too short for the features");
        return -1;
    }
    f->slots[f->used] = (int32_t)(h % f->dim);
    f->signs[f->used++] = (h >> 63) ? 1 : -1;
    return 0;
}

/* The first character is kana, CJK or hangul (_text.is_cjk). */
int is_cjk_char(Py_UCS4 c)
{
    return (c >= 0x3040 && c <= 0x30ff) || (c >= 0x3400 && c <= 0x4dbf) || (c >= 0x4e00 && c <= 0x9fff)
           || (c >= 0xac00 && c <= 0xd7af) || (c >= 0xf900 && c <= 0xfaff);
}

int starts_cjk(PyObject *word)
{
    return PyUnicode_GET_LENGTH(word) > 0 && is_cjk_char(PyUnicode_READ_CHAR(word, 0));
}

/* "<" + w + ">" (PyUnicode_FromFormat parses its format each call: ~5x the work). */
static PyObject *bracketed(PyObject *w)
{
    const Py_ssize_t n = PyUnicode_GET_LENGTH(w);
    PyObject *out = PyUnicode_New(n + 2, PyUnicode_MAX_CHAR_VALUE(w));
    if (!out)
        return NULL;
    PyUnicode_WRITE(PyUnicode_KIND(out), PyUnicode_DATA(out), 0, '<');
    memcpy((char *)PyUnicode_DATA(out) + PyUnicode_KIND(out), PyUnicode_DATA(w), (size_t)(n * PyUnicode_KIND(w)));
    PyUnicode_WRITE(PyUnicode_KIND(out), PyUnicode_DATA(out), n + 1, '>');
    return out;
}

PyObject *word_features(PyObject *self, PyObject *args)
{
    enum { HASHES, COUNTS, SLOTS, SIGNS, N };
    static const Spec specs[N] = {{"hashes", 1, "LQ", WRITABLE}, {"counts", 1, "lq", WRITABLE},
                                  {"slots", 1, "i", WRITABLE},   {"signs", 1, "b", WRITABLE}};
    PyObject *words, *grams, *sizes, *o[N];
    Py_ssize_t dim;
    Arg a[N];
    if (!PyArg_ParseTuple(args, "O!O!O!nOOOO:word_features", &PyList_Type, &words, &PyDict_Type, &grams,
                          &PyTuple_Type, &sizes, &dim, &o[HASHES], &o[COUNTS], &o[SLOTS], &o[SIGNS]))
        return NULL;
    if (take_all(a, o, specs, N) < 0)
        return release(a, N, 0);
    /* A copy of the list: the keys of grams run Python code (__eq__), which could change words while
     * they are read (the copy keeps them alive and n valid). */
    PyObject *batch = PyList_AsTuple(words);
    if (!batch)
        return release(a, N, 0);
    const Py_ssize_t n = PyTuple_GET_SIZE(batch);
    if (dim < 1 || LEN(a[HASHES]) < n || LEN(a[COUNTS]) < n || LEN(a[SIGNS]) != LEN(a[SLOTS])
        || a[HASHES].view.itemsize != 8 || a[COUNTS].view.itemsize != 8) {
        PyErr_SetString(PyExc_ValueError, "word_features: dim must be >= 1, hashes (uint64) and counts (int64) "
                                          "one per word, slots and signs as long as each other");
        Py_DECREF(batch);
        return release(a, N, 0);
    }
    uint64_t *hashes = DATA(a[HASHES], uint64_t);
    int64_t *counts = DATA(a[COUNTS], int64_t);
    Features f = {DATA(a[SLOTS], int32_t), DATA(a[SIGNS], int8_t), 0, LEN(a[SLOTS]), (uint64_t)dim};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *w = PyTuple_GET_ITEM(batch, i), *marked = NULL;
        uint64_t h;
        const Py_ssize_t before = f.used;
        if (!PyUnicode_Check(w)) {
            PyErr_SetString(PyExc_TypeError, "word_features: words must be a list of str");
            Py_DECREF(batch);
            return release(a, N, 0);
        }
        int ok = utf8_hash("w|", w, &h) == 0 && store_feature(h, &f) == 0;
        if (ok && !starts_cjk(w))
            ok = (marked = bracketed(w)) && each_gram(marked, grams, sizes, store_feature, &f) == 0;
        Py_XDECREF(marked);
        if (!ok) {
            Py_DECREF(batch);
            return release(a, N, 0);
        }
        hashes[i] = h;
        counts[i] = f.used - before;
    }
    Py_DECREF(batch);
    release(a, N, 1);
    return PyLong_FromSsize_t(f.used);
}
