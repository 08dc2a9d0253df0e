"""Threads running pure Python side by side: on the free-threaded build
(3.14t) they run in parallel, on the default build they take turns at the
GIL.  Each of THREADS threads runs LOOPS rounds of work that allocates
(dicts, strings, lists) and computes; the main thread waits for them.

    python parallel_threads.py LOOPS
"""
import sys
import threading

THREADS = 2  # the bench machine's cores


def work(seed, loops, out):
    total = 0
    for n in range(loops):
        rows = [{"id": i, "name": "r%d" % (i ^ seed), "v": i * 0.5} for i in range(2000)]
        rows.sort(key=lambda r: r["name"])
        total += sum(len(r["name"]) for r in rows)
        x = seed + n
        for i in range(20000):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        total += x & 0xFF
    out[seed] = total


def main(loops):
    out = {}
    threads = [threading.Thread(target=work, args=(k, loops, out)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(out.values())


if __name__ == "__main__":
    main(int(sys.argv[1]))
