/* cal_profile — see cal_profile.h. */
#include "cal_profile.h"

#include "cal_map.h"

#include <stdlib.h>
#include <string.h>

typedef struct vec {
    void *data;
    size_t len, cap, elem;
} vec;

struct cal_profile {
    vec strings;          /* char * */
    cal_map string_index; /* hash -> string id */
    vec lines;            /* cal_line_stat */
    cal_map line_index;   /* (file << 32 | line) -> index */
    vec funcs;            /* cal_func_stat */
    cal_map func_index;   /* hash(file, name, first_line) -> index */
    vec threads;          /* cal_thread_stat */
    cal_map thread_index; /* hash(process, ident, tid) -> index */
    vec processes;        /* cal_process */
    vec leaks;            /* cal_leak */
    int64_t wall_ns;
    int64_t paused_ns; /* of it, with profiling switched off */
    cal_memory memory;
    cal_gpu_summary gpu;
    cal_gc_stats gc;
    cal_stacks stacks;
    cal_timeline timeline;
    cal_atypes *atypes; /* allocation types and lifetimes, or NULL */
};

static void *vec_push(vec *v)
{
    if (v->len == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        void *data = realloc(v->data, cap * v->elem);
        if (!data)
            return NULL;
        v->data = data;
        v->cap = cap;
    }
    void *slot = (char *)v->data + v->len * v->elem;
    memset(slot, 0, v->elem);
    v->len++;
    return slot;
}

static void *vec_at(const vec *v, size_t i) { return (char *)v->data + i * v->elem; }

cal_profile *cal_profile_new(void)
{
    cal_profile *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->strings.elem = sizeof(char *);
    p->lines.elem = sizeof(cal_line_stat);
    p->funcs.elem = sizeof(cal_func_stat);
    p->threads.elem = sizeof(cal_thread_stat);
    p->processes.elem = sizeof(cal_process);
    p->leaks.elem = sizeof(cal_leak);
    p->memory.peak_line = CAL_PROFILE_NONE;
    p->gpu.reason = p->gpu.fallback = CAL_PROFILE_NONE;
    p->gpu.stopped_at = -1;
    cal_stacks_init(&p->stacks);
    cal_timeline_init(&p->timeline);
    if (cal_profile_process_add(p) == CAL_PROFILE_NONE) {
        free(p);
        return NULL;
    }
    return p;
}

void cal_profile_free(cal_profile *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->strings.len; i++)
        free(*(char **)vec_at(&p->strings, i));
    free(p->strings.data);
    for (size_t i = 0; i < p->lines.len; i++) {
        cal_line_stat *ls = vec_at(&p->lines, i);
        free(ls->live_series);
        free(ls->procs);
    }
    free(p->lines.data);
    free(p->funcs.data);
    free(p->threads.data);
    for (size_t i = 0; i < p->processes.len; i++)
        free(((cal_process *)vec_at(&p->processes, i))->argv);
    free(p->processes.data);
    free(p->leaks.data);
    cal_map_clear(&p->string_index);
    cal_map_clear(&p->line_index);
    cal_map_clear(&p->func_index);
    cal_map_clear(&p->thread_index);
    cal_stacks_free(&p->stacks);
    cal_timeline_free(&p->timeline);
    if (p->atypes)
        cal_atypes_free(p->atypes);
    free(p->atypes);
    free(p);
}

uint32_t cal_profile_string(cal_profile *p, const char *s, size_t n)
{
    uint64_t h = cal_hash_bytes(s, n);
    size_t cursor = 0;
    uint32_t id;
    while ((id = cal_map_find(&p->string_index, h, &cursor)) != CAL_MAP_NONE) {
        const char *have = *(char **)vec_at(&p->strings, id);
        if (strlen(have) == n && memcmp(have, s, n) == 0)
            return id;
    }
    char *copy = malloc(n + 1);
    if (!copy)
        return CAL_PROFILE_NONE;
    memcpy(copy, s, n);
    copy[n] = '\0';
    id = (uint32_t)p->strings.len;
    char **slot = vec_push(&p->strings);
    if (!slot || cal_map_put(&p->string_index, h, id) != 0) {
        if (slot)
            p->strings.len--;
        free(copy);
        return CAL_PROFILE_NONE;
    }
    *slot = copy;
    return id;
}

const char *cal_profile_string_at(const cal_profile *p, uint32_t id)
{
    if (id >= p->strings.len)
        return "";
    return *(char **)vec_at(&p->strings, id);
}

