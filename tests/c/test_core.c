/*
 * Unit tests of src/core: maps, the profile store, the JSON writer and
 * reader, the renderers (and a mutation fuzzer over them), the clocks and
 * the random intervals.  Plain checks, run by
 * `make test` and under ASan/UBSan by `make test-sanitize`.  Ends with the
 * line "N passed, M failed"; exits non-zero on any failure.
 */
#define _GNU_SOURCE
#include "cal_bsamp.h"
#include "cal_buf.h"
#include "cal_clock.h"
#include "cal_diff.h"
#include "cal_export.h"
#include "cal_gpu.h"
#include "cal_json.h"
#include "cal_jsonr.h"
#include "cal_map.h"
#include "cal_merge.h"
#include "cal_profile.h"
#include "cal_rand.h"
#include "cal_report.h"
#include "cal_series.h"
#include "cal_snapshot.h"
#include "cal_utf8.h"
#include "cal_view.h"
#include "cal_vmread.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static int passed, failed;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (cond) {                                                                    \
            passed++;                                                                  \
        } else {                                                                       \
            failed++;                                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
        }                                                                              \
    } while (0)

static void test_map(void)
{
    cal_map m;
    cal_map_init(&m);
    int ok = 1;
    for (uint32_t i = 0; i < 10000; i++)
        ok &= cal_map_put(&m, (uint64_t)i * 7919, i) == 0;
    CHECK(ok);
    ok = 1;
    for (uint32_t i = 0; i < 10000; i++)
        ok &= cal_map_get(&m, (uint64_t)i * 7919) == i;
    CHECK(ok);
    CHECK(cal_map_get(&m, 1) == CAL_MAP_NONE);
    cal_map_put(&m, 42, 1);
    cal_map_put(&m, 42, 2);
    size_t cur = 0;
    uint32_t a = cal_map_find(&m, 42, &cur), b = cal_map_find(&m, 42, &cur);
    CHECK((a == 1 && b == 2) || (a == 2 && b == 1));
    CHECK(cal_map_find(&m, 42, &cur) == CAL_MAP_NONE);
    cal_map_clear(&m);
    CHECK(cal_map_get(&m, 0) == CAL_MAP_NONE);
}

static void test_strings(void)
{
    cal_profile *p = cal_profile_new();
    uint32_t a = cal_profile_string(p, "a.py", 4);
    uint32_t b = cal_profile_string(p, "b.py", 4);
    CHECK(a != b);
    CHECK(cal_profile_string(p, "a.py", 4) == a);
    CHECK(cal_profile_string(p, "a.pyX", 4) == a); /* only n bytes count */
    CHECK(strcmp(cal_profile_string_at(p, b), "b.py") == 0);
    char buf[32];
    int ok = 1;
    for (int i = 0; i < 5000; i++) {
        snprintf(buf, sizeof buf, "s%d", i);
        uint32_t id = cal_profile_string(p, buf, strlen(buf));
        ok &= strcmp(cal_profile_string_at(p, id), buf) == 0;
        ok &= cal_profile_string(p, buf, strlen(buf)) == id;
    }
    CHECK(ok);
    cal_profile_free(p);
}

static cal_times T(int64_t py, int64_t nat, int64_t sys, int64_t wait)
{
    cal_times t = {py, nat, sys, wait, 1, 0, 0};
    return t;
}

static void build_profile(cal_profile *p, int reverse)
{
    uint32_t files[2], funcs[2], th;
    const char *paths[2] = {"/w/a.py", "/w/b.py"};
    for (int k = 0; k < 2; k++) {
        int i = reverse ? 1 - k : k;
        files[i] = cal_profile_string(p, paths[i], strlen(paths[i]));
    }
    th = cal_profile_thread(p, 77, 1234, 1);
    cal_profile_set_thread_name(p, th, "MainThread");
    for (int k = 0; k < 2; k++) {
        int i = reverse ? 1 - k : k;
        uint32_t name = cal_profile_string(p, i ? "g" : "f", 1);
        funcs[i] = cal_profile_function(p, files[i], name, 10 * (i + 1));
    }
    for (int k = 0; k < 4; k++) {
        int i = reverse ? 3 - k : k;
        cal_times t = T(1000000 * (i + 1), 500, 250, 0);
        cal_profile_add_sample(p, th, files[i % 2], 11 + i, funcs[i % 2], &t);
        cal_profile_add_func_total(p, funcs[i % 2], &t);
    }
    cal_times u = T(0, 0, 0, 5000000);
    cal_profile_add_sample(p, th, CAL_PROFILE_NONE, 0, CAL_PROFILE_NONE, &u);
    cal_profile_set_wall(p, 20000000);
}

static cal_meta test_meta(void)
{
    static const char *argv[] = {"prog.py", "--flag"};
    cal_meta m = {0};
    m.calipers_version = "0.0-test";
    m.python_version = "3.11.7";
    m.python_executable = "/usr/bin/python3";
    m.cwd = "/w";
    m.script = "/w/a.py";
    m.argv = argv;
    m.argc = 2;
    m.pid = 1;
    m.interval_ns = 10000000;
    return m;
}

static void test_profile(void)
{
    cal_profile *p = cal_profile_new();
    build_profile(p, 0);
    CHECK(cal_profile_nlines(p) == 4);
    CHECK(cal_profile_nfuncs(p) == 2);
    CHECK(cal_profile_nthreads(p) == 1);
    const cal_thread_stat *th = cal_profile_thread_at(p, 0);
    CHECK(th->t.samples == 5);
    CHECK(th->unattributed.samples == 1);
    CHECK(th->unattributed.waiting_ns == 5000000);
    CHECK(th->t.python_ns == 10000000);
    const cal_func_stat *f = cal_profile_func_at(p, 0);
    CHECK(f->self.python_ns == 1000000 + 3000000);
    CHECK(f->total.python_ns == f->self.python_ns);
    /* the same (ident, tid) is the same thread; a new tid is a new one */
    CHECK(cal_profile_thread(p, 77, 1234, 1) == 0);
    CHECK(cal_profile_thread(p, 77, 999, 0) == 1);
    /* a native thread that later runs Python keeps its entry (and what it
       was credited as native), found under either name */
    uint32_t nat = cal_profile_thread(p, 0, 555, 0);
    CHECK(nat == 2);
    cal_times native = T(0, 7000000, 0, 0);
    cal_profile_add_sample(p, nat, CAL_PROFILE_NONE, 0, CAL_PROFILE_NONE, &native);
    cal_profile_set_thread_name(p, nat, "worker");
    CHECK(cal_profile_thread(p, 88, 555, 0) == nat);
    CHECK(cal_profile_thread(p, 88, 555, 0) == nat);
    /* ... and by its kernel id alone (a C thread's allocation made while
       it had no thread state): the same row, not a second one */
    CHECK(cal_profile_thread(p, 0, 555, 0) == nat);
    /* a Python thread first seen by its ident, then by its kernel id
       alone: one row too */
    uint32_t py = cal_profile_thread(p, 99, 777, 0);
    CHECK(cal_profile_thread(p, 0, 777, 0) == py);
    CHECK(cal_profile_thread(p, 99, 777, 0) == py);
    CHECK(cal_profile_nthreads(p) == 4);
    CHECK(cal_profile_thread_at(p, nat)->ident == 88);
    CHECK(cal_profile_thread_at(p, nat)->name == CAL_PROFILE_NONE);
    CHECK(cal_profile_thread_at(p, nat)->t.native_ns == 7000000);
    /* adding to a line accumulates */
    cal_times t = T(5, 0, 0, 0);
    uint32_t a = cal_profile_string(p, "/w/a.py", 7);
    cal_profile_add_sample(p, 0, a, 11, 0, &t);
    CHECK(cal_profile_nlines(p) == 4);
    cal_profile_free(p);
}

static void test_json_writer(void)
{
    cal_buf b;
    cal_buf_init(&b);
    cal_json j;
    cal_json_init(&j, &b, 0);
    cal_json_object_begin(&j);
    cal_json_key(&j, "s");
    cal_json_string(&j, "q\"b\\n\n\x01</script>\xff\xc3\xa9");
    cal_json_key(&j, "a");
    cal_json_array_begin(&j);
    cal_json_int(&j, -3);
    cal_json_seconds(&j, 1500);
    cal_json_seconds(&j, 0);
    cal_json_seconds(&j, -2500000000LL);
    cal_json_bool(&j, 1);
    cal_json_null(&j);
    cal_json_fixed(&j, 1.23456, 2);
    cal_json_fixed(&j, -0.0001, 2);
    cal_json_fixed(&j, NAN, 2);
    cal_json_array_end(&j);
    cal_json_key(&j, "e");
    cal_json_object_begin(&j);
    cal_json_object_end(&j);
    cal_json_object_end(&j);
    const char *want =
        "{\"s\":\"q\\\"b\\\\n\\n\\u0001\\u003c/script>\\ufffd\xc3\xa9\","
        "\"a\":[-3,0.000002,0.000000,-2.500000,true,null,1.23,0.00,null],"
        "\"e\":{}}";
    CHECK(strcmp(b.data, want) == 0);
    if (strcmp(b.data, want) != 0)
        fprintf(stderr, "got:  %s\nwant: %s\n", b.data, want);
    cal_buf_free(&b);

    /* Numbers, written without printf, as printf would write them. */
    static const int64_t ints[] = {0,        1,         -1,        9,
                                   10,       -10,       999999,    1000000,
                                   -1000001, INT64_MAX, INT64_MIN, INT64_MIN + 1};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        for (int secs = 0; secs < 2; secs++) {
            char expect[64];
            int64_t v = ints[i];
            if (!secs) {
                snprintf(expect, sizeof expect, "%lld", (long long)v);
            } else {
                uint64_t us = (v < 0 ? 0 - (uint64_t)v : (uint64_t)v);
                us = us / 1000 + (us % 1000 >= 500);
                snprintf(expect, sizeof expect, "%s%llu.%06llu", v < 0 && us ? "-" : "",
                         (unsigned long long)(us / 1000000),
                         (unsigned long long)(us % 1000000));
            }
            cal_buf_init(&b);
            cal_json_init(&j, &b, 0);
            if (secs)
                cal_json_seconds(&j, v);
            else
                cal_json_int(&j, v);
            CHECK(strcmp(b.data, expect) == 0);
            if (strcmp(b.data, expect) != 0)
                fprintf(stderr, "got:  %s\nwant: %s\n", b.data, expect);
            cal_buf_free(&b);
        }
    }

    /* Indented, with one flat part: a list of pairs on one line. */
    cal_buf_init(&b);
    cal_json_init(&j, &b, 1);
    cal_json_object_begin(&j);
    cal_json_key(&j, "t");
    cal_json_flat(&j);
    cal_json_array_begin(&j);
    for (int i = 1; i <= 2; i++) {
        cal_json_array_begin(&j);
        cal_json_int(&j, i);
        cal_json_int(&j, 10 * i);
        cal_json_array_end(&j);
    }
    cal_json_array_end(&j);
    cal_json_key(&j, "u");
    cal_json_array_begin(&j);
    cal_json_int(&j, 7);
    cal_json_array_end(&j);
    cal_json_object_end(&j);
    want = "{\n \"t\": [[1,10],[2,20]],\n \"u\": [\n  7\n ]\n}";
    CHECK(strcmp(b.data, want) == 0);
    if (strcmp(b.data, want) != 0)
        fprintf(stderr, "got:  %s\nwant: %s\n", b.data, want);
    cal_buf_free(&b);
}

/* The widest line of terminal text, in columns: ANSI sequences take none. */
static int max_visible_width(const char *s)
{
    int widest = 0, cols = 0;
    for (; *s; s++) {
        if (*s == '\033') {
            while (*s && *s != 'm')
                s++;
            if (!*s)
                break;
            continue;
        }
        if (*s == '\n') {
            widest = cols > widest ? cols : widest;
            cols = 0;
        } else if ((*s & 0xC0) != 0x80) {
            cols++;
        }
    }
    return cols > widest ? cols : widest;
}

/* max_visible_width, less the lines that hold one word alone after their
   indentation: prose prints a word longer than a line whole, on a line of
   its own (it may be a path the reader has to copy); no other line may be
   wider than asked. */
static int max_wrapped_width(const char *text)
{
    int widest = 0;
    size_t n = strlen(text);
    char *line = malloc(n + 1);
    if (!line)
        return max_visible_width(text);
    for (const char *s = text; *s;) {
        size_t len = strcspn(s, "\n");
        size_t k = 0; /* the line without its ANSI sequences */
        for (size_t i = 0; i < len; i++) {
            if (s[i] == '\033') {
                while (i < len && s[i] != 'm')
                    i++;
                continue;
            }
            line[k++] = s[i];
        }
        line[k] = '\0';
        const char *word = line + strspn(line, " ");
        int w = max_visible_width(line);
        if (w > widest && (!*word || strchr(word, ' ')))
            widest = w;
        s += len + (s[len] == '\n');
    }
    free(line);
    return widest;
}

/* A file of tests/data (malloc'd), or NULL. */
static char *read_fixture(const char *path, size_t *len);

static void test_fuzz(const char *generated, size_t n);

/* A profile's JSON, as another process of the run would write it. */
static char *profile_json(cal_profile *p, double start_unix, size_t *len)
{
    cal_meta m = test_meta();
    m.start_unix = start_unix;
    cal_buf b;
    cal_buf_init(&b);
    cal_report_json(p, &m, &b);
    *len = b.len;
    return b.data;
}

static void test_merge(void)
{
    /* The same program in two processes: every figure doubles, and each
       line knows both processes' shares. */
    cal_profile *child = cal_profile_new(), *q = cal_profile_new();
    build_profile(child, 0);
    build_profile(q, 1);
    cal_memory *cm = cal_profile_memory(child), *qm = cal_profile_memory(q);
    cm->enabled = qm->enabled = 1;
    cal_series_add(&cm->footprint, 0, 100);
    cal_series_add(&cm->footprint, 10000000, 300);
    cm->peak = 300;
    cal_series_add(&qm->footprint, 0, 50);
    cal_series_add(&qm->footprint, 20000000, 50);
    qm->peak = 50;
    cal_profile_process_mut(child, 0)->pid = 42;
    size_t len;
    char *text = profile_json(child, 1000.005, &len);
    cal_jdoc doc;
    char err[200];
    CHECK(cal_jdoc_parse(&doc, text, len, err, sizeof err) == 0);
    CHECK(cal_merge_add(q, doc.root, 1000.0, err, sizeof err) == 0);
    CHECK(cal_profile_nprocesses(q) == 2);
    CHECK(cal_profile_process_at(q, 1)->pid == 42);
    CHECK(cal_profile_process_at(q, 1)->start_ns == 5000000);
    CHECK(cal_profile_process_at(q, 0)->peak == 50); /* its own, before the sum */
    CHECK(cal_profile_nthreads(q) == 2);
    CHECK(cal_profile_thread_at(q, 1)->process == 1);
    CHECK(cal_profile_thread_at(q, 1)->unattributed.waiting_ns == 5000000);
    CHECK(cal_profile_nlines(q) == 4);
    for (size_t i = 0; i < cal_profile_nlines(q); i++) {
        const cal_line_stat *ls = cal_profile_line_at(q, i);
        int64_t want = 2 * (1000000 * (ls->line - 10));
        CHECK(llabs(ls->t.python_ns - want) <= 1000);
        CHECK(ls->t.samples == 2);
        CHECK(ls->nprocs == 2 && ls->procs[0].process == 0 &&
              ls->procs[1].process == 1);
        CHECK(llabs(ls->procs[1].ns - ls->procs[0].ns) <= 3000);
    }
    CHECK(cal_profile_nfuncs(q) == 2);
    CHECK(cal_profile_func_at(q, 0)->self.samples == 4);
    /* The footprints add up in time: the child's 300 at 15 ms on q's
       clock, over q's 50. */
    CHECK(qm->peak == 350);
    cal_jdoc_free(&doc);
    free(text);

    /* The merged profile writes a valid profile, with the processes. */
    text = profile_json(q, 1000.0, &len);
    CHECK(cal_jdoc_parse(&doc, text, len, err, sizeof err) == 0);
    CHECK(cal_view_check(doc.root, err, sizeof err) == 0);
    CHECK(cal_jv_len(cal_jv_get(doc.root, "processes")) == 2);
    CHECK(strstr(text, "\"processes\": [[0,") != NULL);
    cal_jdoc_free(&doc);
    free(text);

    /* Not a profile: refused, nothing added. */
    CHECK(cal_jdoc_parse(&doc, "{\"schema\": \"other\"}", 19, err, sizeof err) == 0);
    CHECK(cal_merge_add(q, doc.root, 1000.0, err, sizeof err) == -1);
    CHECK(cal_profile_nprocesses(q) == 2);
    cal_jdoc_free(&doc);
    cal_profile_free(child);
    cal_profile_free(q);
}

static void test_report_deterministic(void)
{
    cal_profile *p1 = cal_profile_new(), *p2 = cal_profile_new();
    build_profile(p1, 0);
    build_profile(p2, 1);
    cal_meta m = test_meta();
    cal_buf b1, b2;
    cal_buf_init(&b1);
    cal_buf_init(&b2);
    cal_report_json(p1, &m, &b1);
    cal_report_json(p2, &m, &b2);
    CHECK(b1.len > 0 && b1.len == b2.len && memcmp(b1.data, b2.data, b1.len) == 0);
    CHECK(strstr(b1.data, "\"schema\": \"calipers/1\"") != NULL);
    /* files in path order, lines in number order */
    const char *a = strstr(b1.data, "/w/a.py\""), *bb = strstr(b1.data, "/w/b.py\"");
    CHECK(a && bb && a < bb);
    const char *l11 = strstr(b1.data, "\"line\": 11"),
               *l13 = strstr(b1.data, "\"line\": 13");
    CHECK(l11 && l13 && l11 < l13);

    /* The renderers read it back: the terminal report fits the width, in
       colour and in plain ASCII. */
    cal_jdoc doc;
    char err[200];
    CHECK(cal_jdoc_parse(&doc, b1.data, b1.len, err, sizeof err) == 0);
    CHECK(cal_view_check(doc.root, err, sizeof err) == 0);
    cal_buf s;
    for (int tty = 0; tty <= 1; tty++) {
        cal_view_opts o = {100, tty, 1.0, 300, "out.json", 0, 0};
        cal_buf_init(&s);
        cal_view_text(doc.root, &o, &s);
        CHECK(s.data && strstr(s.data, "a.py") != NULL);
        CHECK(strstr(s.data, "out.json") != NULL);
        CHECK(max_visible_width(s.data) <= 100);
        if (!tty) {
            int ascii = 1;
            for (const char *c = s.data; *c; c++)
                ascii &= (unsigned char)*c < 0x80 && *c != '\033';
            CHECK(ascii);
        }
        cal_buf_free(&s);
    }
    cal_jdoc_free(&doc);
    test_fuzz(b1.data, b1.len);
    cal_buf_free(&b1);
    cal_buf_free(&b2);
    cal_profile_free(p1);
    cal_profile_free(p2);
}

