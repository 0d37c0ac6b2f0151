/* The write path's rows as JSON (_writer.rows_json: one INSERT ... SELECT FROM json_each(?) a
 * table). json.JSONEncoder's C encoder makes a str of every value and joins them, behind a few
 * Python calls per encode; this writes a batch's rows in one pass into one UTF-8 buffer. */
#include "speedups.h"

typedef struct {
    char *buf;
    size_t len, cap;
    /* the last floats written and their text: a batch's rows repeat a few (importance, expiry), and
     * repr's shortest digits cost ~4,000 instructions each */
    double floats[4];
    char texts[4][32];
    size_t lens[4], next;
} Out;

static int room(Out *o, size_t more)
{
    if (o->len + more <= o->cap)
        return 0;
    size_t cap = o->cap ? o->cap : 1 << 14;
    while (cap < o->len + more)
        cap *= 2;
    char *grown = PyMem_Realloc(o->buf, cap);
    if (!grown) {
        PyErr_NoMemory();
        return -1;
    }
    o->buf = grown;
    o->cap = cap;
    return 0;
}

static int put(Out *o, const char *s, size_t n)
{
    if (room(o, n) < 0)
        return -1;
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    return 0;
}

/* A str as json.dumps(ensure_ascii=False) writes it: '"' and '\' escaped, control characters as
 * \n, \r, \t, \b, \f or \u00XX, everything else as it is (in UTF-8). */
static int put_str(Out *o, PyObject *s)
{
    PyObject *utf8 = NULL;
    const unsigned char *u;
    Py_ssize_t n;
    if (PyUnicode_IS_ASCII(s)) {
        u = PyUnicode_1BYTE_DATA(s);
        n = PyUnicode_GET_LENGTH(s);
    } else {
        if (!(utf8 = PyUnicode_AsUTF8String(s)))     /* (a lone surrogate: UnicodeEncodeError) */
            return -1;
        u = (const unsigned char *)PyBytes_AS_STRING(utf8);
        n = PyBytes_GET_SIZE(utf8);
    }
    static const char hex[] = "0123456789abcdef";
    const int ok = room(o, 6 * (size_t)n + 2) == 0;      /* every byte escaped as \u00XX at worst */
    if (ok) {
        char *w = o->buf + o->len;
        *w++ = '"';
        for (Py_ssize_t i = 0; i < n; i++) {
            const unsigned char c = u[i];
            if (c >= 0x20 && c != '"' && c != '\\') {
                *w++ = (char)c;
                continue;
            }
            *w++ = '\\';
            switch (c) {
            case '"': *w++ = '"'; break;
            case '\\': *w++ = '\\'; break;
            case '\n': *w++ = 'n'; break;
            case '\r': *w++ = 'r'; break;
            case '\t': *w++ = 't'; break;
            case '\b': *w++ = 'b'; break;
            case '\f': *w++ = 'f'; break;
            default:
                memcpy(w, "u00", 3);
                w[3] = hex[c >> 4];
                w[4] = hex[c & 15];
                w += 5;
            }
        }
        *w++ = '"';
        o->len = (size_t)(w - o->buf);
    }
    Py_XDECREF(utf8);
    return ok ? 0 : -1;
}

/* None, a bool, an int, a float (as repr writes it; NaN and infinities refused, as allow_nan=False
 * does) or a str; TypeError for anything else. */
