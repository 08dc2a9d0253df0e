"""A program for an interpreter whose frame layouts calipers does not know:
a busy Python loop, a second thread hashing, and 64 MiB of bytearrays kept
alive.  It prints a line and exits with status 3; it writes {"cpu": process
CPU seconds, "kept": bytes} as JSON to argv[1]."""
import hashlib
import json
import sys
import threading
import time


def hashing():
    data = b"\x01" * (1 << 22)
    t0 = time.thread_time()
    while time.thread_time() - t0 < 0.3:
        hashlib.sha256(data).digest()


t = threading.Thread(target=hashing)
t.start()
total = 0
t0 = time.thread_time()
while time.thread_time() - t0 < 0.3:
    total += 1
kept = [bytearray(1 << 20) for _ in range(64)]
t.join()
with open(sys.argv[1], "w") as f:
    json.dump({"cpu": time.process_time(), "kept": sum(len(b) for b in kept)}, f)
print("done")
sys.exit(3)
