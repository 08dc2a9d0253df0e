"""time.sleep shows as waiting; many small reads from /dev/urandom show as
system time."""
import os
import time

time.sleep(0.4)  # sleep-line
fd = os.open("/dev/urandom", os.O_RDONLY)
deadline = time.perf_counter() + 0.5
while time.perf_counter() < deadline:
    os.read(fd, 512)  # read-line
os.close(fd)
