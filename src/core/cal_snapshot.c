/*
 * cal_snapshot — see cal_snapshot.h.  The interning tables of a memory
 * snapshot, and its file (docs/FORMAT.md, "Snapshot files"): encoded in
 * one pass over the tables, decoded by building the tables again through
 * the same interning functions, so that a decoded snapshot is exactly one
 * that was built, and everything the builder refuses the reader refuses.
 *
 * The reader's input is untrusted (a file a user names): every count is
 * checked against the bytes left before anything is allocated for it,
 * every index against its table, and the file ends with a checksum.
 * Plain C, no globals.
 */
#define _GNU_SOURCE
#include "cal_snapshot.h"

#include "cal_binfile.h"
#include "cal_buf.h"
#include "cal_jsonr.h"
#include "cal_utf8.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The magic: 0x89 first, a byte no UTF-8 text (so no JSON profile, no
   collapsed stacks) can start with, as PNG does; then the name; then a
   line feed, which a transfer that rewrites line ends would change. */
static const char MAGIC[8] = {(char)0x89, 'C', 'A', 'L', 'S', 'N', 'P', '\n'};

/* Header (magic, version) and trailer (checksum) sizes. */
#define HEADER_LEN 12

void cal_snapshot_init(cal_snapshot *s)
{
    memset(s, 0, sizeof(*s));
    cal_map_init(&s->string_index);
    cal_map_init(&s->frame_index);
    cal_map_init(&s->traceback_index);
}

void cal_snapshot_free(cal_snapshot *s)
{
    for (size_t i = 0; i < s->nstrings; i++)
        free(s->strings[i]);
    free(s->strings);
    free(s->frames);
    free(s->frame_ids);
    free(s->tracebacks);
    free(s->traces);
    free(s->meta_json);
    cal_map_clear(&s->string_index);
    cal_map_clear(&s->frame_index);
    cal_map_clear(&s->traceback_index);
    cal_snapshot_init(s);
}

/* Make room for `need` elements of `elem` bytes in *v (cap allocated),
   doubling.  0, or -1 on allocation failure or overflow (errno ENOMEM). */
static int reserve(void **v, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n = n > SIZE_MAX / 2 ? need : n * 2;
    if (n > SIZE_MAX / elem) {
        errno = ENOMEM;
        return -1;
    }
    void *p = realloc(*v, n * elem);
    if (!p) {
        errno = ENOMEM;
        return -1;
    }
    *v = p;
    *cap = n;
    return 0;
}

uint32_t cal_snapshot_string(cal_snapshot *s, const char *text, size_t len)
{
    if (cal_binfile_utf8_bad_at(text, len) != len) {
        errno = EINVAL;
        return CAL_SNAPSHOT_NONE;
    }
    uint64_t h = cal_hash_bytes(text, len);
    size_t cursor = 0;
    uint32_t id;
    while ((id = cal_map_find(&s->string_index, h, &cursor)) != CAL_MAP_NONE) {
        if (strlen(s->strings[id]) == len && memcmp(s->strings[id], text, len) == 0)
            return id;
    }
    if (s->nstrings >= CAL_SNAPSHOT_NONE) {
        errno = ENOMEM;
        return CAL_SNAPSHOT_NONE;
    }
    if (reserve((void **)&s->strings, &s->strings_cap, s->nstrings + 1,
                sizeof(*s->strings)) != 0)
        return CAL_SNAPSHOT_NONE;
    char *copy = malloc(len + 1);
    if (!copy) {
        errno = ENOMEM;
        return CAL_SNAPSHOT_NONE;
    }
    memcpy(copy, text, len);
    copy[len] = '\0';
    id = (uint32_t)s->nstrings;
    if (cal_map_put(&s->string_index, h, id) != 0) {
        free(copy);
        errno = ENOMEM;
        return CAL_SNAPSHOT_NONE;
    }
    s->strings[s->nstrings++] = copy;
    return id;
}

