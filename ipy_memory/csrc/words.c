/* Word tables: word -> 64-bit value caches kept in a flat uint64 array instead of a dict.
 *
 * A dict lookup of a word met in a new text touches three places in memory (the index, the entry,
 * the key's characters: the word is another str object than the key), each a cache miss in a table
 * of a few hundred thousand words; a slot here holds the word's 64-bit key and its value side by
 * side. Two words with the same key would share a value: with keys from a 64-bit mixing hash and
 * at most 2^19 words in a table, the odds of that anywhere in a table are below 1e-7 (the index's
 * term hashes take the same odds). */
#include "speedups.h"

/* Layout: [count, key_0, value_0, key_1, value_1, ...], a power of two of slots; key 0 = free. */
typedef struct {
    uint64_t *count, *slots, mask;
} Table;

static int table_of(Arg *arg, Table *t)
{
    const Py_ssize_t n = LEN(*arg);
    const uint64_t cap = n > 1 ? (uint64_t)(n - 1) / 2 : 0;
    uint64_t *a = DATA(*arg, uint64_t);
    if (cap < 2 || (cap & (cap - 1)) || (uint64_t)n != 1 + 2 * cap || a[0] > cap) {
        PyErr_SetString(PyExc_ValueError, "word table: a uint64 array of 1 + 2 * (a power of two >= 2) items, "
                                          "its first item the count of words held");
        return -1;
    }
    *t = (Table){a, a + 1, cap - 1};
    return 0;
}

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* A str's key: a mixing hash of its characters as CPython stores them (an equal str always has the
 * same kind and bytes), never 0. */
static uint64_t word_key(PyObject *w)
{
    const uint8_t *p = (const uint8_t *)PyUnicode_DATA(w);
    const int kind = PyUnicode_KIND(w);
    size_t n = (size_t)PyUnicode_GET_LENGTH(w) * (size_t)kind;
    uint64_t h = mix(0x243F6A8885A308D3ull ^ (uint64_t)n << 2 ^ (uint64_t)kind);
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t c;
        memcpy(&c, p, 8);
        h = mix(h ^ c);
    }
    if (n) {
        uint64_t c = 0;
        memcpy(&c, p, n);
        h = mix(h ^ c);
    }
    return h ? h : 1;
}

/* The slot holding key, or the free slot where it would go. */
static uint64_t *find(const Table *t, uint64_t key)
{
    for (uint64_t i = key & t->mask;; i = (i + 1) & t->mask) {
        uint64_t *s = t->slots + 2 * i;
        if (s[0] == key || s[0] == 0)
            return s;
    }
}

/* Store key -> value unless the table is 3/4 full (a free slot always remains: find ends). */
static void store(const Table *t, uint64_t key, uint64_t value)
{
    uint64_t *s = find(t, key);      /* looked up again: the miss function may have run another thread */
    if (s[0] == 0 && *t->count < (t->mask + 1) / 4 * 3) {
        s[0] = key;
        s[1] = value;
        ++*t->count;
    }
}

/* ------------------------------------------------------------------------------ indexing words */

const char index_terms_doc[] = PyDoc_STR(
"index_terms(words, table, miss, vocab) -> (terms, counts)\n--\n\n"
"Each word's entry, term hash * 2 + expandable (a non-negative int below 2**64), from the word\n"
"table (see words.c; lexical._word_table), or from miss(word), which is then stored there (a word\n"
"that starts with a CJK character or is ASCII digits gets blake2b64(word) >> 1 << 1 without a\n"
"call: _text.index_word's entry for it, and most new words are such); an expandable word is the\n"
"word of its term in `vocab` unless one is there already; the distinct term hashes in order of\n"
"first use, and how often each occurs (_kernels.index_terms_python, whose cache is a dict).");

/* A text's distinct terms, in order of first use, found through an open-addressing table of
 * their positions (a dict of Python ints per text cost more than the words' cache lookups). */
typedef struct {
    uint64_t term;
    long count;
    int expanded; /* an expandable word of this term has been offered to vocab */
} Seen;

#define SMALL_TEXT 64   /* words whose tables fit on the stack */

static Py_ssize_t seen_slot(const int32_t *table, uint64_t mask, const Seen *seen, uint64_t term)
{
    uint64_t i = (term * 0x9E3779B97F4A7C15ull) >> 32 & mask;
    while (table[i] >= 0 && seen[table[i]].term != term)
        i = (i + 1) & mask;
    return (Py_ssize_t)i;
}

/* A new word's entry: its own term, not expandable, for a CJK gram or an ASCII number (no call);
 * else miss(word)'s. 0, or -1 with an exception set. */
