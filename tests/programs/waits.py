"""time.sleep and blocking I/O show as waiting; many small reads from
/dev/urandom show as system time."""
import os
import socket
import threading
import time

time.sleep(0.4)  # sleep-line
fd = os.open("/dev/urandom", os.O_RDONLY)
start = time.thread_time()  # CPU time: a loaded machine must not shorten the loop
while time.thread_time() - start < 0.5:
    for _ in range(100):
        os.read(fd, 512)  # read-line
os.close(fd)
a, b = socket.socketpair()
threading.Timer(0.3, b.send, args=(b"x",)).start()
a.recv(1)  # recv-line