uint32_t cal_profile_function(cal_profile *p, uint32_t file, uint32_t name,
                              int32_t first_line)
{
    uint64_t h = cal_hash_u64(((uint64_t)file << 32 | name) ^
                              cal_hash_u64((uint64_t)(uint32_t)first_line));
    size_t cursor = 0;
    uint32_t id;
    while ((id = cal_map_find(&p->func_index, h, &cursor)) != CAL_MAP_NONE) {
        const cal_func_stat *f = vec_at(&p->funcs, id);
        if (f->file == file && f->name == name && f->first_line == first_line)
            return id;
    }
    id = (uint32_t)p->funcs.len;
    cal_func_stat *f = vec_push(&p->funcs);
    if (!f)
        return CAL_PROFILE_NONE;
    if (cal_map_put(&p->func_index, h, id) != 0) {
        p->funcs.len--;
        return CAL_PROFILE_NONE;
    }
    f->file = file;
    f->name = name;
    f->first_line = first_line;
    return id;
}

static uint64_t thread_key(uint32_t process, uint64_t ident, int32_t tid)
{
    return cal_hash_u64(ident ^ cal_hash_u64(process)) ^ (uint64_t)(uint32_t)tid;
}

/* The row of (process, ident, tid).  With `any_ident`, any row of that
   kernel thread: a thread known by its kernel id alone (ident 0: a native
   thread, or a C thread's allocation made while it had no thread state)
   is the same thread as the Python one with that id. */
static uint32_t thread_find(const cal_profile *p, uint32_t process, uint64_t ident,
                            int32_t tid, int any_ident)
{
    size_t cursor = 0;
    uint32_t id;
    while ((id = cal_map_find(&p->thread_index, thread_key(process, ident, tid),
                              &cursor)) != CAL_MAP_NONE) {
        const cal_thread_stat *t = vec_at(&p->threads, id);
        if (t->tid == tid && t->process == process && (t->ident == ident || any_ident))
            return id;
    }
    return CAL_PROFILE_NONE;
}

uint32_t cal_profile_thread(cal_profile *p, uint64_t ident, int32_t tid, int is_main)
{
    return cal_profile_thread_in(p, 0, ident, tid, is_main);
}

uint32_t cal_profile_thread_in(cal_profile *p, uint32_t process, uint64_t ident,
                               int32_t tid, int is_main)
{
    uint64_t h = thread_key(process, ident, tid);
    uint32_t id = thread_find(p, process, ident, tid, ident == 0 && tid > 0);
    if (id != CAL_PROFILE_NONE)
        return id;
    if (ident != 0 && tid > 0) {
        /* A thread that did native work before it first ran Python (a C
           library's thread calling back into it) already has a native
           thread's entry (ident 0): it becomes this thread's. */
        id = thread_find(p, process, 0, tid, 0);
        if (id != CAL_PROFILE_NONE) {
            if (cal_map_put(&p->thread_index, h, id) != 0)
                return CAL_PROFILE_NONE;
            cal_thread_stat *t = vec_at(&p->threads, id);
            t->ident = ident;
            t->is_main = is_main;
            t->name = CAL_PROFILE_NONE;
            return id;
        }
    }
    id = (uint32_t)p->threads.len;
    cal_thread_stat *t = vec_push(&p->threads);
    if (!t)
        return CAL_PROFILE_NONE;
    if (cal_map_put(&p->thread_index, h, id) != 0) {
        p->threads.len--;
        return CAL_PROFILE_NONE;
    }
    t->process = process;
    t->ident = ident;
    t->tid = tid;
    t->is_main = is_main;
    t->name = CAL_PROFILE_NONE;
    /* Found by its kernel id alone too (thread_find's any_ident); out of
       memory, such a lookup makes a row of its own. */
    if (ident != 0 && tid > 0)
        (void)cal_map_put(&p->thread_index, thread_key(process, 0, tid), id);
    return id;
}

int cal_profile_set_thread_name(cal_profile *p, uint32_t thread, const char *name)
{
    if (thread >= p->threads.len)
        return -1;
    uint32_t sid = cal_profile_string(p, name, strlen(name));
    if (sid == CAL_PROFILE_NONE)
        return -1;
    ((cal_thread_stat *)vec_at(&p->threads, thread))->name = sid;
    return 0;
}

