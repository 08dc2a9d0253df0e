"""Four Python-busy workers and one worker hashing without the GIL; the main
thread join()s them.  Each worker measures its own CPU time, and the hashing
one also the kernel's split of it into user and system time; the program
writes {"busy": [...], "native": s, "native_user": s, "native_system": s}
as JSON to argv[1]."""
import hashlib
import json
import resource
import sys
import threading
import time

CPU_EACH = 0.4
busy_cpu = []
native_cpu = []
native_split = []


def busy():
    total = 0
    t0 = time.thread_time()
    while time.thread_time() - t0 < CPU_EACH:
        for i in range(20_000): total += i  # busy-line
    busy_cpu.append(time.thread_time() - t0)


def native():
    data = b"\x01" * (1 << 22)
    r0 = resource.getrusage(resource.RUSAGE_THREAD)
    t0 = time.thread_time()
    while time.thread_time() - t0 < CPU_EACH:
        hashlib.sha256(data).digest()  # native-line
    native_cpu.append(time.thread_time() - t0)
    r1 = resource.getrusage(resource.RUSAGE_THREAD)
    native_split.append((r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime))


workers = [threading.Thread(target=busy, name="busy-%d" % i) for i in range(4)]
workers.append(threading.Thread(target=native, name="native"))
for w in workers:
    w.start()
for w in workers:
    w.join()  # join-line
with open(sys.argv[1], "w") as f:
    json.dump({"busy": busy_cpu, "native": native_cpu[0],
               "native_user": native_split[0][0], "native_system": native_split[0][1]}, f)
