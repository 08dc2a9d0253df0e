"""Allocations in worker threads land on the workers' lines."""
import threading


def worker():
    keep = []
    for _ in range(2000):
        keep.append(bytearray(50_000))  # worker-line
        if len(keep) > 50:
            keep.clear()


threads = [threading.Thread(target=worker) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()  # join-line
