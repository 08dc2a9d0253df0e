"""A busy program for calipers attach: one hot line until the file argv[1]
exists (the test makes it once calipers has detached; at most 120 s),
then what it can see of calipers' hooks (the same whether or not calipers
attached and detached), and exit status 7."""
import atexit
import os
import sys
import time

real = (os._exit, os.execv, os.execve)
callbacks = atexit._ncallbacks()
path = list(sys.path)


def work(n):
    total = 0
    for i in range(n):
        total += (i * i) % 7 + (i << 3) // 5 + i * 3  # HOT
    return total


print("ready", flush=True)
deadline = time.monotonic() + 120
rounds = 0
while time.monotonic() < deadline and not (rounds % 20 == 0 and os.path.exists(sys.argv[1])):
    work(2000)
    rounds += 1
print("hooks unchanged:", (os._exit, os.execv, os.execve) == real)
# Before 3.14 atexit.unregister empties a slot without lowering the count
# _ncallbacks reads: there, calipers' own record of its handler is asked.
agent = sys.modules.get("calipers._agent")
print("atexit unchanged:", atexit._ncallbacks() == callbacks if sys.version_info >= (3, 14)
      else agent is None or not agent._hooks_installed[0])
print("sys.path unchanged:", sys.path == path)
print("worked:", rounds > 0)
sys.exit(7)
