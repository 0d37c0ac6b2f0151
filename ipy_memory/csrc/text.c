/* A text's words (_text._words) and ASCII text's answer cues (_text.answer_cues: what its three
 * regexes find), in one pass each. */
#include "speedups.h"

/* The words of the number and time patterns (_text.cue_patterns: whole tokens, any case), and the
 * time pattern's month prefixes (a token that starts with one and goes on in letters). tests/test_text_block.py checks every word
 * of those patterns, in several spellings, against this scan. */
static const char *const NUMBER_WORDS[] = {"one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                                           "ten", "eleven", "twelve", "twenty", "thirty", "hundred", "thousand",
                                           "dozen", "several", "few", "couple", NULL};
static const char *const TIME_WORDS[] = {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday",
                                         "sunday", "yesterday", "today", "tomorrow", "tonight", "week", "weekend",
                                         "month", "year", "ago", "last", "next", "since", "morning", "evening",
                                         "summer", "winter", "spring", "autumn", "fall", NULL};
static const char *const MONTHS[] = {"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov",
                                     "dec", NULL};
#define LONGEST_WORD 9 /* "wednesday", "yesterday" */

enum { NUMBER = 1, TIME = 2, NAME = 4 };

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static int is_upper(unsigned char c) { return c >= 'A' && c <= 'Z'; }
static int is_lower(unsigned char c) { return c >= 'a' && c <= 'z'; }
static int is_letter(unsigned char c) { return is_upper(c) || is_lower(c); }
static int is_word(unsigned char c) { return is_letter(c) || is_digit(c) || c == '_'; }            /* re's \w */
static int is_space(unsigned char c) { return c == ' ' || (c >= 9 && c <= 13) || (c >= 28 && c <= 31); } /* \s */

static int listed(const char *word, size_t n, const char *const *list)
{
    for (; *list; list++)       /* the first letter rules out most entries before any strlen */
        if ((*list)[0] == word[0] && strlen(*list) == n && memcmp(*list, word, n) == 0)
            return 1;
    return 0;
}

/* The cues of the token s[0..n) (a maximal run of word characters) at offset `at` of the text. */
static int token_cues(const unsigned char *text, Py_ssize_t at, Py_ssize_t n)
{
    const unsigned char *s = text + at;
    Py_ssize_t digits = 0, letters = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        digits += is_digit(s[i]);
        letters += is_letter(s[i]);
    }
    int cues = 0;
    if (digits == n) {
        cues |= NUMBER;
        if (n == 4 && ((s[0] == '1' && s[1] == '9') || (s[0] == '2' && s[1] == '0')))
            cues |= TIME;
    }
    if (letters == n) {
        char low[LONGEST_WORD];
        const Py_ssize_t m = n < LONGEST_WORD ? n : LONGEST_WORD;
        for (Py_ssize_t i = 0; i < m; i++)
            low[i] = (char)(s[i] | 0x20);
        if (n <= LONGEST_WORD) {
            cues |= listed(low, (size_t)n, NUMBER_WORDS) ? NUMBER : 0;
            cues |= listed(low, (size_t)n, TIME_WORDS) ? TIME : 0;
        }
        if (n >= 3 && listed(low, 3, MONTHS))
            cues |= TIME;
    }
    /* _NAME: a capital, two lower-case letters, not the text's first character, not after ". " */
    if (at > 0 && n >= 3 && is_upper(s[0]) && is_lower(s[1]) && is_lower(s[2])
        && !(at >= 2 && strchr(".!?", text[at - 2]) && text[at - 2] && is_space(text[at - 1])))
        cues |= NAME;
    return cues;
}

const char ascii_cues_doc[] = PyDoc_STR(
"ascii_cues(text) -> int | None\n--\n\n"
"_text.answer_cues(text) for ASCII text (bit 1 a number, 2 a time, 4 a proper name: what the regexes\n"
"of _text.cue_patterns find), None for other text (the regexes then run).");

