"""time.sleep and blocking I/O show as waiting; many small reads from
/dev/urandom show as system time.  With a path argument, writes how long
the sleep and the recv blocked (wall time around each)."""
import json
import os
import resource
import socket
import sys
import threading
import time

t0 = time.perf_counter()
time.sleep(0.4)  # sleep-line
slept = time.perf_counter() - t0
fd = os.open("/dev/urandom", os.O_RDONLY)
before = resource.getrusage(resource.RUSAGE_THREAD)
start = time.thread_time()  # CPU time: a loaded machine must not shorten the loop
while time.thread_time() - start < 0.5:
    for _ in range(100):
        os.read(fd, 512)  # read-line
after = resource.getrusage(resource.RUSAGE_THREAD)
os.close(fd)
# The kernel's split of the loop's CPU, whose system share a loaded machine
# lowers (the Python around each read runs slower with caches other
# programs keep taking).
loop_sys = after.ru_stime - before.ru_stime
loop_cpu = loop_sys + after.ru_utime - before.ru_utime
a, b = socket.socketpair()
threading.Timer(0.3, b.send, args=(b"x",)).start()
t0 = time.perf_counter()
a.recv(1)  # recv-line
received = time.perf_counter() - t0
if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as f:
        json.dump({"sleep": slept, "recv": received, "loop_system_share": loop_sys / loop_cpu}, f)
