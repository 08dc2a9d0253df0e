"""Threads: three Python threads doing 1, 2 and 3 units of pure-Python work,
the main thread waiting in join().  Truth: each worker's CPU time
(time.thread_time in the thread)."""
import threading
import time

import _truth

UNIT = 10_000_000
spent = {}


def work_one():
    t = time.thread_time()
    total = 0
    for i in range(UNIT):
        total += i % 7  # @one
    spent["work_one"] = time.thread_time() - t


def work_two():
    t = time.thread_time()
    total = 0
    for i in range(2 * UNIT):
        total += i % 7  # @two
    spent["work_two"] = time.thread_time() - t


def work_three():
    t = time.thread_time()
    total = 0
    for i in range(3 * UNIT):
        total += i % 7  # @three
    spent["work_three"] = time.thread_time() - t


def main():
    threads = [threading.Thread(target=f) for f in (work_one, work_two, work_three)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _truth.write(cpu_s=spent)


main()
