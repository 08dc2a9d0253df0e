"""Worker threads alternate json.loads of a big document (C code that
keeps the GIL from start to end) with time.sleep(0), which lets the GIL go
at once, while the main thread joins them.  A worker waits for the GIL on
the sleep line, having spent its CPU on the json line.  Writes the json
line's CPU time (each worker's own thread_time around each call, summed)
and the whole of the workers' CPU."""
import json
import sys
import threading
import time

DOC = json.dumps([{"id": i, "name": "n%d" % i, "v": i * 0.5} for i in range(20000)])
spent = {"json": 0.0, "all": 0.0}
lock = threading.Lock()


def work():
    mine = 0.0
    start = time.thread_time()
    for _ in range(15):
        t0 = time.thread_time()
        json.loads(DOC)  # json-line
        mine += time.thread_time() - t0
        time.sleep(0)  # yield-line
    with lock:
        spent["json"] += mine
        spent["all"] += time.thread_time() - start


threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with open(sys.argv[1], "w") as f:
    json.dump(spent, f)
