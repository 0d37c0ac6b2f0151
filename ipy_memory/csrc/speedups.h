/* Shared by the C files of ipy_memory._speedups (see module.c): the array-argument helpers and
 * the build's choice of SIMD code. */
#ifndef IPY_MEMORY_SPEEDUPS_H
#define IPY_MEMORY_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Function multi-versioning: one build runs AVX-512 (x86-64-v4) or AVX2 + FMA (x86-64-v3) code
 * where the CPU has it, baseline SSE2 elsewhere. (Plain "avx512f" lacks FMA and AVX512BW's byte
 * conversions: 1.8x slower here.) ifuncs need glibc and GCC 12 names these levels; other
 * compilers and platforms get the baseline loop, still auto-vectorised. */
#if defined(__x86_64__) && defined(__GLIBC__) && !defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 12
#define MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MULTIVERSION
#endif


/* A kernel's array arguments: each described by a Spec, acquired through the buffer protocol by
 * take_all, and all released by release whatever happened in between. */
typedef struct {
    Py_buffer view;
    int held;
} Arg;

typedef struct {
    const char *name;
    int ndim;
    const char *formats; /* the struct codes accepted */
    int flags;
} Spec;

#define NONE_OK 1 /* None is accepted (the argument is then not held: DATA gives NULL) */
#define WRITABLE 2

#define DATA(arg, type) ((arg).held ? (type *)(arg).view.buf : NULL)
#define LEN(arg) ((arg).held ? (arg).view.shape[0] : 0)

int take_all(Arg *args, PyObject *const *objs, const Spec *specs, int n);
PyObject *release(Arg *args, int n, int ok);
PyObject *release_checked(Arg *args, int n, Py_ssize_t bad, const char *kernel, const char *what);

/* the kernels, one PyCFunction each (METH_VARARGS), and their docstrings */
#define KERNEL(name) PyObject *name(PyObject *self, PyObject *args); extern const char name##_doc[];
KERNEL(column_scores)
KERNEL(quantize_rows)
KERNEL(half_dots)
KERNEL(half_dots_crc)
KERNEL(bm25_add)
KERNEL(context_add)
KERNEL(priors)
KERNEL(add_runs)
KERNEL(neighbours)
KERNEL(reply_add)
KERNEL(nonzero)
KERNEL(hash_rows)
KERNEL(word_ids)
KERNEL(index_batch)
KERNEL(word_table_move)
KERNEL(ascii_cues)
KERNEL(text_words)
KERNEL(squeeze_spaces)
PyObject *nfkc_text(PyObject *self, PyObject *text);
extern const char nfkc_doc[];
KERNEL(blake2b64)
KERNEL(gram_hashes)
KERNEL(word_features)
KERNEL(crc32)
KERNEL(crc32_rows)
KERNEL(sort_postings)
KERNEL(merge_postings)
KERNEL(to_half)
KERNEL(rows_json)
KERNEL(rows_json_utf8)
#undef KERNEL
void crc32_init(void);
uint64_t blake2b_64(const uint8_t *data, Py_ssize_t n); /* blake2b.c: the 8-byte digest, little-endian */
int utf8_hash(const char *prefix, PyObject *text, uint64_t *out); /* ... of prefix + text's UTF-8 */
int is_cjk_char(Py_UCS4 c);     /* kana, CJK or hangul: _text._CJK's ranges */
int starts_cjk(PyObject *word); /* its first character is such */

/* float16 bits -> float32, exact for every value (Giesen's method: the exponent is rebased by one
 * multiplication by 2^112, which is exact and also normalises subnormals; inf and NaN get an all-ones
 * exponent). scan.c's portable path (x86 CPUs with F16C convert eight at a time) and columns.c. */
static inline float half_to_float(uint16_t h)
{
    union { uint32_t u; float f; } v = {.u = (uint32_t)(h & 0x7fff) << 13};
    v.f *= 0x1p112f;
    if (v.f >= 65536.0f)
        v.u |= 0xffu << 23;
    v.u |= (uint32_t)(h & 0x8000) << 16;
    return v.f;
}

int half_dots_fast(void); /* the F16C path runs here (else the portable one: ~10x slower) */
int half_dots_crc_fused(void); /* half_dots_crc checksums in the scan's own pass here (AVX-512, VPCLMULQDQ) */
extern int crc32_fast, crc32_wide;
uint32_t crc32_zlib(uint32_t value, const uint8_t *p, size_t n); /* zlib.crc32(p[:n], value) */

#endif