static void test_jsonr(void)
{
    static const char *text =
        "\xEF\xBB\xBF {\"a\": [1, -2.5e3, 0.000125, 1e-310, 12345678901234567890123],"
        " \"s\": \"x\\u00e9\\ud83d\\ude00\\n\\\"\", \"t\": true, \"f\": false, \"z\": "
        "null,"
        " \"bad\": \"\xff\", \"lone\": \"\\udc00\", \"e\": {}, \"ea\": []}";
    cal_jdoc d;
    char err[128];
    CHECK(cal_jdoc_parse(&d, text, strlen(text), err, sizeof err) == 0);
    const cal_jv *a = cal_jv_get(d.root, "a");
    CHECK(cal_jv_len(a) == 5);
    CHECK(cal_jv_num(cal_jv_at(a, 0), 0) == 1);
    CHECK(cal_jv_num(cal_jv_at(a, 1), 0) == -2500);
    CHECK(fabs(cal_jv_num(cal_jv_at(a, 2), 0) - 0.000125) < 1e-18);
    CHECK(cal_jv_num(cal_jv_at(a, 3), 1) > 0 &&
          cal_jv_num(cal_jv_at(a, 3), 1) < 1e-300);
    CHECK(fabs(cal_jv_num(cal_jv_at(a, 4), 0) / 1.2345678901234568e22 - 1) < 1e-12);
    CHECK(strcmp(cal_jv_getstr(d.root, "s", ""), "x\xC3\xA9\xF0\x9F\x98\x80\n\"") == 0);
    CHECK(cal_jv_bool(cal_jv_get(d.root, "t"), 0) == 1 &&
          cal_jv_bool(cal_jv_get(d.root, "f"), 1) == 0);
    CHECK(cal_jv_is(cal_jv_get(d.root, "z"), CAL_JNULL));
    CHECK(strcmp(cal_jv_getstr(d.root, "bad", ""), "\xEF\xBF\xBD") == 0); /* U+FFFD */
    CHECK(strcmp(cal_jv_getstr(d.root, "lone", ""), "\xEF\xBF\xBD") == 0);
    CHECK(cal_jv_is(cal_jv_get(d.root, "e"), CAL_JOBJ) &&
          cal_jv_len(cal_jv_get(d.root, "ea")) == 0);
    /* Wrong types and missing keys answer the default. */
    CHECK(cal_jv_get(a, "x") == NULL && cal_jv_at(d.root, 99) == NULL);
    CHECK(cal_jv_getnum(d.root, "s", 7) == 7 && cal_jv_getstr(NULL, "s", NULL) == NULL);
    cal_jdoc_free(&d);

    static const struct {
        const char *text, *where;
    } bad[] = {
        {"", "line 1 column 1"},
        {"{\"a\" 1}", "expected ':'"},
        {"[1,]", "line 1 column 4"},
        {"[01]", "expected ','"},
        {"\"abc", "unterminated"},
        {"{\"a\":1}}", "after the document"},
        {"[1e999]", "out of range"},
        {"\"\\x\"", "invalid escape"},
        {"\"a\tb\"", "control character"},
        {"[1,\n 2,\n x]", "line 3 column 2"},
        {"nul", "unexpected"},
        {"-", "invalid number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = cal_jdoc_parse(&d, bad[i].text, strlen(bad[i].text), err, sizeof err);
        CHECK(rc == -1 && strstr(err, bad[i].where) != NULL);
        if (rc == 0 || !strstr(err, bad[i].where))
            fprintf(stderr, "  %s -> %s\n", bad[i].text, err);
        cal_jdoc_free(&d);
    }
    /* Nesting is limited (no stack overflow on hostile input). */
    char deep[4096];
    memset(deep, '[', sizeof deep);
    CHECK(cal_jdoc_parse(&d, deep, sizeof deep, err, sizeof err) == -1 &&
          strstr(err, "deeply"));
    cal_jdoc_free(&d);

    /* The check: schema name and shape. */
    static const struct {
        const char *text, *why;
    } foreign[] = {
        {"[]", "not a calipers profile"},
        {"{\"schema\": \"calipers/2\"}", "calipers/2"},
        {"{\"schema\": \"calipers/1\", \"program\": {}, \"summary\": {}}", "\"files\""},
    };
    for (size_t i = 0; i < sizeof foreign / sizeof *foreign; i++) {
        CHECK(cal_jdoc_parse(&d, foreign[i].text, strlen(foreign[i].text), err,
                             sizeof err) == 0);
        CHECK(cal_view_check(d.root, err, sizeof err) == -1 &&
              strstr(err, foreign[i].why));
        cal_jdoc_free(&d);
    }
}

/* The HTML page: holes filled, and nothing in the profile can end the
   <script> element or turn into markup. */
static void test_html(void)
{
    static const char *tmpl =
        "<title>CALIPERS_TITLE</title><script>CALIPERS_PROFILE</script>";
    static const char *json =
        "{\"schema\": \"calipers/1\", \"program\": {\"argv\": "
        "[\"/x/<img src=x onerror=alert(1)>.py\"]}, \"summary\": {}, "
        "\"files\": [{\"source\": [\"</script><script>alert(1)</script>\"]}]}";
    cal_jdoc d;
    char err[128];
    CHECK(cal_jdoc_parse(&d, json, strlen(json), err, sizeof err) == 0);
    cal_buf b;
    cal_buf_init(&b);
    cal_view_html(d.root, json, strlen(json), tmpl, strlen(tmpl), &b);
    CHECK(strstr(b.data, "<title>&lt;img src=x onerror=alert(1)&gt;.py</title>") !=
          NULL);
    CHECK(strstr(b.data, "\\u003c/script>\\u003cscript>alert(1)\\u003c/script>") !=
          NULL);
    /* One <script> and one </script>: the template's. */
    const char *first = strstr(b.data, "</script>");
    CHECK(first && strstr(first + 1, "</script>") == NULL);
    cal_buf_free(&b);
    cal_jdoc_free(&d);
}

static uint64_t fuzz_state = 88172645463325252ull;

static uint64_t fuzz_next(void)
{
    fuzz_state ^= fuzz_state << 13;
    fuzz_state ^= fuzz_state >> 7;
    fuzz_state ^= fuzz_state << 17;
    return fuzz_state;
}

/* Mutation fuzzing of the reader and both renderers: flip, insert, delete
   and duplicate bytes of real profiles; whatever parses and passes the
   check is rendered at a random width, in both modes.  Under ASan/UBSan
   (the c-core-sanitize tier) any out-of-bounds access or UB fails it. */
static void fuzz_profile(const char *seed, size_t n, int rounds)
{
    char *buf = malloc(n * 2 + 64);
    size_t parsed = 0, rendered = 0;
    for (int r = 0; r < rounds; r++) {
        size_t len = n;
        memcpy(buf, seed, n);
        int edits = 1 + (int)(fuzz_next() % 8);
        for (int e = 0; e < edits && len > 1; e++) {
            size_t at = fuzz_next() % len;
            static const char interesting[] = "{}[]\",:\\0-e.\x01\x1b\xff\xc3";
            char c = fuzz_next() % 2
                         ? (char)(fuzz_next() & 0xFF)
                         : interesting[fuzz_next() % (sizeof interesting - 1)];
            switch (fuzz_next() % 5) {
            case 0:
                buf[at] = c;
                break;
            case 1: /* insert */
                if (len < n * 2 + 32) {
                    memmove(buf + at + 1, buf + at, len - at);
                    buf[at] = c;
                    len++;
                }
                break;
            case 2: /* delete a run */ {
                size_t k = 1 + fuzz_next() % 16;
                if (at + k > len)
                    k = len - at;
                memmove(buf + at, buf + at + k, len - at - k);
                len -= k;
                break;
            }
            case 3:
                len = at + 1;
                break; /* truncate */
            default: /* duplicate a run */ {
                size_t k = 1 + fuzz_next() % 32;
                if (at + k > len)
                    k = len - at;
                if (len + k <= n * 2 + 32) {
                    memmove(buf + at + k, buf + at, len - at);
                    len += k;
                }
            }
            }
        }
        cal_jdoc d;
        char err[128];
        if (cal_jdoc_parse(&d, buf, len, err, sizeof err) == 0) {
            parsed++;
            if (cal_view_check(d.root, err, sizeof err) == 0) {
                cal_view_opts o = {60 + (int)(fuzz_next() % 140),
                                   (int)(fuzz_next() % 2),
                                   1.0,
                                   300,
                                   NULL,
                                   (int)(fuzz_next() % 2),
                                   (int)(fuzz_next() % 2)};
                cal_buf b;
                cal_buf_init(&b);
                cal_view_text(d.root, &o, &b);
                if (b.data && max_wrapped_width(b.data) > o.width) {
                    CHECK(max_wrapped_width(b.data) <= o.width);
                    for (char *ln = b.data, *nl; (nl = strchr(ln, '\n')); ln = nl + 1) {
                        *nl = '\0';
                        if (max_wrapped_width(ln) > o.width) {
                            fprintf(stderr, "  wider than %d: %s\n", o.width, ln);
                            break;
                        }
                    }
                }
                cal_view_html(d.root, buf, len, "CALIPERS_TITLE CALIPERS_PROFILE", 31,
                              &b);
                cal_buf_free(&b);
                rendered++;
            }
        }
        cal_jdoc_free(&d);
    }
    free(buf);
    CHECK(parsed > 0 && rendered > 0); /* the fuzzer reached the renderers */
}

static void test_fuzz(const char *generated, size_t n)
{
    fuzz_profile(generated, n, 4000);
    static const char *const fixtures[] = {
        "tests/data/memory.json", "tests/data/cpu.json", "tests/data/empty.json",
        "tests/data/procs.json", "tests/data/stacks.json"};
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) {
        size_t len;
        char *text = read_fixture(fixtures[i], &len);
        if (!text)
            continue;
        fuzz_profile(text, len, 1500);
        free(text);
    }
}

static void test_notes(void)
{
    cal_meta m = test_meta();
    cal_profile *p = cal_profile_new();
    cal_profile_set_wall(p, 3000000);
    cal_buf b;
    cal_buf_init(&b);
    CHECK(cal_report_notes(p, &m, &b) == 1);
    CHECK(strstr(b.data, "No samples were taken") && strstr(b.data, "--interval"));
    cal_buf_free(&b);

    uint32_t th = cal_profile_thread(p, 1, 1, 1);
    cal_times t = T(1000, 0, 0, 0);
    for (int i = 0; i < 20; i++)
        cal_profile_add_sample(p, th, CAL_PROFILE_NONE, 0, CAL_PROFILE_NONE, &t);
    cal_buf_init(&b);
    CHECK(cal_report_notes(p, &m, &b) == 1);
    CHECK(strstr(b.data, "--profile-all") != NULL);
    cal_buf_free(&b);

    static const char *only[] = {"mypkg"};
    m.profile_only = only;
    m.nprofile_only = 1;
    cal_buf_init(&b);
    cal_report_notes(p, &m, &b);
    CHECK(strstr(b.data, "--profile-only mypkg") != NULL);
    cal_buf_free(&b);
    cal_profile_free(p);
}

/* The terminal report wraps prose and never cuts a word: a path longer
   than the line is printed whole, alone on its line (it used to end in
   '~' at the width, so the preload path of the in-process note could not
   be copied). */
static void test_text_long_word(void)
{
    static const char path[] =
        "/home/someone/projects/with/a/deep/tree/.venv/lib/python3.12/"
        "site-packages/calipers/libcalipers_shim.so";
    /* A real (empty) profile whose note is the in-process one. */
    FILE *f = fopen("tests/data/empty.json", "rb");
    CHECK(f != NULL); /* run from the repository root */
    if (!f)
        return;
    static char fixture[65536], json[66000];
    size_t len = fread(fixture, 1, sizeof fixture - 1, f);
    fclose(f);
    fixture[len] = '\0';
    char *notes = strstr(fixture, "\"notes\": [");
    CHECK(notes != NULL);
    if (!notes)
        return;
    char *after = strchr(notes, ']');
    snprintf(json, sizeof json,
             "%.*s\"notes\": [\"Memory was not profiled: start Python with "
             "LD_PRELOAD=%s\"%s",
             (int)(notes - fixture), fixture, path, after);
    cal_jdoc d;
    char err[128];
    CHECK(cal_jdoc_parse(&d, json, strlen(json), err, sizeof err) == 0);
    CHECK(cal_view_check(d.root, err, sizeof err) == 0);
    for (int tty = 0; tty <= 1; tty++) {
        cal_view_opts o = {60, tty, 1.0, 300, NULL, 0, 0};
        cal_buf b;
        cal_buf_init(&b);
        cal_view_text(d.root, &o, &b);
        char whole[256];
        snprintf(whole, sizeof whole, "\n                LD_PRELOAD=%s\n", path);
        CHECK(b.data && strstr(b.data, whole) != NULL);
        CHECK(max_visible_width(b.data) > 60 && max_wrapped_width(b.data) <= 60);
        cal_buf_free(&b);
    }
    cal_jdoc_free(&d);
}

static void test_rand(void)
{
    cal_rand r;
    cal_rand_seed(&r, 12345);
    double sum = 0, sumsq = 0;
    int n = 200000, ok = 1;
    for (int i = 0; i < n; i++) {
        double x = cal_rand_exp(&r, 10.0);
        ok &= x > 0 && isfinite(x);
        sum += x;
        sumsq += x * x;
    }
    double mean = sum / n, var = sumsq / n - mean * mean;
    CHECK(ok);
    CHECK(fabs(mean - 10.0) < 0.2);      /* sd of the mean: 10/sqrt(n) = 0.022 */
    CHECK(fabs(sqrt(var) - 10.0) < 0.3); /* exponential: sd == mean */
}

static volatile double spin_sink;

static void *spin(void *arg)
{
    double x = 0;
    for (long i = 0; i < 20000000; i++)
        x += (double)i;
    spin_sink = x;
    (void)arg;
    return NULL;
}

static int noted_tid;

static void *note_tid(void *arg)
{
    noted_tid = (int)gettid();
    return arg;
}

/* Field 20 of /proc/self/stat: the kernel's count of this process's threads. */
static int threads_counted(void)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the name may hold spaces */
    int field = 2;
    for (; p && *p; p++)
        if (*p == ' ' && ++field == 20)
            return atoi(p + 1);
    return -1;
}

/* Process-info entries as drivers write them: 24 bytes (pid, memory, two
   MIG ids) or, from a header some drivers shipped, 32 (one more field). */
static void put_entry(unsigned char *e, uint32_t pid, uint64_t mem, size_t stride)
{
    uint32_t none = 0xFFFFFFFFu;
    uint64_t zero = 0;
    memcpy(e, &pid, 4);
    memset(e + 4, 0, 4);
    memcpy(e + 8, &mem, 8);
    memcpy(e + 16, &none, 4);
    memcpy(e + 20, &none, 4);
    if (stride == 32)
        memcpy(e + 24, &zero, 8);
}

static void test_gpu_entries(void)
{
    /* The reader tries 24 first, 32 only when 24 reads nonsense. */
    unsigned char buf[4 * 32];
    memset(buf, 0, sizeof buf);
    for (int k = 0; k < 3; k++)
        put_entry(buf + k * 24, 100 + k, (uint64_t)(k + 1) << 30, 24);
    CHECK(cal_gpu_entries_plausible(buf, 3, 24));
    memset(buf, 0, sizeof buf);
    for (int k = 0; k < 3; k++)
        put_entry(buf + k * 32, 100 + k, (uint64_t)(k + 1) << 30, 32);
    CHECK(!cal_gpu_entries_plausible(buf, 3, 24)); /* entry 1 at 24 reads pid 0 */
    CHECK(cal_gpu_entries_plausible(buf, 3, 32));
    CHECK(cal_gpu_entries_plausible(buf, 1, 24)); /* one entry: both read alike */
    CHECK(cal_gpu_entries_plausible(buf, 0, 24));
    /* MIG ids are small when set */
    put_entry(buf, 7, 1, 24);
    uint32_t gi = 3;
    memcpy(buf + 16, &gi, 4);
    CHECK(cal_gpu_entries_plausible(buf, 1, 24));
    gi = 12345;
    memcpy(buf + 16, &gi, 4);
    CHECK(!cal_gpu_entries_plausible(buf, 1, 24));
    /* no NVML here: nothing to say */
    char err[128] = "x";
    CHECK(cal_gpu_open("libcalipers-no-such-nvml.so.1", err, sizeof err) == NULL);
    CHECK(err[0] == 0);
}