uint32_t cal_snapshot_frame(cal_snapshot *s, uint32_t file, int32_t line)
{
    if (file >= s->nstrings) {
        errno = EINVAL;
        return CAL_SNAPSHOT_NONE;
    }
    uint64_t h = cal_hash_u64((uint64_t)file << 32 | (uint32_t)line);
    size_t cursor = 0;
    uint32_t id;
    while ((id = cal_map_find(&s->frame_index, h, &cursor)) != CAL_MAP_NONE) {
        if (s->frames[id].file == file && s->frames[id].line == line)
            return id;
    }
    if (s->nframes >= CAL_SNAPSHOT_NONE) {
        errno = ENOMEM;
        return CAL_SNAPSHOT_NONE;
    }
    if (reserve((void **)&s->frames, &s->frames_cap, s->nframes + 1,
                sizeof(*s->frames)) != 0)
        return CAL_SNAPSHOT_NONE;
    id = (uint32_t)s->nframes;
    if (cal_map_put(&s->frame_index, h, id) != 0) {
        errno = ENOMEM;
        return CAL_SNAPSHOT_NONE;
    }
    s->frames[s->nframes++] = (cal_snap_frame){file, line};
    return id;
}

static uint64_t traceback_hash(const uint32_t *frames, uint32_t nframes, uint32_t total,
                               uint32_t root_kept)
{
    uint64_t h = cal_hash_u64((uint64_t)total << 32 | root_kept) ^ nframes;
    for (uint32_t i = 0; i < nframes; i++)
        h = cal_hash_u64(h ^ frames[i]);
    return h;
}

uint32_t cal_snapshot_traceback(cal_snapshot *s, const uint32_t *frames,
                                uint32_t nframes, uint32_t total, uint32_t root_kept)
{
    if (root_kept > nframes || nframes > total) {
        errno = EINVAL;
        return CAL_SNAPSHOT_NONE;
    }
    for (uint32_t i = 0; i < nframes; i++) {
        if (frames[i] >= s->nframes) {
            errno = EINVAL;
            return CAL_SNAPSHOT_NONE;
        }
    }
    uint64_t h = traceback_hash(frames, nframes, total, root_kept);
    size_t cursor = 0;
    uint32_t id;
    while ((id = cal_map_find(&s->traceback_index, h, &cursor)) != CAL_MAP_NONE) {
        const cal_snap_traceback *t = &s->tracebacks[id];
        if (t->nframes == nframes && t->total == total && t->root_kept == root_kept &&
            (nframes == 0 ||
             memcmp(s->frame_ids + t->first, frames, nframes * sizeof(*frames)) == 0))
            return id;
    }
    /* first and first + nframes are u32s in the file. */
    if (s->ntracebacks >= CAL_SNAPSHOT_NONE ||
        s->nframe_ids + nframes > (size_t)CAL_SNAPSHOT_NONE) {
        errno = ENOMEM;
        return CAL_SNAPSHOT_NONE;
    }
    if (reserve((void **)&s->tracebacks, &s->tracebacks_cap, s->ntracebacks + 1,
                sizeof(*s->tracebacks)) != 0 ||
        reserve((void **)&s->frame_ids, &s->frame_ids_cap, s->nframe_ids + nframes,
                sizeof(*s->frame_ids)) != 0)
        return CAL_SNAPSHOT_NONE;
    id = (uint32_t)s->ntracebacks;
    if (cal_map_put(&s->traceback_index, h, id) != 0) {
        errno = ENOMEM;
        return CAL_SNAPSHOT_NONE;
    }
    if (nframes)
        memcpy(s->frame_ids + s->nframe_ids, frames, nframes * sizeof(*frames));
    s->tracebacks[s->ntracebacks++] =
        (cal_snap_traceback){(uint32_t)s->nframe_ids, nframes, total, root_kept};
    s->nframe_ids += nframes;
    return id;
}

int cal_snapshot_add(cal_snapshot *s, uint32_t domain, uint32_t traceback, int64_t size,
                     int64_t block_size)
{
    if (traceback >= s->ntracebacks || size < 0 || block_size <= 0) {
        errno = EINVAL;
        return -1;
    }
    if (reserve((void **)&s->traces, &s->traces_cap, s->ntraces + 1,
                sizeof(*s->traces)) != 0)
        return -1;
    s->traces[s->ntraces++] = (cal_snap_trace){domain, traceback, size, block_size};
    return 0;
}

