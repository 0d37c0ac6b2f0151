/* Word tables: word -> 64-bit value caches kept in a flat uint64 array instead of a dict.
 *
 * A dict lookup of a word met in a new text touches three places in memory (the index, the entry,
 * the key's characters: the word is another str object than the key), each a cache miss in a table
 * of a few hundred thousand words; a slot here holds the word's 128-bit key and its value side by
 * side (24 bytes). The key is two independent hashes: a mixing hash of the characters, whose low
 * bits place the slot, and str's own hash (SipHash, keyed per process; cached in the str). The
 * mixing hash alone can be made to collide on purpose (a chain of public bijections: a word that
 * shares a given word's is computed in a second), and two words with one key share a value; a pair
 * that collides in both takes ~2^64 trials to find even where PYTHONHASHSEED makes str's hash
 * known, and by chance has odds of 2^-128. (Comparing the words themselves would be the cache miss
 * the table exists to avoid, and would make the table hold references.) */
#include "speedups.h"

/* Layout: [count, key_0, check_0, value_0, key_1, ...], a power of two of slots; key 0 = free. */
#define SLOT 3
typedef struct {
    uint64_t *count, *slots, mask;
} Table;

typedef struct {
    uint64_t key, check;
} Key;

static int table_of(Arg *arg, Table *t)
{
    const Py_ssize_t n = LEN(*arg);
    const uint64_t cap = n > 1 ? (uint64_t)(n - 1) / SLOT : 0;
    uint64_t *a = DATA(*arg, uint64_t);
    if (cap < 2 || (cap & (cap - 1)) || (uint64_t)n != 1 + SLOT * cap || a[0] > cap) {
        PyErr_SetString(PyExc_ValueError, "word table: a uint64 array of 1 + 3 * (a power of two >= 2) items, "
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
 * same kind and bytes), never 0, and str's own hash (str's, not a subclass's __hash__: no Python
 * code runs). */
static Key word_key(PyObject *w)
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
    return (Key){h ? h : 1, (uint64_t)PyUnicode_Type.tp_hash(w)};
}

/* The slot holding k, or the free slot where it would go. */
static uint64_t *find(const Table *t, Key k)
{
    for (uint64_t i = k.key & t->mask;; i = (i + 1) & t->mask) {
        uint64_t *s = t->slots + SLOT * i;
        if ((s[0] == k.key && s[1] == k.check) || s[0] == 0)
            return s;
    }
}

static inline int holds(const uint64_t *slot, Key k) { return slot[0] == k.key && slot[1] == k.check; }

/* Prefetching: a text's word slots are asked of memory a text or two before they are read, so
 * that the cache misses of a large table (one a word, ~100 ns each) overlap instead of queueing
 * one after another. A hint only: the lookups themselves are unchanged. */
#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)0)
#endif

/* keys[i] = word_key of the tuple's i-th word, each one's home slot prefetched. */
static void keys_ahead(const Table *t, PyObject *tuple, Key *keys)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); i++) {
        keys[i] = word_key(PyTuple_GET_ITEM(tuple, i));
        PREFETCH(t->slots + SLOT * (keys[i].key & t->mask));
    }
}

/* The `known` slots of the expandable words among keys whose word slots were prefetched earlier
 * (found in their home slot: nearly all at most half full): index_batch looks those up next. */
static void known_ahead(const Table *words, const Table *known, const Key *keys, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint64_t *s = words->slots + SLOT * (keys[i].key & words->mask);
        if (holds(s, keys[i]) && (s[2] & 1))
            PREFETCH(known->slots + SLOT * ((s[2] >> 1 | 1ull << 63) & known->mask));
    }
}

/* Store k -> value unless the table is 3/4 full (a free slot always remains: find ends). */
static void store(const Table *t, Key k, uint64_t value)
{
    uint64_t *s = find(t, k);        /* looked up again: the miss function may have run another thread */
    if (s[0] == 0 && *t->count < (t->mask + 1) / 4 * 3) {
        s[0] = k.key;
        s[1] = k.check;
        s[2] = value;
        ++*t->count;
    }
}

/* per_text (a list of tuples of str, or a tuple copy of one) checked: its number of words and the
 * longest tuple's. 0, or -1 with a TypeError naming kernel. */
static int count_words(PyObject *per_text, const char *kernel, Py_ssize_t *total, Py_ssize_t *longest)
{
    *total = *longest = 0;
    for (Py_ssize_t t = 0; t < PySequence_Fast_GET_SIZE(per_text); t++) {
        PyObject *tuple = PySequence_Fast_GET_ITEM(per_text, t);
        if (!PyTuple_Check(tuple)) {
            PyErr_Format(PyExc_TypeError, "%s: per_text must be a list of tuples of words", kernel);
            return -1;
        }
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(tuple); j++)
            if (!PyUnicode_Check(PyTuple_GET_ITEM(tuple, j))) {
                PyErr_Format(PyExc_TypeError, "%s: words must be str", kernel);
                return -1;
            }
        *total += PyTuple_GET_SIZE(tuple);
        *longest = Py_MAX(*longest, PyTuple_GET_SIZE(tuple));
    }
    return 0;
}