static void test_clock(void)
{
    pthread_t t;
    pthread_create(&t, NULL, spin, NULL);
    clockid_t sched;
    CHECK(pthread_getcpuclockid(t, &sched) == 0);
    clockid_t base = cal_clock_thread_base(sched);
    pthread_join(t, NULL);
    /* once the kernel has let the thread go, reads fail instead of crashing */
    CHECK(cal_clock_wait_thread_gone(cal_clock_thread_tid(base)) == 0);
    cal_thread_times tt;
    CHECK(cal_clock_thread_times_sigsafe(base, &tt) == -1);
    /* a thread that is still here is waited for only until the limit */
    CHECK(cal_clock_wait_thread_gone((int)gettid()) == -1);
    /* and after the wait the kernel no longer counts the joined thread:
       pthread_join alone returns a moment too early, now and then */
    for (int i = 0; i < 2000; i++) {
        pthread_create(&t, NULL, note_tid, NULL);
        pthread_join(t, NULL);
        CHECK(cal_clock_wait_thread_gone(noted_tid) == 0);
        CHECK(threads_counted() == 1);
    }

    CHECK(pthread_getcpuclockid(pthread_self(), &sched) == 0);
    base = cal_clock_thread_base(sched);
    CHECK(cal_clock_thread_tid(base) == (int)gettid());
    CHECK(cal_clock_thread_base_for_tid((int)gettid()) == base);
    cal_thread_times before, mid, after;
    CHECK(cal_clock_thread_times_sigsafe(base, &before) == 0);
    spin(NULL);
    CHECK(cal_clock_thread_times_sigsafe(base, &mid) == 0);
    int fd = open("/dev/urandom", O_RDONLY);
    static char buf[1 << 16];
    /* 200 ms of this thread's CPU (not of wall time: on a loaded machine
       the thread may run for a fraction of it), mostly in the kernel: large
       reads, so that the work per call is the kernel's (with 256-byte reads
       AddressSanitizer's interception of read() took most of it, and the
       kernel's share fell below a quarter once in CI) */
    do {
        for (int k = 0; k < 16; k++)
            if (read(fd, buf, sizeof buf) < 0)
                break;
        CHECK(cal_clock_thread_times_sigsafe(base, &after) == 0);
    } while (after.cpu_ns - mid.cpu_ns < 200000000);
    close(fd);
    CHECK(mid.cpu_ns > before.cpu_ns);
    /* accounting is tick based: a quarter is far below what reads give */
    CHECK(after.system_ns - mid.system_ns > 50000000);
    CHECK(after.system_ns <= after.cpu_ns + 20000000);
}

static int blocker_pipe[2];
static int blocker_tid;

static void *block_on_pipe(void *arg)
{
    (void)arg;
    __atomic_store_n(&blocker_tid, (int)gettid(), __ATOMIC_RELEASE);
    char c;
    while (read(blocker_pipe[0], &c, 1) < 0 && errno == EINTR)
        ;
    return NULL;
}

/* Start a thread that blocks in read() on blocker_pipe, and wait until it
   does (up to 2 s on a loaded machine).  Returns its kernel id, or 0 if it
   was not seen blocked. */
static int start_blocked_reader(pthread_t *t)
{
    CHECK(pipe(blocker_pipe) == 0);
    blocker_tid = 0;
    pthread_create(t, NULL, block_on_pipe, NULL);
    for (int i = 0; i < 2000; i++) {
        int tid = __atomic_load_n(&blocker_tid, __ATOMIC_ACQUIRE);
        if (tid > 0 && cal_clock_thread_runnable(tid) == 0)
            return tid;
        usleep(1000);
    }
    return 0;
}

/* Runnable (state R) or not, as the sampler's blocked rule asks. */
static void test_runnable(void)
{
    CHECK(cal_clock_thread_runnable((int)gettid()) == 1); /* running is R */
    CHECK(cal_clock_thread_runnable(0) == -1);
    pthread_t t;
    int tid = start_blocked_reader(&t);
    CHECK(tid > 0);
    CHECK(write(blocker_pipe[1], "x", 1) == 1);
    pthread_join(t, NULL);
    CHECK(cal_clock_wait_thread_gone(tid) == 0);
    CHECK(cal_clock_thread_runnable(tid) == -1); /* gone */
    close(blocker_pipe[0]);
    close(blocker_pipe[1]);
}

static pthread_mutex_t futex_held = PTHREAD_MUTEX_INITIALIZER;
static int futex_waiter_tid;

static void *wait_on_mutex(void *arg)
{
    (void)arg;
    __atomic_store_n(&futex_waiter_tid, (int)gettid(), __ATOMIC_RELEASE);
    pthread_mutex_lock(&futex_held);
    pthread_mutex_unlock(&futex_held);
    return NULL;
}

/* The futex word a thread waits on, as the sampler tells a main thread
   waiting for the GIL from one blocked elsewhere. */
static void test_futex_wait(void)
{
    uintptr_t addr = 0;
    CHECK(cal_clock_thread_futex_wait((int)gettid(), &addr) == 0); /* running */
    CHECK(cal_clock_thread_futex_wait(0, &addr) == -1);
    /* blocked in read(): not a futex */
    pthread_t t;
    int tid = start_blocked_reader(&t);
    CHECK(tid > 0);
    CHECK(cal_clock_thread_futex_wait(tid, &addr) == 0);
    CHECK(write(blocker_pipe[1], "x", 1) == 1);
    pthread_join(t, NULL);
    close(blocker_pipe[0]);
    close(blocker_pipe[1]);
    /* blocked on a mutex: its futex word lies inside the mutex */
    pthread_mutex_lock(&futex_held);
    pthread_create(&t, NULL, wait_on_mutex, NULL);
    int found = 0;
    for (int i = 0; i < 2000 && found != 1; i++) {
        tid = __atomic_load_n(&futex_waiter_tid, __ATOMIC_ACQUIRE);
        found = tid > 0 ? cal_clock_thread_futex_wait(tid, &addr) : 0;
        if (found != 1)
            usleep(1000);
    }
    CHECK(found == 1);
    CHECK(addr >= (uintptr_t)&futex_held && addr < (uintptr_t)(&futex_held + 1));
    pthread_mutex_unlock(&futex_held);
    pthread_join(t, NULL);
}

static void test_buf_write(void)
{
    cal_buf b;
    cal_buf_init(&b);
    cal_buf_printf(&b, "%s %d\n", "hello", 42);
    char path[] = "/tmp/calipers-test-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(cal_buf_write_file(&b, path) == 0);
    FILE *f = fopen(path, "r");
    char line[64] = {0};
    CHECK(f && fgets(line, sizeof line, f) && strcmp(line, "hello 42\n") == 0);
    if (f)
        fclose(f);
    unlink(path);
    CHECK(cal_buf_write_file(&b, "/nonexistent-dir/x.json") == -1);
    cal_buf_free(&b);
}

/* How many entries does `dir` hold besides . and ..? */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    if (d)
        closedir(d);
    return n;
}

/* The writer on a shared machine: a symbolic link planted at the old
   predictable temporary name or at the target itself is never followed,
   nothing but a regular file is replaced (a FIFO, /dev/null, a
   directory), the file gets the umask's mode, and no temporary file is
   left behind. */