int cal_snapshot_check_meta(const char *json, size_t len, char *err, size_t errlen)
{
    size_t bad = cal_binfile_utf8_bad_at(json, len);
    if (bad != len) {
        snprintf(err, errlen, "meta is not UTF-8 text without NUL (byte %zu)", bad);
        return -1;
    }
    cal_jdoc doc;
    char why[200];
    int rc = cal_jdoc_parse(&doc, json, len, why, sizeof why);
    if (rc != 0)
        snprintf(err, errlen, "meta is not JSON: %s", why);
    else if (!cal_jv_is(doc.root, CAL_JOBJ)) {
        snprintf(err, errlen, "meta is not a JSON object");
        rc = -1;
    }
    cal_jdoc_free(&doc);
    return rc;
}

int cal_snapshot_set_meta(cal_snapshot *s, const char *json, size_t len)
{
    char err[256];
    if (cal_snapshot_check_meta(json, len, err, sizeof err) != 0) {
        errno = EINVAL;
        return -1;
    }
    char *copy = malloc(len + 1);
    if (!copy) {
        errno = ENOMEM;
        return -1;
    }
    memcpy(copy, json, len);
    copy[len] = '\0';
    free(s->meta_json);
    s->meta_json = copy;
    return 0;
}

/* ---- the file ---------------------------------------------------------- */