/* ------------------------------------------------------------------------------ indexing words */

const char index_batch_doc[] = PyDoc_STR(
"index_batch(per_text, table, miss, vocab, known, terms, counts, distinct) -> postings\n--\n\n"
"The index terms of a batch of texts (per_text: a list of tuples of words), text by text: each\n"
"word's entry, term hash * 2 + expandable (a non-negative int below 2**64), comes from the word\n"
"table (see words.c; lexical._word_table), or from miss(word), which is then stored there (a word\n"
"that starts with a CJK character or is ASCII digits gets blake2b64(word) >> 1 << 1 without a\n"
"call: _text.index_word's entry for it, and most new words are such). An expandable word is the\n"
"word of its term in `vocab` unless one is there already; `known` (a word table) holds terms that\n"
"vocab is known to hold, and is not looked up in vocab again (each offered term is stored there).\n"
"Writes each text's distinct term hashes in order of first use to terms (int64) and how often each\n"
"occurs to counts (int32), text after text, and each text's number of distinct terms to distinct\n"
"(int64, one per text); returns how many terms it wrote (terms and counts need room for every\n"
"word). The batch is per_text as it is at the call: a miss that changes the list does not change\n"
"it. (_wordkernels.index_batch_python, whose caches are dicts.)");

/* A text's distinct terms, in order of first use, found through an open-addressing table of
 * their positions. */
typedef struct {
    uint64_t term;
    int expanded; /* an expandable word of this term has been offered to vocab */
} Seen;

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
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "index_batch: entries must be term hash * 2 + expandable, "
                                         "a non-negative int below 2**64");
        return -1;
    }
    return 0;
}

/* Offer word to vocab as its term's word unless the term has one. 0, or -1 with an exception set. */
static int offer(PyObject *vocab, uint64_t term, PyObject *word)
{
    PyObject *key = PyLong_FromUnsignedLongLong(term);
    if (!key)
        return -1;
    const int known = PyDict_Contains(vocab, key);
    const int bad = known < 0 || (!known && PyDict_SetItem(vocab, key, word) < 0);
    Py_DECREF(key);
    return bad ? -1 : 0;
}