static void test_buf_write_safely(void)
{
    cal_buf b;
    cal_buf_init(&b);
    cal_buf_puts(&b, "{}\n");
    char dir[] = "/tmp/calipers-test-XXXXXX", out[64], victim[64], old_tmp[96],
         path[96];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(out, sizeof out, "%s/out.json", dir);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    FILE *f = fopen(victim, "w");
    CHECK(f && fputs("precious\n", f) >= 0);
    if (f)
        fclose(f);
    /* The name the writer used to use, planted. */
    snprintf(old_tmp, sizeof old_tmp, "%s.tmp-%ld", out, (long)getpid());
    CHECK(symlink(victim, old_tmp) == 0);
    mode_t old_mask = umask(022);
    CHECK(cal_buf_write_file(&b, out) == 0);
    struct stat st;
    CHECK(lstat(out, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0644);
    CHECK(stat(victim, &st) == 0 && st.st_size == 9);
    umask(077);
    CHECK(cal_buf_write_file(&b, out) == 0); /* replaced, with the new mode */
    CHECK(lstat(out, &st) == 0 && (st.st_mode & 0777) == 0600 && st.st_size == 3);
    umask(old_mask);
    /* A symbolic link at the target: refused, its target unchanged. */
    snprintf(path, sizeof path, "%s/link.json", dir);
    CHECK(symlink(victim, path) == 0);
    errno = 0;
    CHECK(cal_buf_write_file(&b, path) == -1 && errno == ELOOP);
    CHECK(lstat(path, &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(stat(victim, &st) == 0 && st.st_size == 9);
    unlink(path);
    /* A FIFO: refused at once (opening it would wait for a reader). */
    snprintf(path, sizeof path, "%s/fifo", dir);
    CHECK(mkfifo(path, 0600) == 0);
    errno = 0;
    CHECK(cal_buf_write_file(&b, path) == -1 && errno == EEXIST);
    CHECK(lstat(path, &st) == 0 && S_ISFIFO(st.st_mode));
    unlink(path);
    /* A character device: as root, a null device of our own (the same
       device as /dev/null), so that a writer that regressed cannot replace
       the machine's; otherwise /dev/null itself, whose directory we then
       cannot write. */
    snprintf(path, sizeof path, "%s/null", dir);
    const char *dev =
        mknod(path, S_IFCHR | 0666, makedev(1, 3)) == 0 ? path : "/dev/null";
    errno = 0;
    CHECK(cal_buf_write_file(&b, dev) == -1 && errno == EEXIST);
    CHECK(stat(dev, &st) == 0 && S_ISCHR(st.st_mode));
    if (dev == path)
        unlink(path);
    errno = 0;
    CHECK(cal_buf_write_file(&b, dir) == -1 && errno == EISDIR);
    snprintf(path, sizeof path, "%s/", dir);
    CHECK(cal_buf_write_file(&b, path) == -1 && errno == EISDIR);
    /* A name without a directory is in the working directory. */
    int here = open(".", O_RDONLY | O_DIRECTORY);
    CHECK(here >= 0 && chdir(dir) == 0);
    CHECK(cal_buf_write_file(&b, "plain.json") == 0);
    CHECK(here >= 0 && fchdir(here) == 0);
    if (here >= 0)
        close(here);
    /* out.json, victim, the planted link, plain.json: no temporary file. */
    CHECK(count_entries(dir) == 4);
    const char *names[] = {"out.json", "victim", "plain.json"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    unlink(old_tmp);
    CHECK(rmdir(dir) == 0);
    cal_buf_free(&b);
}

/* The byte sampler: unbiased per stream whatever the sizes, no aliasing with
   a periodic pattern, and huge allocations weighted by their size. */
static void test_bsamp(void)
{
    const int64_t mean = 64 << 10;
    cal_bsamp b;
    cal_bsamp_init(&b, mean, 42);
    /* Period-3 pattern (64, 200, 200 bytes): the 64-byte slot is 64/464 of
       the bytes; a fixed stride would give it all or none of the samples. */
    double small = 0, big = 0, truth_small = 0, truth_big = 0;
    for (long i = 0; i < 3000000; i++) {
        size_t n = i % 3 == 0 ? 64 : 200;
        double w = (double)cal_bsamp_take(&b, n) * (double)mean;
        if (n == 64) {
            small += w;
            truth_small += 64;
        } else {
            big += w;
            truth_big += 200;
        }
    }
    CHECK(fabs(small / truth_small - 1) < 0.05);
    CHECK(fabs(big / truth_big - 1) < 0.03);
    /* A 512 MiB block: ~8192 points, weight within one mean of its size. */
    uint64_t k = cal_bsamp_take(&b, (size_t)512 << 20);
    CHECK(llabs((int64_t)k * mean - ((int64_t)512 << 20)) <= mean);
    /* Disabled: never a sample. */
    cal_bsamp off;
    cal_bsamp_init(&off, 0, 1);
    uint64_t any = 0;
    for (int i = 0; i < 1000; i++)
        any += cal_bsamp_take(&off, 1 << 20);
    CHECK(any == 0);
}

/* RDP keeps the end points and the extremes, and at most `keep` points;
   a series stays bounded however many points it is given. */
static void test_series(void)
{
    cal_point pts[200];
    for (int i = 0; i < 200; i++) {
        pts[i].t = i;
        pts[i].v = i == 77 ? 1000 : i == 150 ? -500 : i % 2;
    }
    size_t n = cal_rdp_reduce(pts, 200, 10);
    CHECK(n == 10);
    CHECK(pts[0].t == 0 && pts[n - 1].t == 199);
    int peak = 0, trough = 0;
    for (size_t i = 0; i < n; i++) {
        peak |= pts[i].t == 77;
        trough |= pts[i].t == 150;
        if (i)
            CHECK(pts[i].t > pts[i - 1].t);
    }
    CHECK(peak && trough);
    static cal_series s;
    cal_series_init(&s);
    for (int i = 0; i < 100000; i++)
        cal_series_add(&s, i, i == 5000 ? 1 << 30 : i);
    CHECK(s.n <= CAL_SERIES_CAP);
    int kept = 0;
    for (size_t i = 0; i < s.n; i++)
        kept |= s.p[i].v == 1 << 30;
    CHECK(kept);
    /* Slope of v = 3t (t in seconds) is 3 per second. */
    cal_point line[3] = {{0, 0}, {1000000000, 3}, {2000000000, 6}};
    CHECK(fabs(cal_series_slope(line, 3) - 3.0) < 1e-9);
}

/* Reads that must fail rather than fault: unmapped memory, and garbage
   pointers whose end wraps around the address space (a torn frame pointer
   of (void *)-1 faulted in the copy before the bounds were checked without
   forming addr + len). */
static void test_vmread(void)
{
    cal_vmread w;
    cal_vmread_reset_sigsafe(&w, getpid());
    long page = sysconf(_SC_PAGESIZE);
    char *map = mmap(NULL, 3 * (size_t)page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(map != MAP_FAILED);
    if (map == MAP_FAILED)
        return;
    for (long i = 0; i < 3 * page; i++)
        map[i] = (char)(i * 7);
    munmap(map + 2 * page, (size_t)page); /* the third page: unmapped */
    char got[CAL_VMREAD_MAX];

    /* A read, then a neighbour from the window, then one across pages. */
    CHECK(cal_vmread_sigsafe(&w, map + page + 100, got, 64) == 0);
    CHECK(memcmp(got, map + page + 100, 64) == 0);
    CHECK(cal_vmread_sigsafe(&w, map + 8, got, 200) == 0); /* the block below */
    CHECK(memcmp(got, map + 8, 200) == 0);
    CHECK(cal_vmread_sigsafe(&w, map + page - 16, got, 32) == 0);
    CHECK(memcmp(got, map + page - 16, 32) == 0);
    /* Into the unmapped page, and wholly in it. */
    CHECK(cal_vmread_sigsafe(&w, map + 2 * page - 8, got, 16) == -1);
    CHECK(cal_vmread_sigsafe(&w, map + 2 * page + 8, got, 8) == -1);
    /* The window still works after a failure. */
    CHECK(cal_vmread_sigsafe(&w, map + 2 * page - 8, got, 8) == 0);
    CHECK(memcmp(got, map + 2 * page - 8, 8) == 0);

    /* Garbage pointers: the top of the address space, wrapping ranges,
       NULL, and too long a read, each with a filled window. */
    uintptr_t garbage[] = {UINTPTR_MAX, UINTPTR_MAX - 3, UINTPTR_MAX - 4096, 0, 8};
    for (size_t i = 0; i < sizeof garbage / sizeof *garbage; i++) {
        CHECK(cal_vmread_sigsafe(&w, map + page, got, 8) == 0);
        CHECK(cal_vmread_sigsafe(&w, (const void *)garbage[i], got, 8) == -1);
        CHECK(cal_vmread_sigsafe(&w, (const void *)garbage[i], got, 1) == -1);
    }
    CHECK(cal_vmread_sigsafe(&w, map, got, CAL_VMREAD_MAX + 1) == -1);
    CHECK(cal_vmread_sigsafe(&w, map + page, got, CAL_VMREAD_MAX) == 0);
    CHECK(memcmp(got, map + page, CAL_VMREAD_MAX) == 0);
    munmap(map, 2 * (size_t)page);
}

/* ---- hostile profiles: the reader's gate and the reports' escaping ------ */

static char *read_fixture(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL); /* run from the repository root */
    if (!f)
        return NULL;
    cal_buf b;
    cal_buf_init(&b);
    char chunk[65536];
    size_t k;
    while ((k = fread(chunk, 1, sizeof chunk, f)) > 0)
        cal_buf_add(&b, chunk, k);
    fclose(f);
    *len = b.len;
    return b.data;
}

/* Member names: one of each, and no NUL (C and a browser would read
   different members). */
static void test_jsonr_member_names(void)
{
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"{\"a\": 1, \"a\": \"x\"}", "two members named \"a\""},
        {"{\"a\": {\"b\": 1, \"c\": 2, \"b\": 3}}",
         "line 1 column 7: two members named \"b\""},
        {"{\"a\\u0000b\": 1}", "NUL in a member name"},
    };
    cal_jdoc d;
    char err[160];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = cal_jdoc_parse(&d, bad[i].text, strlen(bad[i].text), err, sizeof err);
        CHECK(rc == -1 && strstr(err, bad[i].why) != NULL);
        if (rc == 0 || !strstr(err, bad[i].why))
            fprintf(stderr, "  %s -> %s\n", bad[i].text, err);
        cal_jdoc_free(&d);
    }
    /* A large object (sorted, not compared pairwise): the twin far apart. */
    cal_buf b;
    cal_buf_init(&b);
    cal_buf_puts(&b, "{");
    for (int i = 0; i < 500; i++)
        cal_buf_printf(&b, "\"k%d\": %d, ", i, i);
    cal_buf_puts(&b, "\"k7\": 0}");
    CHECK(cal_jdoc_parse(&d, b.data, b.len, err, sizeof err) == -1 &&
          strstr(err, "\"k7\""));
    cal_jdoc_free(&d);
    b.len -= strlen("\"k7\": 0}");
    cal_buf_puts(&b, "\"k500\": 0}");
    CHECK(cal_jdoc_parse(&d, b.data, b.len, err, sizeof err) == 0 &&
          cal_jv_len(d.root) == 501);
    cal_jdoc_free(&d);
    cal_buf_free(&b);
    /* A name in a message is printable ASCII, whatever it was. */
    const char *esc =
        "{\"\\u001b]0;x\\u0007\\u202e\": 1, \"\\u001b]0;x\\u0007\\u202e\": 2}";
    CHECK(cal_jdoc_parse(&d, esc, strlen(esc), err, sizeof err) == -1);
    int printable = 1;
    for (const char *c = err; *c; c++)
        printable &= *c >= 0x20 && *c < 0x7F;
    CHECK(printable && strstr(err, "\"?]0;x??\""));
    cal_jdoc_free(&d);
}

/* Check `text` against the profile's shape: NULL when accepted, else the
   reason (static). */
static const char *view_check_text(const char *text, size_t len)
{
    static char err[300];
    cal_jdoc d;
    int rc = cal_jdoc_parse(&d, text, len, err, sizeof err);
    if (rc == 0)
        rc = cal_view_check(d.root, err, sizeof err);
    cal_jdoc_free(&d);
    return rc == 0 ? NULL : err;
}

static void write_mutated(cal_buf *b, const cal_jv *v, const cal_jv *target,
                          const char *repl);

/* A fixture as compact JSON ("key":value, no blanks), for the edits below. */
static char *compact_fixture(const char *path, size_t *len)
{
    size_t n;
    char *text = read_fixture(path, &n), err[200];
    cal_jdoc d;
    if (!text || cal_jdoc_parse(&d, text, n, err, sizeof err) != 0) {
        CHECK(0);
        free(text);
        return NULL;
    }
    cal_buf b;
    cal_buf_init(&b);
    write_mutated(&b, d.root, NULL, NULL);
    cal_jdoc_free(&d);
    free(text);
    *len = b.len;
    return b.data;
}

/* `doc` with the first `from` replaced by `to`. */
static char *replaced(const char *doc, size_t len, const char *from, const char *to,
                      size_t *out)
{
    const char *at = strstr(doc, from);
    CHECK(at != NULL);
    if (!at) {
        fprintf(stderr, "  no %s\n", from);
        return NULL;
    }
    size_t head = (size_t)(at - doc), n = len - head - strlen(from);
    char *r = malloc(head + strlen(to) + n + 1);
    memcpy(r, doc, head);
    memcpy(r + head, to, strlen(to));
    memcpy(r + head + strlen(to), at + strlen(from), n);
    *out = head + strlen(to) + n;
    r[*out] = '\0';
    return r;
}

/* The shape check: what the renderers and the page's script read has the
   type and range they expect, and the refusal names the member.  (A value
   displaced by an edit lives on as the unknown member "zz".) */
static void test_view_check_shapes(void)
{
    size_t len;
    char *doc = compact_fixture("tests/data/memory.json", &len);
    if (!doc)
        return;
    CHECK(view_check_text(doc, len) == NULL);
    static const struct {
        const char *from, *to, *why;
    } cases[] = {
        {"\"wall_s\":", "\"wall_s\":\"0.8\",\"zz\":",
         "summary.wall_s: expected a number, not a string"},
        {"\"lines\":[{\"line\":", "\"lines\":[{\"line\":\"4\",\"zz\":",
         "files[0].lines[0].line: expected a whole number, not a string"},
        {"\"lines\":[{\"line\":", "\"lines\":[{\"line\":4.5,\"zz\":",
         "files[0].lines[0].line: expected a whole number, not 4.5"},
        {"\"lines\":[{\"line\":", "\"lines\":[{\"line\":1e12,\"zz\":",
         "files[0].lines[0].line: 1000000000000 is out of range (-2147483648 to "
         "2147483647)"},
        {"\"attributed_samples\":", "\"attributed_samples\":-5,\"zz\":",
         "summary.attributed_samples: -5 is out of range"},
        {"\"peak_bytes\":", "\"peak_bytes\":1e16,\"zz\":",
         "summary.memory.peak_bytes: 1e+16 is out of range"},
        {"\"lines\":[", "\"lines\":{\"x\":1},\"zz\":[",
         "files[0].lines: expected an array, not an object"},
        {"\"argv\":[", "\"argv\":[null,",
         "program.argv[0]: expected a string, not null"},
        {"\"cwd\":", "\"cwd\":null,\"zz\":",
         "program.cwd: expected a string, not null"},
        {"\"timeline\":[[", "\"timeline\":[[1],[",
         "summary.memory.timeline[0]: expected 2 items, not 1"},
        {"\"source\":[[", "\"source\":[[0,\"x\"],[",
         "files[0].source[0][0]: 0 is out of range"},
        {"\"python_s\":", "\"py\":", "summary.python_s: missing"},
        {"\"memory\":{\"allocated", "\"memory\":[],\"zz\":{\"allocated",
         "summary.memory: expected an object or null, not an array"},
        {"\"notes\":[]", "\"notes\":[{}]",
         "notes[0]: expected a string, not an object"},
        {"\"cpu_only\":false", "\"cpu_only\":0",
         "config.cpu_only: expected true or false, not a number"},
        {"\"wall_s\":", "\"wall_s\":1e10,\"zz\":",
         "summary.wall_s: 10000000000 is out of range (0 to 1000000000)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t n;
        char *bad = replaced(doc, len, cases[i].from, cases[i].to, &n);
        if (!bad)
            continue;
        const char *why = view_check_text(bad, n);
        CHECK(why && strstr(why, cases[i].why));
        if (!why || !strstr(why, cases[i].why))
            fprintf(stderr, "  %s -> %s -> %s\n", cases[i].from, cases[i].to,
                    why ? why : "accepted");
        free(bad);
    }
    /* What may be missing or null is, and unknown members are ignored. */
    static const struct {
        const char *from, *to;
    } fine[] = {
        {"\"summary\":{",
         "\"summary\":{\"gpu\":null,\"paused_s\":1.5,\"new_thing\":[\"x\"],"},
        {"\"summary\":{",
         "\"summary\":{\"gpu\":{\"available\":false,\"reason\":\"no driver\"},"},
        {"\"memory\":{\"alloc_python_bytes\"",
         "\"memory\":null,\"zz\":{\"alloc_python_bytes\""},
        {"\"source\":[[", "\"source\":null,\"zz\":[["},
        {"\"schema\":\"calipers/1\",", "\"schema\":\"calipers/1\",\"__proto__\":1,"},
        {"\"wall_s\":", "\"wall_s\":1e9,\"zz\":"},
    };
    for (size_t i = 0; i < sizeof fine / sizeof *fine; i++) {
        size_t n;
        char *ok = replaced(doc, len, fine[i].from, fine[i].to, &n);
        if (!ok)
            continue;
        const char *why = view_check_text(ok, n);
        CHECK(why == NULL);
        if (why)
            fprintf(stderr, "  %s -> %s -> %s\n", fine[i].from, fine[i].to, why);
        free(ok);
    }
    free(doc);
}

/* Controls in the user's text are shown as their code in the terminal
   report and the page's title, never obeyed; a byte order mark is not
   embedded in the page (JSON.parse would refuse it). */
static void test_view_controls(void)
{
    size_t len;
    char *doc = compact_fixture("tests/data/cpu.json", &len);
    if (!doc)
        return;
    size_t n1, n2, n3;
    char *a = replaced(doc, len, "\"argv\":[\"tests/programs/",
                       "\"argv\":[\"tests/programs/\\u202e\\u001b[2J", &n1);
    char *b =
        a ? replaced(a, n1, "\"path\":\"", "\"path\":\"\\u2066\\u0085\\ufeff", &n2)
          : NULL;
    char *c = b ? malloc(n2 + 4) : NULL;
    if (!c) {
        free(a);
        free(b);
        free(doc);
        return;
    }
    memcpy(c, "\xEF\xBB\xBF", 3);
    memcpy(c + 3, b, n2 + 1);
    n3 = n2 + 3;
    cal_jdoc d;
    char err[200];
    CHECK(cal_jdoc_parse(&d, c, n3, err, sizeof err) == 0 &&
          cal_view_check(d.root, err, sizeof err) == 0);
    cal_buf out;
    for (int tty = 0; tty <= 1; tty++) {
        for (int width = 60; width <= 160; width += 7) {
            cal_view_opts o = {width, tty, 0, 300, NULL, 0, 0};
            cal_buf_init(&out);
            cal_view_text(d.root, &o, &out);
            CHECK(out.data && strstr(out.data, "<U+202E><U+001B>[2J") != NULL);
            CHECK(strstr(out.data, "<U+2066><U+0085><U+FEFF>") || width < 100);
            CHECK(strstr(out.data, "\xe2\x80\xae") == NULL &&
                  strstr(out.data, "\xe2\x81\xa6") == NULL &&
                  strstr(out.data, "\xc2\x85") == NULL &&
                  strstr(out.data, "\xef\xbb\xbf") == NULL);
            CHECK(max_visible_width(out.data) <= width);
            if (!tty)
                CHECK(strchr(out.data, '\033') == NULL);
            cal_buf_free(&out);
        }
    }
    cal_buf_init(&out);
    cal_view_html(d.root, c, n3, "<title>CALIPERS_TITLE</title>CALIPERS_PROFILE", 45,
                  &out);
    CHECK(strncmp(out.data, "<title>&lt;U+202E&gt;&lt;U+001B&gt;[2J", 38) == 0);
    CHECK(strstr(out.data, "</title>{") != NULL); /* the document, not its BOM */
    cal_buf_free(&out);
    cal_jdoc_free(&d);
    free(a);
    free(b);
    free(c);
    free(doc);
}

/* ---- type-confusion fuzzing: valid JSON, the wrong things in it ------------ */

static void add_json_string(cal_buf *b, const char *s, size_t n)
{
    cal_buf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            cal_buf_printf(b, "\\%c", c);
        else if (c < 0x20)
            cal_buf_printf(b, "\\u%04x", c);
        else
            cal_buf_add(b, s + i, 1);
    }
    cal_buf_puts(b, "\"");
}

/* `v` as JSON, with the node `target` written as `repl` (dropped when
   repl is "", with its member name). */
static void write_mutated(cal_buf *b, const cal_jv *v, const cal_jv *target,
                          const char *repl)
{
    if (v == target) {
        cal_buf_puts(b, repl);
        return;
    }
    switch (v->type) {
    case CAL_JNULL:
        cal_buf_puts(b, "null");
        break;
    case CAL_JBOOL:
        cal_buf_puts(b, v->u.boolean ? "true" : "false");
        break;
    case CAL_JNUM:
        cal_buf_printf(b, "%.17g", v->u.num);
        break;
    case CAL_JSTR:
        add_json_string(b, v->u.str, v->n);
        break;
    default: {
        int obj = v->type == CAL_JOBJ, first = 1;
        cal_buf_puts(b, obj ? "{" : "[");
        for (size_t i = 0; i < v->n; i++) {
            const cal_jv *kid = &v->u.kids[i];
            if (kid == target && !*repl)
                continue;
            cal_buf_puts(b, first ? "" : ",");
            first = 0;
            if (obj) {
                add_json_string(b, kid->key, strlen(kid->key));
                cal_buf_puts(b, ":");
            }
            write_mutated(b, kid, target, repl);
        }
        cal_buf_puts(b, obj ? "}" : "]");
    }
    }
}

static size_t count_nodes(const cal_jv *v)
{
    size_t n = 1;
    if (v->type == CAL_JARR || v->type == CAL_JOBJ)
        for (size_t i = 0; i < v->n; i++)
            n += count_nodes(&v->u.kids[i]);
    return n;
}

static const cal_jv *nth_node(const cal_jv *v, size_t *k)
{
    if ((*k)-- == 0)
        return v;
    if (v->type == CAL_JARR || v->type == CAL_JOBJ)
        for (size_t i = 0; i < v->n; i++) {
            const cal_jv *r = nth_node(&v->u.kids[i], k);
            if (r)
                return r;
        }
    return NULL;
}

/* Replace one node of a real profile by a value of another type, an edge
   number, or nothing; whatever the check accepts is rendered, at a random
   width, in both modes, and the HTML written.  Under ASan/UBSan any bad
   access, overflow or out-of-range conversion fails it; the renderers'
   own invariants are checked too (width, no escape sequences in plain
   mode).  The pytest tier does the same through the browser
   (tests/security/test_fuzz_view.py). */
static void fuzz_types(const char *seed, size_t len, int rounds)
{
    static const char *const repl[] = {
        "\"12\"",
        "\"\"",
        "null",
        "true",
        "false",
        "[]",
        "{}",
        "[[0,0]]",
        "[\"x\"]",
        "{\"python_s\":1}",
        "0",
        "-1",
        "0.5",
        "-0",
        "1e300",
        "-1e300",
        "1e-310",
        "1e9",
        "1000000001",
        "9007199254740992",
        "9007199254740994",
        "18446744073709551616",
        "2147483648",
        "-2147483649",
        "4294967296",
        "\"\\u202e\\u001b[31m\"",
        "",
    };
    cal_jdoc d;
    char err[300];
    if (cal_jdoc_parse(&d, seed, len, err, sizeof err) != 0) {
        CHECK(0);
        return;
    }
    size_t nodes = count_nodes(d.root), accepted = 0, refused = 0;
    for (int r = 0; r < rounds; r++) {
        size_t k = 1 + fuzz_next() % (nodes - 1);
        const cal_jv *target = nth_node(d.root, &k);
        cal_buf text;
        cal_buf_init(&text);
        write_mutated(&text, d.root, target,
                      repl[fuzz_next() % (sizeof repl / sizeof *repl)]);
        cal_jdoc m;
        if (cal_jdoc_parse(&m, text.data, text.len, err, sizeof err) == 0 &&
            cal_view_check(m.root, err, sizeof err) == 0) {
            accepted++;
            cal_view_opts o = {60 + (int)(fuzz_next() % 140),
                               (int)(fuzz_next() % 2),
                               (double)(fuzz_next() % 3),
                               1 + (int)(fuzz_next() % 400),
                               NULL,
                               (int)(fuzz_next() % 2),
                               (int)(fuzz_next() % 2)};
            cal_buf out;
            cal_buf_init(&out);
            cal_view_text(m.root, &o, &out);
            CHECK(out.data && max_visible_width(out.data) <= o.width);
            if (!o.tty)
                CHECK(strchr(out.data, '\033') == NULL);
            cal_view_html(m.root, text.data, text.len,
                          "CALIPERS_TITLE CALIPERS_PROFILE", 31, &out);
            cal_buf_free(&out);
            /* Each export writes, or refuses in one line (no stacks, or
               a table whose indices do not hold together). */
            for (int f = 0; f < CAL_EXPORT_NFORMATS; f++) {
                cal_buf_init(&out);
                char why[300] = "";
                if (cal_export(m.root, f, &out, why, sizeof why) == 0)
                    CHECK(cal_buf_ok(&out));
                else
                    CHECK(why[0] != '\0' && strchr(why, '\n') == NULL);
                cal_buf_free(&out);
            }
        } else {
            refused++;
            CHECK(err[0] != '\0' && strchr(err, '\n') == NULL);
        }
        cal_jdoc_free(&m);
        cal_buf_free(&text);
    }
    cal_jdoc_free(&d);
    CHECK(accepted > 0 && refused > 0); /* both ways were taken */
}

static void test_fuzz_types(void)
{
    static const char *const fixtures[] = {
        "tests/data/memory.json", "tests/data/cpu.json", "tests/data/empty.json",
        "tests/data/procs.json", "tests/data/stacks.json"};
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) {
        size_t len;
        char *doc = read_fixture(fixtures[i], &len);
        if (doc)
            fuzz_types(doc, len, 600);
        free(doc);
    }
}

/* cal_utf8_decode on a copy of `bytes` in a block of exactly `n` bytes (so
   that AddressSanitizer catches a read past them), given `avail`. */
static size_t decode_exact(const char *bytes, size_t n, size_t avail, uint32_t *cp)
{
    char *copy = malloc(n ? n : 1);
    if (!copy)
        return 99;
    memcpy(copy, bytes, n);
    size_t len = cal_utf8_decode(copy, avail, cp);
    free(copy);
    return len;
}

/* The one UTF-8 decoder (cal_utf8), and that the JSON writer, the reader
   and the reports' control test all follow it. */
