"""Ends the way argv[1] says, after a little work."""
import os
import signal
import sys
import time

total = 0
for i in range(300_000):
    total += i
how = sys.argv[1]
print("working", flush=True)
if how == "exit3":
    sys.exit(3)
if how == "exit-message":
    sys.exit("fatal: message")
if how == "raise":
    def inner():
        raise ValueError("boom")
    inner()
if how == "sigint":
    # Python installs its SIGINT handler only when SIGINT is not ignored at
    # start (a background job of a non-interactive shell ignores it): set it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)  # KeyboardInterrupt arrives first
if how == "keyboard":
    raise KeyboardInterrupt
if how == "os._exit":
    os._exit(5)
if how in ("sigterm", "sighup", "sigusr1", "sigalrm"):
    # Left at their default action: the process dies by the signal.
    os.kill(os.getpid(), getattr(signal, how.upper()))
    time.sleep(5)
if how == "sigterm-thread":
    # Sent while the main thread sleeps and another thread is busy.
    import threading

    def busy():
        t = time.time()
        while time.time() - t < 5:
            sum(range(100))

    threading.Thread(target=busy, daemon=True).start()
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
    time.sleep(5)
