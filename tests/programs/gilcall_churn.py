"""C threads entering and leaving Python as fast as they can: each call
makes a thread state and deletes it, both under the interpreter's
thread-list lock, which the profiler's passes take too."""
import sys

sys.path.insert(0, sys.argv[1])
import gilcall  # noqa: E402  (built by the test)

calls = 0


def callback(index):
    global calls
    calls += 1
    for _ in range(100):
        pass


gilcall.run_in_threads(callback, 8, int(sys.argv[2]))
print("ok", calls)