PyObject *ascii_cues(PyObject *self, PyObject *arg)
{
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "ascii_cues: text must be a str");
        return NULL;
    }
    if (!PyUnicode_IS_ASCII(arg))
        Py_RETURN_NONE;
    const unsigned char *s = PyUnicode_1BYTE_DATA(arg);
    const Py_ssize_t n = PyUnicode_GET_LENGTH(arg);
    int cues = 0;
    for (Py_ssize_t i = 1; i + 2 < n && !(cues & TIME); i++)       /* "\d:\d\d", anywhere */
        if (s[i] == ':' && is_digit(s[i - 1]) && is_digit(s[i + 1]) && is_digit(s[i + 2]))
            cues |= TIME;
    for (Py_ssize_t i = 0; i < n && cues != (NUMBER | TIME | NAME);) {
        if (!is_word(s[i])) {
            i++;
            continue;
        }
        Py_ssize_t start = i;
        while (i < n && is_word(s[i]))
            i++;
        cues |= token_cues(s, start, i - start);
    }
    return PyLong_FromLong(cues);
}

/* ------------------------------------------------------------------------------ words */

const char text_words_doc[] = PyDoc_STR(
"text_words(text, stop_words, nfkc=True, after=()) -> tuple\n--\n\n"
"_text._words_python(text): the text NFKC-normalised and lower-cased (str.lower), its runs of CJK characters (kana,\n"
"CJK ideographs, hangul) as character bigrams (a lone character stays itself) and its runs of other\n"
"letters and digits (re's \\w without '_'), in order, without the tokens in the set stop_words and\n"
"without single characters that are not digits. nfkc=False: not normalised (the hashing embedder's\n"
"words, whose vectors a store keeps under its name). The tuple `after` follows the words (a text's\n"
"first line's words and then those of the rest, already known).");

/* Append word (a new reference, stolen) to out unless it is in stop. 0, or -1 with an exception. */
static int keep(PyObject *out, PyObject *stop, PyObject *word, int check)
{
    if (!word)
        return -1;
    const int skip = check ? PySet_Contains(stop, word) : 0;
    const int bad = skip < 0 || (!skip && PyList_Append(out, word) < 0);
    Py_DECREF(word);
    return bad ? -1 : 0;
}

/* The stop words as packed ASCII (up to 8 bytes, little-endian, zero-padded), for ASCII tokens to
 * be tested before a str is made of them (most text's commonest tokens are stop words: no str, no
 * hash for those). Built for one set at a time (the last one asked about, held); `usable` is 0 when
 * the set holds anything but exact str (a subclass's __eq__ could answer otherwise): then every token
 * goes through PySet_Contains, as it does when it is longer than 8 and the set has such a word. */
#define PACKED_MAX 8
static struct {
    PyObject *set;
    uint64_t slots[512];     /* 0: free (no token packs to 0) */
    int usable, has_long;
} stops;

static uint64_t packed_slot(uint64_t key) { return (key * 0x9E3779B97F4A7C15ull) >> 55; /* 9 bits */ }

/* key's bytes (ASCII, at most PACKED_MAX) packed little-endian, as ascii_text_words packs a token. */
static uint64_t packed_of(const unsigned char *c, Py_ssize_t n)
{
    uint64_t packed = 0;
    for (Py_ssize_t j = 0; j < n; j++)
        packed |= (uint64_t)c[j] << (8 * j);
    return packed;
}

/* stops made for the frozenset `stop`: 0, or -1 with an exception set. */
static int stops_for(PyObject *stop)
{
    if (stops.set == stop)
        return 0;
    PyObject *it = PyObject_GetIter(stop), *key;
    if (!it)
        return -1;
    memset(stops.slots, 0, sizeof stops.slots);
    stops.usable = PySet_GET_SIZE(stop) <= 256;
    stops.has_long = 0;
    while (stops.usable && (key = PyIter_Next(it))) {
        const Py_ssize_t n = PyUnicode_CheckExact(key) ? PyUnicode_GET_LENGTH(key) : -1;
        if (n < 0)
            stops.usable = 0;
        else if (n > PACKED_MAX && PyUnicode_IS_ASCII(key))
            stops.has_long = 1;
        else if (n > 0 && PyUnicode_IS_ASCII(key) && !memchr(PyUnicode_1BYTE_DATA(key), 0, (size_t)n)) {
            const uint64_t packed = packed_of(PyUnicode_1BYTE_DATA(key), n);     /* (else: no ASCII token is it) */
            uint64_t i = packed_slot(packed);
            while (stops.slots[i] && stops.slots[i] != packed)
                i = (i + 1) & 511;
            stops.slots[i] = packed;
        }
        Py_DECREF(key);
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) {
        stops.usable = 0;
        return -1;
    }
    Py_INCREF(stop);
    Py_XSETREF(stops.set, stop);
    return 0;
}