PyObject *index_batch(PyObject *self, PyObject *args)
{
    enum { TABLE, KNOWN, TERMS, COUNTS, DISTINCT, N };
    static const Spec specs[N] = {{"table", 1, "LQ", WRITABLE}, {"known", 1, "LQ", WRITABLE},
                                  {"terms", 1, "lq", WRITABLE}, {"counts", 1, "i", WRITABLE},
                                  {"distinct", 1, "lq", WRITABLE}};
    PyObject *per_text, *miss, *vocab, *o[N];
    if (!PyArg_ParseTuple(args, "O!OOO!OOOO:index_batch", &PyList_Type, &per_text, &o[TABLE], &miss, &PyDict_Type,
                          &vocab, &o[KNOWN], &o[TERMS], &o[COUNTS], &o[DISTINCT]))
        return NULL;
    /* A copy of the list: miss and vocab's keys run Python code, which could change per_text while
     * its words are read and the scratch sized from it here is used (the copy keeps them alive). */
    PyObject *batch = PyList_AsTuple(per_text);
    if (!batch)
        return NULL;
    const Py_ssize_t texts = PyTuple_GET_SIZE(batch);
    Py_ssize_t total, longest;
    Arg a[N] = {0};
    Table words, known;
    if (count_words(batch, "index_batch", &total, &longest) < 0 || take_all(a, o, specs, N) < 0
        || table_of(&a[TABLE], &words) < 0 || table_of(&a[KNOWN], &known) < 0) {
        Py_DECREF(batch);
        return release(a, N, 0);
    }
    if (a[TABLE].view.buf == a[KNOWN].view.buf) {
        PyErr_SetString(PyExc_ValueError, "index_batch: known must be another word table than table");
        Py_DECREF(batch);
        return release(a, N, 0);
    }
    if (LEN(a[TERMS]) < total || LEN(a[COUNTS]) < total || LEN(a[DISTINCT]) != texts
        || a[TERMS].view.itemsize != 8 || a[DISTINCT].view.itemsize != 8) {
        PyErr_SetString(PyExc_ValueError, "index_batch: terms (int64) and counts (int32) need room for every word, "
                                          "distinct (int64) one item per text");
        Py_DECREF(batch);
        return release(a, N, 0);
    }
    uint64_t mask = 15;
    while ((Py_ssize_t)(mask + 1) < 2 * longest)
        mask = 2 * mask + 1;
    int32_t *table = PyMem_Malloc((mask + 1) * sizeof(int32_t));
    Seen *seen = PyMem_Malloc(Py_MAX(longest, 1) * sizeof(Seen));
    /* each text's word keys, computed two texts ahead (the slots prefetched), in a ring of three */
    const Py_ssize_t room = Py_MAX(longest, 1);
    Key *keys = PyMem_Malloc(3 * room * sizeof(Key));
#define KEYS(t) (keys + (t) % 3 * room)
    int64_t *terms = DATA(a[TERMS], int64_t), *distinct = DATA(a[DISTINCT], int64_t);
    int32_t *counts = DATA(a[COUNTS], int32_t);
    Py_ssize_t out = 0;
    int ok = table && seen && keys;
    if (!ok)
        PyErr_NoMemory();
    for (Py_ssize_t t = 0; ok && t < 2 && t < texts; t++)
        keys_ahead(&words, PyTuple_GET_ITEM(batch, t), KEYS(t));
    for (Py_ssize_t t = 0; ok && t < texts; t++) {
        if (t + 2 < texts)
            keys_ahead(&words, PyTuple_GET_ITEM(batch, t + 2), KEYS(t + 2));
        if (t + 1 < texts)
            known_ahead(&words, &known, KEYS(t + 1), PyTuple_GET_SIZE(PyTuple_GET_ITEM(batch, t + 1)));
        PyObject *tuple = PyTuple_GET_ITEM(batch, t);
        const Key *key_of = KEYS(t);
        const Py_ssize_t n = PyTuple_GET_SIZE(tuple), first = out;
        uint64_t m = 15;
        while ((Py_ssize_t)(m + 1) < 2 * n)
            m = 2 * m + 1;
        memset(table, 0xff, (m + 1) * sizeof(int32_t));
        for (Py_ssize_t i = 0; ok && i < n; i++) {
            PyObject *word = PyTuple_GET_ITEM(tuple, i);
            const Key key = key_of[i];
            const uint64_t *slot = find(&words, key);
            uint64_t packed = slot[2];
            if (!holds(slot, key)) {
                if (new_entry(word, miss, &packed) < 0) {
                    ok = 0;
                    break;
                }
                store(&words, key, packed);
            }
            const uint64_t term = packed >> 1;
            const Py_ssize_t at = seen_slot(table, m, seen, term);
            if (table[at] < 0) {
                table[at] = (int32_t)(out - first);
                seen[out - first] = (Seen){term, 0};
                terms[out] = (int64_t)term;
                counts[out++] = 0;
            }
            Seen *s = &seen[table[at]];
            counts[first + table[at]]++;
            if ((packed & 1) && !s->expanded) {  /* later expandable words of the term find it in vocab */
                s->expanded = 1;
                const Key mark = {term | 1ull << 63, 0};  /* (a term hash has 63 bits: never 0; no check) */
                if (!holds(find(&known, mark), mark)) {   /* a dict lookup costs a Python int and two cache misses */
                    ok = offer(vocab, term, word) == 0;
                    store(&known, mark, 1);
                }
            }
        }
        distinct[t] = out - first;
    }
#undef KEYS
    PyMem_Free(table);
    PyMem_Free(seen);
    PyMem_Free(keys);
    Py_DECREF(batch);
    release(a, N, 0);
    return ok ? PyLong_FromSsize_t(out) : NULL;
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
    for (uint64_t i = 0; i <= from.mask; i++) {
        const uint64_t *s = from.slots + SLOT * i;
        if (s[0])
            store(&to, (Key){s[0], s[1]}, s[2]);
    }
    return release(a, 2, 1);
}

/* ------------------------------------------------------------------------------ embedder's words */

const char word_ids_doc[] = PyDoc_STR(
"word_ids(per_text, table, first_new, ids, distinct) -> (count, new_words)\n--\n\n"
"The HashEmbedder's word lookup (_wordkernels.word_ids_python, whose cache is a dict): per_text is a\n"
"list of tuples of words and table a word table of their entries (ints). A word not in table is a\n"
"new word: it is listed in new_words (each once, in the order first met) and stored in table with\n"
"the entry first_new + its place in that list (the caller stores those entries' features). Fills\n"
"ids (int64, one per word in order, as long as all the tuples together) with each word's index\n"
"into distinct, and distinct (int64, as long) with the entries in the order the batch first uses\n"
"them; count is how many. ValueError (nothing stored) unless the table has room for every word.");

/* Entry -> its index among the batch's distinct entries: open addressing, kept at most half full
 * and doubled as it fills. A batch has several times fewer distinct words than words: a table sized
 * for every word (2 MB for a thousand memories) missed the cache on most lookups. */
typedef struct {
    int64_t *pairs; /* entry, local index; entry -1: free */
    size_t mask;
} Local;

