"""The main thread blocked in join() while two workers run Python and take
turns with the GIL: each worker 0.3 s of its CPU in deep() then 0.1 s in
shallow().  Writes each worker's CPU seconds per function (its own CPU
clock, as the profiler counts) as JSON to argv[1]."""
import json
import sys
import threading
import time

spent = {}


def leaf(seconds):
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:
        pass


def deep():
    leaf(0.3)


def shallow():
    leaf(0.1)


def work():
    name = threading.current_thread().name
    for fn in (deep, shallow):
        t0 = time.thread_time()
        fn()
        spent[name, fn.__name__] = time.thread_time() - t0


workers = [threading.Thread(target=work, name="worker-%d" % i) for i in range(2)]
for w in workers:
    w.start()
for w in workers:
    w.join()
with open(sys.argv[1], "w") as f:
    json.dump({"%s:%s" % k: v for k, v in spent.items()}, f)
