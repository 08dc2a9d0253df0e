"""Two threads running Python at once, the main one and a worker, each
0.3 s of its CPU in deep() then 0.1 s in shallow(): they take turns with
the GIL all along.  With argv[2] "joined", two workers (worker-0 and
worker-1) do it instead while the main thread waits in join().  Writes
each thread's CPU seconds per function (its own CPU clock, as the
profiler counts) as JSON to argv[1]."""
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


if sys.argv[2:] == ["joined"]:
    workers = [threading.Thread(target=work, name="worker-%d" % i) for i in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
else:
    worker = threading.Thread(target=work, name="worker")
    worker.start()
    work()
    worker.join()
with open(sys.argv[1], "w") as f:
    json.dump({"%s:%s" % k: v for k, v in spent.items()}, f)