static size_t local_home(int64_t entry, size_t mask) { return (size_t)((uint64_t)entry * 0x9E3779B97F4A7C15ull >> 17) & mask; }

static int local_init(Local *l, size_t cap)
{
    l->pairs = PyMem_Malloc(cap * 2 * sizeof(int64_t));
    l->mask = cap - 1;
    if (!l->pairs) {
        PyErr_NoMemory();
        return -1;
    }
    memset(l->pairs, 0xff, cap * 2 * sizeof(int64_t));
    return 0;
}

static int local_grow(Local *l)
{
    Local old = *l;
    if (local_init(l, 2 * (old.mask + 1)) < 0) {
        *l = old;
        return -1;
    }
    for (size_t i = 0; i <= old.mask; i++)
        if (old.pairs[2 * i] >= 0) {
            size_t at = local_home(old.pairs[2 * i], l->mask);
            while (l->pairs[2 * at] >= 0)
                at = (at + 1) & l->mask;
            memcpy(l->pairs + 2 * at, old.pairs + 2 * i, 2 * sizeof(int64_t));
        }
    PyMem_Free(old.pairs);
    return 0;
}

/* The local index of entry (the next one, *next, if it is new), or -1 with MemoryError. */
static int64_t local_index(Local *l, int64_t entry, int64_t *next)
{
    size_t at = local_home(entry, l->mask);
    while (l->pairs[2 * at] >= 0 && l->pairs[2 * at] != entry)
        at = (at + 1) & l->mask;
    if (l->pairs[2 * at] < 0) {
        if ((size_t)(*next + 1) * 2 > l->mask + 1)
            return local_grow(l) < 0 ? -1 : local_index(l, entry, next);
        l->pairs[2 * at] = entry;
        l->pairs[2 * at + 1] = (*next)++;
    }
    return l->pairs[2 * at + 1];
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
    Py_ssize_t total, longest;
    if (count_words(per_text, "word_ids", &total, &longest) < 0)
        return NULL;
    if (take_all(a, o, specs, N) < 0 || table_of(&a[TABLE], &words) < 0)
        return release(a, N, 0);
    if (LEN(a[IDS]) != total || LEN(a[DISTINCT]) != total || a[IDS].view.itemsize != 8
        || a[DISTINCT].view.itemsize != 8 || first_new < 0
        || *words.count + (uint64_t)total > (words.mask + 1) / 4 * 3) {
        PyErr_SetString(PyExc_ValueError, "word_ids: ids and distinct must be int64, one per word, first_new >= 0, "
                                          "and the table must have room for every word (3/4 full at most)");
        return release(a, N, 0);
    }
    Local local = {NULL, 0};
    const Py_ssize_t room = Py_MAX(longest, 1);
    Key *keys = PyMem_Malloc(2 * room * sizeof(Key));     /* two texts' word keys */
    PyObject *missing = PyList_New(0), *result = NULL;
    if (!keys || !missing || local_init(&local, 1024) < 0) {
        if (!keys)
            PyErr_NoMemory();
        goto done;
    }
    int64_t *ids = DATA(a[IDS], int64_t), *distinct = DATA(a[DISTINCT], int64_t), next = 0;
    Py_ssize_t k = 0;
    const Py_ssize_t texts = PyList_GET_SIZE(per_text);
    if (texts)
        keys_ahead(&words, PyList_GET_ITEM(per_text, 0), keys);
    for (Py_ssize_t t = 0; t < texts; t++) {
        PyObject *tuple = PyList_GET_ITEM(per_text, t);
        const Key *key_of = keys + t % 2 * room;
        if (t + 1 < texts)   /* the next text's keys and slots while this one's are looked up */
            keys_ahead(&words, PyList_GET_ITEM(per_text, t + 1), keys + (t + 1) % 2 * room);
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(tuple); j++, k++) {
            PyObject *w = PyTuple_GET_ITEM(tuple, j);
            const Key key = key_of[j];
            uint64_t *slot = find(&words, key);
            if (!holds(slot, key)) {             /* new: stored at once, so that its next use finds it */
                if (PyList_Append(missing, w) < 0)
                    goto done;
                slot[0] = key.key;
                slot[1] = key.check;
                slot[2] = (uint64_t)(first_new + PyList_GET_SIZE(missing) - 1);
                ++*words.count;
            }
            const int64_t before = next, at = local_index(&local, (int64_t)slot[2], &next);
            if (at < 0)
                goto done;
            if (next > before)
                distinct[at] = (int64_t)slot[2];
            ids[k] = at;
        }
    }
    result = Py_BuildValue("(LO)", (long long)next, missing);
done:
    Py_XDECREF(missing);
    PyMem_Free(local.pairs);
    PyMem_Free(keys);
    release(a, N, 0);
    return result;
}