static int put_value(Out *o, PyObject *v)
{
    if (v == Py_None)
        return put(o, "null", 4);
    if (v == Py_True)
        return put(o, "true", 4);
    if (v == Py_False)
        return put(o, "false", 5);
    if (PyUnicode_CheckExact(v))
        return put_str(o, v);
    if (PyLong_CheckExact(v)) {
        int overflow;
        const long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (x == -1 && PyErr_Occurred())
            return -1;
        if (!overflow) {           /* (as "%lld" writes it, without snprintf's ~1,000 instructions) */
            char digits[24], *d = digits + sizeof digits;
            unsigned long long u = x < 0 ? 0ull - (unsigned long long)x : (unsigned long long)x;
            do
                *--d = (char)('0' + u % 10);
            while (u /= 10);
            if (x < 0)
                *--d = '-';
            return put(o, d, (size_t)(digits + sizeof digits - d));
        }
        PyObject *text = PyObject_Str(v);          /* beyond 64 bits: int's own digits */
        const int r = text ? put(o, PyUnicode_AsUTF8(text), (size_t)PyUnicode_GET_LENGTH(text)) : -1;
        Py_XDECREF(text);
        return r;
    }
    if (PyFloat_CheckExact(v)) {
        const double x = PyFloat_AS_DOUBLE(v);
        if (!isfinite(x)) {
            PyErr_SetString(PyExc_ValueError, "Out of range float values are not JSON compliant");
            return -1;
        }
        for (int k = 0; k < 4; k++)
            if (o->lens[k] && memcmp(&x, &o->floats[k], sizeof x) == 0)      /* (bit for bit: -0.0 is not 0.0) */
                return put(o, o->texts[k], o->lens[k]);
        char *text = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
        const size_t n = text ? strlen(text) : 0;
        const int r = text ? put(o, text, n) : -1;
        if (text && n < sizeof o->texts[0]) {
            const size_t k = o->next++ % 4;
            memcpy(o->texts[k], text, n);
            o->floats[k] = x;
            o->lens[k] = n;
        }
        PyMem_Free(text);
        return r;
    }
    PyErr_Format(PyExc_TypeError, "rows_json: a %.100s is not a plain JSON scalar", Py_TYPE(v)->tp_name);
    return -1;
}

const char rows_json_doc[] = PyDoc_STR(
"rows_json(rows) -> str\n--\n\n"
"JSON of a list whose items are rows (tuples or lists) of None, bool, int, float and str, or such\n"
"values themselves: what json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode(rows) means,\n"
"written without spaces. TypeError for any other value (a subclass included), ValueError for NaN or\n"
"an infinity, UnicodeEncodeError for a lone surrogate.");

/* The JSON of rows in o (UTF-8): 0, or -1 with an exception set (o's buffer is the caller's to free). */
static int write_rows(PyObject *rows, Out *o)
{
    if (!PyList_Check(rows)) {
        PyErr_SetString(PyExc_TypeError, "rows_json: rows must be a list");
        return -1;
    }
    int ok = put(o, "[", 1) == 0;
    for (Py_ssize_t i = 0; ok && i < PyList_GET_SIZE(rows); i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        ok = !i || put(o, ",", 1) == 0;
        if (ok && (PyTuple_CheckExact(row) || PyList_CheckExact(row))) {
            PyObject **items = PySequence_Fast_ITEMS(row);
            const Py_ssize_t n = PySequence_Fast_GET_SIZE(row);
            ok = put(o, "[", 1) == 0;
            for (Py_ssize_t j = 0; ok && j < n; j++)
                ok = (!j || put(o, ",", 1) == 0) && put_value(o, items[j]) == 0;
            ok = ok && put(o, "]", 1) == 0;
        } else if (ok)
            ok = put_value(o, row) == 0;
    }
    return ok && put(o, "]", 1) == 0 ? 0 : -1;
}

PyObject *rows_json(PyObject *self, PyObject *rows)
{
    Out o = {0};
    PyObject *result = write_rows(rows, &o) == 0 ? PyUnicode_DecodeUTF8(o.buf, (Py_ssize_t)o.len, "strict") : NULL;
    PyMem_Free(o.buf);
    return result;
}

const char rows_json_utf8_doc[] = PyDoc_STR(
"rows_json_utf8(rows) -> bytes\n--\n\n"
"rows_json(rows).encode() (the same errors), made without the str: for SQL that binds it as a blob\n"
"and reads it as text (CAST(? AS TEXT)), which a str would be encoded to again.");

PyObject *rows_json_utf8(PyObject *self, PyObject *rows)
{
    Out o = {0};
    PyObject *result = write_rows(rows, &o) == 0 ? PyBytes_FromStringAndSize(o.buf, (Py_ssize_t)o.len) : NULL;
    PyMem_Free(o.buf);
    return result;
}
