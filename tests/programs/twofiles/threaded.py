"""The twofiles program with a thread (the HTML viewer's views of the
hottest lines): a worker thread busy in helper.py's crunch-line, then
asleep once the main thread is done; the main thread busy on its own line
at the same time, then waiting in join() for at least that sleep (in
threading.py: library code, charged to the join line), then asleep on a
line of its own."""
import threading
import time

from helper import crunch

CPU_EACH = 0.3
main_done = threading.Event()


def worker():
    t0 = time.thread_time()
    while time.thread_time() - t0 < CPU_EACH:
        crunch(20_000)
    main_done.wait()
    time.sleep(0.2)  # worker-sleep


def main():
    th = threading.Thread(target=worker, name="worker")
    th.start()
    total = 0
    t0 = time.thread_time()
    while time.thread_time() - t0 < CPU_EACH:
        for k in range(20_000):
            total += k % 3  # main-line
    main_done.set()
    th.join()  # join-line
    time.sleep(0.3)  # sleep-line
    print(total)


main()