static int packed_stop(uint64_t packed)
{
    for (uint64_t i = packed_slot(packed);; i = (i + 1) & 511) {
        if (stops.slots[i] == packed)
            return 1;
        if (!stops.slots[i])
            return 0;
    }
}

/* ASCII text: runs of letters and digits, lower-cased as they are copied (no str.lower). */
static int ascii_text_words(PyObject *text, PyObject *stop, PyObject *out)
{
    const unsigned char *s = PyUnicode_1BYTE_DATA(text);
    const Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (stops_for(stop) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n;) {
        if (!is_letter(s[i]) && !is_digit(s[i])) {
            i++;
            continue;
        }
        const Py_ssize_t start = i;
        while (i < n && (is_letter(s[i]) || is_digit(s[i])))
            i++;
        const Py_ssize_t len = i - start;
        if (len == 1 && !is_digit(s[start]))
            continue;
        int check = 1;
        if (stops.usable) {
            if (len <= PACKED_MAX) {
                unsigned char low[PACKED_MAX];
                for (Py_ssize_t j = 0; j < len; j++)
                    low[j] = is_upper(s[start + j]) ? (unsigned char)(s[start + j] | 0x20) : s[start + j];
                if (packed_stop(packed_of(low, len)))
                    continue;
                check = 0;
            } else
                check = stops.has_long;
        }
        PyObject *word = PyUnicode_New(len, 127);
        if (!word)
            return -1;
        Py_UCS1 *w = PyUnicode_1BYTE_DATA(word);
        for (Py_ssize_t j = start; j < i; j++)
            w[j - start] = is_upper(s[j]) ? (Py_UCS1)(s[j] | 0x20) : s[j];
        if (keep(out, stop, word, check) < 0)
            return -1;
    }
    return 0;
}

/* re's \w is Py_UNICODE_ISALNUM or '_' (sre's SRE_UNI_IS_WORD); the pattern excludes '_' and CJK */
static int is_word_char(Py_UCS4 c) { return c != '_' && !is_cjk_char(c) && Py_UNICODE_ISALNUM(c); }

/* NFKC's own image of the characters that most often keep a text from being NFKC already: the
 * fullwidth forms of ASCII (Chinese punctuation ，！？：；（）, fullwidth letters and digits) and the
 * spaces it reads as ' '. */
static Py_UCS4 ascii_image(Py_UCS4 c)
{
    if (c >= 0xFF01 && c <= 0xFF5E)
        return c - 0xFEE0;
    if (c == 0xA0 || (c >= 0x2000 && c <= 0x200A) || c == 0x202F || c == 0x205F || c == 0x3000)
        return ' ';
    return c;
}

/* text with ascii_image applied (a new reference), or NULL with an exception set: what NFKC makes
 * of it is what it makes of text (each such character decomposes to that image), and its quick
 * check then passes over most Chinese text, whose full normalisation cost 3x the words' own pass. */
static PyObject *ascii_images(PyObject *text)
{
    const int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    const Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    Py_UCS4 widest = 0;
    int changed = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Py_UCS4 c = PyUnicode_READ(kind, data, i), image = ascii_image(c);
        changed |= image != c;
        widest = Py_MAX(widest, image);
    }
    if (!changed) {
        Py_INCREF(text);
        return text;
    }
    PyObject *out = PyUnicode_New(n, widest);          /* at the width of its widest character, as str's own */
    if (!out)
        return NULL;
    const int okind = PyUnicode_KIND(out);
    void *odata = PyUnicode_DATA(out);
    for (Py_ssize_t i = 0; i < n; i++)
        PyUnicode_WRITE(okind, odata, i, ascii_image(PyUnicode_READ(kind, data, i)));
    return out;
}

