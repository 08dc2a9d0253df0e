"""C code that keeps the GIL, in threads: four workers alternate json.loads
of a 1.4 MB document (C from start to end, the GIL held throughout) with a
loop of Python arithmetic, while the main thread waits in join().  Truth:
decode() is native but for the Python wrappers around json's scanner (the
program times the same call on a one-character document), arith() is
Python."""
import json
import threading
import time

import _truth

WORKERS = 4
ROUNDS = 12
DOC = json.dumps(
    [{"id": i, "name": "n%d" % i, "tags": ["a", "b", "c"], "v": i * 0.5} for i in range(20000)]
)
spent = {"decode": 0.0, "arith": 0.0}
lock = threading.Lock()


def decode():
    return json.loads(DOC)  # @decode


def arith():
    x = 0
    for i in range(60000):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF  # @arith
    return x


def work():
    mine = {"decode": 0.0, "arith": 0.0}
    for _ in range(ROUNDS):
        for name, fn in (("decode", decode), ("arith", arith)):
            t = time.thread_time()
            fn()
            mine[name] += time.thread_time() - t
    with lock:
        for name, s in mine.items():
            spent[name] += s


def main():
    threads = [threading.Thread(target=work) for _ in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t = time.thread_time()
    for _ in range(10000):
        json.loads("0")
    python_part = (time.thread_time() - t) / 10000 * WORKERS * ROUNDS / spent["decode"]
    _truth.write(cpu_s=spent, native_share={"decode": 1.0 - python_part, "arith": 0.0})


main()
