"""Ends the way argv[1] says, after a little work."""
import os
import signal
import sys

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
    os.kill(os.getpid(), signal.SIGINT)
    signal.pause()
if how == "keyboard":
    raise KeyboardInterrupt