static void test_utf8(void)
{
    static const struct {
        const char *bytes;
        size_t len; /* the valid sequence's, 0 if none */
        uint32_t cp;
    } cases[] = {
        /* valid, at every length's bounds */
        {"A", 1, 0x41},
        {"\x7f", 1, 0x7F},
        {"\xc2\x80", 2, 0x80},
        {"\xc3\xa9", 2, 0xE9},
        {"\xdf\xbf", 2, 0x7FF},
        {"\xe0\xa0\x80", 3, 0x800},
        {"\xe2\x80\xae", 3, 0x202E},
        {"\xed\x9f\xbf", 3, 0xD7FF},
        {"\xee\x80\x80", 3, 0xE000},
        {"\xef\xbf\xbf", 3, 0xFFFF},
        {"\xf0\x90\x80\x80", 4, 0x10000},
        {"\xf0\x9f\x98\x80", 4, 0x1F600},
        {"\xf4\x8f\xbf\xbf", 4, 0x10FFFF},
        /* overlong: the shortest form only */
        {"\xc0\x80", 0, 0},
        {"\xc1\xbf", 0, 0},
        {"\xe0\x80\x80", 0, 0},
        {"\xe0\x82\x85", 0, 0}, /* U+0085, a control, overlong */
        {"\xe0\x9f\xbf", 0, 0},
        {"\xf0\x80\x80\x80", 0, 0},
        {"\xf0\x8f\xbf\xbf", 0, 0},
        /* surrogates */
        {"\xed\xa0\x80", 0, 0},
        {"\xed\xb2\x80", 0, 0},
        {"\xed\xbf\xbf", 0, 0},
        /* above U+10FFFF, and lead bytes that cannot start anything */
        {"\xf4\x90\x80\x80", 0, 0},
        {"\xf5\x80\x80\x80", 0, 0},
        {"\xf7\xbf\xbf\xbf", 0, 0},
        {"\xf8\x88\x80\x80", 0, 0},
        {"\xfe", 0, 0},
        {"\xff", 0, 0},
        /* a continuation byte alone, and a sequence broken off */
        {"\x80", 0, 0},
        {"\xbf", 0, 0},
        {"\xc3\x28", 0, 0},
        {"\xe2\x28\xa1", 0, 0},
        {"\xe2\x82\x28", 0, 0},
        {"\xf0\x9f\x98\x28", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *b = cases[i].bytes;
        size_t n = strlen(b);
        uint32_t cp = 0xDEAD;
        size_t len = decode_exact(b, n, n, &cp);
        CHECK(len == cases[i].len);
        if (len != cases[i].len)
            fprintf(stderr, "  case %zu: %zu bytes, not %zu\n", i, len, cases[i].len);
        CHECK(len ? cp == cases[i].cp : cp == 0xDEAD); /* cp only when valid */
        CHECK(cal_utf8_decode(b, n, NULL) == cases[i].len);
        /* A valid one cut short, by avail or by a NUL after `cut` of its
           bytes: no longer valid, and nothing read past the end. */
        for (size_t cut = 0; cut < n && cases[i].len; cut++) {
            CHECK(decode_exact(b, n, cut, NULL) == 0);
            char text[5] = {0};
            memcpy(text, b, cut);
            CHECK(decode_exact(text, cut + 1, 4, NULL) ==
                  (cut ? 0 : 1)); /* NUL: ASCII */
        }
    }

    /* Every scalar value: encoded in the shortest form, decoded back. */
    int bad = 0;
    for (uint32_t c = 0; c <= 0x10FFFF; c++) {
        if (c >= 0xD800 && c <= 0xDFFF)
            continue;
        char enc[4];
        uint32_t back;
        size_t k = cal_utf8_encode(enc, c);
        size_t want = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
        if (k != want || cal_utf8_decode(enc, k, &back) != k || back != c)
            bad++;
    }
    CHECK(bad == 0);

    /* The writer: each byte that is not UTF-8 becomes U+FFFD. */
    cal_buf b;
    cal_buf_init(&b);
    cal_json_escape(&b, "\xc3\xa9|\xc0\x80|\xed\xa0\x80|\xf4\x90\x80\x80|\xe2\x80");
    CHECK(b.data && strcmp(b.data, "\xc3\xa9|\\ufffd\\ufffd|\\ufffd\\ufffd\\ufffd|"
                                   "\\ufffd\\ufffd\\ufffd\\ufffd|\\ufffd\\ufffd") == 0);
    cal_buf_free(&b);

    /* The reader: the same bytes, the same replacements. */
    static const char doc[] =
        "[\"\xc3\xa9|\xc0\x80|\xed\xa0\x80|\xf4\x90\x80\x80|\xe2\x80\"]";
    cal_jdoc d;
    char err[200];
    CHECK(cal_jdoc_parse(&d, doc, sizeof doc - 1, err, sizeof err) == 0);
    const char *s = cal_jv_str(cal_jv_at(d.root, 0), NULL);
    CHECK(s &&
          strcmp(s, "\xc3\xa9|\xef\xbf\xbd\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd"
                    "\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd|"
                    "\xef\xbf\xbd\xef\xbf\xbd") == 0);
    cal_jdoc_free(&d);

    /* The reports' controls: a valid one is shown as its code; an overlong
       form is no character at all (the reader never lets one through). */
    size_t len;
    CHECK(cal_view_control("\xe2\x80\xae!", &len) == 0x202E && len == 3);
    CHECK(cal_view_control("\xc2\x85", &len) == 0x85 && len == 2);
    CHECK(cal_view_control("\xe2\x80\xaf", &len) == 0 && len == 1);
    CHECK(cal_view_control("\xe0\x82\x85", &len) == 0 && len == 1);
    CHECK(cal_view_control("\xf0\x9f\x98\x80", &len) == 0 && len == 1);
}

/* The stack table: frames and nodes are found again, not duplicated; a
   full table credits a stack's nearest caller and says how much, of time
   and of allocation and copy volume; a merge brings a child's tree under
   its own thread's root, parents first, with its volumes. */
static void test_stacks(void)
{
    cal_profile *p = cal_profile_new();
    cal_stacks *st = cal_profile_stacks(p);
    uint32_t file = cal_profile_string(p, "/a.py", 5),
             f = cal_profile_string(p, "f", 1);
    uint32_t fr = cal_stacks_frame(st, file, f, 3, 0);
    CHECK(fr == cal_stacks_frame(st, file, f, 3, 0));
    CHECK(fr != cal_stacks_frame(st, file, f, 3, 1)); /* library or not: two frames */
    uint32_t t0 = cal_profile_thread(p, 7, 70, 1), t1 = cal_profile_thread(p, 8, 80, 0);
    uint32_t r0 = cal_stacks_root(st, t0), r1 = cal_stacks_root(st, t1);
    CHECK(r0 != r1 && r0 == cal_stacks_root(st, t0));
    uint32_t a = cal_stacks_child(st, r0, fr, 10), b = cal_stacks_child(st, a, fr, 11);
    CHECK(a == cal_stacks_child(st, r0, fr, 10));
    CHECK(a != cal_stacks_child(st, r0, fr, 12)); /* another line, another stack */
    CHECK(cal_stacks_child(st, r1, fr, 10) != a); /* another thread */
    CHECK(st->nodes[b].parent == a && st->nodes[b].thread == t0);
    cal_times t = {.python_ns = 5000000, .samples = 1};
    cal_stacks_add_times(st, b, &t, 0);
    cal_volume v = {
        .alloc_python = 3000, .alloc_native = 700, .copied = 50, .samples = 2};
    cal_volume copy = {.copied = 1 << 20};
    cal_stacks_add_volume(st, b, &v, 0);
    cal_stacks_add_volume(st, r1, &copy, 0); /* a native thread's, at its root */
    CHECK(st->nodes[b].alloc_python == 3000 && st->nodes[b].alloc_native == 700 &&
          st->nodes[b].copied == 50 && st->nodes[b].alloc_samples == 2);
    CHECK(st->nodes[r1].copied == 1 << 20 && st->nodes[r1].alloc_samples == 0);
    CHECK(st->folded_bytes == 0 && st->folded_samples == 0);
    cal_stacks_add_volume(st, CAL_STACKS_NONE, &v, 0); /* ignored */
    /* Fill it: the next new stack stops at its caller, and is counted. */
    int32_t line = 100;
    while (st->nnodes < CAL_STACKS_MAX_NODES)
        cal_stacks_child(st, r1, fr, line++);
    CHECK(cal_stacks_child(st, b, fr, 99) == CAL_STACKS_NONE);
    cal_stacks_add_times(st, b, &t, 1);
    CHECK(st->nodes[b].python_ns == 10000000 && st->folded_ns == 5000000 &&
          st->folded_samples == 1);
    cal_stacks_add_volume(st, b, &v, 1);
    CHECK(st->nodes[b].alloc_python == 6000 && st->nodes[b].alloc_samples == 4);
    CHECK(st->folded_bytes == 3750 && st->folded_samples == 3);

    /* Merged into a profile with a tree of its own. */
    cal_profile *q = cal_profile_new();
    cal_stacks *qs = cal_profile_stacks(q);
    uint32_t qt = cal_profile_thread(q, 1, 10, 1);
    uint32_t qfile = cal_profile_string(q, "/a.py", 5),
             qf = cal_profile_string(q, "f", 1);
    uint32_t qa = cal_stacks_child(qs, cal_stacks_root(qs, qt),
                                   cal_stacks_frame(qs, qfile, qf, 3, 0), 10);
    cal_stacks_add_times(qs, qa, &t, 0);
    size_t len;
    char *text = profile_json(p, 1000.0, &len);
    cal_jdoc doc;
    char err[200];
    CHECK(cal_jdoc_parse(&doc, text, len, err, sizeof err) == 0);
    CHECK(cal_merge_add(q, doc.root, 1000.0, err, sizeof err) == 0);
    /* The child's two threads are new threads here, each with its root;
       its frame is the one q had (the library frame no node used is not
       written). */
    CHECK(qs->nframes == 1);
    size_t roots = 0;
    int64_t total = 0, py = 0, native = 0, copied = 0, samples = 0;
    for (size_t i = 0; i < qs->nnodes; i++) {
        roots += qs->nodes[i].parent == CAL_STACKS_NONE;
        CHECK(qs->nodes[i].parent == CAL_STACKS_NONE || qs->nodes[i].parent < i);
        total += qs->nodes[i].python_ns;
        py += qs->nodes[i].alloc_python;
        native += qs->nodes[i].alloc_native;
        copied += qs->nodes[i].copied;
        samples += qs->nodes[i].alloc_samples;
    }
    CHECK(roots == 3);
    CHECK(total == 15000000);
    CHECK(py == 6000 && native == 1400 && copied == 100 + (1 << 20) && samples == 4);
    CHECK(qs->folded_ns == 5000000);
    CHECK(qs->folded_bytes == 3750 && qs->folded_samples == 3);
    cal_jdoc_free(&doc);
    free(text);
    cal_profile_free(q);
    cal_profile_free(p);
}

/* The sum of a node's self time over its subtree, in table t. */
static int64_t inclusive_ns(const cal_stacks *t, uint32_t node)
{
    int64_t sum = 0;
    for (size_t i = 0; i < t->nnodes; i++) {
        uint32_t up = (uint32_t)i;
        while (up != CAL_STACKS_NONE && up != node)
            up = t->nodes[up].parent;
        if (up == node)
            sum += t->nodes[i].python_ns + t->nodes[i].native_ns;
    }
    return sum;
}

/* The written table keeps the heaviest stacks and merges the rest into
   their callers, losing nothing. */
static void test_stacks_pruned(void)
{
    cal_profile *p = cal_profile_new();
    cal_stacks *st = cal_profile_stacks(p);
    uint32_t file = cal_profile_string(p, "/a.py", 5);
    uint32_t t0 = cal_profile_thread(p, 7, 70, 1), t1 = cal_profile_thread(p, 8, 80, 0);
    uint32_t fr[4];
    for (int k = 0; k < 4; k++) {
        char name[16];
        snprintf(name, sizeof name, "f%d", k);
        fr[k] = cal_stacks_frame(st, file, cal_profile_string(p, name, 2), k, k == 3);
    }
    /* Thread 0: a heavy chain main -> f1 -> f2, and 500 rare leaves under
       f1; thread 1 only has its root, with a little time. */
    uint32_t r0 = cal_stacks_root(st, t0), r1 = cal_stacks_root(st, t1);
    uint32_t a = cal_stacks_child(st, r0, fr[0], 1),
             b = cal_stacks_child(st, a, fr[1], 2),
             c = cal_stacks_child(st, b, fr[2], 3);
    cal_times heavy = {.python_ns = 1000000000, .samples = 100};
    cal_stacks_add_times(st, c, &heavy, 0);
    cal_times rare = {.native_ns = 1000, .samples = 1};
    for (int32_t line = 0; line < 500; line++)
        cal_stacks_add_times(st, cal_stacks_child(st, b, fr[3], 100 + line), &rare, 0);
    /* One leaf holds little time but all the bytes copied. */
    uint32_t copier = cal_stacks_child(st, a, fr[3], 7);
    cal_volume copied = {.copied = 1 << 20, .samples = 3};
    cal_stacks_add_volume(st, copier, &copied, 0);
    cal_times little = {.waiting_ns = 5, .samples = 1};
    cal_stacks_add_times(st, r1, &little, 0);

    cal_stacks out;
    uint32_t map[600];
    CHECK(st->nnodes <= 600);
    CHECK(cal_stacks_pruned(st, 6, &out, map) == 0);
    CHECK(out.nnodes == 6);
    /* Both roots, the heavy chain and the copier are kept ... */
    int64_t self = 0, samples = 0, bytes = 0;
    int roots = 0, copier_kept = 0;
    uint32_t heavy_leaf = CAL_STACKS_NONE;
    for (size_t i = 0; i < out.nnodes; i++) {
        const cal_stack_node *n = &out.nodes[i];
        CHECK(n->parent == CAL_STACKS_NONE || n->parent < i);
        roots += n->parent == CAL_STACKS_NONE;
        copier_kept += n->copied == 1 << 20;
        if (n->python_ns == 1000000000)
            heavy_leaf = (uint32_t)i;
        self += n->python_ns + n->native_ns + n->waiting_ns;
        samples += n->samples;
        bytes += n->copied;
    }
    CHECK(roots == 2 && copier_kept == 1 && heavy_leaf != CAL_STACKS_NONE);
    /* ... the rare leaves are merged into f1, their caller, whose inclusive
       time is what it was; nothing is lost, and the merge is counted. */
    uint32_t f1 = out.nodes[heavy_leaf].parent;
    CHECK(out.nodes[f1].native_ns == 500 * 1000);
    CHECK(map[c] == heavy_leaf && map[b] == f1 && map[r1] != map[r0]);
    for (size_t i = 0; i < st->nnodes; i++) /* each rare leaf: f1 */
        CHECK(st->nodes[i].frame != fr[3] || st->nodes[i].parent != b || map[i] == f1);
    CHECK(inclusive_ns(&out, f1) == inclusive_ns(st, b));
    CHECK(self == 1000000000 + 500 * 1000 + 5 && samples == 100 + 500 + 1);
    CHECK(bytes == 1 << 20);
    CHECK(out.folded_ns == 500 * 1000 && out.folded_samples == 500);
    /* Only the frames in use are copied: f3 stays, for the copier. */
    CHECK(out.nframes == 4);
    cal_stacks_free(&out);

    /* Room for the roots only: everything lands on them. */
    CHECK(cal_stacks_pruned(st, 1, &out, NULL) == 0);
    CHECK(out.nnodes == 2 && out.nframes == 0);
    CHECK(out.nodes[0].python_ns == 1000000000 && out.nodes[0].copied == 1 << 20);
    cal_stacks_free(&out);
    cal_profile_free(p);
}

/* The protobuf wire encoding under pprof's writer: varints, keys,
   length-delimited fields (https://protobuf.dev/programming-guides/encoding/). */
static void test_pb_encoding(void)
{
    static const struct {
        uint64_t v;
        const char *bytes;
        size_t n;
    } varints[] = {
        {0, "\x00", 1},
        {1, "\x01", 1},
        {127, "\x7f", 1},
        {128, "\x80\x01", 2},
        {150, "\x96\x01", 2}, /* the encoding guide's example */
        {300, "\xac\x02", 2},
        {16383, "\xff\x7f", 2},
        {16384, "\x80\x80\x01", 3},
        {UINT64_MAX >> 1, "\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 9},
        /* an int64 of -1 takes ten bytes */
        {(uint64_t)(int64_t)-1, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10},
    };
    for (size_t i = 0; i < sizeof varints / sizeof *varints; i++) {
        cal_buf b;
        cal_buf_init(&b);
        cal_pb_varint(&b, varints[i].v);
        CHECK(b.len == varints[i].n && memcmp(b.data, varints[i].bytes, b.len) == 0);
        cal_buf_free(&b);
    }
    cal_buf b;
    cal_buf_init(&b);
    cal_pb_uint(&b, 1, 150);           /* 08 96 01 */
    cal_pb_key(&b, 16, 0);             /* 80 01: a field number past 15 */
    cal_pb_bytes(&b, 6, "testing", 7); /* 32 07 "testing" */
    cal_pb_bytes(&b, 2, "", 0);        /* 12 00: empty, still written */
    static const char want[] = "\x08\x96\x01\x80\x01\x32\x07testing\x12\x00";
    CHECK(b.len == sizeof want - 1 && memcmp(b.data, want, b.len) == 0);
    /* A length of 200 takes two bytes. */
    b.len = 0;
    char big[200];
    memset(big, 'x', sizeof big);
    cal_pb_bytes(&b, 1, big, sizeof big);
    CHECK(b.len == 203 && memcmp(b.data, "\x0a\xc8\x01", 3) == 0);
    cal_buf_free(&b);
}

/* The exports of a profile with a stack table: deterministic, the
   collapsed lines exactly, names that would break a format made safe,
   and a table whose indices do not hold together refused. */
static void test_export(void)
{
    cal_profile *p = cal_profile_new();
    cal_stacks *st = cal_profile_stacks(p);
    uint32_t file = cal_profile_string(p, "/a.py", 5);
    uint32_t f = cal_profile_string(p, "f", 1), g = cal_profile_string(p, "g;h\n", 4);
    uint32_t ff = cal_stacks_frame(st, file, f, 3, 0),
             fg = cal_stacks_frame(st, file, g, 9, 1);
    uint32_t t0 = cal_profile_thread(p, 7, 70, 1);
    cal_profile_set_thread_name(p, t0, "Main;Thread");
    uint32_t r0 = cal_stacks_root(st, t0);
    uint32_t a = cal_stacks_child(st, r0, ff, 4), b = cal_stacks_child(st, a, fg, 10);
    uint32_t b2 = cal_stacks_child(st, a, fg, 11); /* same frames, another line */
    cal_times t = {.python_ns = 2000000, .waiting_ns = 1000000, .samples = 1};
    cal_stacks_add_times(st, b, &t, 0);
    cal_stacks_add_times(st, b2, &t, 0);
    cal_stacks_add_times(st, r0, &t, 0);
    cal_volume v = {.alloc_python = 4096, .samples = 1};
    cal_stacks_add_volume(st, a, &v, 0);
    size_t len;
    char *text = profile_json(p, 1000.0, &len);
    cal_jdoc doc;
    char err[300];
    CHECK(cal_jdoc_parse(&doc, text, len, err, sizeof err) == 0);
    CHECK(cal_view_check(doc.root, err, sizeof err) == 0);
    long long pid = (long long)cal_jv_getnum(
        cal_jv_at(cal_jv_get(doc.root, "processes"), 0), "pid", -1);
    cal_buf out, again;
    for (int fmt = 0; fmt < CAL_EXPORT_NFORMATS; fmt++) {
        cal_buf_init(&out);
        cal_buf_init(&again);
        CHECK(cal_export(doc.root, fmt, &out, err, sizeof err) == 0);
        CHECK(cal_export(doc.root, fmt, &again, err, sizeof err) == 0);
        CHECK(out.len > 0 && out.len == again.len &&
              memcmp(out.data, again.data, out.len) == 0);
        if (fmt == CAL_EXPORT_COLLAPSED || fmt == CAL_EXPORT_COLLAPSED_ALLOC) {
            char want[512];
            if (fmt == CAL_EXPORT_COLLAPSED)
                snprintf(want, sizeof want,
                         "Main,Thread (pid %lld);(no Python frame) 3000\n"
                         "Main,Thread (pid %lld);f (/a.py:3);g,h? (/a.py:9) 6000\n",
                         pid, pid);
            else
                snprintf(want, sizeof want, "Main,Thread (pid %lld);f (/a.py:3) 4096\n",
                         pid);
            cal_buf_add(&out, "", 1);
            CHECK(strcmp(out.data, want) == 0);
        }
        /* sample_type first: {type "cpu", unit "nanoseconds"}, strings 1 and 3 */
        if (fmt == CAL_EXPORT_PPROF)
            CHECK(memcmp(out.data, "\x0a\x04\x08\x01\x10\x03", 6) == 0);
        cal_buf_free(&out);
        cal_buf_free(&again);
    }
    CHECK(cal_export_format_named("collapsed-alloc") == CAL_EXPORT_COLLAPSED_ALLOC);
    CHECK(cal_export_format_named("svg") == -1);
    cal_jdoc_free(&doc);

    /* A parent after its child; a frame that does not exist. */
    static const char *const breaks[][2] = {
        {"[0,0,4,0,", "[2,0,4,0,"},
        {"[0,0,4,0,", "[0,9,4,0,"},
    };
    for (size_t i = 0; i < sizeof breaks / sizeof *breaks; i++) {
        char *copy = strdup(text), *at = strstr(copy, breaks[i][0]);
        CHECK(at != NULL);
        if (!at) {
            free(copy);
            continue;
        }
        memcpy(at, breaks[i][1], strlen(breaks[i][1]));
        CHECK(cal_jdoc_parse(&doc, copy, len, err, sizeof err) == 0);
        cal_buf_init(&out);
        CHECK(cal_export(doc.root, CAL_EXPORT_PPROF, &out, err, sizeof err) == -1);
        CHECK(strstr(err, "stacks.nodes[1]") != NULL);
        cal_buf_free(&out);
        cal_jdoc_free(&doc);
        free(copy);
    }
    /* The fuzzer over a profile that has a stack table. */
    fuzz_types(text, len, 400);
    free(text);
    cal_profile_free(p);
}

/* The Firefox export (cal_firefox.c) of a small profile, with a timeline of
   samples added by hand (docs/FORMAT.md, "stacks.timeline") and without:
   exact figures where they are the point (a sample's time and weight, its
   stack's frames and category, the strings), the timeline's indices
   checked, and the fuzzer over both. */
static void test_export_firefox(void)
{
    cal_profile *p = cal_profile_new();
    cal_stacks *st = cal_profile_stacks(p);
    uint32_t file = cal_profile_string(p, "/a.py", 5);
    uint32_t f = cal_profile_string(p, "f", 1), g = cal_profile_string(p, "g\"<", 3);
    uint32_t ff = cal_stacks_frame(st, file, f, 3, 0),
             fg = cal_stacks_frame(st, file, g, 9, 1);
    uint32_t t0 = cal_profile_thread(p, 7, 70, 1);
    uint32_t r0 = cal_stacks_root(st, t0);
    uint32_t a = cal_stacks_child(st, r0, ff, 4), b = cal_stacks_child(st, a, fg, 10);
    cal_times t = {.python_ns = 2000000, .native_ns = 1000000, .samples = 1};
    cal_stacks_add_times(st, b, &t, 0);
    cal_times w = {.waiting_ns = 500000, .samples = 1};
    cal_stacks_add_times(st, a, &w, 0);
    size_t len;
    char *text = profile_json(p, 1000.0, &len);
    char err[300];
    cal_jdoc doc;
    cal_buf out;

    /* No timeline: b's python then native time laid end to end after a's
       waiting (the tree's order: a, then b), a note over the thread. */
    CHECK(cal_jdoc_parse(&doc, text, len, err, sizeof err) == 0);
    cal_buf_init(&out);
    CHECK(cal_export(doc.root, CAL_EXPORT_FIREFOX, &out, err, sizeof err) == 0);
    cal_buf_add(&out, "", 1);
    CHECK(strstr(out.data, "\"preprocessedProfileVersion\": 62") != NULL);
    CHECK(strstr(out.data, "\"product\": \"calipers: ") != NULL);
    CHECK(strstr(out.data, "\"startTime\": 1000000.000") != NULL);
    CHECK(strstr(out.data, "\"time\": [0.000000,0.500000,2.500000]") != NULL);
    CHECK(strstr(out.data, "\"weight\": [0.500000,2.000000,1.000000]") != NULL);
    CHECK(strstr(out.data, "\"weightType\": \"tracing-ms\"") != NULL);
    CHECK(strstr(out.data, "\"stringArray\": [\n") != NULL);
    CHECK(strstr(out.data, "\"g\\\"\\u003c\"") != NULL); /* g"< escaped */
    CHECK(strstr(out.data, "\"No timeline\"") != NULL);
    CHECK(strstr(out.data, "\"pid\": \"") != NULL &&
          strstr(out.data, "\"tid\": \"70\"") != NULL);
    /* Frames: f at line 4 (Python),g at 10 (Python,library),then the
       samples' own: a waiting at 4,g native at 10 (library). */
    CHECK(strstr(out.data, "\"category\": [1,1,4,2]") != NULL);
    CHECK(strstr(out.data, "\"subcategory\": [0,1,0,1]") != NULL);
    CHECK(strstr(out.data, "\"line\": [4,10,4,10]") != NULL);
    CHECK(strstr(out.data, "\"prefix\": [null,0,null,0]") != NULL);
    cal_buf_free(&out);
    cal_jdoc_free(&doc);

    /* A timeline: node 2 (b) at 1.5 ms, 3 ms of Python; an allocation of
       4096 bytes at node 1 (a); a copy, left out; every 2.  Samples out
       of time order are put in order. */
    size_t tlen;
    char *timed = replaced(
        text, len, "\"folded\"",
        "\"timeline\": {\"every\": 2, \"kinds\": [\"python\",\"native\",\"system\","
        "\"waiting\",\"alloc_python\",\"alloc_native\",\"copy\"], \"sample_fields\": "
        "[\"time_ns\", \"node\", \"kind\", \"value\"], \"threads\": [{\"thread\": 0,"
        "\"samples\": [[2500000,1,3,500000], [1500000, 2, 0, 3000000], "
        "[1600000, 1, 4, 4096], [1700000, 2, 6, 64]]}]},\n\"folded\"",
        &tlen);
    CHECK(timed != NULL);
    if (timed) {
        CHECK(cal_jdoc_parse(&doc, timed, tlen, err, sizeof err) == 0);
        CHECK(cal_view_check(doc.root, err, sizeof err) == 0);
        cal_buf_init(&out);
        CHECK(cal_export(doc.root, CAL_EXPORT_FIREFOX, &out, err, sizeof err) == 0);
        cal_buf_add(&out, "", 1);
        CHECK(strstr(out.data, "\"time\": [1.500000,2.500000]") != NULL);
        CHECK(strstr(out.data, "\"weight\": [6.000000,1.000000]") != NULL);
        CHECK(strstr(out.data, "\"nativeAllocations\": {") != NULL);
        CHECK(strstr(out.data, "\"time\": [1.600000]") != NULL);
        CHECK(strstr(out.data, "\"weight\": [8192]") != NULL);
        CHECK(strstr(out.data, "\"weightType\": \"bytes\"") != NULL);
        CHECK(strstr(out.data, "\"Thinned timeline\"") != NULL);
        CHECK(strstr(out.data, "\"No timeline\"") == NULL);
        /* b's Python sample is b's own stack (1); a's waiting (2) and a's
           allocation (3: Memory, Python allocator) end in frames of their
           own (category 4, Waiting; 5, Memory). */
        CHECK(strstr(out.data, "\"stack\": [1,2]") != NULL);
        CHECK(strstr(out.data, "\"stack\": [3]") != NULL);
        CHECK(strstr(out.data, "\"category\": [1,1,4,5]") != NULL);
        cal_buf_free(&out);
        cal_jdoc_free(&doc);

        /* Broken timelines: one line each, naming the place. */
        static const char *const breaks[][3] = {
            {"[1500000, 2, 0,", "[1500000, 9, 0,", "samples[1]: node: no such node"},
            {"[1500000, 2, 0,", "[1500000, 2, 8,", "samples[1]: kind: no such kind"},
            {"[1500000, 2, 0,", "[1500000.5, 2, 0,", "samples[1]: time_ns"},
            {"\"every\": 2", "\"every\": 0", "stacks.timeline.every"},
            {"\"thread\": 0,", "\"thread\": 5,", "stacks.timeline.threads[0]"},
            {"\"value\"]", "\"vaule\"]", "sample_fields has no \"value\""},
        };
        for (size_t i = 0; i < sizeof breaks / sizeof *breaks; i++) {
            size_t clen;
            char *copy = replaced(timed, tlen, breaks[i][0], breaks[i][1], &clen);
            if (copy) {
                CHECK(cal_jdoc_parse(&doc, copy, clen, err, sizeof err) == 0);
                cal_buf_init(&out);
                err[0] = '\0';
                CHECK(cal_export(doc.root, CAL_EXPORT_FIREFOX, &out, err, sizeof err) ==
                      -1);
                CHECK(strstr(err, breaks[i][2]) != NULL && strchr(err, '\n') == NULL);
                cal_buf_free(&out);
                cal_jdoc_free(&doc);
            }
            free(copy);
        }
        /* The fuzzer over a profile that has a timeline. */
        fuzz_types(timed, tlen, 400);
        free(timed);
    }
    free(text);
    cal_profile_free(p);
}

/* The timeline of samples: bounded at its cap however many samples come,
   each thread keeping exactly its samples numbered by multiples of the
   stride; written, checked (a bad member refused by name) and merged with
   a coarser stride, times moved to the parent's start. */
static void test_timeline(void)
{
    CHECK(cal_timeline_cpu_kind(1, 5, 5, 0) == CAL_TL_NATIVE); /* ties: the first */
    CHECK(cal_timeline_cpu_kind(0, 0, 0, 7) == CAL_TL_WAITING);
    CHECK(cal_timeline_cpu_kind(0, 0, 0, 0) == CAL_TL_PYTHON);

    cal_timeline tl;
    cal_timeline_init(&tl);
    tl.cap = 8;
    /* Thread 0: 100 samples (t = its number); thread 3: 30. */
    for (int64_t i = 0; i < 100; i++) {
        CHECK(cal_timeline_add(&tl, 0, i, 1, CAL_TL_PYTHON, 10) == 0);
        if (i < 30)
            CHECK(cal_timeline_add(&tl, 3, 1000 + i, 2, CAL_TL_ALLOC_NATIVE, 4096) ==
                  0);
        CHECK(tl.total <= tl.cap);
    }
    /* 130 samples into 8: stride 32 keeps 0, 32, 64, 96 of thread 0 and 0
       of thread 3 (5); 16 would keep 7 + 2 = 9. */
    CHECK(tl.every == 32 && tl.total == 5);
    CHECK(tl.threads[0].n == 4 && tl.threads[3].n == 1);
    for (size_t k = 0; k < tl.threads[0].n; k++)
        CHECK(tl.threads[0].v[k].t == (int64_t)(k * tl.every));
    CHECK(tl.threads[3].v[0].t == 1000 &&
          tl.threads[3].v[0].kind == CAL_TL_ALLOC_NATIVE);
    CHECK(tl.threads[1].n == 0 && tl.threads[0].seen == 100);
    cal_timeline_free(&tl);

    /* In a profile: written, checked, merged into another. */
    cal_profile *child = cal_profile_new(), *q = cal_profile_new();
    uint32_t cfile = cal_profile_string(child, "/a.py", 5),
             cf = cal_profile_string(child, "f", 1);
    cal_stacks *cs = cal_profile_stacks(child);
    uint32_t ct = cal_profile_thread(child, 7, 70, 1);
    uint32_t croot = cal_stacks_root(cs, ct);
    uint32_t cnode =
        cal_stacks_child(cs, croot, cal_stacks_frame(cs, cfile, cf, 3, 0), 4);
    cal_timeline *ctl = cal_profile_timeline(child);
    ctl->cap = 4;
    for (int64_t i = 0; i < 6; i++) /* stride 2: numbers 0, 2, 4 */
        CHECK(cal_timeline_add(ctl, ct, 100 + i, i % 2 ? croot : cnode, CAL_TL_COPY,
                               1 << 20) == 0);
    CHECK(ctl->every == 2 && ctl->total == 3);
    uint32_t qt = cal_profile_thread(q, 1, 10, 1);
    cal_stacks *qs = cal_profile_stacks(q);
    uint32_t qroot = cal_stacks_root(qs, qt);
    cal_timeline *qtl = cal_profile_timeline(q);
    for (int64_t i = 0; i < 4; i++) /* stride 1: numbers 0 to 3 */
        CHECK(cal_timeline_add(qtl, qt, i, qroot, CAL_TL_SYSTEM, 500) == 0);
    size_t len;
    char *text = profile_json(child, 1000.5, &len);
    CHECK(strstr(text, "\"timeline\": {") != NULL);
    CHECK(strstr(text, "\"every\": 2") != NULL);
    CHECK(view_check_text(text, len) == NULL);
    static const struct {
        const char *from, *to, *why;
    } cases[] = {
        {"\"every\": 2", "\"every\": 0", "stacks.timeline.every: 0 is out of range"},
        {"[100,1,6,1048576]", "[100,1,7,1048576]",
         "stacks.timeline.threads[0].samples[0][2]: 7 is out of range"},
        {"[100,1,6,1048576]", "[100,1,6]",
         "stacks.timeline.threads[0].samples[0]: expected 4 items, not 3"},
        {"[100,1,6,1048576]", "[-1,1,6,1048576]",
         "stacks.timeline.threads[0].samples[0][0]: -1 is out of range"},
        {"\"thread\": 0", "\"thread\": \"0\"",
         "stacks.timeline.threads[0].thread: expected a whole number, not a string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t n;
        char *bad = replaced(text, len, cases[i].from, cases[i].to, &n);
        if (!bad)
            continue;
        const char *why = view_check_text(bad, n);
        CHECK(why && strstr(why, cases[i].why));
        if (!why || !strstr(why, cases[i].why))
            fprintf(stderr, "  %s -> %s -> %s\n", cases[i].from, cases[i].to,
                    why ? why : "accepted");
        free(bad);
    }
    cal_jdoc doc;
    char err[200];
    CHECK(cal_jdoc_parse(&doc, text, len, err, sizeof err) == 0);
    CHECK(cal_merge_add(q, doc.root, 1000.0, err, sizeof err) == 0);
    /* Both at stride 2: q keeps its 0 and 2, the child's three come at its
       thread here, at its nodes here, half a second later. */
    CHECK(qtl->every == 2 && qtl->total == 5);
    uint32_t mt = CAL_PROFILE_NONE;
    for (uint32_t i = 0; i < qtl->nthreads; i++)
        if (i != qt && qtl->threads[i].n)
            mt = i;
    CHECK(mt != CAL_PROFILE_NONE && mt < qtl->nthreads);
    if (mt != CAL_PROFILE_NONE && mt < qtl->nthreads) {
        const cal_tl_thread *th = &qtl->threads[mt];
        CHECK(th->n == 3);
        for (size_t k = 0; k < th->n && k < 3; k++) {
            CHECK(th->v[k].t == 100 + 2 * (int64_t)k + 500000000);
            CHECK(th->v[k].kind == CAL_TL_COPY && th->v[k].value == 1 << 20);
            CHECK(th->v[k].node < qs->nnodes && qs->nodes[th->v[k].node].thread == mt);
            CHECK(qs->nodes[th->v[k].node].frame != CAL_STACKS_NONE);
        }
    }
    CHECK(qtl->threads[qt].n == 2 && qtl->threads[qt].v[1].t == 2);
    cal_jdoc_free(&doc);
    free(text);
    cal_profile_free(q);
    cal_profile_free(child);

    /* Written in time order, whatever order they were credited in (a
       queued allocation is credited after a later CPU sample). */
    cal_profile *r = cal_profile_new();
    uint32_t rt = cal_profile_thread(r, 3, 30, 1);
    uint32_t rroot = cal_stacks_root(cal_profile_stacks(r), rt);
    cal_timeline *rtl = cal_profile_timeline(r);
    CHECK(cal_timeline_add(rtl, rt, 30000, rroot, CAL_TL_PYTHON, 7) == 0);
    CHECK(cal_timeline_add(rtl, rt, 10000, rroot, CAL_TL_ALLOC_PYTHON, 8) == 0);
    CHECK(cal_timeline_add(rtl, rt, 20000, rroot, CAL_TL_COPY, 9) == 0);
    text = profile_json(r, 1000.0, &len);
    const char *a = strstr(text, "[10000,"), *b = strstr(text, "[20000,"),
               *c = strstr(text, "[30000,");
    CHECK(a && b && c && a < b && b < c);
    CHECK(view_check_text(text, len) == NULL);
    free(text);
    cal_profile_free(r);
}

/* ---- memory snapshots ---------------------------------------------------- */

/* Write the checksum a snapshot of `len` bytes ends with (FNV-1a of the
   bytes before it), so that a mutated file reaches the checks behind it. */
static void snap_reseal(char *data, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i + 8 < len; i++) {
        h ^= (unsigned char)data[i];
        h *= 0x100000001b3ull;
    }
    for (int k = 0; k < 8; k++)
        data[len - 8 + k] = (char)(h >> (8 * k));
}

static void snap_put_u32(char *at, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        at[k] = (char)(v >> (8 * k));
}

static int snap_equal(const cal_snapshot *a, const cal_snapshot *b)
{
    if (a->nstrings != b->nstrings || a->nframes != b->nframes ||
        a->nframe_ids != b->nframe_ids || a->ntracebacks != b->ntracebacks ||
        a->ntraces != b->ntraces)
        return 0;
    for (size_t i = 0; i < a->nstrings; i++)
        if (strcmp(a->strings[i], b->strings[i]) != 0)
            return 0;
    if ((a->nframes &&
         memcmp(a->frames, b->frames, a->nframes * sizeof(*a->frames)) != 0) ||
        (a->nframe_ids &&
         memcmp(a->frame_ids, b->frame_ids, a->nframe_ids * sizeof(*a->frame_ids))) ||
        (a->ntracebacks && memcmp(a->tracebacks, b->tracebacks,
                                  a->ntracebacks * sizeof(*a->tracebacks)) != 0) ||
        (a->ntraces &&
         memcmp(a->traces, b->traces, a->ntraces * sizeof(*a->traces)) != 0))
        return 0;
    const char *ma = a->meta_json ? a->meta_json : "{}";
    const char *mb = b->meta_json ? b->meta_json : "{}";
    return strcmp(ma, mb) == 0;
}

static int snap_empty(const cal_snapshot *s)
{
    return !s->nstrings && !s->nframes && !s->nframe_ids && !s->ntracebacks &&
           !s->ntraces && !s->meta_json && !s->strings && !s->traces;
}

/* Decode `data` and expect a refusal whose reason holds `why`. */
static int snap_refused(const char *data, size_t len, const char *why)
{
    cal_snapshot out;
    char err[256];
    int rc = cal_snapshot_decode(data, len, &out, err, sizeof err);
    int ok = rc == -1 && snap_empty(&out) && err[0] && !strchr(err, '\n') &&
             (!why || strstr(err, why));
    if (!ok)
        fprintf(stderr, "snapshot not refused as expected (%s): rc %d, \"%s\"\n",
                why ? why : "", rc, err);
    cal_snapshot_free(&out);
    return ok;
}

/* The tiny snapshot whose bytes test_snapshot_refusals edits:
   meta "{}", strings ["a.py"], frames [(0, 7)], frame ids [0],
   tracebacks [(0, 1, 1, 0)], traces [(0, 0, 100, 100)]. */
static void snap_tiny(cal_buf *b)
{
    cal_snapshot s;
    cal_snapshot_init(&s);
    uint32_t f = cal_snapshot_frame(&s, cal_snapshot_string(&s, "a.py", 4), 7);
    uint32_t tb = cal_snapshot_traceback(&s, &f, 1, 1, 0);
    CHECK(cal_snapshot_add(&s, 0, tb, 100, 100) == 0);
    CHECK(cal_snapshot_encode(&s, b) == 0);
    cal_snapshot_free(&s);
}

/* Refusals, each a valid file with one thing wrong (checksum fixed). */
static void test_snapshot_refusals(void)
{
    cal_buf b;
    snap_tiny(&b);
    CHECK(b.len == 110);
    if (b.len != 110) {
        cal_buf_free(&b);
        return;
    }
    /* The bytes docs/FORMAT.md shows: the format does not drift. */
    CHECK(memcmp(b.data,
                 "\x89"
                 "CALSNP\n\x01\0\0\0\x02\0\0\0{}",
                 18) == 0);
    CHECK(memcmp(b.data + 102, "\xfe\xab\x47\x18\xad\xec\xc6\xe0", 8) == 0);
    char *m = malloc(b.len + 16);
    cal_snapshot out;
    char err[256];
    CHECK(cal_snapshot_decode(b.data, b.len, &out, err, sizeof err) == 0);
    CHECK(out.ntraces == 1 && out.traces[0].size == 100 && out.frames[0].line == 7);
    cal_snapshot_free(&out);
    /* Each edit: offset, u32 value, expected reason. */
    static const struct {
        size_t at;
        uint32_t v;
        const char *why;
    } edits[] = {
        {0, 0x4c41437b, "not a calipers snapshot"}, /* magic */
        {8, 2, "snapshot format version 2 is newer than this calipers reads (1)"},
        {8, 0, "version 0"},
        {12, 3, "meta is not JSON"},                                /* meta length */
        {18, 0xffffffffu, "strings count 4294967295 needs"},        /* lying count */
        {22, 0x7fffffff, "truncated"},                              /* string length */
        {26, 0x79700061, "string 0 is not UTF-8 text without NUL"}, /* "a\0py" */
        {26, 0x797061ff, "string 0 is not UTF-8"},
        {30, 0x10000000, "frames count"},
        {34, 5, "frame 0: file 5 is not a string"},
        {42, 0x40000000, "frame ids count 1073741824 needs"},
        {42, 2, "frame id 1: frame 1 out of range"},
        {46, 3, "frame id 0: frame 3 out of range"},
        {54, 1, "traceback 0: frames"}, /* first */
        {58, 2, "traceback 0: frames"}, /* nframes */
        {58, 0, "frame ids, of which the tracebacks use 0"},
        {62, 0, "root_kept <= nframes <= total"}, /* total */
        {66, 2, "root_kept <= nframes <= total"},
        {70, 2, "traces count 2"},
        {74, 1, "traces count"}, /* high half */
        {82, 1, "trace 0: traceback 1 out of range"},
        {90, 0x80000000u, "trace 0: size"}, /* negative */
        {94, 0, "block size 0 is not positive"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        memcpy(m, b.data, b.len);
        snap_put_u32(m + edits[i].at, edits[i].v);
        snap_reseal(m, b.len);
        CHECK(snap_refused(m, b.len, edits[i].why));
    }
    memcpy(m, b.data, b.len);
    memcpy(m + 16, "[]", 2);
    snap_reseal(m, b.len);
    CHECK(snap_refused(m, b.len, "meta is not a JSON object"));
    /* The checksum. */
    memcpy(m, b.data, b.len);
    m[86] ^= 1;
    CHECK(snap_refused(m, b.len, "checksum mismatch"));
    /* Bytes after the end. */
    memcpy(m, b.data, b.len);
    m[b.len] = 0;
    snap_reseal(m, b.len + 1);
    CHECK(snap_refused(m, b.len + 1, "bytes after the traces"));
    /* Truncated at every length. */
    int all = 1;
    for (size_t len = 0; len < b.len; len++) {
        memcpy(m, b.data, len);
        all &= snap_refused(m, len, NULL);
    }
    CHECK(all);
    CHECK(snap_refused(b.data, 5, "truncated"));
    CHECK(snap_refused(b.data, 60,
                       "truncated snapshot: 60 bytes, ended in the tracebacks"));
    /* Text is never a snapshot. */
    CHECK(snap_refused("{\"schema\": \"calipers/1\"}", 24, "not a calipers snapshot"));
    CHECK(!cal_snapshot_is_snapshot("{}", 2));
    CHECK(cal_snapshot_is_snapshot(b.data, b.len));
    free(m);
    cal_buf_free(&b);
}

/* A snapshot with a bit of everything: shared and elided tracebacks, an
   empty one, non-ASCII names, both domains, sizes near the limits. */
static void snap_sample(cal_snapshot *s)
{
    cal_snapshot_init(s);
    const char *names[] = {"app.py", "/usr/lib/python3/json/decoder.py", "π/ü.py", ""};
    uint32_t fr[8];
    for (int i = 0; i < 8; i++) {
        const char *n = names[i % 4];
        fr[i] = cal_snapshot_frame(s, cal_snapshot_string(s, n, strlen(n)),
                                   i == 7 ? -1 : INT32_MAX - i);
    }
    uint32_t t0 = cal_snapshot_traceback(s, fr, 8, 8, 0);
    uint32_t t1 = cal_snapshot_traceback(s, fr + 2, 3, 40, 1);
    uint32_t t2 = cal_snapshot_traceback(s, NULL, 0, 0, 0);
    for (int i = 0; i < 50; i++) {
        uint32_t tb = i % 3 == 0 ? t0 : i % 3 == 1 ? t1 : t2;
        cal_snapshot_add(s, (uint32_t)(i % 2), tb, i == 0 ? 0 : (int64_t)i << 40,
                         i == 0 ? 1 : INT64_MAX - i);
    }
    const char *meta =
        "{\"traceback_limit\": 8, \"mean_bytes\": 524288, \"é\": [1, 2]}";
    CHECK(cal_snapshot_set_meta(s, meta, strlen(meta)) == 0);
}

static void test_snapshot(void)
{
    /* Interning. */
    cal_snapshot s;
    cal_snapshot_init(&s);
    uint32_t a = cal_snapshot_string(&s, "a.py", 4),
             b = cal_snapshot_string(&s, "b.py", 4);
    CHECK(a == 0 && b == 1 && cal_snapshot_string(&s, "a.pyX", 4) == a);
    CHECK(cal_snapshot_string(&s, "", 0) == 2 && cal_snapshot_string(&s, "", 0) == 2);
    uint32_t fa = cal_snapshot_frame(&s, a, 3), fb = cal_snapshot_frame(&s, b, 3);
    CHECK(fa != fb && cal_snapshot_frame(&s, a, 3) == fa);
    CHECK(cal_snapshot_frame(&s, a, 4) != fa);
    uint32_t st[2] = {fa, fb}, rev[2] = {fb, fa};
    uint32_t t = cal_snapshot_traceback(&s, st, 2, 2, 0);
    CHECK(cal_snapshot_traceback(&s, st, 2, 2, 0) == t);
    CHECK(cal_snapshot_traceback(&s, rev, 2, 2, 0) != t);
    CHECK(cal_snapshot_traceback(&s, st, 2, 5, 0) != t); /* elided: another */
    CHECK(cal_snapshot_traceback(&s, st, 2, 5, 1) !=
          cal_snapshot_traceback(&s, st, 2, 5, 0));
    CHECK(s.ntracebacks == 4 && s.nframe_ids == 8);
    /* What the file cannot hold is refused. */
    errno = 0;
    CHECK(cal_snapshot_string(&s, "a\0b", 3) == CAL_SNAPSHOT_NONE && errno == EINVAL);
    CHECK(cal_snapshot_string(&s, "\xc3(", 2) == CAL_SNAPSHOT_NONE);
    CHECK(cal_snapshot_frame(&s, 99, 1) == CAL_SNAPSHOT_NONE);
    uint32_t bad = 99;
    CHECK(cal_snapshot_traceback(&s, &bad, 1, 1, 0) == CAL_SNAPSHOT_NONE);
    CHECK(cal_snapshot_traceback(&s, st, 2, 1, 0) == CAL_SNAPSHOT_NONE);
    CHECK(cal_snapshot_traceback(&s, st, 2, 2, 3) == CAL_SNAPSHOT_NONE);
    CHECK(cal_snapshot_add(&s, 0, t, 10, 10) == 0);
    CHECK(cal_snapshot_add(&s, 0, 99, 10, 10) == -1 && errno == EINVAL);
    CHECK(cal_snapshot_add(&s, 0, t, -1, 10) == -1);
    CHECK(cal_snapshot_add(&s, 0, t, 10, 0) == -1);
    CHECK(s.ntraces == 1);
    CHECK(cal_snapshot_set_meta(&s, "[1]", 3) == -1 && errno == EINVAL);
    CHECK(cal_snapshot_set_meta(&s, "{", 1) == -1);
    CHECK(s.meta_json == NULL);
    cal_snapshot_free(&s);

    /* Round trip, and the same bytes each time. */
    snap_sample(&s);
    CHECK(s.ntraces == 50 && s.ntracebacks == 3 && s.nstrings == 4 && s.nframes == 8);
    cal_buf e1, e2;
    CHECK(cal_snapshot_encode(&s, &e1) == 0);
    CHECK(cal_snapshot_encode(&s, &e2) == 0);
    CHECK(e1.len == e2.len && memcmp(e1.data, e2.data, e1.len) == 0);
    cal_buf_free(&e2);
    cal_snapshot d;
    char err[256];
    CHECK(cal_snapshot_decode(e1.data, e1.len, &d, err, sizeof err) == 0);
    CHECK(snap_equal(&s, &d));
    CHECK(cal_snapshot_encode(&d, &e2) == 0);
    CHECK(e1.len == e2.len && memcmp(e1.data, e2.data, e1.len) == 0);
    cal_buf_free(&e2);
    /* A decoded snapshot interns as the built one did. */
    CHECK(cal_snapshot_string(&d, "π/ü.py", strlen("π/ü.py")) == 2);
    cal_snapshot_free(&d);
    /* An empty snapshot: meta "{}". */
    cal_snapshot z;
    cal_snapshot_init(&z);
    CHECK(cal_snapshot_encode(&z, &e2) == 0);
    CHECK(cal_snapshot_decode(e2.data, e2.len, &d, err, sizeof err) == 0);
    CHECK(snap_equal(&z, &d) && strcmp(d.meta_json, "{}") == 0);
    cal_snapshot_free(&d);
    cal_buf_free(&e2);

    /* A real file. */
    char dir[] = "/tmp/calipers-test-XXXXXX", path[96], other[96];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/mem.calsnap", dir);
    CHECK(cal_snapshot_write(&s, path) == 0);
    CHECK(cal_snapshot_read(path, &d, err, sizeof err) == 0);
    CHECK(snap_equal(&s, &d));
    cal_snapshot_free(&d);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (size_t)sb.st_size == e1.len);
    /* A symbolic link is neither written through nor read through. */
    snprintf(other, sizeof other, "%s/link", dir);
    CHECK(symlink(path, other) == 0);
    errno = 0;
    CHECK(cal_snapshot_write(&s, other) == -1 && errno == ELOOP);
    errno = 0;
    CHECK(cal_snapshot_read(other, &d, err, sizeof err) == -1 && errno == ELOOP);
    CHECK(snap_empty(&d) && strstr(err, "symbolic link"));
    unlink(other);
    /* Neither a directory nor a FIFO (which must not block the reader). */
    errno = 0;
    CHECK(cal_snapshot_read(dir, &d, err, sizeof err) == -1 && errno == EISDIR);
    snprintf(other, sizeof other, "%s/fifo", dir);
    CHECK(mkfifo(other, 0600) == 0);
    errno = 0;
    CHECK(cal_snapshot_read(other, &d, err, sizeof err) == -1 && errno == 0);
    CHECK(strstr(err, "not a regular file") != NULL);
    unlink(other);
    snprintf(other, sizeof other, "%s/missing", dir);
    CHECK(cal_snapshot_read(other, &d, err, sizeof err) == -1 && errno == ENOENT);
    /* A corrupt file: errno 0, the reason in err. */
    FILE *f = fopen(path, "r+b");
    CHECK(f && fseek(f, 8, SEEK_SET) == 0 && fputc(7, f) == 7);
    if (f)
        fclose(f);
    errno = 1;
    CHECK(cal_snapshot_read(path, &d, err, sizeof err) == -1 && errno == 0);
    CHECK(strstr(err, "version 7 is newer") != NULL);
    unlink(path);
    rmdir(dir);

    test_snapshot_refusals();

    /* Mutation fuzz: flip bytes of a valid encoding; half of the time fix
       the checksum so that the mutation reaches the checks behind it.
       Decoding must answer 0 or -1 cleanly (ASan/UBSan watch), and what
       it accepts must encode again to what it read. */
    char *m = malloc(e1.len);
    int clean = 1, accepted = 0;
    for (int round = 0; round < 20000; round++) {
        memcpy(m, e1.data, e1.len);
        int flips = 1 + (int)(fuzz_next() % 4);
        for (int k = 0; k < flips; k++) {
            size_t at = (size_t)(fuzz_next() % e1.len);
            m[at] = fuzz_next() % 2 ? (char)(m[at] ^ (1 << (fuzz_next() % 8)))
                                    : (char)fuzz_next();
        }
        if (round % 2)
            snap_reseal(m, e1.len);
        err[0] = '\0';
        int rc = cal_snapshot_decode(m, e1.len, &d, err, sizeof err);
        if (rc == 0) {
            accepted++;
            if (cal_snapshot_encode(&d, &e2) == 0) {
                clean &= e2.len == e1.len && memcmp(e2.data, m, e1.len) == 0;
                cal_buf_free(&e2);
            }
        } else {
            clean &= rc == -1 && err[0] != '\0' && snap_empty(&d);
        }
        cal_snapshot_free(&d);
    }
    CHECK(clean);
    CHECK(accepted > 100); /* some mutations are valid files (a size, a line) */
    free(m);
    cal_buf_free(&e1);
    cal_snapshot_free(&s);
}

/* calipers diff: profiles matched by line (new, gone, changed source),
   sorted by the largest change; snapshots with their standard errors. */
static const char DIFF_OLD[] =
    "{\"summary\":{\"wall_s\":1,\"python_s\":1,\"native_s\":0,\"system_s\":0,"
    "\"waiting_s\":0,\"memory\":{\"peak_bytes\":100,\"allocated_python_bytes\":50,"
    "\"allocated_native_bytes\":0}},\"files\":[{\"path\":\"/p/a.py\",\"source\":"
    "[[1,\"x = 1\"],[2,\"y = 2\"],[3,\"z = 3\"]],\"lines\":["
    "{\"line\":1,\"function\":\"f\",\"python_s\":0.5,\"memory\":{\"alloc_python_"
    "bytes\":10,"
    "\"live_peak_bytes\":5,\"live_end_bytes\":1}},"
    "{\"line\":2,\"function\":\"f\",\"python_s\":0.3},"
    "{\"line\":3,\"function\":\"g\",\"python_s\":0.2}],"
    "\"functions\":[{\"name\":\"f\",\"line\":1,\"total\":{\"python_s\":0.8}}]}]}";
static const char DIFF_NEW[] =
    "{\"summary\":{\"wall_s\":3,\"python_s\":3,\"native_s\":0,\"system_s\":0,"
    "\"waiting_s\":0,\"memory\":{\"peak_bytes\":300,\"allocated_python_bytes\":90,"
    "\"allocated_native_bytes\":0}},\"files\":[{\"path\":\"/p/a.py\",\"source\":"
    "[[1,\"x = 1\"],[2,\"y = 22\"],[4,\"w = 4\"]],\"lines\":["
    "{\"line\":1,\"function\":\"f\",\"python_s\":2.5,\"memory\":{\"alloc_python_"
    "bytes\":"
    "40,\"alloc_native_bytes\":10,\"live_peak_bytes\":7,\"live_end_bytes\":0}},"
    "{\"line\":2,\"function\":\"f\",\"python_s\":0.2},"
    "{\"line\":4,\"function\":\"h\",\"python_s\":0.3}],"
    "\"functions\":[{\"name\":\"f\",\"line\":1,\"total\":{\"python_s\":2.7}}]}]}";

/* Row i of a diff's JSON output. */
static const cal_jv *diff_row(const cal_jdoc *d, size_t i)
{
    return cal_jv_at(cal_jv_get(d->root, "rows"), i);
}

static double diff_at(const cal_jv *row, const char *key, size_t i)
{
    return cal_jv_num(cal_jv_at(cal_jv_get(row, key), i), -1);
}

static void test_diff(void)
{
    cal_jdoc a, b, out;
    char err[200];
    CHECK(cal_jdoc_parse(&a, DIFF_OLD, sizeof DIFF_OLD - 1, err, sizeof err) == 0);
    CHECK(cal_jdoc_parse(&b, DIFF_NEW, sizeof DIFF_NEW - 1, err, sizeof err) == 0);
    cal_diff_opts o = {CAL_DIFF_BY_LINE, CAL_DIFF_SORT_TIME, 0, CAL_DIFF_JSON, 100, 0,
                       "old.json",       "new.json"};
    cal_buf buf;
    cal_buf_init(&buf);
    CHECK(cal_diff_profiles(a.root, b.root, &o, &buf, err, sizeof err) == 0);
    CHECK(cal_jdoc_parse(&out, buf.data, buf.len, err, sizeof err) == 0);
    CHECK(cal_jv_getnum(out.root, "rows_total", 0) == 4);
    /* Line 1: +2 s, first; then the new line 4 (+0.3), the gone line 3
       (-0.2), line 2 (-0.1, its text changed). */
    const cal_jv *r0 = diff_row(&out, 0), *r1 = diff_row(&out, 1),
                 *r2 = diff_row(&out, 2), *r3 = diff_row(&out, 3);
    CHECK(cal_jv_getnum(r0, "line", 0) == 1 &&
          fabs(diff_at(r0, "time_s", 2) - 2) < 1e-9);
    CHECK(diff_at(r0, "alloc_bytes", 0) == 10 && diff_at(r0, "alloc_bytes", 2) == 40);
    CHECK(diff_at(r0, "live_peak_bytes", 2) == 2 &&
          diff_at(r0, "live_end_bytes", 2) == -1);
    CHECK(strcmp(cal_jv_getstr(r0, "status", ""), "both") == 0);
    CHECK(cal_jv_getnum(r1, "line", 0) == 4);
    CHECK(strcmp(cal_jv_getstr(r1, "status", ""), "new") == 0);
    CHECK(cal_jv_getnum(r2, "line", 0) == 3);
    CHECK(strcmp(cal_jv_getstr(r2, "status", ""), "gone") == 0);
    CHECK(cal_jv_getnum(r3, "line", 0) == 2 &&
          cal_jv_bool(cal_jv_get(r3, "changed"), 0));
    CHECK(!cal_jv_bool(cal_jv_get(r0, "changed"), 1));
    cal_jdoc_free(&out);

    /* By function, sorted by allocation, the first row only. */
    o.by = CAL_DIFF_BY_FUNCTION;
    o.top = 1;
    buf.len = 0;
    CHECK(cal_diff_profiles(a.root, b.root, &o, &buf, err, sizeof err) == 0);
    CHECK(cal_jdoc_parse(&out, buf.data, buf.len, err, sizeof err) == 0);
    CHECK(cal_jv_len(cal_jv_get(out.root, "rows")) == 1);
    CHECK(strcmp(cal_jv_getstr(diff_row(&out, 0), "function", ""), "f") == 0);
    CHECK(fabs(diff_at(diff_row(&out, 0), "time_s", 2) - 1.9) < 1e-9);
    cal_jdoc_free(&out);

    /* Text and HTML render, at any width; the page fetches nothing. */
    o.by = CAL_DIFF_BY_LINE;
    o.top = 0;
    for (int tty = 0; tty < 2; tty++)
        for (int w = 0; w < 200; w += 37) {
            o.format = CAL_DIFF_TEXT;
            o.tty = tty;
            o.width = w;
            buf.len = 0;
            CHECK(cal_diff_profiles(a.root, b.root, &o, &buf, err, sizeof err) == 0);
            CHECK(buf.len > 0 && strstr(buf.data, "a.py:1") != NULL);
        }
    o.format = CAL_DIFF_HTML;
    buf.len = 0;
    CHECK(cal_diff_profiles(a.root, b.root, &o, &buf, err, sizeof err) == 0);
    cal_buf_add(&buf, "", 1);
    CHECK(strstr(buf.data, "Content-Security-Policy") && !strstr(buf.data, "<script"));
    CHECK(strstr(buf.data, "changed") != NULL);
    o.by = CAL_DIFF_BY_TRACEBACK;
    CHECK(cal_diff_profiles(a.root, b.root, &o, &buf, err, sizeof err) == -1);
    CHECK(strstr(err, "traceback") != NULL);
    cal_jdoc_free(&a);
    cal_jdoc_free(&b);

    /* Snapshots: a.py:1 exact (1000 -> 2000 bytes: significant at any size);
       b.py:2 sampled (10000 bytes in blocks of 100 both times: no change,
       stderr sqrt(2 * 10000 * 9900)); c.py:3 only in the new one. */
    char *strs[3] = {"a.py", "b.py", "c.py"};
    cal_snap_frame frames[3] = {{0, 1}, {1, 2}, {2, 3}};
    uint32_t ids[3] = {0, 1, 2};
    cal_snap_traceback tbs[3] = {{0, 1, 1, 0}, {1, 1, 1, 0}, {2, 1, 1, 0}};
    cal_snap_trace t_old[2] = {{0, 0, 1000, 1000}, {1, 1, 10000, 100}};
    cal_snap_trace t_new[4] = {
        {0, 0, 1000, 1000}, {0, 0, 1000, 1000}, {1, 1, 10000, 100}, {0, 2, 5000, 5000}};
    cal_snapshot so, sn;
    memset(&so, 0, sizeof so);
    so.strings = strs;
    so.nstrings = 3;
    so.frames = frames;
    so.nframes = 3;
    so.frame_ids = ids;
    so.nframe_ids = 3;
    so.tracebacks = tbs;
    so.ntracebacks = 3;
    sn = so;
    so.traces = t_old;
    so.ntraces = 2;
    sn.traces = t_new;
    sn.ntraces = 4;
    o.by = CAL_DIFF_BY_LINE;
    o.format = CAL_DIFF_JSON;
    buf.len = 0;
    CHECK(cal_diff_snapshots(&so, &sn, &o, &buf, err, sizeof err) == 0);
    CHECK(cal_jdoc_parse(&out, buf.data, buf.len, err, sizeof err) == 0);
    r0 = diff_row(&out, 0);
    r1 = diff_row(&out, 1);
    r2 = diff_row(&out, 2);
    CHECK(strcmp(cal_jv_getstr(r0, "path", ""), "c.py") == 0);
    CHECK(strcmp(cal_jv_getstr(r0, "status", ""), "new") == 0);
    CHECK(strcmp(cal_jv_getstr(r1, "path", ""), "a.py") == 0);
    CHECK(diff_at(r1, "size_bytes", 2) == 1000 && diff_at(r1, "count", 2) == 1);
    CHECK(cal_jv_getnum(r1, "size_stderr", -1) == 0);
    CHECK(cal_jv_bool(cal_jv_get(r1, "size_significant"), 0));
    CHECK(diff_at(r2, "size_bytes", 2) == 0 && diff_at(r2, "count", 0) == 100);
    CHECK(cal_jv_getnum(r2, "size_stderr", 0) == 14071); /* sqrt(1.98e8) */
    CHECK(fabs(cal_jv_getnum(r2, "count_stderr", 0) - sqrt(2 * 100 * 99.0)) < 0.01);
    CHECK(!cal_jv_bool(cal_jv_get(r2, "size_significant"), 1));
    cal_jdoc_free(&out);
    /* By traceback and by file; text; and what snapshots do not take. */
    for (int by = CAL_DIFF_BY_LINE; by <= CAL_DIFF_BY_TRACEBACK; by++)
        for (int f = CAL_DIFF_TEXT; f <= CAL_DIFF_JSON; f++) {
            o.by = by;
            o.format = f;
            buf.len = 0;
            int rc = cal_diff_snapshots(&so, &sn, &o, &buf, err, sizeof err);
            CHECK(rc == (by == CAL_DIFF_BY_FUNCTION ? -1 : 0));
        }
    cal_buf_free(&buf);
}

/* Allocation types: buckets, the bytes-weighted median, one record per
   (line, type), and the JSON section's sums. */
static void test_atypes(void)
{
    CHECK(cal_atypes_bucket(0) == 0 && cal_atypes_bucket(-5) == 0);
    CHECK(cal_atypes_bucket(1) == 1 && cal_atypes_bucket(2) == 2 &&
          cal_atypes_bucket(3) == 2);
    CHECK(cal_atypes_bucket(INT64_MAX) == CAL_ATYPES_BUCKETS - 1);
    int64_t h[CAL_ATYPES_BUCKETS] = {0};
    CHECK(cal_atypes_median(h) < 0);
    h[cal_atypes_bucket(1000)] = 10; /* [512, 1024) */
    double m = cal_atypes_median(h);
    CHECK(m >= 512 && m < 1024);
    h[cal_atypes_bucket(100000)] = 30; /* most bytes lived longer */
    m = cal_atypes_median(h);
    CHECK(m >= 65536 && m < 131072);

    cal_profile *p = cal_profile_new();
    uint32_t f = cal_profile_string(p, "a.py", 4), fn = cal_profile_string(p, "f", 1);
    uint32_t li = cal_profile_line(p, f, 3, cal_profile_function(p, f, fn, 1));
    uint32_t dict = cal_profile_string(p, "dict", 4),
             str = cal_profile_string(p, "str", 3);
    cal_atypes *a = cal_profile_atypes(p);
    CHECK(a != NULL);
    CHECK(cal_atypes_add(a, li, dict, 1000, 100, CAL_FATE_YOUNG, 5000, 10) == 0);
    CHECK(cal_atypes_add(a, li, dict, 3000, 100, CAL_FATE_SURVIVED, 1 << 20, 1000) ==
          0);
    CHECK(cal_atypes_add(a, li, str, 500, 50, CAL_FATE_END, -1, -1) == 0);
    CHECK(cal_atypes_add(a, CAL_PROFILE_NONE, str, 500, 50, CAL_FATE_UNTRACKED, -1,
                         -1) == 0);
    CHECK(a->n == 3);
    CHECK(a->v[0].samples == 2 && a->v[0].bytes == 4000);
    CHECK(a->v[0].objects > 39.99 && a->v[0].objects < 40.01);
    cal_buf out;
    cal_buf_init(&out);
    cal_json j;
    cal_json_init(&j, &out, 0);
    cal_json_object_begin(&j);
    cal_atypes_json(&j, p);
    cal_json_object_end(&j);
    CHECK(out.data && strstr(out.data, "\"allocated_types\""));
    /* str first among types? No: dict has the most bytes, then str. */
    CHECK(strstr(out.data, "\"type\":\"dict\"") < strstr(out.data, "\"type\":\"str\""));
    /* The line: 3 samples, 4500 bytes, survived 3000 of 4500 known. */
    CHECK(strstr(out.data, "\"survived_fraction\":0.6667") != NULL);
    cal_buf_free(&out);
    cal_profile_free(p);
}

/* The heap at exit: the caller's summary is written as the profile's
   "heap", as it is, and the shape check accepts it beside a real
   allocated_types section, and names a member of the wrong type. */
static void test_heap_member(void)
{
    cal_profile *p = cal_profile_new();
    build_profile(p, 0);
    uint32_t f = cal_profile_string(p, "a.py", 4), fn = cal_profile_string(p, "f", 1);
    uint32_t li = cal_profile_line(p, f, 3, cal_profile_function(p, f, fn, 1));
    cal_atypes *a = cal_profile_atypes(p);
    CHECK(a && cal_atypes_add(a, li, cal_profile_string(p, "dict", 4), 1000, 100,
                              CAL_FATE_SURVIVED, 5000, 10) == 0);
    static const char *const heaps[2] = {
        "{\"dump\":\"p.1.1.heap\",\"largest\":[{\"path\":\"__main__.x  (list)\","
        "\"retained_bytes\":900,\"size_bytes\":56,\"steps\":[{\"edge\":\"root\","
        "\"object\":\"dict sys.modules\"},{\"edge\":null,\"object\":\"list\"}],"
        "\"type\":\"list\"}],\"objects\":10,\"reason\":\"at exit\",\"scan_s\":0.01,"
        "\"shallow_bytes\":1000,\"types\":[{\"count\":2,\"retained_bytes\":900,"
        "\"size_bytes\":100,\"type\":\"dict\"}]}",
        "{\"dump\":\"p.1.1.heap\",\"largest\":[],\"objects\":10,\"reason\":\"at exit\","
        "\"scan_s\":0.01,\"shallow_bytes\":1000,\"types\":[{\"count\":\"two\","
        "\"retained_bytes\":900,\"size_bytes\":100,\"type\":\"dict\"}]}",
    };
    for (int k = 0; k < 2; k++) {
        cal_meta m = test_meta();
        m.heap_json = heaps[k];
        cal_buf b;
        cal_buf_init(&b);
        cal_report_json(p, &m, &b);
        CHECK(b.data && strstr(b.data, "\"heap\": {\"dump\""));
        cal_jdoc doc;
        char err[256];
        CHECK(cal_jdoc_parse(&doc, b.data, b.len, err, sizeof err) == 0);
        const cal_jv *heap = cal_jv_get(doc.root, "heap");
        CHECK(strcmp(cal_jv_getstr(cal_jv_at(cal_jv_get(heap, "types"), 0), "type", ""),
                     "dict") == 0);
        CHECK(cal_jv_is(cal_jv_get(doc.root, "allocated_types"), CAL_JOBJ));
        if (k == 0) {
            CHECK(cal_view_check(doc.root, err, sizeof err) == 0);
        } else {
            CHECK(cal_view_check(doc.root, err, sizeof err) != 0 &&
                  strstr(err, "heap.types[0].count") != NULL);
        }
        cal_jdoc_free(&doc);
        cal_buf_free(&b);
    }
    cal_profile_free(p);
}

/* The garbage collector: gc_s in the time records, summary.gc (null when
   the collector was not read), both accepted by the shape check and shown
   by the terminal report, and a child's collections merged in. */
static void test_gc(void)
{
    cal_profile *p = cal_profile_new();
    build_profile(p, 0);
    size_t len;
    char *text = profile_json(p, 1000.0, &len);
    CHECK(strstr(text, "\"gc\": null") != NULL);
    CHECK(strstr(text, "\"gc_s\": 0.000000") != NULL);
    free(text);

    uint32_t f = cal_profile_string(p, "/w/a.py", 7);
    uint32_t fn = cal_profile_function(p, f, cal_profile_string(p, "f", 1), 10);
    cal_times t = T(30000000, 10000000, 0, 0);
    t.gc_ns = 26000000; /* of the 40 ms of CPU */
    CHECK(cal_profile_add_sample(p, 0, f, 12, fn, &t) == 0);
    cal_gc_stats *g = cal_profile_gc(p);
    g->read = 1;
    for (int i = 0; i < CAL_GC_GENERATIONS; i++) {
        g->gen[i].collections = 10 >> i;
        g->gen[i].collected = 1000 >> i;
        g->gen[i].threshold = i ? 10 : 2000;
        cal_series_add(&g->gen[i].count, 0, 0);
        cal_series_add(&g->gen[i].count, 5000000, 7 - i);
    }
    g->gen[2].uncollectable = 3;
    /* Collections seen: the longest first, one record per collection, the
       shortest dropped once the list is full. */
    uint32_t li = cal_profile_line(p, f, 12, fn);
    for (int k = 0; k < CAL_GC_LONGEST + 5; k++) {
        cal_gc_seen one = {0, 1000 * k, 0, 1 + k % 7, li, 10, 0};
        cal_gc_add_seen(g, &one);
    }
    cal_gc_seen big = {2, 5, 0, 3, li, -1, -1};
    cal_gc_add_seen(g, &big);
    big.ticks = 40; /* the same collection, seen by more ticks */
    big.span_ns = 20000000;
    cal_gc_add_seen(g, &big);
    CHECK(g->seen == CAL_GC_LONGEST + 6);
    CHECK(g->nlongest == CAL_GC_LONGEST);
    CHECK(g->longest[0].generation == 2 && g->longest[0].ticks == 40);
    for (size_t k = 1; k < g->nlongest; k++)
        CHECK(g->longest[k - 1].ticks >= g->longest[k].ticks);
    CHECK(g->longest[g->nlongest - 1].ticks >= 1);
    text = profile_json(p, 1000.0, &len);
    CHECK(strstr(text, "\"ticks\": 40") != NULL);
    CHECK(strstr(text, "\"at_least_s\": 0.020000") != NULL);
    CHECK(strstr(text, "\"gc_s\": 0.026000") != NULL);
    CHECK(strstr(text, "\"time_s\": 0.026000") != NULL);
    CHECK(strstr(text, "\"collections\": 17") != NULL); /* 10 + 5 + 2 */
    CHECK(strstr(text, "\"collected\": 1750") != NULL); /* 1000 + 500 + 250 */
    CHECK(strstr(text, "\"uncollectable\": 3") != NULL);
    cal_jdoc doc;
    char err[200];
    CHECK(cal_jdoc_parse(&doc, text, len, err, sizeof err) == 0);
    CHECK(cal_view_check(doc.root, err, sizeof err) == 0);
    cal_buf s;
    cal_buf_init(&s);
    cal_view_opts o = {240, 0, 1.0, 300, NULL, 0, 0};
    cal_view_text(doc.root, &o, &s);
    CHECK(s.data && strstr(s.data, "garbage collector 0.03 s") != NULL);
    CHECK(strstr(s.data, "gen 2: 2") != NULL && strstr(s.data, "3 uncollectable"));
    /* 40 ticks at 10 ms */
    CHECK(strstr(s.data, "the longest seen about 400 ms (gen 2) at a.py:12") != NULL);
    CHECK(strstr(s.data, "      gc") != NULL); /* the lines' gc column */
    cal_buf_free(&s);

    /* A child's collections add to the run's. */
    cal_profile *q = cal_profile_new();
    build_profile(q, 1);
    cal_profile_gc(q)->read = 1;
    cal_profile_gc(q)->gen[0].collections = 1;
    CHECK(cal_merge_add(q, doc.root, 1000.0, err, sizeof err) == 0);
    CHECK(cal_profile_gc_at(q)->gen[0].collections == 11);
    CHECK(cal_profile_gc_at(q)->gen[2].uncollectable == 3);
    cal_jdoc_free(&doc);

    /* A gc member of the wrong shape is refused, with its name. */
    char *at = strstr(text, "\"time_s\": 0.026000");
    CHECK(at != NULL);
    if (at) {
        memcpy(at, "\"time_s\": \"0.0260\"", 18);
        CHECK(cal_jdoc_parse(&doc, text, len, err, sizeof err) == 0);
        CHECK(cal_view_check(doc.root, err, sizeof err) != 0);
        CHECK(strstr(err, "summary.gc.time_s: expected a number") != NULL);
        cal_jdoc_free(&doc);
    }
    free(text);
    cal_profile_free(q);
    cal_profile_free(p);
}

int main(void)
{
    test_map();
    test_atypes();
    test_gc();
    test_heap_member();
    test_strings();
    test_profile();
    test_json_writer();
    test_jsonr();
    test_html();
    test_report_deterministic();
    test_merge();
    test_notes();
    test_text_long_word();
    test_rand();
    test_clock();
    test_runnable();
    test_futex_wait();
    test_gpu_entries();
    test_buf_write();
    test_buf_write_safely();
    test_bsamp();
    test_series();
    test_vmread();
    test_jsonr_member_names();
    test_view_check_shapes();
    test_view_controls();
    test_fuzz_types();
    test_utf8();
    test_stacks();
    test_stacks_pruned();
    test_pb_encoding();
    test_export();
    test_export_firefox();
    test_timeline();
    test_snapshot();
    test_diff();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
