"""Lines that make reference cycles, some of them triggering many
collections of the cyclic garbage collector and some none, in the main
thread and in a worker thread; measures its own truth when asked
(argv[2] == "measure", with tests/programs/gctimer.c built and on the
path): a gc.callbacks callback in C takes the CPU time of each collection
(the collecting thread's CPU clock from "start" to "stop") and credits it
to the line of this file that was running when it started (the innermost
frame of this file, as a profiler credits the innermost profiled line).

Writes to argv[1]: {"lines": {line: seconds}, "collections": per
generation over the work, "collections_all": over the whole script,
"cpu_s": the process's CPU time over the work, "view" and "counts": the
collector's view as the program reads it}."""

import gc
import json
import sys
import threading
import time

at_start = [s["collections"] for s in gc.get_stats()]

MEASURE = len(sys.argv) > 2 and sys.argv[2] == "measure"
SCALE = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
HERE = __file__

if MEASURE:
    import gctimer

class Node:
    pass


def cycles_of_lists(n):
    for i in range(n):
        a = [i]; a.append(a)  # lists


def cycles_of_nodes(n):
    for i in range(n):
        o = Node(); o.me = o  # nodes


def no_cycles(n):
    for i in range(n):
        t = [i, i]  # fresh
        t = None


def worker(n):
    for i in range(n):
        d = {}; d["me"] = d  # dicts


def full_collections(k):
    """k collections of every generation, each with garbage cycles to free:
    what gc.collect() found unreachable (collected + uncollectable) and how
    long each took (wall time: a pause), in order.  100 000 cycles: under
    calipers each collection then takes about 30 ms or more (29-45 ms on
    3.14 beside a test run, on an Intel Xeon), twice the 30 ticks of 0.5 ms
    test_gc.py asks for; 20 000 took 13 ms on 3.10 there, and 40 000 14 ms
    on 3.14."""
    found, took = [], []
    for _ in range(k):
        junk = [[] for _ in range(100000)]
        for x in junk:
            x.append(x)
        junk = None
        t0 = time.perf_counter()
        found.append(gc.collect())  # full
        took.append(time.perf_counter() - t0)
    return found, took


def view():
    """What the program sees of the collector."""
    return {"callbacks": len(gc.callbacks), "threshold": list(gc.get_threshold()),
            "enabled": gc.isenabled()}


def counted():
    """gc.get_count() over a stretch whose allocations are known: after a
    collection, with the collector off, 100 lists kept."""
    gc.disable()
    gc.collect()
    before = list(gc.get_count())
    kept = [[] for _ in range(100)]
    after = list(gc.get_count())
    gc.enable()
    del kept
    return [before, after]


# Objects that live through the run, as a program's data does: the older
# generations' collections have them to examine.
heap = [[i] for i in range(400000)]

view_before = view()
count_before = counted()
if MEASURE:
    gctimer.watch(HERE)
stats_before = [s["collections"] for s in gc.get_stats()]
cpu0 = time.process_time()
main_cpu0 = time.thread_time()


def preempted():
    """The main thread's time runnable but not running (another program had
    the CPU), from the scheduler: /proc's schedstat, in seconds."""
    try:
        with open("/proc/self/task/%d/schedstat" % threading.get_native_id()) as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0


preempted0 = preempted()

cycles_of_lists(int(12000000 * SCALE))
cycles_of_nodes(int(12000000 * SCALE))
no_cycles(int(2000000 * SCALE))
t = threading.Thread(target=worker, args=(int(12000000 * SCALE),))
t.start()
t.join()
full = full_collections(10)

cpu = time.process_time() - cpu0
main_cpu = time.thread_time() - main_cpu0
main_preempted = preempted() - preempted0
stats_after = [s["collections"] for s in gc.get_stats()]
gc_lines = gctimer.unwatch() if MEASURE else {}
count_after = counted()
view_after = view()
at_end = [s["collections"] for s in gc.get_stats()]

with open(sys.argv[1], "w") as f:
    json.dump({"lines": gc_lines, "cpu_s": cpu, "main_cpu_s": main_cpu,
               "main_preempted_s": main_preempted,
               "collections": [b - a for a, b in zip(stats_before, stats_after)],
               "collections_all": [b - a for a, b in zip(at_start, at_end)],
               "view": [view_before, view_after], "counts": [count_before, count_after],
               "full": full}, f)