void cal_times_add(cal_times *dst, const cal_times *src)
{
    dst->python_ns += src->python_ns;
    dst->native_ns += src->native_ns;
    dst->system_ns += src->system_ns;
    dst->waiting_ns += src->waiting_ns;
    dst->samples += src->samples;
    dst->gc_ns += src->gc_ns;
    dst->preempted_ns += src->preempted_ns;
}

int64_t cal_times_cpu(const cal_times *t)
{
    return t->python_ns + t->native_ns + t->system_ns;
}

int64_t cal_times_all(const cal_times *t) { return cal_times_cpu(t) + t->waiting_ns; }

int cal_profile_add_sample(cal_profile *p, uint32_t thread, uint32_t file, int32_t line,
                           uint32_t func, const cal_times *t)
{
    cal_thread_stat *th = thread < p->threads.len ? vec_at(&p->threads, thread) : NULL;
    if (file == CAL_PROFILE_NONE) {
        if (th) {
            cal_times_add(&th->t, t);
            cal_times_add(&th->unattributed, t);
        }
        return 0;
    }
    uint32_t id = cal_profile_line(p, file, line, func);
    if (id == CAL_PROFILE_NONE)
        return -1;
    cal_line_stat *ls = vec_at(&p->lines, id);
    cal_times_add(&ls->t, t);
    if (func < p->funcs.len)
        cal_times_add(&((cal_func_stat *)vec_at(&p->funcs, func))->self, t);
    if (th)
        cal_times_add(&th->t, t);
    return 0;
}

uint32_t cal_profile_line(cal_profile *p, uint32_t file, int32_t line, uint32_t func)
{
    uint64_t key = (uint64_t)file << 32 | (uint32_t)line;
    uint32_t id = cal_map_get(&p->line_index, key);
    if (id == CAL_MAP_NONE) {
        id = (uint32_t)p->lines.len;
        cal_line_stat *ls = vec_push(&p->lines);
        if (!ls)
            return CAL_PROFILE_NONE;
        if (cal_map_put(&p->line_index, key, id) != 0) {
            p->lines.len--;
            return CAL_PROFILE_NONE;
        }
        ls->file = file;
        ls->line = line;
    }
    ((cal_line_stat *)vec_at(&p->lines, id))->func = func;
    return id;
}

uint32_t cal_profile_line_find(const cal_profile *p, uint32_t file, int32_t line)
{
    uint32_t id = cal_map_get(&p->line_index, (uint64_t)file << 32 | (uint32_t)line);
    return id == CAL_MAP_NONE ? CAL_PROFILE_NONE : id;
}

cal_thread_stat *cal_profile_thread_mut(cal_profile *p, uint32_t i)
{
    return i < p->threads.len ? vec_at(&p->threads, i) : NULL;
}

cal_line_stat *cal_profile_line_mut(cal_profile *p, uint32_t i)
{
    return i < p->lines.len ? vec_at(&p->lines, i) : NULL;
}

cal_func_stat *cal_profile_func_mut(cal_profile *p, uint32_t i)
{
    return i < p->funcs.len ? vec_at(&p->funcs, i) : NULL;
}

cal_series *cal_profile_line_series(cal_profile *p, uint32_t i)
{
    cal_line_stat *ls = cal_profile_line_mut(p, i);
    if (!ls)
        return NULL;
    if (!ls->live_series) {
        ls->live_series = malloc(sizeof(cal_series));
        if (!ls->live_series)
            return NULL;
        cal_series_init(ls->live_series);
    }
    return ls->live_series;
}

int cal_profile_line_series_add(cal_profile *p, uint32_t i, int64_t t, int64_t live)
{
    cal_series *s = cal_profile_line_series(p, i);
    if (!s)
        return -1;
    cal_series_add(s, t, live);
    return 0;
}

cal_stacks *cal_profile_stacks(cal_profile *p) { return &p->stacks; }
const cal_stacks *cal_profile_stacks_at(const cal_profile *p) { return &p->stacks; }
cal_timeline *cal_profile_timeline(cal_profile *p) { return &p->timeline; }
const cal_timeline *cal_profile_timeline_at(const cal_profile *p)
{
    return &p->timeline;
}

cal_memory *cal_profile_memory(cal_profile *p) { return &p->memory; }

const cal_memory *cal_profile_memory_at(const cal_profile *p) { return &p->memory; }

cal_gpu_summary *cal_profile_gpu(cal_profile *p) { return &p->gpu; }

const cal_gpu_summary *cal_profile_gpu_at(const cal_profile *p) { return &p->gpu; }

cal_gc_stats *cal_profile_gc(cal_profile *p) { return &p->gc; }

