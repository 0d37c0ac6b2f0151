/* Optional compiled kernels for ipy_memory's hottest loops.
 *
 * Every function here has a numpy twin in _kernels.py that computes the same thing; the package
 * works without this extension (a build without a C compiler skips it), and the tests run both.
 * Arguments arrive through the buffer protocol (numpy arrays, no numpy headers needed to build),
 * are checked here (a wrong shape raises, it never reads out of bounds), and the loops run with
 * the GIL released, so two threads can scan two parts of one query at once.
 *
 * This file holds the argument helpers (speedups.h) and the module; the kernels are in scan.c
 * (the column scan, the exact float16 scan, float16 conversion), columns.c (building the int8
 * columns), lexical.c (BM25 loops), words.c (word tables, indexing words), postings.c (postings
 * runs), structure.c (neighbours), text.c (words and answer cues), embed.c (the hashing embedder),
 * blake2b.c (its feature and the index's term hashes) and crc.c (snapshot checksums).
 */
#include "speedups.h"

/* Acquire `obj` as `spec` says, its last axis contiguous. Returns 0, or -1 with TypeError /
 * ValueError set. */
static int take(Arg *arg, PyObject *obj, const Spec *spec)
{
    if (obj == Py_None && (spec->flags & NONE_OK))
        return 0;
    Py_buffer *view = &arg->view;
    if (PyObject_GetBuffer(obj, view, PyBUF_STRIDES | PyBUF_FORMAT | (spec->flags & WRITABLE ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    arg->held = 1;
    const char *fmt = view->format ? view->format : "B";
    if (*fmt == '=' || *fmt == '<' || *fmt == '@')
        fmt++;
    if (view->ndim != spec->ndim || strlen(fmt) != 1 || !strchr(spec->formats, *fmt)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a %d-d array of format '%s', got %d-d '%s'", spec->name,
                     spec->ndim, spec->formats, view->ndim, view->format ? view->format : "B");
        return -1;
    }
    if (view->strides[view->ndim - 1] != view->itemsize || (view->ndim == 2 && view->strides[0] % view->itemsize)) {
        PyErr_Format(PyExc_ValueError, "%s: its last axis must be contiguous", spec->name);
        return -1;
    }
    return 0;
}

int take_all(Arg *args, PyObject *const *objs, const Spec *specs, int n)
{
    for (int i = 0; i < n; i++)
        args[i].held = 0;
    for (int i = 0; i < n; i++)
        if (take(&args[i], objs[i], &specs[i]) < 0)
            return -1;
    return 0;
}

/* Release every held argument; return None when `ok`, else NULL (the error is set). */
PyObject *release(Arg *args, int n, int ok)
{
    for (int i = 0; i < n; i++)
        if (args[i].held)
            PyBuffer_Release(&args[i].view);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

/* release(), after a loop that skipped `bad` indices out of range instead of reading them: then
 * IndexError naming the kernel and `what` was out of range. */
PyObject *release_checked(Arg *args, int n, Py_ssize_t bad, const char *kernel, const char *what)
{
    if (bad)
        PyErr_Format(PyExc_IndexError, "%s: %zd %s", kernel, bad, what);
    return release(args, n, !bad);
}

/* ------------------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"column_scores", column_scores, METH_VARARGS, column_scores_doc},
    {"half_dots", half_dots, METH_VARARGS, half_dots_doc},
    {"quantize_rows", quantize_rows, METH_VARARGS, quantize_rows_doc},
    {"half_dots_crc", half_dots_crc, METH_VARARGS, half_dots_crc_doc},
    {"bm25_add", bm25_add, METH_VARARGS, bm25_add_doc},
    {"context_add", context_add, METH_VARARGS, context_add_doc},
    {"priors", priors, METH_VARARGS, priors_doc},
    {"add_runs", add_runs, METH_VARARGS, add_runs_doc},
    {"neighbours", neighbours, METH_VARARGS, neighbours_doc},
    {"reply_add", reply_add, METH_VARARGS, reply_add_doc},
    {"nonzero", nonzero, METH_VARARGS, nonzero_doc},
    {"crc32", crc32, METH_VARARGS, crc32_doc},
    {"crc32_rows", crc32_rows, METH_VARARGS, crc32_rows_doc},
    {"sort_postings", sort_postings, METH_VARARGS, sort_postings_doc},
    {"merge_postings", merge_postings, METH_VARARGS, merge_postings_doc},
    {"to_half", to_half, METH_VARARGS, to_half_doc},
    {"hash_rows", hash_rows, METH_VARARGS, hash_rows_doc},
    {"word_ids", word_ids, METH_VARARGS, word_ids_doc},
    {"index_batch", index_batch, METH_VARARGS, index_batch_doc},
    {"word_table_move", word_table_move, METH_VARARGS, word_table_move_doc},
    {"ascii_cues", ascii_cues, METH_O, ascii_cues_doc},
    {"text_words", text_words, METH_VARARGS, text_words_doc},
    {"squeeze_spaces", squeeze_spaces, METH_O, squeeze_spaces_doc},
    {"nfkc", nfkc_text, METH_O, nfkc_doc},
    {"blake2b64", blake2b64, METH_O, blake2b64_doc},
    {"gram_hashes", gram_hashes, METH_VARARGS, gram_hashes_doc},
    {"word_features", word_features, METH_VARARGS, word_features_doc},
    {"rows_json", rows_json, METH_O, rows_json_doc},
    {"rows_json_utf8", rows_json_utf8, METH_O, rows_json_utf8_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ipy_memory._speedups",
    .m_doc = "Compiled kernels of ipy_memory (optional): see _kernels.py for their numpy twins.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    crc32_init();
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "FAST_CRC32", crc32_fast) < 0
              || PyModule_AddIntConstant(m, "WIDE_CRC32", crc32_wide) < 0
              || PyModule_AddIntConstant(m, "FAST_HALF_DOTS", half_dots_fast()) < 0
              || PyModule_AddIntConstant(m, "FUSED_CRC_DOTS", half_dots_crc_fused()) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
