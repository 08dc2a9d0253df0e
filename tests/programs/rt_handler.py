"""A worker thread burns Python while the main thread, a moment after it
started, installs a handler of its own on SIGRTMAX (the signal calipers'
CPU-clock ticks of other threads take when it is free) and then waits for
the worker.  Prints how many times the handler ran: 0 without calipers."""
import signal
import threading
import time

calls = 0


def handler(signum, frame):
    global calls
    calls += 1


def burn():
    t0 = time.thread_time()
    while time.thread_time() - t0 < 0.6:  # burn-line
        pass


worker = threading.Thread(target=burn)
worker.start()
time.sleep(0.1)
signal.signal(signal.SIGRTMAX, handler)
while worker.is_alive():  # (runs the handler as each signal comes)
    time.sleep(0.002)
worker.join()
print("handler ran", calls)
