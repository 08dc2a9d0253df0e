/*
 * alloctypes — see alloctypes.h.  Runs inside memory.c's callbacks, with
 * the GIL held, inside the shim's guard: it never makes a Python object,
 * never runs Python code, never sets or clears an exception, and reads the
 * program's memory only through cal_vmread (a read that fails instead of
 * faulting), so that a block it misjudges can cost a wrong "unknown" but
 * never a crash.
 *
 * TYPES.  A block from Python's object domain (PyObject_Malloc) is not an
 * object yet when the allocator returns it, so its type is read later: at
 * the next sampled allocation or CPU sample pass (the GIL held, the block
 * still tracked, so not freed: on a GIL build Python's allocator frees only
 * under the GIL, and every free of a tracked block reaches died() first),
 * or when it is freed (the shim reports the free before releasing the
 * block, and a dying object still has its type).  The object may sit 0, 16
 * or 32 bytes into its block (CPython's pre-header: the GC links, and from
 * 3.11 the managed dict and weak references); at each offset the header
 * must look alive (a reference count below 2^32, not 0 but at a free), and
 * its type pointer must be a type: one seen before whose tp_name has not
 * moved, or a readable object whose header looks alive, whose own type is
 * alive and has Py_TPFLAGS_TYPE_SUBCLASS, that is ready, and whose
 * pre-header size is that offset.  A block that passes no offset is
 * "unknown".  An object-allocator block need not hold an object (an
 * extension's array, uninitialised, with a stale word from a freed type),
 * so a static type's name is read through the window, and a class's memory
 * is read directly only once it is whole: its slot tables point into
 * itself, its dict and qualified name are live objects of their types.  PyMem blocks
 * are "buffer" (a list's items, a set's table: never an object), malloc's "native".
 * Names are interned once per type in the profile's strings.
 *
 * SURVIVAL.  At its birth and at its death a sample notes the collector's
 * count of collections (calx_gc_collections, read from the interpreter's
 * statistics, invisible to the program): a death with the same count died
 * young; a later one survived.  Its lifetimes are the shim's allocation
 * clock and the session clock between the two.
 *
 * LIMITATIONS
 *   - Free-threaded builds: every Python block is "unknown" (no GIL keeps
 *     a block from being freed while it is read).
 *   - An object returned to a free list (floats, tuples, lists, dicts in
 *     some versions) is not freed in the allocator: it lives on, for us,
 *     until the free list releases it.
 */
#include "alloctypes.h" /* Python.h first */

#include "cal_vmread.h"
#include "calipers_shim.h"
#include "pyinternals.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PENDING UINT32_MAX - 1 /* a record whose type is not read yet */
#define PENDING_MAX 64
#define NAME_MAX_BYTES 512

typedef struct rec {
    const void *ptr; /* NULL: an empty slot */
    uint32_t line, type;
    int domain;
    int at; /* where its object header is in the block, or -1 */
    int64_t weight, size, clock, t, gc;
} rec;

typedef struct known_type {
    const void *tp;
    const char *tp_name; /* its tp_name when it was named: moved, renamed */
    int pre;             /* its pre-header size */
    uint32_t name;
} known_type;

static struct {
    cal_profile *profile;
    cal_atypes *store;
    int64_t gc_start;
    rec *recs; /* open addressing on the block's address */
    size_t cap, len;
    const void *pending[PENDING_MAX];
    size_t npending;
    uint32_t native, buffer, unknown;
    PyObject *module_key; /* "__module__", interned */
    cal_map type_index;   /* type address -> index in known */
    known_type *known;
    size_t nknown, known_cap;
    cal_vmread vm;
} A;

/* ---- the records of live samples ------------------------------------------ */

static size_t slot_of(const void *ptr)
{
    return (size_t)cal_hash_u64((uint64_t)(uintptr_t)ptr) & (A.cap - 1);
}

static rec *find(const void *ptr)
{
    if (!A.cap)
        return NULL;
    for (size_t i = slot_of(ptr);; i = (i + 1) & (A.cap - 1)) {
        if (A.recs[i].ptr == ptr)
            return &A.recs[i];
        if (!A.recs[i].ptr)
            return NULL;
    }
}