const cal_gc_stats *cal_profile_gc_at(const cal_profile *p) { return &p->gc; }

void cal_profile_add_func_total(cal_profile *p, uint32_t func, const cal_times *t)
{
    if (func < p->funcs.len)
        cal_times_add(&((cal_func_stat *)vec_at(&p->funcs, func))->total, t);
}

void cal_profile_set_wall(cal_profile *p, int64_t wall_ns) { p->wall_ns = wall_ns; }

void cal_profile_set_paused(cal_profile *p, int64_t paused_ns)
{
    p->paused_ns = paused_ns;
}

int64_t cal_profile_paused(const cal_profile *p) { return p->paused_ns; }

int64_t cal_profile_wall(const cal_profile *p) { return p->wall_ns; }

size_t cal_profile_nlines(const cal_profile *p) { return p->lines.len; }
const cal_line_stat *cal_profile_line_at(const cal_profile *p, size_t i)
{
    return vec_at(&p->lines, i);
}
size_t cal_profile_nfuncs(const cal_profile *p) { return p->funcs.len; }
const cal_func_stat *cal_profile_func_at(const cal_profile *p, size_t i)
{
    return vec_at(&p->funcs, i);
}
size_t cal_profile_nthreads(const cal_profile *p) { return p->threads.len; }
const cal_thread_stat *cal_profile_thread_at(const cal_profile *p, size_t i)
{
    return vec_at(&p->threads, i);
}

/* ---- processes, and what merging adds -------------------------------- */

size_t cal_profile_nprocesses(const cal_profile *p) { return p->processes.len; }

const cal_process *cal_profile_process_at(const cal_profile *p, size_t i)
{
    return i < p->processes.len ? vec_at(&p->processes, i) : NULL;
}

cal_process *cal_profile_process_mut(cal_profile *p, size_t i)
{
    return i < p->processes.len ? vec_at(&p->processes, i) : NULL;
}

uint32_t cal_profile_process_add(cal_profile *p)
{
    cal_process *pr = vec_push(&p->processes);
    if (!pr)
        return CAL_PROFILE_NONE;
    pr->end = CAL_PROFILE_NONE;
    pr->peak = -1;
    return (uint32_t)(p->processes.len - 1);
}

int cal_profile_process_set_argv(cal_profile *p, size_t i, const char *const *argv,
                                 size_t argc)
{
    cal_process *pr = cal_profile_process_mut(p, i);
    if (!pr)
        return -1;
    uint32_t *v = malloc((argc ? argc : 1) * sizeof(*v));
    if (!v)
        return -1;
    for (size_t k = 0; k < argc; k++) {
        v[k] = cal_profile_string(p, argv[k], strlen(argv[k]));
        if (v[k] == CAL_PROFILE_NONE) {
            free(v);
            return -1;
        }
    }
    free(pr->argv);
    pr->argv = v;
    pr->argc = argc;
    return 0;
}

int cal_profile_line_proc_add(cal_profile *p, uint32_t line, uint32_t process,
                              int64_t ns, int64_t alloc)
{
    cal_line_stat *ls = cal_profile_line_mut(p, line);
    if (!ls)
        return -1;
    for (uint32_t k = 0; k < ls->nprocs; k++)
        if (ls->procs[k].process == process) {
            ls->procs[k].ns += ns;
            ls->procs[k].alloc += alloc;
            return 0;
        }
    cal_line_proc *v = realloc(ls->procs, (ls->nprocs + 1) * sizeof(*v));
    if (!v)
        return -1;
    ls->procs = v;
    ls->procs[ls->nprocs++] = (cal_line_proc){process, ns, alloc};
    return 0;
}

int cal_profile_leak_add(cal_profile *p, const cal_leak *leak)
{
    cal_leak *slot = vec_push(&p->leaks);
    if (!slot)
        return -1;
    *slot = *leak;
    return 0;
}

size_t cal_profile_nleaks(const cal_profile *p) { return p->leaks.len; }

const cal_leak *cal_profile_leak_at(const cal_profile *p, size_t i)
{
    return vec_at(&p->leaks, i);
}

cal_atypes *cal_profile_atypes(cal_profile *p)
{
    if (!p->atypes) {
        p->atypes = malloc(sizeof *p->atypes);
        if (p->atypes)
            cal_atypes_init(p->atypes);
    }
    return p->atypes;
}

const cal_atypes *cal_profile_atypes_at(const cal_profile *p) { return p->atypes; }