/* unicodedata.normalize("NFKC", text), a new reference (text itself when it is NFKC already: the
 * quick check finds that in one pass), or NULL with an exception set. */
static PyObject *nfkc(PyObject *text)
{
    static PyObject *normalize, *form;
    if (!normalize) {
        PyObject *module = PyImport_ImportModule("unicodedata");
        PyObject *fn = module ? PyObject_GetAttrString(module, "normalize") : NULL;
        PyObject *name = fn ? PyUnicode_InternFromString("NFKC") : NULL;
        Py_XDECREF(module);
        if (!name) {
            Py_XDECREF(fn);
            return NULL;
        }
        if (normalize) {           /* another thread got here first while the import let go of the GIL */
            Py_DECREF(fn);
            Py_DECREF(name);
        } else {
            normalize = fn;
            form = name;
        }
    }
    PyObject *mapped = ascii_images(text);
    PyObject *out = mapped ? PyObject_CallFunctionObjArgs(normalize, form, mapped, NULL) : NULL;
    Py_XDECREF(mapped);
    return out;
}

const char nfkc_doc[] = PyDoc_STR(
"nfkc(text) -> str\n--\n\n"
"unicodedata.normalize('NFKC', text) (_text.normalize's): an ASCII text as it is, another with the\n"
"fullwidth forms of ASCII and the spaces NFKC reads as ' ' replaced by those first, which NFKC's own\n"
"quick check then finds normalised in most Chinese text (their full normalisation: ~10 us a memory).");

PyObject *nfkc_text(PyObject *self, PyObject *text)
{
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "nfkc: text must be a str, not %.100s", Py_TYPE(text)->tp_name);
        return NULL;
    }
    return PyUnicode_IS_ASCII(text) ? Py_NewRef(text) : nfkc(text);
}

/* Other text: NFKC, then str.lower() (either may change the length: "İ" becomes "i" + a combining
 * dot), then what _text._cjk_patterns()[0] finds in it, token by token as _words_python treats them. */
static int unicode_text_words(PyObject *text, PyObject *stop, PyObject *out, int normalize)
{
    PyObject *normal = normalize ? nfkc(text) : Py_NewRef(text);
    PyObject *low = normal ? PyObject_CallMethod(normal, "lower", NULL) : NULL;
    Py_XDECREF(normal);
    /* a str subclass's lower() may return anything: only a str is read as one (the twin fails too) */
    if (low && !PyUnicode_Check(low)) {
        PyErr_Format(PyExc_TypeError, "text_words: lower() returned %.100s, not a str", Py_TYPE(low)->tp_name);
        Py_CLEAR(low);
    }
    if (!low)
        return -1;
    const int kind = PyUnicode_KIND(low);
    const void *data = PyUnicode_DATA(low);
    const Py_ssize_t n = PyUnicode_GET_LENGTH(low);
    int ok = 1;
    for (Py_ssize_t i = 0; ok && i < n;) {
        const Py_UCS4 c = PyUnicode_READ(kind, data, i);
        const int cjk = is_cjk_char(c);
        if (!cjk && !is_word_char(c)) {
            i++;
            continue;
        }
        const Py_ssize_t start = i;
        int digits = 1;
        while (i < n) {
            const Py_UCS4 d = PyUnicode_READ(kind, data, i);
            if (cjk ? !is_cjk_char(d) : !is_word_char(d))
                break;
            digits = digits && Py_UNICODE_ISDIGIT(d);
            i++;
        }
        PyObject *token = PyUnicode_Substring(low, start, i);
        int stopped = token ? PySet_Contains(stop, token) : -1;
        if (stopped < 0) {
            Py_XDECREF(token);
            ok = 0;
        } else if (stopped) {
            Py_DECREF(token);
        } else if (cjk && i - start > 1) {     /* overlapping bigrams */
            Py_DECREF(token);
            for (Py_ssize_t j = start; ok && j + 1 < i; j++)
                ok = keep(out, stop, PyUnicode_Substring(low, j, j + 2), 0) == 0;
        } else if (cjk || i - start > 1 || digits) {
            ok = keep(out, stop, token, 0) == 0;
        } else {
            Py_DECREF(token);
        }
    }
    Py_DECREF(low);
    return ok ? 0 : -1;
}

