"""Ground truth for native work done by an operator: an in-place NumPy add
(one thread, no allocation, a few milliseconds) is an operator, not a call,
and from 3.10 on the interpreter next looks at pending calls at the call on
the line after it.  The program times the operators with its own CPU clock
and writes {"operator": seconds} as JSON to argv[1]."""
import json
import sys
import time

import numpy as np


def work(values, rounds):
    spent = 0.0
    for _ in range(rounds):
        t0 = time.thread_time()
        values += 1.0  # operator-line
        spent += time.thread_time() - t0  # timing-line
        total = 0
        for i in range(30_000):
            total += i  # python-line
    return spent


values = np.zeros(1 << 23)
# Every page touched before the timed work: the first += would otherwise
# take 16,000 page faults, a tenth of a second of system time that the
# kernel accounts in ticks, and the line's time would be as noisy as that
# (1.2x the truth in one CI run of four here).
values += 0.0
spent = work(values, 400)
with open(sys.argv[1], "w") as f:
    json.dump({"operator": spent}, f)
