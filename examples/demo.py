"""A small program with something for every column of the profile:
pure-Python work, native work (with and without the GIL), kernel work,
waiting, and a worker thread."""
import hashlib
import os
import threading
import time
import zlib


def python_work(n):
    """Pure Python: the interpreter executes every step."""
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def native_work(data, rounds):
    """Native code: hashlib and zlib run in C and release the GIL."""
    for _ in range(rounds):
        hashlib.sha256(data).digest()
        zlib.compress(data[: 1 << 18], 6)


def kernel_work(seconds):
    """System time: many small reads served by the kernel."""
    fd = os.open("/dev/urandom", os.O_RDONLY)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        os.read(fd, 256)
    os.close(fd)


def main():
    data = os.urandom(1 << 20)
    worker = threading.Thread(target=native_work, args=(data, 60), name="hasher")
    worker.start()
    python_work(2_000_000)
    values = sorted(i * 7919 % 10007 for i in range(1_000_000))
    kernel_work(0.3)
    time.sleep(0.2)
    worker.join()
    return len(values)


if __name__ == "__main__":
    main()