PyObject *text_words(PyObject *self, PyObject *args)
{
    PyObject *text, *stop, *after = NULL;
    int normalize = 1;
    if (!PyArg_ParseTuple(args, "UO!|pO!:text_words", &text, &PyFrozenSet_Type, &stop, &normalize, &PyTuple_Type, &after))
        return NULL;
    PyObject *out = PyList_New(0), *result = NULL;
    if (out && (PyUnicode_IS_ASCII(text) ? ascii_text_words(text, stop, out)
                                         : unicode_text_words(text, stop, out, normalize)) == 0
        && (!after || PyList_SetSlice(out, PyList_GET_SIZE(out), PyList_GET_SIZE(out), after) == 0))
        result = PyList_AsTuple(out);
    /* A tuple of str can be in no reference cycle; untracked now, the cyclic GC never visits its
     * words (CPython would untrack it too, but only after a collection had read every word: the
     * caches of recent texts' words kept a few thousand such tuples young, 2 ms a collection). */
    if (result && PyObject_GC_IsTracked(result))
        PyObject_GC_UnTrack(result);
    Py_XDECREF(out);
    return result;
}

/* ------------------------------------------------------------------------------ whitespace */

const char squeeze_spaces_doc[] = PyDoc_STR(
"squeeze_spaces(text) -> str\n--\n\n"
"\" \".join(text.split()): each run of whitespace (str.isspace) one space, none at either end, in one\n"
"pass instead of a list of every word (_text.squeeze_spaces_python).");

/* ASCII text: whitespace is \t-\r, \x1c-\x1f and the space (is_space); the result is ASCII too. */
static PyObject *ascii_squeeze(PyObject *text)
{
    const unsigned char *s = PyUnicode_1BYTE_DATA(text);
    const Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    Py_ssize_t len = 0, i = 0;
    int changed = 0, gap = 0;
    for (; i < n; i++) {
        if (is_space(s[i])) {
            changed |= gap || len == 0 || s[i] != ' ';
            gap = 1;
        } else {
            len += 1 + (gap && len);
            gap = 0;
        }
    }
    if (!(changed | gap)) {
        Py_INCREF(text);
        return text;
    }
    PyObject *out = PyUnicode_New(len, 127);
    if (!out)
        return NULL;
    Py_UCS1 *w = PyUnicode_1BYTE_DATA(out);
    Py_ssize_t k = 0;
    gap = 0;
    for (i = 0; i < n; i++) {
        if (is_space(s[i])) {
            gap = 1;
            continue;
        }
        if (gap && k)
            w[k++] = ' ';
        gap = 0;
        w[k++] = s[i];
    }
    return out;
}

PyObject *squeeze_spaces(PyObject *self, PyObject *text)
{
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "squeeze_spaces: text must be a str");
        return NULL;
    }
    if (PyUnicode_IS_ASCII(text))
        return ascii_squeeze(text);
    const int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    const Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    /* the result's length and widest character (a str is stored at the width of its widest one) */
    Py_ssize_t len = 0;
    Py_UCS4 widest = 0;
    int gap = 0, changed = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (Py_UNICODE_ISSPACE(c)) {
            changed |= gap || len == 0 || c != ' ';
            gap = 1;
            continue;
        }
        if (gap && len) {
            len++;
            widest = Py_MAX(widest, ' ');
        }
        gap = 0;
        len++;
        widest = Py_MAX(widest, c);
    }
    changed |= gap;
    if (!changed) {
        Py_INCREF(text);
        return text;
    }
    PyObject *out = PyUnicode_New(len, widest);
    if (!out)
        return NULL;
    const int okind = PyUnicode_KIND(out);
    void *odata = PyUnicode_DATA(out);
    Py_ssize_t k = 0;
    gap = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (Py_UNICODE_ISSPACE(c)) {
            gap = 1;
            continue;
        }
        if (gap && k)
            PyUnicode_WRITE(okind, odata, k++, ' ');
        gap = 0;
        PyUnicode_WRITE(okind, odata, k++, c);
    }
    return out;
}
