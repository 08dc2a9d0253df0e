"""The program's own signal handlers and timers under a profiler.  Prints
facts that must be the same with and without calipers."""
import ctypes
import errno
import json
import os
import select
import signal
import time

libc = ctypes.CDLL(None, use_errno=True)
alarms = 0
profs = 0


def on_alarm(signum, frame):
    global alarms
    alarms += 1


def on_prof(signum, frame):
    global profs
    profs += 1


def raw_poll(ms):
    """poll(2) with no descriptors, straight from libc: returns 'eintr' if a
    signal interrupted it (Python's own wrappers would retry, PEP 475)."""
    r = libc.poll(None, 0, ms)
    return "eintr" if r == -1 and ctypes.get_errno() == errno.EINTR else r


# What the program finds before it sets any handler of its own.
def disposition(h):
    return {signal.SIG_DFL: "SIG_DFL", signal.SIG_IGN: "SIG_IGN"}.get(h, "handler")


facts = {"dispositions": {name: disposition(signal.getsignal(getattr(signal, name)))
                          for name in ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2",
                                       "SIGALRM", "SIGINT", "SIGPIPE")}}

# Its own handlers for the signals calipers watches run, and the program
# goes on.
caught = []
WATCHED = ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGINT")
for name in WATCHED:
    signal.signal(getattr(signal, name), lambda signum, frame: caught.append(signum))
    os.kill(os.getpid(), getattr(signal, name))
facts["caught"] = caught
for name in WATCHED:
    signal.signal(getattr(signal, name), signal.SIG_DFL)
signal.signal(signal.SIGINT, signal.default_int_handler)

signal.signal(signal.SIGALRM, on_alarm)
signal.signal(signal.SIGPROF, on_prof)

# No timer of our own: nothing may interrupt a blocking call.
facts["quiet_polls"] = [raw_poll(40) for _ in range(10)]

# An interval timer: select() is retried by Python and still waits the full time;
# each raw poll is interrupted by the next alarm.
signal.setitimer(signal.ITIMER_REAL, 0.05, 0.05)
t0 = time.monotonic()
select.select([], [], [], 0.6)
facts["select_waited_enough"] = time.monotonic() - t0 >= 0.6
facts["timer_polls"] = [raw_poll(2000) for _ in range(3)]
signal.setitimer(signal.ITIMER_REAL, 0)
facts["alarms_enough"] = alarms >= 10

# A CPU-time profiling timer of the program's own.
signal.setitimer(signal.ITIMER_PROF, 0.01, 0.01)
t0 = time.process_time()
while time.process_time() - t0 < 0.5:
    sum(range(1000))
signal.setitimer(signal.ITIMER_PROF, 0)
facts["prof_ticks_enough"] = 35 <= profs <= 65
print(json.dumps(facts, sort_keys=True))