static int grow(void)
{
    size_t cap = A.cap ? A.cap * 2 : 1024;
    rec *recs = calloc(cap, sizeof *recs);
    if (!recs)
        return -1;
    for (size_t i = 0; i < A.cap; i++) {
        if (!A.recs[i].ptr)
            continue;
        size_t j = (size_t)cal_hash_u64((uint64_t)(uintptr_t)A.recs[i].ptr) & (cap - 1);
        while (recs[j].ptr)
            j = (j + 1) & (cap - 1);
        recs[j] = A.recs[i];
    }
    free(A.recs);
    A.recs = recs;
    A.cap = cap;
    return 0;
}

/* Remove r, shifting back the entries after it that it displaced. */
static void erase(rec *r)
{
    size_t mask = A.cap - 1, i = (size_t)(r - A.recs), j = i;
    A.recs[i].ptr = NULL;
    A.len--;
    for (;;) {
        j = (j + 1) & mask;
        if (!A.recs[j].ptr)
            return;
        size_t home = slot_of(A.recs[j].ptr);
        /* Can j's entry move to the hole at i (is i on its probe path)? */
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            A.recs[i] = A.recs[j];
            A.recs[j].ptr = NULL;
            i = j;
        }
    }
}

static void pending_drop(const void *ptr)
{
    for (size_t k = 0; k < A.npending; k++)
        if (A.pending[k] == ptr) {
            A.pending[k] = A.pending[--A.npending];
            return;
        }
}

/* ---- types ---------------------------------------------------------------- */

/* What CPython puts in front of an object of a type with these flags (as
   _PyType_PreHeaderSize; traces.c's block_of). */
static int pre_of(unsigned long flags)
{
    int pre = 0;
#ifndef Py_GIL_DISABLED
    if (flags & Py_TPFLAGS_HAVE_GC)
        pre += 2 * (int)sizeof(void *);
#endif
#if PY_VERSION_HEX >= 0x030C0000
    if (flags & ((1UL << 3) | (1UL << 4))) /* MANAGED_WEAKREF | MANAGED_DICT */
        pre += 2 * (int)sizeof(PyObject *);
#elif PY_VERSION_HEX >= 0x030B0000
    if (flags & (1UL << 4)) /* Py_TPFLAGS_MANAGED_DICT */
        pre += 2 * (int)sizeof(PyObject *);
#else
    (void)flags;
#endif
    return pre;
}

/* Append a str's text as UTF-8 (no allocation, unlike PyUnicode_AsUTF8). */
static void put_str(char *buf, size_t *n, PyObject *u)
{
    if (!u || !PyUnicode_Check(u))
        return;
#if PY_VERSION_HEX < 0x030C0000
    if (!PyUnicode_IS_READY(u))
        return;
#endif
    int kind = PyUnicode_KIND(u);
    const void *data = PyUnicode_DATA(u);
    Py_ssize_t len = PyUnicode_GET_LENGTH(u);
    for (Py_ssize_t i = 0; i < len && *n + 4 < NAME_MAX_BYTES; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c < 0x80) {
            buf[(*n)++] = (char)c;
        } else if (c < 0x800) {
            buf[(*n)++] = (char)(0xC0 | (c >> 6));
            buf[(*n)++] = (char)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            buf[(*n)++] = (char)(0xE0 | (c >> 12));
            buf[(*n)++] = (char)(0x80 | ((c >> 6) & 0x3F));
            buf[(*n)++] = (char)(0x80 | (c & 0x3F));
        } else {
            buf[(*n)++] = (char)(0xF0 | (c >> 18));
            buf[(*n)++] = (char)(0x80 | ((c >> 12) & 0x3F));
            buf[(*n)++] = (char)(0x80 | ((c >> 6) & 0x3F));
            buf[(*n)++] = (char)(0x80 | (c & 0x3F));
        }
    }
}

/* Whether a copied object header looks alive: a reference count with bits
   32-47 clear (3.14's ob_overflow, a pointer's) and a low half not 0. */
static int header_alive(const PyObject *copy)
{
    uint64_t refcnt;
    memcpy(&refcnt, copy, sizeof refcnt);
    return !((refcnt >> 32) & 0xffff) && (uint32_t)refcnt != 0;
}

/* Whether the object at `at` is a live one of exactly type `tp`. */
static int alive_of_type(const void *at, const PyTypeObject *tp)
{
    PyObject head;
    return at && !((uintptr_t)at & 7) &&
           cal_vmread_sigsafe(&A.vm, at, &head, sizeof head) == 0 &&
           header_alive(&head) && Py_TYPE(&head) == tp;
}

