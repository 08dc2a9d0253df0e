/*
 * cal_speedscope — the stack table in speedscope's JSON file format.
 *
 * THE FORMAT.  github.com/jlfwong/speedscope, src/lib/file-format-spec.ts
 * (its JSON Schema: https://www.speedscope.app/file-format-schema.json):
 * a File is {"$schema", "shared": {"frames": [Frame]}, "profiles":
 * [Profile], "name", "activeProfileIndex", "exporter"}; a Frame is
 * {"name", "file", "line"}; a SampledProfile is {"type": "sampled",
 * "name", "unit", "startValue", "endValue", "samples": [[frame index,
 * ...]], "weights": [number]}, each sample's stack from the root down, one
 * weight per sample.
 *
 * WHAT GOES WHERE.  The frames are the table's (the function's qualified
 * name, its file, its first line), then CAL_EXPORT_NO_FRAME for what a
 * thread did with no Python frame (its root's self figures).  One time
 * profile per thread, "MainThread (pid 4080) - time", in nanoseconds:
 * each node with self time is a sample weighing its python + native +
 * system + waiting time; and, for a thread that allocated, one memory
 * profile, "... - memory", in bytes.  Threads keep the profile's order;
 * within one, samples keep the tree's (parents before children).
 */
#include "cal_export.h"

#include "cal_json.h"

#include <stdio.h>
#include <stdlib.h>

#define SCHEMA "https://www.speedscope.app/file-format-schema.json"

/* One sampled profile of thread `th`: time (wall ns) or memory (bytes). */
static void profile(const cal_extable *t, size_t th, int memory, int64_t *path,
                    cal_json *j)
{
    cal_buf name;
    cal_buf_init(&name);
    cal_buf_printf(&name, "%s - %s", t->thread_names[th], memory ? "memory" : "time");
    cal_buf_add(&name, "", 1);
    int64_t total = 0;
    for (size_t i = 0; i < t->nnodes; i++) {
        const cal_exnode *nd = &t->nodes[i];
        int64_t w = memory ? nd->alloc_bytes : nd->wall_ns;
        if (nd->thread == (int64_t)th && w > 0)
            total += w;
    }
    cal_json_object_begin(j);
    cal_json_key(j, "type");
    cal_json_string(j, "sampled");
    cal_json_key(j, "name");
    cal_json_string(j, cal_buf_ok(&name) ? name.data : "?");
    cal_buf_free(&name);
    cal_json_key(j, "unit");
    cal_json_string(j, memory ? "bytes" : "nanoseconds");
    cal_json_key(j, "startValue");
    cal_json_int(j, 0);
    cal_json_key(j, "endValue");
    cal_json_int(j, total);
    cal_json_key(j, "samples");
    cal_json_array_begin(j);
    for (size_t i = 0; i < t->nnodes; i++) {
        const cal_exnode *nd = &t->nodes[i];
        int64_t w = memory ? nd->alloc_bytes : nd->wall_ns;
        if (nd->thread != (int64_t)th || w <= 0)
            continue;
        size_t depth = 0;
        if (nd->frame < 0)
            path[depth++] = (int64_t)t->nframes; /* no Python frame */
        for (int64_t p = (int64_t)i; p >= 0 && t->nodes[p].frame >= 0;
             p = t->nodes[p].parent)
            path[depth++] = t->nodes[p].frame;
        cal_json_flat(j);
        cal_json_array_begin(j);
        while (depth-- > 0)
            cal_json_int(j, path[depth]);
        cal_json_array_end(j);
    }
    cal_json_array_end(j);
    cal_json_key(j, "weights");
    cal_json_flat(j);
    cal_json_array_begin(j);
    for (size_t i = 0; i < t->nnodes; i++) {
        const cal_exnode *nd = &t->nodes[i];
        int64_t w = memory ? nd->alloc_bytes : nd->wall_ns;
        if (nd->thread == (int64_t)th && w > 0)
            cal_json_int(j, w);
    }
    cal_json_array_end(j);
    cal_json_object_end(j);
}

void cal_speedscope_write(const cal_extable *t, cal_buf *out)
{
    int64_t *path = calloc(t->nnodes ? t->nnodes : 1, sizeof *path);
    char *allocated = calloc(t->nthreads ? t->nthreads : 1, 1);
    if (!path || !allocated) {
        free(path);
        free(allocated);
        out->failed = 1;
        return;
    }
    for (size_t i = 0; i < t->nnodes; i++)
        if (t->nodes[i].alloc_bytes > 0)
            allocated[t->nodes[i].thread] = 1;
    const cal_jv *program = cal_jv_get(t->root, "program");
    const char *title = cal_jv_getstr(program, "script", NULL);
    if (!title)
        title = cal_jv_getstr(program, "module", "calipers profile");

    cal_json j;
    cal_json_init(&j, out, 1);
    cal_json_object_begin(&j);
    cal_json_key(&j, "$schema");
    cal_json_string(&j, SCHEMA);
    cal_json_key(&j, "exporter");
    cal_buf who;
    cal_buf_init(&who);
    cal_buf_printf(&who, "calipers@%s",
                   cal_jv_getstr(t->root, "calipers_version", "unknown"));
    cal_json_string(&j, cal_buf_ok(&who) ? who.data : "calipers");
    cal_buf_free(&who);
    cal_json_key(&j, "name");
    cal_json_string(&j, title);
    cal_json_key(&j, "activeProfileIndex");
    cal_json_int(&j, 0);
    cal_json_key(&j, "shared");
    cal_json_object_begin(&j);
    cal_json_key(&j, "frames");
    cal_json_array_begin(&j);
    for (size_t f = 0; f <= t->nframes; f++) {
        cal_json_flat(&j);
        cal_json_object_begin(&j);
        cal_json_key(&j, "name");
        if (f == t->nframes) {
            cal_json_string(&j, CAL_EXPORT_NO_FRAME);
        } else {
            cal_json_string(&j, cal_extable_frame_name(t, f));
            cal_json_key(&j, "file");
            cal_json_string(&j, cal_extable_frame_file(t, f));
            cal_json_key(&j, "line");
            cal_json_int(&j, cal_extable_frame_line(t, f));
        }
        cal_json_object_end(&j);
    }
    cal_json_array_end(&j);
    cal_json_object_end(&j);
    cal_json_key(&j, "profiles");
    cal_json_array_begin(&j);
    for (size_t th = 0; th < t->nthreads; th++) {
        profile(t, th, 0, path, &j);
        if (allocated[th])
            profile(t, th, 1, path, &j);
    }
    cal_json_array_end(&j);
    cal_json_object_end(&j);
    cal_buf_add(out, "\n", 1);
    free(path);
    free(allocated);
}
