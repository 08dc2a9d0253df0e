"""Worker threads alternate json.loads of a big document (C code that keeps
the GIL from start to end) with a loop of Python arithmetic, while the main
thread joins them.  Writes each kind's CPU time (the workers' own
thread_time around each call, summed) and the Python part of a json.loads
call: the same call on a one-character document, per call."""
import json
import sys
import threading
import time

WORKERS = int(sys.argv[2]) if len(sys.argv) > 2 else 4
ROUNDS = 12
DOC = json.dumps(
    [{"id": i, "name": "n%d" % i, "tags": ["a", "b", "c"], "v": i * 0.5} for i in range(20000)]
)
spent = {"json": 0.0, "loop": 0.0, "calls": 0}
lock = threading.Lock()


def loop():
    x = 0
    for i in range(60000):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF  # loop-line
    return x


def work():
    mine = {"json": 0.0, "loop": 0.0}
    for _ in range(ROUNDS):
        t0 = time.thread_time()
        json.loads(DOC)  # json-line
        t1 = time.thread_time()
        loop()
        t2 = time.thread_time()
        mine["json"] += t1 - t0
        mine["loop"] += t2 - t1
    with lock:
        spent["json"] += mine["json"]
        spent["loop"] += mine["loop"]
        spent["calls"] += ROUNDS


workers = [threading.Thread(target=work, name="worker-%d" % i) for i in range(WORKERS)]
for w in workers:
    w.start()
for w in workers:
    w.join()
t0 = time.thread_time()
for _ in range(10000):
    json.loads("0")
spent["python_per_call"] = (time.thread_time() - t0) / 10000
with open(sys.argv[1], "w") as f:
    json.dump(spent, f)