/* The C string at s, read through the window a page at a time (a string
   may end just before an unmapped page); its length, 0 if unreadable. */
static size_t read_cstr(const char *s, char *buf, size_t max)
{
    size_t n = 0;
    while (s && n + 1 < max) {
        size_t page = 4096 - ((uintptr_t)(s + n) & 4095), want = max - 1 - n;
        want = want < page ? want : page;
        want = want < 256 ? want : 256;
        if (cal_vmread_sigsafe(&A.vm, s + n, buf + n, want) != 0)
            return 0;
        for (size_t i = 0; i < want; i++, n++)
            if (!buf[n])
                return n;
    }
    return n;
}

/* The qualified name of the type at tp, checked to be one by type_at:
   tp_name for a static type ("dict", "numpy.ndarray", read through the
   window), module.qualname for a class ("builtins" left out; a heap type
   checked whole, so its memory is read directly). */
static uint32_t name_type(PyTypeObject *tp, const PyTypeObject *copy)
{
    char buf[NAME_MAX_BYTES];
    size_t n = 0;
    if (!(copy->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
        n = read_cstr(copy->tp_name, buf, NAME_MAX_BYTES);
    } else {
        PyHeapTypeObject *ht = (PyHeapTypeObject *)tp;
        /* PyDict_GetItem: str keys run no Python code, and it leaves the
           thread's exception (the program's, maybe) as it was. */
        PyObject *mod = tp->tp_dict && A.module_key
                            ? PyDict_GetItem(tp->tp_dict, A.module_key)
                            : NULL;
        if (mod && PyUnicode_Check(mod) &&
            PyUnicode_CompareWithASCIIString(mod, "builtins") != 0) {
            put_str(buf, &n, mod);
            buf[n++] = '.';
        }
        put_str(buf, &n, ht->ht_qualname);
    }
    if (!n)
        return A.unknown;
    uint32_t id = cal_profile_string(A.profile, buf, n);
    return id == CAL_PROFILE_NONE ? A.unknown : id;
}

/* Whether the heap type at tp (its PyTypeObject copied) is one whole: a
   live class's slot tables point into itself, its dict and qualified name
   are live objects of their types.  A word of a buffer that points at
   something shaped like a type header, or a type freed since, fails. */
static int heap_type_whole(const void *tp)
{
    _Static_assert(sizeof(PyHeapTypeObject) <= CAL_VMREAD_MAX, "read at once");
    PyHeapTypeObject ht;
    if (cal_vmread_sigsafe(&A.vm, tp, &ht, sizeof ht) != 0)
        return 0;
    const PyHeapTypeObject *self = tp;
    const PyTypeObject *t = &ht.ht_type;
    return t->tp_as_async == &self->as_async && t->tp_as_number == &self->as_number &&
           t->tp_as_mapping == &self->as_mapping &&
           t->tp_as_sequence == &self->as_sequence &&
           t->tp_as_buffer == &self->as_buffer &&
           alive_of_type(ht.ht_qualname, &PyUnicode_Type) &&
           (!t->tp_dict || alive_of_type(t->tp_dict, &PyDict_Type));
}

/* The name of the type at `tp` if it is one whose objects begin `pre`
   bytes into their block, else CAL_PROFILE_NONE. */
static uint32_t type_at(const void *tp, int pre)
{
    if (!tp || ((uintptr_t)tp & 7))
        return CAL_PROFILE_NONE;
    const char *tp_name;
    uint32_t k = cal_map_get(&A.type_index, (uint64_t)(uintptr_t)tp);
    if (k != CAL_MAP_NONE) {
        known_type *e = &A.known[k];
        if (cal_vmread_sigsafe(&A.vm,
                               (const char *)tp + offsetof(PyTypeObject, tp_name),
                               &tp_name, sizeof tp_name) != 0)
            return CAL_PROFILE_NONE;
        if (tp_name == e->tp_name)
            return e->pre == pre ? e->name : CAL_PROFILE_NONE;
        /* Another type now lives at this address: look at it afresh. */
    }
    PyTypeObject copy;
    PyObject meta_head;
    unsigned long meta_flags;
    if (cal_vmread_sigsafe(&A.vm, tp, &copy, sizeof copy) != 0)
        return CAL_PROFILE_NONE;
    const char *meta = (const char *)Py_TYPE((PyObject *)&copy);
    if (!meta || ((uintptr_t)meta & 7) ||
        cal_vmread_sigsafe(&A.vm, meta, &meta_head, sizeof meta_head) != 0 ||
        cal_vmread_sigsafe(&A.vm, meta + offsetof(PyTypeObject, tp_flags), &meta_flags,
                           sizeof meta_flags) != 0)
        return CAL_PROFILE_NONE;
    if (!header_alive((PyObject *)&copy) || !header_alive(&meta_head) ||
        !(meta_flags & Py_TPFLAGS_TYPE_SUBCLASS) ||
        !(copy.tp_flags & Py_TPFLAGS_READY) ||
        copy.tp_basicsize < (Py_ssize_t)sizeof(PyObject) ||
        pre_of(copy.tp_flags) != pre)
        return CAL_PROFILE_NONE;
    if ((copy.tp_flags & Py_TPFLAGS_HEAPTYPE) && !heap_type_whole(tp))
        return CAL_PROFILE_NONE;
    uint32_t name = name_type((PyTypeObject *)tp, &copy);
    if (k == CAL_MAP_NONE) {
        if (A.nknown == A.known_cap) {
            size_t cap = A.known_cap ? A.known_cap * 2 : 64;
            known_type *v = realloc(A.known, cap * sizeof *v);
            if (!v)
                return name;
            A.known = v;
            A.known_cap = cap;
        }
        if (cal_map_put(&A.type_index, (uint64_t)(uintptr_t)tp, (uint32_t)A.nknown) !=
            0)
            return name;
        k = (uint32_t)A.nknown++;
    }
    A.known[k] = (known_type){tp, copy.tp_name, pre, name};
    return name;
}

/* The type of r's block (its domain's, or the object's in it). `dying`:
   it is being freed, so an object in it has a reference count of 0. */
static uint32_t read_type(rec *r, int dying)
{
    if (r->domain == CAL_SHIM_NATIVE)
        return A.native;
    if (r->domain == CAL_SHIM_PYMEM)
        return A.buffer;
#ifdef Py_GIL_DISABLED
    (void)dying;
    (void)type_at; /* kept compiled: the layouts are checked all the same */
    return A.unknown;
#else
    /* The block's first 48 bytes at most: the three places an object
       header can be, each a reference count and a type. */
    uint64_t words[6];
    size_t have = r->size < (int64_t)sizeof words ? (size_t)r->size : sizeof words;
    cal_vmread_reset_sigsafe(&A.vm, getpid());
    if (have < 16 || cal_vmread_sigsafe(&A.vm, r->ptr, words, have) != 0)
        return A.unknown;
    for (size_t o = 0; o + 2 <= have / 8 && o < 6; o += 2) {
        uint64_t refcnt = words[o];
        /* Bits 32-47 (3.14's ob_overflow, a large count's, a pointer's)
           must be clear; the low half 0 only in an object being freed. */
        if ((refcnt >> 32) & 0xffff)
            continue;
        if (!dying && (uint32_t)refcnt == 0)
            continue;
        uint32_t name = type_at((const void *)(uintptr_t)words[o + 1], (int)(o * 8));
        if (name != CAL_PROFILE_NONE) {
            r->at = (int)(o * 8);
            return name;
        }
    }
    return A.unknown;
#endif
}

/* ---- the life of a sample ------------------------------------------------------ */

static void record(const rec *r, int fate, int64_t life_clock, int64_t life_ns)
{
    uint32_t type = r->type == PENDING ? A.unknown : r->type;
    (void)cal_atypes_add(A.store, r->line, type, r->weight, r->size, fate, life_clock,
                         life_ns);
}

int calx_atypes_start(cal_profile *profile)
{
    free(A.recs);
    free(A.known);
    cal_map_clear(&A.type_index);
    PyObject *key = A.module_key;
    memset(&A, 0, sizeof A);
    cal_map_init(&A.type_index);
    A.module_key = key ? key : PyUnicode_InternFromString("__module__");
    if (!A.module_key)
        return -1;
    A.profile = profile;
    A.store = cal_profile_atypes(profile);
    A.native = cal_profile_string(profile, "native", 6);
    A.buffer = cal_profile_string(profile, "buffer", 6);
    A.unknown = cal_profile_string(profile, "unknown", 7);
    if (!A.store || A.native == CAL_PROFILE_NONE || A.buffer == CAL_PROFILE_NONE ||
        A.unknown == CAL_PROFILE_NONE) {
        A.store = NULL;
        PyErr_NoMemory();
        return -1;
    }
    A.gc_start = calx_gc_collections();
    return 0;
}

void calx_atypes_settle(void)
{
    for (size_t k = 0; k < A.npending; k++) {
        rec *r = find(A.pending[k]);
        if (r && r->type == PENDING)
            r->type = read_type(r, 0);
    }
    A.npending = 0;
}

void calx_atypes_born(const void *ptr, size_t size, int64_t weight, int domain,
                      uint32_t line, int64_t clock, int64_t t)
{
    if (!A.store)
        return;
    calx_atypes_settle();
    rec r = {.ptr = ptr,
             .line = line,
             .type = PENDING,
             .domain = domain,
             .at = -1,
             .weight = weight,
             .size = (int64_t)size,
             .clock = clock,
             .t = t,
             .gc = calx_gc_collections()};
    if (domain != CAL_SHIM_PYOBJ)
        r.type = read_type(&r, 0);
    rec *old = find(ptr);
    if (old) { /* freed where the shim could not see: its fate is unknown */
        record(old, CAL_FATE_UNTRACKED, -1, -1);
        *old = r;
    } else {
        if ((A.len + 1) * 2 > A.cap && grow() != 0) {
            r.type = r.type == PENDING ? A.unknown : r.type;
            record(&r, CAL_FATE_UNTRACKED, -1, -1);
            return;
        }
        size_t i = slot_of(ptr);
        while (A.recs[i].ptr)
            i = (i + 1) & (A.cap - 1);
        A.recs[i] = r;
        A.len++;
    }
    if (r.type == PENDING) {
        if (A.npending == PENDING_MAX)
            calx_atypes_settle(); /* not reached: born() settles first */
        A.pending[A.npending++] = ptr;
    }
}

void calx_atypes_unfollowed(size_t size, int64_t weight, int domain, uint32_t line)
{
    if (!A.store)
        return;
    uint32_t type = domain == CAL_SHIM_NATIVE  ? A.native
                    : domain == CAL_SHIM_PYMEM ? A.buffer
                                               : A.unknown;
    (void)cal_atypes_add(A.store, line, type, weight, (int64_t)size, CAL_FATE_UNTRACKED,
                         -1, -1);
}

void calx_atypes_died(const void *ptr, int64_t clock, int64_t t, int64_t gc,
                      int readable)
{
    if (!A.store)
        return;
    rec *r = find(ptr);
    if (!r)
        return;
    if (r->type == PENDING) {
        r->type = readable ? read_type(r, 1) : A.unknown;
        pending_drop(ptr);
    }
    int fate = CAL_FATE_UNTRACKED;
    if (gc >= 0 && r->gc >= 0)
        fate = gc > r->gc ? CAL_FATE_SURVIVED : CAL_FATE_YOUNG;
    int64_t life_clock = clock - r->clock, life_ns = t - r->t;
    record(r, fate, life_clock > 0 ? life_clock : 0, life_ns > 0 ? life_ns : 0);
    erase(r);
}

/* Is r's object dead but not freed: its reference count 0, in a free list
   (tuples, floats, ...) that keeps the block for the next object of its
   type?  Then when it died is unknown: it is not followed. */
static int in_free_list(const rec *r)
{
#ifdef Py_GIL_DISABLED
    (void)r;
    return 0;
#else
    uint64_t refcnt;
    if (r->at < 0)
        return 0;
    cal_vmread_reset_sigsafe(&A.vm, getpid());
    if (cal_vmread_sigsafe(&A.vm, (const char *)r->ptr + r->at, &refcnt,
                           sizeof refcnt) != 0)
        return 0;
    return (uint32_t)refcnt == 0;
#endif
}

void calx_atypes_stop(void)
{
    if (!A.store)
        return;
    calx_atypes_settle();
    int64_t gc = calx_gc_collections();
    for (size_t i = 0; i < A.cap; i++) {
        const rec *r = &A.recs[i];
        if (!r->ptr)
            continue;
        int fate = CAL_FATE_UNTRACKED;
        if (gc >= 0 && r->gc >= 0 && !in_free_list(r))
            fate = gc > r->gc ? CAL_FATE_SURVIVED : CAL_FATE_END;
        record(r, fate, -1, -1);
    }
    A.store->collections = gc >= 0 && A.gc_start >= 0 ? gc - A.gc_start : 0;
    free(A.recs);
    A.recs = NULL;
    A.cap = A.len = 0;
    A.npending = 0;
    A.store = NULL;
}
