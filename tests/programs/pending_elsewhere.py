"""The main thread burns Python while another thread keeps the
interpreter's own pending calls coming (_testinternalcapi.pending_threadfunc,
what crossinterp does for subinterpreters): on the free-threaded build
whichever thread runs those clears every thread's "calls to do" bit, the
main thread's too, which stranded the profiler's call to the main thread
(no sample of it after that).  Prints how many pending calls ran."""

import threading
import time

import _testinternalcapi

ran = []
stop = threading.Event()


def other():
    n = 0
    while not stop.is_set():
        _testinternalcapi.pending_threadfunc(lambda: ran.append(1), 1)
        for _ in range(2000):  # runs them at its eval breaker
            n += 1


def burn(seconds):
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1  # burn-line
    return n


t = threading.Thread(target=other)
t.start()
burn(1.5)
stop.set()
t.join()
print("pending calls ran:", len(ran) > 0)
