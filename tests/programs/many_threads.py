"""64 short-lived threads that each compute a little and sleep, started in
waves, while the main thread computes.  Writes each worker's CPU time."""
import json
import sys
import threading
import time

cpu = {}


def worker(i):
    t0 = time.thread_time()
    total = 0
    for k in range(60_000):
        total += k  # worker-line
    time.sleep(0.05)
    cpu[i] = time.thread_time() - t0


threads = []
for wave in range(4):
    batch = [threading.Thread(target=worker, args=(wave * 16 + j,)) for j in range(16)]
    for t in batch:
        t.start()
    threads += batch
    total = 0
    for k in range(300_000):
        total += k  # main-line
for t in threads:
    t.join()
with open(sys.argv[1], "w") as f:
    json.dump(cpu, f)