static int new_entry(PyObject *word, PyObject *miss, uint64_t *packed)
{
    int own = starts_cjk(word);
    if (!own && PyUnicode_IS_ASCII(word) && PyUnicode_GET_LENGTH(word) > 0) {
        const char *c = (const char *)PyUnicode_DATA(word);
        own = 1;
        for (Py_ssize_t i = 0; own && i < PyUnicode_GET_LENGTH(word); i++)
            own = c[i] >= '0' && c[i] <= '9';
    }
    if (own) {
        if (utf8_hash("", word, packed) < 0)
            return -1;
        *packed = *packed >> 1 << 1;
        return 0;
    }
    PyObject *entry = PyObject_CallOneArg(miss, word);
    if (!entry)
        return -1;
    *packed = PyLong_Check(entry) ? PyLong_AsUnsignedLongLong(entry) : (uint64_t)-1;
    const int bad = *packed == (uint64_t)-1 && (!PyLong_Check(entry) || PyErr_Occurred());
    Py_DECREF(entry);
    if (bad) {                     /* (replaces an OverflowError for a negative or too large int) */
        PyErr_SetString(PyExc_TypeError, "index_terms: entries must be term hash * 2 + expandable, "
                                         "a non-negative int below 2**64");
        return -1;
    }
    return 0;
}

PyObject *index_terms(PyObject *self, PyObject *args)
{
    static const Spec spec = {"table", 1, "LQ", WRITABLE};
    PyObject *words, *table_obj, *miss, *vocab;
    if (!PyArg_ParseTuple(args, "OOOO!:index_terms", &words, &table_obj, &miss, &PyDict_Type, &vocab))
        return NULL;
    Arg arg;
    Table words_table;
    if (take_all(&arg, &table_obj, &spec, 1) < 0 || table_of(&arg, &words_table) < 0)
        return release(&arg, 1, 0);
    PyObject *seq = PySequence_Fast(words, "index_terms: words must be a sequence");
    if (!seq)
        return release(&arg, 1, 0);
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq), *result = NULL, *terms = NULL, *counts = NULL;
    uint64_t mask = 2 * SMALL_TEXT - 1;
    while ((Py_ssize_t)(mask + 1) < 2 * n)
        mask = 2 * mask + 1;
    int32_t small_table[2 * SMALL_TEXT];
    Seen small_seen[SMALL_TEXT];
    int32_t *table = n <= SMALL_TEXT ? small_table : PyMem_Malloc((mask + 1) * sizeof(int32_t));
    Seen *seen = n <= SMALL_TEXT ? small_seen : PyMem_Malloc(n * sizeof(Seen));
    if (!table || !seen) {
        PyErr_NoMemory();
        goto done;
    }
    memset(table, 0xff, (mask + 1) * sizeof(int32_t));
    if (!(terms = PyList_New(0)))
        goto done;
    Py_ssize_t distinct = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyUnicode_Check(items[i])) {
            PyErr_SetString(PyExc_TypeError, "index_terms: words must be str");
            goto done;
        }
        const uint64_t key = word_key(items[i]);
        const uint64_t *slot = find(&words_table, key);
        uint64_t packed = slot[1];
        if (slot[0] != key) {
            if (new_entry(items[i], miss, &packed) < 0)
                goto done;
            store(&words_table, key, packed);
        }
        const uint64_t term = packed >> 1;
        const Py_ssize_t at = seen_slot(table, mask, seen, term);
        Seen *s;
        PyObject *term_obj = NULL;
        if (table[at] < 0) {
            table[at] = (int32_t)distinct;
            s = &seen[distinct++];
            *s = (Seen){term, 0, 0};
            if (!(term_obj = PyLong_FromUnsignedLongLong(term)) || PyList_Append(terms, term_obj) < 0) {
                Py_XDECREF(term_obj);
                goto done;
            }
        } else
            s = &seen[table[at]];
        s->count++;
        if ((packed & 1) && !s->expanded) {     /* later expandable words of the term find it in vocab */
            s->expanded = 1;
            if (!term_obj) {
                term_obj = PyList_GET_ITEM(terms, table[at]);
                Py_INCREF(term_obj);
            }
            int known = PyDict_Contains(vocab, term_obj);
            if (known < 0 || (!known && PyDict_SetItem(vocab, term_obj, items[i]) < 0)) {
                Py_DECREF(term_obj);
                goto done;
            }
        }
        Py_XDECREF(term_obj);
    }
    if (!(counts = PyList_New(distinct)))
        goto done;
    for (Py_ssize_t j = 0; j < distinct; j++) {
        PyObject *c = PyLong_FromLong(seen[j].count);
        if (!c)
            goto done;
        PyList_SET_ITEM(counts, j, c);
    }
    result = PyTuple_Pack(2, terms, counts);
done:
    if (table != small_table)
        PyMem_Free(table);
    if (seen != small_seen)
        PyMem_Free(seen);
    Py_XDECREF(terms);
    Py_XDECREF(counts);
    Py_DECREF(seq);
    release(&arg, 1, 1);
    return result;
}

const char word_table_move_doc[] = PyDoc_STR(
"word_table_move(old, new)\n--\n\n"
"Store every word of the word table old in the word table new (a larger one, when old fills up).\n"
"ValueError if new would be more than 3/4 full.");