int cal_snapshot_encode(const cal_snapshot *s, cal_buf *out)
{
    cal_buf_init(out);
    const char *meta = s->meta_json ? s->meta_json : "{}";
    size_t meta_len = strlen(meta);
    if (meta_len > UINT32_MAX) {
        errno = EINVAL;
        return -1;
    }
    cal_buf_add(out, MAGIC, sizeof MAGIC);
    cal_binfile_put_u32(out, CAL_SNAPSHOT_VERSION);
    cal_binfile_put_u32(out, (uint32_t)meta_len);
    cal_buf_add(out, meta, meta_len);
    /* The interning functions keep every count below UINT32_MAX. */
    cal_binfile_put_u32(out, (uint32_t)s->nstrings);
    for (size_t i = 0; i < s->nstrings; i++) {
        size_t len = strlen(s->strings[i]);
        cal_binfile_put_u32(out, (uint32_t)len);
        cal_buf_add(out, s->strings[i], len);
    }
    cal_binfile_put_u32(out, (uint32_t)s->nframes);
    for (size_t i = 0; i < s->nframes; i++) {
        cal_binfile_put_u32(out, s->frames[i].file);
        cal_binfile_put_u32(out, (uint32_t)s->frames[i].line);
    }
    cal_binfile_put_u32(out, (uint32_t)s->nframe_ids);
    for (size_t i = 0; i < s->nframe_ids; i++)
        cal_binfile_put_u32(out, s->frame_ids[i]);
    cal_binfile_put_u32(out, (uint32_t)s->ntracebacks);
    for (size_t i = 0; i < s->ntracebacks; i++) {
        const cal_snap_traceback *t = &s->tracebacks[i];
        cal_binfile_put_u32(out, t->first);
        cal_binfile_put_u32(out, t->nframes);
        cal_binfile_put_u32(out, t->total);
        cal_binfile_put_u32(out, t->root_kept);
    }
    cal_binfile_put_u64(out, s->ntraces);
    for (size_t i = 0; i < s->ntraces; i++) {
        const cal_snap_trace *t = &s->traces[i];
        cal_binfile_put_u32(out, t->domain);
        cal_binfile_put_u32(out, t->traceback);
        cal_binfile_put_u64(out, (uint64_t)t->size);
        cal_binfile_put_u64(out, (uint64_t)t->block_size);
    }
    if (cal_buf_ok(out))
        cal_binfile_put_u64(out, cal_binfile_checksum(out->data, out->len));
    if (!cal_buf_ok(out)) {
        cal_buf_free(out);
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

int cal_snapshot_write(const cal_snapshot *s, const char *path)
{
    cal_buf b;
    if (cal_snapshot_encode(s, &b) != 0)
        return -1;
    int rc = cal_buf_write_file(&b, path);
    int saved = errno;
    cal_buf_free(&b);
    errno = saved;
    return rc;
}

int cal_snapshot_is_snapshot(const char *data, size_t len)
{
    return len >= sizeof MAGIC && memcmp(data, MAGIC, sizeof MAGIC) == 0;
}

/* ---- decoding ------------------------------------------------------------

   A cursor over the bytes; each take_* checks what is left first.  The
   first problem is written to err and makes the decode fail. */

static int oom(cal_binr *r)
{
    return cal_binr_fail(r, "out of memory reading the snapshot");
}

static int decode_meta(cal_binr *r, cal_snapshot *out)
{
    r->section = "meta";
    if (cal_binr_need(r, 4) != 0)
        return -1;
    uint32_t len = cal_binr_u32(r);
    if (cal_binr_need(r, len) != 0)
        return -1;
    const char *json = (const char *)r->p + r->at;
    char why[256];
    if (cal_snapshot_check_meta(json, len, why, sizeof why) != 0)
        return cal_binr_fail(r, "%s", why);
    if (cal_snapshot_set_meta(out, json, len) != 0)
        return oom(r);
    r->at += len;
    return 0;
}

static int decode_strings(cal_binr *r, cal_snapshot *out)
{
    size_t n;
    if (cal_binr_count(r, "strings", 4, 0, &n) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (cal_binr_need(r, 4) != 0)
            return -1;
        uint32_t len = cal_binr_u32(r);
        if (cal_binr_need(r, len) != 0)
            return -1;
        const char *text = (const char *)r->p + r->at;
        size_t bad = cal_binfile_utf8_bad_at(text, len);
        if (bad != len)
            return cal_binr_fail(
                r, "string %zu is not UTF-8 text without NUL (byte %zu)", i, bad);
        uint32_t id = cal_snapshot_string(out, text, len);
        if (id == CAL_SNAPSHOT_NONE)
            return oom(r);
        if (id != i)
            return cal_binr_fail(r, "string %zu repeats string %u", i, id);
        r->at += len;
    }
    return 0;
}

static int decode_frames(cal_binr *r, cal_snapshot *out)
{
    size_t n;
    if (cal_binr_count(r, "frames", 8, 0, &n) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        uint32_t file = cal_binr_u32(r);
        int32_t line = (int32_t)cal_binr_u32(r);
        if (file >= out->nstrings)
            return cal_binr_fail(r, "frame %zu: file %u is not a string (%zu strings)",
                                 i, file, out->nstrings);
        uint32_t id = cal_snapshot_frame(out, file, line);
        if (id == CAL_SNAPSHOT_NONE)
            return oom(r);
        if (id != i)
            return cal_binr_fail(r, "frame %zu repeats frame %u", i, id);
    }
    return 0;
}

/* The tracebacks, from the frame ids read into `ids` (n_ids of them). */
static int decode_tracebacks(cal_binr *r, cal_snapshot *out, const uint32_t *ids,
                             size_t n_ids)
{
    size_t n;
    if (cal_binr_count(r, "tracebacks", 16, 0, &n) != 0)
        return -1;
    size_t next = 0; /* where the next traceback's frames must start */
    for (size_t i = 0; i < n; i++) {
        uint32_t first = cal_binr_u32(r), nframes = cal_binr_u32(r),
                 total = cal_binr_u32(r), root_kept = cal_binr_u32(r);
        if (first != next || nframes > n_ids - next)
            return cal_binr_fail(
                r,
                "traceback %zu: frames %u..%llu are not the next %u of the %zu "
                "frame ids (from %zu)",
                i, first, (unsigned long long)first + nframes, nframes, n_ids, next);
        if (nframes > total || root_kept > nframes)
            return cal_binr_fail(
                r,
                "traceback %zu: needs root_kept <= nframes <= total, has %u, "
                "%u, %u",
                i, root_kept, nframes, total);
        uint32_t id =
            cal_snapshot_traceback(out, ids + first, nframes, total, root_kept);
        if (id == CAL_SNAPSHOT_NONE)
            return oom(r);
        if (id != i)
            return cal_binr_fail(r, "traceback %zu repeats traceback %u", i, id);
        next += nframes;
    }
    if (next != n_ids)
        return cal_binr_fail(r, "%zu frame ids, of which the tracebacks use %zu", n_ids,
                             next);
    return 0;
}

static int decode_traces(cal_binr *r, cal_snapshot *out)
{
    size_t n;
    if (cal_binr_count(r, "traces", 24, 1, &n) != 0)
        return -1;
    if (n && reserve((void **)&out->traces, &out->traces_cap, n, sizeof(*out->traces)))
        return oom(r);
    for (size_t i = 0; i < n; i++) {
        uint32_t domain = cal_binr_u32(r), traceback = cal_binr_u32(r);
        int64_t size = (int64_t)cal_binr_u64(r), block_size = (int64_t)cal_binr_u64(r);
        if (traceback >= out->ntracebacks)
            return cal_binr_fail(
                r, "trace %zu: traceback %u out of range (%zu tracebacks)", i,
                traceback, out->ntracebacks);
        if (size < 0)
            return cal_binr_fail(r, "trace %zu: size %lld is negative", i,
                                 (long long)size);
        if (block_size <= 0)
            return cal_binr_fail(r, "trace %zu: block size %lld is not positive", i,
                                 (long long)block_size);
        if (cal_snapshot_add(out, domain, traceback, size, block_size) != 0)
            return oom(r);
    }
    return 0;
}

static int decode_body(cal_binr *r, cal_snapshot *out)
{
    if (r->len < HEADER_LEN + CAL_BINFILE_TRAILER)
        return cal_binr_fail(r, "truncated snapshot: %zu bytes, shorter than any",
                             r->len);
    r->at = sizeof MAGIC;
    uint32_t version = cal_binr_u32(r);
    if (version > CAL_SNAPSHOT_VERSION)
        return cal_binr_fail(
            r, "snapshot format version %u is newer than this calipers reads (%d)",
            version, CAL_SNAPSHOT_VERSION);
    if (version == 0)
        return cal_binr_fail(r, "snapshot format version 0 does not exist");
    if (decode_meta(r, out) != 0 || decode_strings(r, out) != 0 ||
        decode_frames(r, out) != 0)
        return -1;
    size_t n_ids;
    if (cal_binr_count(r, "frame ids", 4, 0, &n_ids) != 0)
        return -1;
    uint32_t *ids = malloc((n_ids ? n_ids : 1) * sizeof(*ids));
    if (!ids)
        return oom(r);
    for (size_t i = 0; i < n_ids; i++) {
        ids[i] = cal_binr_u32(r);
        if (ids[i] >= out->nframes) {
            cal_binr_fail(r, "frame id %zu: frame %u out of range (%zu frames)", i,
                          ids[i], out->nframes);
            free(ids);
            return -1;
        }
    }
    int rc = decode_tracebacks(r, out, ids, n_ids);
    free(ids);
    if (rc != 0 || decode_traces(r, out) != 0)
        return -1;
    if (r->len - r->at != CAL_BINFILE_TRAILER)
        return cal_binr_fail(
            r, "%zu bytes after the traces where 8 (the checksum) end the file",
            r->len - r->at);
    uint64_t want = cal_binfile_checksum(r->p, r->at);
    if (cal_binr_u64(r) != want)
        return cal_binr_fail(r, "checksum mismatch: the snapshot is corrupt");
    return 0;
}

int cal_snapshot_decode(const char *data, size_t len, cal_snapshot *out, char *err,
                        size_t errlen)
{
    cal_snapshot_init(out);
    if (errlen)
        err[0] = '\0';
    cal_binr r = {
        (const unsigned char *)data, len, 0, err, errlen, "snapshot", "header"};
    int rc;
    if (!cal_snapshot_is_snapshot(data, len))
        rc =
            cal_binr_fail(&r,
                          len < sizeof MAGIC && len > 0 && memcmp(data, MAGIC, len) == 0
                              ? "truncated snapshot: %zu bytes, shorter than its magic"
                              : "not a calipers snapshot (%zu bytes, no magic)",
                          len);
    else
        rc = decode_body(&r, out);
    if (rc != 0)
        cal_snapshot_free(out);
    return rc;
}

/* ---- reading a file ---------------------------------------------------- */

/* At most this many bytes are read: 4 GiB, about 170 million traces. */
#define MAX_FILE ((size_t)4 << 30)

int cal_snapshot_read(const char *path, cal_snapshot *out, char *err, size_t errlen)
{
    cal_snapshot_init(out);
    if (errlen)
        err[0] = '\0';
    char *data = NULL;
    size_t len = 0;
    if (cal_binfile_read(path, "snapshot", MAX_FILE, &data, &len, err, errlen) != 0)
        return -1;
    char why[512];
    int rc = cal_snapshot_decode(data, len, out, why, sizeof why);
    free(data);
    if (rc != 0)
        snprintf(err, errlen, "%s: %s", path, why);
    errno = 0;
    return rc;
}
