/* codeinfo — see codeinfo.h. */
#include "codeinfo.h"

#include "cal_utf8.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define LINE_CACHE_BYTES ((size_t)(1 << CALX_LINE_CACHE_BITS) * sizeof(calx_line_slot))

void calx_codes_init(calx_codes *c)
{
    memset(c, 0, sizeof(*c));
    cal_map_init(&c->index);
}

void calx_codes_clear(calx_codes *c)
{
    for (size_t i = 0; i < c->len; i++)
        Py_DECREF(c->owned[i]);
    free(c->entries);
    free(c->owned);
    if (c->lines)
        munmap(c->lines, LINE_CACHE_BYTES);
    cal_map_clear(&c->index);
    calx_codes_init(c);
}

int calx_codes_line(calx_codes *c, const calx_code *ci, int offset)
{
    uint32_t entry = (uint32_t)(ci - c->entries) + 1;
    if (!c->lines) {
        /* Zero pages of its own, not calloc's: a slot costs its page's
           fault when first used, rather than the whole table's at once
           (a forked child that ends at once looks up a line or two). */
        void *m = mmap(NULL, LINE_CACHE_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return PyCode_Addr2Line((PyCodeObject *)c->owned[entry - 1], offset);
        c->lines = m;
    }
    uint32_t h = (entry * 0x9E3779B1u) ^ ((uint32_t)offset * 0x85EBCA6Bu);
    calx_line_slot *slot = &c->lines[h >> (32 - CALX_LINE_CACHE_BITS)];
    if (slot->entry != entry || slot->offset != offset) {
        slot->line = PyCode_Addr2Line((PyCodeObject *)c->owned[entry - 1], offset);
        slot->entry = entry;
        slot->offset = offset;
    }
    return slot->line;
}

size_t calx_utf8(PyObject *str, char *dst, size_t cap)
{
    size_t n = 0;
    if (cap == 0)
        return 0;
    if (!str || !PyUnicode_Check(str)) {
        dst[0] = '\0';
        return 0;
    }
    Py_ssize_t len = PyUnicode_GET_LENGTH(str);
    int kind = PyUnicode_KIND(str);
    const void *data = PyUnicode_DATA(str);
    for (Py_ssize_t i = 0; i < len; i++) {
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        if (ch >= 0xD800 && ch <= 0xDFFF)
            ch = CAL_UTF8_REPLACEMENT;
        char enc[4];
        size_t k = cal_utf8_encode(enc, ch);
        if (n + k >= cap)
            break;
        memcpy(dst + n, enc, k);
        n += k;
    }
    dst[n] = '\0';
    return n;
}

static int has_glob(const char *pat) { return strpbrk(pat, "*?[") != NULL; }

static int pattern_match(const char *pat, const char *path)
{
    if (has_glob(pat))
        return fnmatch(pat, path, 0) == 0;
    return strstr(path, pat) != NULL;
}

static int any_match(char *const *pats, size_t n, const char *path)
{
    for (size_t i = 0; i < n; i++)
        if (pattern_match(pats[i], path))
            return 1;
    return 0;
}

static int under_dir(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    if (n == 0 || strncmp(path, dir, n) != 0)
        return 0;
    return dir[n - 1] == '/' || path[n] == '/' || path[n] == '\0';
}

int calx_filter_match(const calx_filter *f, const char *path)
{
    if (f->self_dir && under_dir(path, f->self_dir))
        return 0;
    if (any_match(f->exclude, f->nexclude, path))
        return 0;
    if (f->nonly)
        return any_match(f->only, f->nonly, path);
    if (f->profile_all)
        return 1;
    if (path[0] != '/')
        return 0; /* <frozen ...>, <string>, <stdin> */
    for (size_t i = 0; i < f->nlibrary; i++)
        if (under_dir(path, f->library[i]))
            return 0;
    return 1;
}

static void free_list(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void calx_filter_free(calx_filter *f)
{
    free_list(f->only, f->nonly);
    free_list(f->exclude, f->nexclude);
    free_list(f->library, f->nlibrary);
    free(f->self_dir);
    free(f->cwd);
    memset(f, 0, sizeof(*f));
}

const calx_code *calx_codes_find(const calx_codes *c, const void *code)
{
    uint32_t id = cal_map_get(&c->index, (uint64_t)(uintptr_t)code);
    return id == CAL_MAP_NONE ? NULL : &c->entries[id];
}

#define NAME_MAX_BYTES 4096

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

/* Is this code the asyncio event loop's own (see calx_code.loop)? */
static int loop_role(PyCodeObject *code, const char *filename)
{
    char name[64];
    if (ends_with(filename, "/asyncio/base_events.py")) {
        calx_utf8(code->co_name, name, sizeof name);
        return strcmp(name, "_run_once") == 0 ? CALX_LOOP_IDLE : CALX_LOOP_NONE;
    }
    if (ends_with(filename, "/asyncio/events.py")) {
        calx_utf8(code->co_name, name, sizeof name);
        return strcmp(name, "_run") == 0 ? CALX_LOOP_STEP : CALX_LOOP_NONE;
    }
    return CALX_LOOP_NONE;
}

const calx_code *calx_codes_get(calx_codes *c, const calx_filter *f, cal_profile *p,
                                PyCodeObject *code)
{
    uint64_t key = (uint64_t)(uintptr_t)code;
    uint32_t id = cal_map_get(&c->index, key);
    if (id != CAL_MAP_NONE)
        return &c->entries[id];

    if (c->len == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        calx_code *e = realloc(c->entries, cap * sizeof(*e));
        if (!e)
            return NULL;
        c->entries = e;
        PyObject **o = realloc(c->owned, cap * sizeof(*o));
        if (!o)
            return NULL;
        c->owned = o;
        c->cap = cap;
    }

    char raw[NAME_MAX_BYTES], path[NAME_MAX_BYTES * 2], name[NAME_MAX_BYTES];
    calx_utf8(code->co_filename, raw, sizeof raw);
    if (raw[0] != '/' && raw[0] != '<' && raw[0] != '\0' && f->cwd)
        snprintf(path, sizeof path, "%s/%s", f->cwd, raw);
    else
        snprintf(path, sizeof path, "%s", raw);
#if PY_VERSION_HEX >= 0x030B0000
    calx_utf8(code->co_qualname, name, sizeof name);
#else
    calx_utf8(code->co_name, name, sizeof name);
#endif

    calx_code entry = {CAL_PROFILE_NONE, CAL_PROFILE_NONE, CAL_STACKS_NONE, 0,
                       CALX_LOOP_NONE};
    entry.profiled = calx_filter_match(f, path);
    entry.loop = loop_role(code, raw);
    /* Every code is a frame of the stack table, library code too (marked
       so), but calipers' own: what it runs at the end of the program is
       the profiler, not the program (its time stays with the thread).
       Only profiled code has lines and functions. */
    uint32_t file = cal_profile_string(p, path, strlen(path));
    uint32_t nm = cal_profile_string(p, name, strlen(name));
    if (file == CAL_PROFILE_NONE || nm == CAL_PROFILE_NONE)
        return NULL;
    if (!(f->self_dir && under_dir(path, f->self_dir))) {
        entry.frame = cal_stacks_frame(cal_profile_stacks(p), file, nm,
                                       code->co_firstlineno, !entry.profiled);
        if (entry.frame == CAL_STACKS_NONE)
            return NULL;
    }
    if (entry.profiled) {
        entry.file = file;
        entry.func = cal_profile_function(p, file, nm, code->co_firstlineno);
        if (entry.func == CAL_PROFILE_NONE)
            return NULL;
    }
    id = (uint32_t)c->len;
    if (cal_map_put(&c->index, key, id) != 0)
        return NULL;
    c->entries[id] = entry;
    Py_INCREF(code);
    c->owned[id] = (PyObject *)code;
    c->len++;
    return &c->entries[id];
}