PyObject *word_table_move(PyObject *self, PyObject *args)
{
    static const Spec specs[2] = {{"old", 1, "LQ", 0}, {"new", 1, "LQ", WRITABLE}};
    PyObject *o[2];
    Arg a[2];
    Table from, to;
    if (!PyArg_ParseTuple(args, "OO:word_table_move", &o[0], &o[1]))
        return NULL;
    if (take_all(a, o, specs, 2) < 0 || table_of(&a[0], &from) < 0 || table_of(&a[1], &to) < 0)
        return release(a, 2, 0);
    if (*to.count + *from.count > (to.mask + 1) / 4 * 3 || from.slots == to.slots) {
        PyErr_SetString(PyExc_ValueError, "word_table_move: the new table has too little room (or is the old one)");
        return release(a, 2, 0);
    }
    for (uint64_t i = 0; i <= from.mask; i++)
        if (from.slots[2 * i])
            store(&to, from.slots[2 * i], from.slots[2 * i + 1]);
    return release(a, 2, 1);
}

/* ------------------------------------------------------------------------------ embedder's words */

const char word_ids_doc[] = PyDoc_STR(
"word_ids(per_text, table, first_new, ids, distinct) -> (count, new_words)\n--\n\n"
"The HashEmbedder's word lookup (_kernels.word_ids_python, whose cache is a dict): per_text is a\n"
"list of tuples of words and table a word table of their entries (ints). A word not in table is a\n"
"new word: it is listed in new_words (each once, in the order first met) and stored in table with\n"
"the entry first_new + its place in that list (the caller stores those entries' features). Fills\n"
"ids (int64, one per word in order, as long as all the tuples together) with each word's index\n"
"into distinct, and distinct (int64, as long) with the entries in the order the batch first uses\n"
"them; count is how many. ValueError (nothing stored) unless the table has room for every word.");

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

PyObject *word_ids(PyObject *self, PyObject *args)
{
    enum { TABLE, IDS, DISTINCT, N };
    static const Spec specs[N] = {{"table", 1, "LQ", WRITABLE}, {"ids", 1, "lq", WRITABLE}, {"distinct", 1, "lq", WRITABLE}};
    PyObject *per_text, *o[N];
    Py_ssize_t first_new;
    Arg a[N];
    Table words;
    if (!PyArg_ParseTuple(args, "O!OnOO:word_ids", &PyList_Type, &per_text, &o[TABLE], &first_new, &o[IDS],
                          &o[DISTINCT]))
        return NULL;
    Py_ssize_t total = 0;
    for (Py_ssize_t t = 0; t < PyList_GET_SIZE(per_text); t++) {
        PyObject *tuple = PyList_GET_ITEM(per_text, t);
        if (!PyTuple_Check(tuple)) {
            PyErr_SetString(PyExc_TypeError, "word_ids: per_text must be a list of tuples of words");
            return NULL;
        }
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(tuple); j++)
            if (!PyUnicode_Check(PyTuple_GET_ITEM(tuple, j))) {
                PyErr_SetString(PyExc_TypeError, "word_ids: words must be str");
                return NULL;
            }
        total += PyTuple_GET_SIZE(tuple);
    }
    if (take_all(a, o, specs, N) < 0 || table_of(&a[TABLE], &words) < 0)
        return release(a, N, 0);
    if (LEN(a[IDS]) != total || LEN(a[DISTINCT]) != total || a[IDS].view.itemsize != 8
        || a[DISTINCT].view.itemsize != 8 || first_new < 0
        || *words.count + (uint64_t)total > (words.mask + 1) / 4 * 3) {
        PyErr_SetString(PyExc_ValueError, "word_ids: ids and distinct must be int64, one per word, first_new >= 0, "
                                          "and the table must have room for every word (3/4 full at most)");
        return release(a, N, 0);
    }
    size_t cap = 16;
    while (cap < 2 * (size_t)total)
        cap <<= 1;
    int64_t *local = PyMem_Malloc(cap * 2 * sizeof(int64_t));
    PyObject *missing = PyList_New(0), *result = NULL;
    if (!local || !missing) {
        if (!local)
            PyErr_NoMemory();
        goto done;
    }
    memset(local, 0xff, cap * 2 * sizeof(int64_t)); /* entry -1: free */
    int64_t *ids = DATA(a[IDS], int64_t), *distinct = DATA(a[DISTINCT], int64_t), next = 0;
    Py_ssize_t k = 0;
    for (Py_ssize_t t = 0; t < PyList_GET_SIZE(per_text); t++) {
        PyObject *tuple = PyList_GET_ITEM(per_text, t);
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(tuple); j++, k++) {
            PyObject *w = PyTuple_GET_ITEM(tuple, j);
            const uint64_t key = word_key(w);
            uint64_t *slot = find(&words, key);
            if (slot[0] != key) {                /* new: stored at once, so that its next use finds it */
                if (PyList_Append(missing, w) < 0)
                    goto done;
                slot[0] = key;
                slot[1] = (uint64_t)(first_new + PyList_GET_SIZE(missing) - 1);
                ++*words.count;
            }
            const int64_t before = next, at = local_index(local, cap - 1, (int64_t)slot[1], &next);
            if (next > before)
                distinct[at] = (int64_t)slot[1];
            ids[k] = at;
        }
    }
    result = Py_BuildValue("(LO)", (long long)next, missing);
done:
    Py_XDECREF(missing);
    PyMem_Free(local);
    release(a, N, 0);
    return result;
}
