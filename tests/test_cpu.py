"""CPU attribution against ground truth that the programs measure themselves."""
import json
import os
import platform
import sys
import sysconfig

import pytest

from conftest import PROGRAMS, TRUTH, cpu, cpu_mark, idle_share_since, line_of, total

BENCH_ACCURACY = PROGRAMS.parents[1] / "bench" / "accuracy"


def shares(d):
    s = sum(d.values())
    return {k: v / s for k, v in d.items()}


def test_python_native_split_and_shares(run_calipers, run_plain, tmp_path):
    prog = PROGRAMS / "split.py"
    plain_file = tmp_path / "plain.json"
    assert run_plain(prog, plain_file).returncode == 0
    plain = json.loads(plain_file.read_text())
    # Each sample labels its whole interval Python or native, so a line's
    # split is a proportion of its samples: 2 ms gives a native line ~200
    # of them and a standard error near 1.5 points (10 ms: ~40 and 3.5).
    run = run_calipers(prog, TRUTH, options=["--interval", "2ms"])
    assert run.returncode == 0, run.stderr
    truth = run.truth
    lines = run.lines("split.py")
    funcs = run.functions("split.py")
    # The program times each call, so its truth is a function's total.  The
    # `for` line of python_loop runs two of the loop's six instructions
    # (FOR_ITER, STORE_FAST) and holds about a quarter of its time.
    called = {"py": "python_loop", "hash": "hash_buffer", "zlib": "compress", "sort": "sort_values"}
    got = {}
    for marker, func in called.items():
        got[marker] = cpu(funcs[func]["total"])
        rec = lines[line_of(prog, marker + "-line")]
        least = 0.6 if marker == "py" else 0.75
        assert cpu(rec) >= least * got[marker], (marker, rec, got[marker])
        # The Python/native split: >= 90% in the right column.  (Kernel time
        # is a third, separate column: zlib's buffers fault pages in.)
        if marker == "py":
            assert rec["python_s"] >= 0.90 * cpu(rec), (marker, rec)
        else:
            assert rec["native_s"] >= 0.90 * (rec["native_s"] + rec["python_s"]), (marker, rec)
    # Each function's share of the time of these calls, against the share
    # the program measured for the same work (it timed each call itself).
    # ... and against the shares of a run without the profiler.
    want, have, unprofiled = shares(truth), shares(got), shares(plain)
    assert set(want) == set(unprofiled) == set(called), (want, unprofiled)
    for marker in want:
        assert abs(have[marker] - want[marker]) <= 0.05, (marker, have, want)
        assert abs(have[marker] - unprofiled[marker]) <= 0.05, (marker, have, unprofiled)


def test_native_python_transitions(run_calipers):
    """A function alternating ~3 ms native calls with ~3 ms of bytecode.

    A tick inside a native call is served only when the call returns; ending
    the main thread's interval there instead of at the tick credited native
    with the Python time before each call: this program read 8 to 15 points
    too native that way (INTERNALS, "Transitions").  At 2 ms over ~2.7 s the
    share's standard error is about 1.3 points; the ticks that land in a
    call's last 50 us count as Python, about one point.
    """
    prog = PROGRAMS / "transitions.py"
    run = run_calipers(prog, TRUTH, options=["--interval", "2ms"])
    assert run.returncode == 0, run.stderr
    got = run.functions("transitions.py")["alternate"]["total"]
    share = got["native_s"] / (got["native_s"] + got["python_s"])
    assert abs(share - run.truth["native_share"]) <= 0.05, (got, run.truth)
    lines = run.lines("transitions.py")
    native = lines[line_of(prog, "native-line")]
    python = lines[line_of(prog, "python-line")]
    assert native["native_s"] >= 0.90 * (native["native_s"] + native["python_s"]), native
    assert python["python_s"] >= 0.90 * (python["native_s"] + python["python_s"]), python


def test_native_calls_of_microseconds_are_native(run_calipers):
    """C calls of 15-35 us (a SHA-256, a failing regex search, a Decimal
    square root), each between ~5 us of bytecode: far under the 50 us
    threshold on how late the main thread answers, which read them 0%
    native.  A tick answered from inside the call instruction the peek
    found is native (INTERNALS, "Native calls without a threshold").
    What it still loses is a call's end from the peek to the queued call
    (0.5-3 us from 3.11, longer after a long gap between ticks on this
    virtual machine; longer still on 3.9/3.10, whose peek reads each frame
    with a system call): measured -12 to -2 points on 3.13-3.14t here, -5
    to -7 beside two busy processes, -7 to -11 on 3.11/3.12, -29 to -49 on
    3.9/3.10 (22 us calls, 0.79 native).  3.9/3.10 are held to a quarter
    of the truth.  Not on the free-threaded build yet, where these calls
    still read as Python: only the absence of false native is checked
    there.
    At 2 ms over ~3 s (1500 ticks) the share's standard error is about
    1.5 points; the program's own truth moves by about 2."""
    prog = PROGRAMS / "medium_calls.py"
    mark = cpu_mark()
    run = run_calipers(prog, TRUTH, "3", "2", options=["--interval", "2ms"])
    idle = idle_share_since(mark)
    assert run.returncode == 0, run.stderr
    truth = run.truth["native_share"]
    work = run.functions("medium_calls.py")["work"]["total"]
    share = work["native_s"] / (work["native_s"] + work["python_s"])
    lines = run.lines("medium_calls.py")
    calls = [lines[line_of(prog, m)] for m in ("hash-line", "re-line", "sqrt-line")]
    python = lines[line_of(prog, "python-line")]
    assert python["native_s"] <= 0.05 * (python["native_s"] + python["python_s"]), python
    assert share <= truth + 0.06, (share, truth)
    # The rule needs the sampler thread prompt from its peek to its poke:
    # a call that ends between them reads as Python.  A tick that finds
    # the main thread preempted keeps the old rules too (a thread frozen
    # in a call of nanoseconds looks as still as one in a long call).
    # Beside a full CI run on this 2-CPU machine (load average over 2)
    # the share read 0.005-0.50 of 0.80, with the main thread preempted
    # for under 1% of its CPU: the sampler thread was the one kept
    # waiting.  So the share is held to the truth where the machine had
    # CPU to spare during the run (a quarter of it idle: the program takes
    # one CPU and calipers a little) and the main thread was not preempted
    # for over a twentieth of its CPU (as test_gc and test_free_threaded
    # do); elsewhere only the absence of false native.  (The load average
    # was asked before: a minute behind, it let a run beside a CI tier
    # that had just started through, at 0.48 of 0.82.)
    main = next(t for t in run.profile["threads"] if t["main"])
    quiet = main["preempted_s"] <= 0.05 * cpu(main) and idle >= 0.25
    if not sysconfig.get_config_var("Py_GIL_DISABLED") and quiet:
        if sys.version_info < (3, 11):
            assert share >= truth / 4, (share, truth, main)
            return
        assert share >= truth - 0.25, (share, truth, main)
        for rec in calls:
            assert rec["native_s"] >= 0.5 * (rec["native_s"] + rec["python_s"]), rec


def test_native_operators_keep_their_line(run_calipers):
    """`values += 1.0` on a NumPy array is native work done by an operator.
    The main thread serves a tick that lands in it at the next call, on the
    line after (3.10+); the sample belongs where the tick found it."""
    prog = PROGRAMS / "operators.py"
    run = run_calipers(prog, TRUTH, options=["--interval", "2ms"])
    assert run.returncode == 0, run.stderr
    truth = run.truth["operator"]
    lines = run.lines("operators.py")
    operator = lines.get(line_of(prog, "operator-line"), {})
    timing = lines.get(line_of(prog, "timing-line"))
    # Sampled: the ticks that land in the operators (about 0.6 s of them
    # at 2 ms: N ~ 300) each credit an exponential interval, so the line's
    # time has a relative standard error near sqrt(2 / N) = 8%; 25% is
    # three of them.  (150 rounds and 20% failed on 3.11 and 3.13 in one
    # CI run; 16 runs of this one here: 0.98-1.13x the truth.)
    assert operator and cpu(operator) == pytest.approx(truth, rel=0.25), (operator, truth)
    assert operator["native_s"] >= 0.90 * (operator["native_s"] + operator["python_s"]), operator
    # What this guards against is the operator's work moving to the next
    # line (3.12 without the peek put nearly all of it there).  The timing
    # line has real work of its own: time.thread_time() is a system call,
    # booked as system time (0.067 s of 150 calls once on a loaded CI
    # machine), so only its Python and native time count, and a quarter of
    # the operator's time still tells a misplaced sample from edge noise
    # (0.049 s native, 9%, seen in that run).
    assert timing is None or timing["native_s"] + timing["python_s"] <= 0.25 * truth, (timing, truth)


@pytest.mark.parametrize("share", [0.25, 0.5, 0.75])
def test_function_bias(run_calipers, share):
    """Seed 000 section 6.2: a loop calling a helper vs the same work inlined."""
    # The variants alternate every few milliseconds, so each sample's share is
    # a coin flip: at 1 ms over 2.4 s the standard error of a share is about
    # 1.0 point, and 5 points are five of them (over 1.2 s it was 1.4, 1.6
    # as measured here, and a CI run on 3.11 once read 7 points off; at the
    # default 10 ms it would be 3.2, too coarse).
    run = run_calipers(PROGRAMS / "bias.py", TRUTH, share, options=["--interval", "1ms"])
    assert run.returncode == 0, run.stderr
    truth = shares(run.truth)
    funcs = run.functions("bias.py")
    got = shares({k: cpu(funcs[k]["total"]) for k in ("with_call", "inlined")})
    assert abs(got["with_call"] - truth["with_call"]) <= 0.05, (got, truth)
    # the helper's time is inside with_call's total, and is its own self time
    assert cpu(funcs["helper"]["total"]) <= cpu(funcs["with_call"]["total"])


def test_threads(run_calipers):
    prog = PROGRAMS / "threads.py"
    run = run_calipers(prog, TRUTH)
    assert run.returncode == 0, run.stderr
    truth = run.truth
    lines = run.lines("threads.py")
    busy = lines[line_of(prog, "busy-line")]
    native = lines[line_of(prog, "native-line")]
    join = lines[line_of(prog, "join-line")]
    funcs = run.functions("threads.py")

    # Workers' CPU lands in the workers' functions, and mostly on their line.
    busy_true = sum(truth["busy"])
    assert cpu(funcs["busy"]["total"]) == pytest.approx(busy_true, rel=0.15)
    assert cpu(busy) >= 0.85 * busy_true
    assert busy["python_s"] >= 0.85 * cpu(busy), busy
    assert cpu(funcs["native"]["total"]) == pytest.approx(truth["native"], rel=0.15)
    # Its user time is native (that split is ours); its system time is the
    # kernel's tick-sampled accounting, which on a loaded machine can be a
    # sixth of a hashing thread's CPU: the function shows what the thread
    # measured of it (to a few 4 ms ticks: the function also made its data).
    assert native["native_s"] >= 0.80 * (native["native_s"] + native["python_s"]), native
    native_sys = funcs["native"]["total"]["system_s"]
    assert native_sys == pytest.approx(truth["native_system"],
                                       abs=0.012 + 0.2 * truth["native_system"])
    # The main thread blocked in join(): waiting, not CPU.
    assert join["waiting_s"] >= 0.5
    assert cpu(join) <= 0.05 * total(join), join
    threads = run.profile["threads"]
    assert len(threads) == 6
    assert sorted(t["name"] for t in threads if not t["main"]) == [
        "busy-0", "busy-1", "busy-2", "busy-3", "native"]


def test_ticks_go_on_while_threads_take_turns_with_the_gil(run_calipers):
    """The main thread and a worker both run Python: when the main thread
    is slow to answer a tick it is waiting for the GIL, and the sampler
    thread must not queue for the GIL itself (it waited tens to hundreds of
    milliseconds, with no ticks meanwhile: a third of a second at a time,
    and with it every sample of a 0.1 s function, on 3.9-3.13)."""
    prog = PROGRAMS / "contended.py"
    run = run_calipers(prog, TRUTH)
    assert run.returncode == 0, run.stderr
    profile = run.profile
    interval = profile["config"]["interval_s"]
    ticks = profile["summary"]["wall_s"] / interval
    main = next(t for t in profile["threads"] if t["main"])
    # The main thread answers about once per turn it gets with the GIL:
    # 0.65-0.97 of the ticks here, 0.68-0.80 beside three busy processes;
    # 0.08-0.72 (median 0.47) when the sampler thread queued for the GIL.
    assert main["samples"] >= 0.55 * ticks, (main, ticks)
    funcs = run.functions("contended.py")
    truth = run.truth
    for fn in ("deep", "shallow"):
        # Both threads' time in each function (they share its code).  With
        # some 40 samples of shallow() the standard error is about 16%.
        true = truth["MainThread:" + fn] + truth["worker:" + fn]
        assert cpu(funcs[fn]["total"]) == pytest.approx(true, rel=0.3), (fn, funcs[fn], truth)


def test_workers_are_sampled_while_the_main_thread_joins(run_calipers):
    """The main thread blocked in join() while two workers run Python: on
    3.12+ the thread holding the GIL is asked to sample the others (a
    pending call any thread may run), where the sampler thread used to
    queue for the GIL behind the workers, which the GIL does not serve in
    order: each worker got 0.05-0.53 of the ticks on 3.12 and 3.13 (at 5
    and 10 ms), and 0.75-1.13 now; 3.14t, its GIL off, 0.73-1.08.  Before
    3.12 only the main thread runs pending calls, and the sampler thread
    still queues: 0.02-0.47 of the ticks on 3.9 and 3.11.  Each function's
    CPU is located there by the workers' own CPU-clock ticks (where they
    run: ticks_possible): 0.97-1.09 of its CPU on 3.9-3.11 in 18 runs; no
    CPU at all on shallow() once in CI when an ended thread's ticks were
    discarded.  Each thread's CPU is exact whatever the samples, so the two
    functions' sum is checked everywhere."""
    run = run_calipers(PROGRAMS / "contended.py", TRUTH, "joined",
                       options=["--interval", "5ms"])
    assert run.returncode == 0, run.stderr
    profile = run.profile
    ticks = profile["summary"]["wall_s"] / profile["config"]["interval_s"]
    workers = [t for t in profile["threads"] if not t["main"]]
    assert len(workers) == 2, profile["threads"]
    asks_holder = sys.version_info >= (3, 12) or sysconfig.get_config_var("Py_GIL_DISABLED") == 1
    # Some 85 ticks on 3.14t (the workers run at once), 160 elsewhere.
    floor = 0.55 * ticks if asks_holder else 1
    for worker in workers:
        assert worker["samples"] >= floor, (worker, ticks)
    funcs = run.functions("contended.py")
    truth = run.truth
    spent = {fn: truth["worker-0:" + fn] + truth["worker-1:" + fn] for fn in ("deep", "shallow")}
    both = cpu(funcs["deep"]["total"]) + cpu(funcs["shallow"]["total"])
    assert both == pytest.approx(sum(spent.values()), rel=0.05), (funcs, truth)
    if asks_holder or ticks_possible():
        for fn, true in spent.items():
            # Some 70 samples of shallow(): a standard error near 12%.
            assert cpu(funcs[fn]["total"]) == pytest.approx(true, rel=0.3), (fn, funcs[fn], truth)


def test_c_code_that_keeps_the_gil_in_workers_is_native(run_calipers):
    """Four workers alternate json.loads of a 1.4 MB document (C code that
    keeps the GIL from start to end) with a loop of Python arithmetic while
    the main thread joins them.  Holding the GIL, a worker runs bytecode or
    C: the watcher sets the holder's own "signals pending" eval-breaker bit
    at each look (3.13+), and a bit still set at the next look means it
    never reached a bytecode boundary in between.  The collector, which
    json.loads' allocations set off as the call ends, is C as it is in the
    main thread.  The program's truth: the json line is C but for the
    Python wrappers around the scanner (a call on a one-character document,
    timed, is under 1% of it), the loop line bytecode.  Measured at 10 ms
    (10 runs each): the json line 0.89-0.98 native on 3.13 and 3.14, the
    loop line 0.00-0.11; before, 0.00 and 0.00-0.01 (issue 18).  Before
    3.13 the eval breaker is shared by every thread and a probe cannot
    tell who looked.  A worker's tick is C there if it has run since the
    watcher found it holding the GIL while another thread's request that
    it let go stood, and the request still stands (a thread in bytecode
    answers within instructions; another worker asks 5 ms into a
    stretch), or if it finds its innermost frame inside a call and the
    signal interrupted a library's code rather than the interpreter's
    (json's scanner spends about half its time in the interpreter's own
    functions that build the objects).  The json line 0.71-0.84, the loop
    line 0.00-0.07 on 3.9-3.12 (20 runs; 0.62-0.87 and 0.00-0.05 beside
    two busy processes; with the call rule alone 0.27-0.49, with neither
    0.00 on 3.9-3.11 and 0.14-0.21 on 3.12, the collector's part), held
    to 0.5.
    On 3.14t with
    its GIL off a thread in C keeps its thread state attached, as in
    bytecode, and counts as Python (known gaps)."""
    prog = PROGRAMS / "json_threads.py"
    run = run_calipers(prog, TRUTH)
    assert run.returncode == 0, run.stderr
    truth = run.truth
    assert truth["python_per_call"] * truth["calls"] < 0.01 * truth["json"], truth
    # Each worker's CPU is exact, wherever its samples put it.
    work = run.functions(prog.name)["work"]["total"]
    assert cpu(work) == pytest.approx(truth["json"] + truth["loop"], rel=0.05), (work, truth)
    if sysconfig.get_config_var("Py_GIL_DISABLED") == 1:
        return
    lines = run.lines(prog.name)
    share = {}
    for marker in ("json-line", "loop-line"):
        rec = lines[line_of(prog, marker)]
        share[marker] = rec["native_s"] / (rec["native_s"] + rec["python_s"])
    # Each sample labels its whole interval by the thread's last stretch
    # with the GIL: some 120 samples on the json line.
    assert share["json-line"] >= (0.8 if sys.version_info >= (3, 13) else 0.5), (share, lines)
    assert share["loop-line"] <= 0.2, (share, lines)


def ticks_possible():
    """Whether threads other than the main one can sample themselves on a
    timer of their own CPU clock: where the kernel handles its expiry on
    the way back to user mode (Linux 5.11+, x86-64), so that no system
    call sees EINTR (src/ext/cputicks.c)."""
    major, minor = (int(x) for x in platform.release().split(".")[:2])
    return platform.machine() == "x86_64" and (major, minor) >= (5, 11)


@pytest.mark.skipif(not ticks_possible(),
                    reason="this kernel may interrupt a system call with a CPU timer's signal: "
                    "threads are sampled where passes find them")
def test_workers_cpu_is_where_it_ran_not_where_they_wait_for_the_gil(run_calipers):
    """Four workers alternate json.loads (C that keeps the GIL) with
    time.sleep(0), which lets the GIL go: passes come when the GIL changes
    hands, and found the workers waiting for it on the sleep line (3.13:
    the json line 0.75-0.79 of its CPU, the sleep line 15-23% of the json
    line's).  Each worker's own CPU-time ticks put the CPU where it ran:
    1.00-1.01 and 0.000 (issue 18)."""
    prog = PROGRAMS / "json_yield.py"
    run = run_calipers(prog, TRUTH, options=["--no-report"])
    assert run.returncode == 0, run.stderr
    truth = run.truth
    lines = run.lines(prog.name)
    json_line = lines[line_of(prog, "json-line")]
    yield_line = lines.get(line_of(prog, "yield-line"))
    # About 50 ticks, nearly all on the json line: a tick's worth is 2%.
    assert cpu(json_line) == pytest.approx(truth["json"], rel=0.1), (json_line, truth)
    assert yield_line is None or cpu(yield_line) < 0.05 * truth["json"], (yield_line, truth)
    assert cpu(run.functions(prog.name)["work"]["total"]) == pytest.approx(
        truth["all"], rel=0.05)


@pytest.mark.skipif(not ticks_possible(),
                    reason="this kernel may interrupt a system call with a CPU timer's signal: "
                    "threads are sampled where passes find them, with no signal")
def test_a_handler_the_program_puts_on_the_ticks_signal_gets_none_of_them(run_calipers,
                                                                        run_plain):
    """Other threads' ticks come on the highest free real-time signal.  A
    program that later handles that signal itself must not get them: each
    pass checks that the handler is still ours, and if not, the timers go
    and threads are armed again on another free signal.  Until that pass
    a tick can still reach the program's handler (a limit, INTERNALS)."""
    prog = PROGRAMS / "rt_handler.py"
    plain = run_plain(prog)
    assert plain.stdout == "handler ran 0\n", plain.stderr
    run = run_calipers(prog, options=["--no-report"])
    assert run.returncode == 0, run.stderr
    ran = int(run.stdout.split()[-1])
    # Without the check: 49 (a tick each 10 ms or so of the worker's 0.5 s).
    # With it, the ticks before the next pass: 0-2 in runs here; the gap
    # between passes is capped at 10 intervals, about 8 ticks.
    assert ran <= 10, run.stdout
    # The worker still ticks, on another signal: its CPU is on its line.
    burn = run.lines(prog.name)[line_of(prog, "burn-line")]
    assert cpu(burn) > 0.45, burn


def test_sleep_and_io_are_waiting_and_syscalls_are_system(run_calipers):
    prog = PROGRAMS / "waits.py"
    # A line that blocks loses to the next sample the waiting after the
    # last tick inside it, and gains what the thread did since the sample
    # before it: each at most one interval, exponential with mean q.  At
    # q = 2 ms a bound of 25 ms is 12.5 means, a false failure about once
    # in 270 000 checks (at 10 ms, 50 ms was 5 means, once in 150: it
    # failed a CI run when 61 ms of a recv's waiting went to the exit).
    run = run_calipers(prog, TRUTH, options=["--interval", "2ms"])
    assert run.returncode == 0, run.stderr
    truth = run.truth
    lines = run.lines("waits.py")
    sleep = lines[line_of(prog, "sleep-line")]
    read = lines[line_of(prog, "read-line")]
    recv = lines[line_of(prog, "recv-line")]
    assert sleep["waiting_s"] == pytest.approx(truth["sleep"], abs=0.025), sleep
    assert cpu(sleep) <= 0.025, sleep
    assert recv["waiting_s"] == pytest.approx(truth["recv"], abs=0.025), recv
    assert cpu(recv) <= 0.025, recv
    # The read loop runs 0.5 s of the thread's CPU; the rest of it is the
    # loop's own lines.  Where a preempted main thread is found is biased
    # towards its time.thread_time() calls (INTERNALS, "The main thread:
    # where the tick found it"; issue 18): when the run's main thread spent
    # over a twentieth of its CPU preempted (the scheduler's count, as
    # test_gc), the read line's floor is 0.30 s (CI beside other work:
    # 0.335 s once), else 0.35 s.
    main = next(t for t in run.profile["threads"] if t["main"])
    quiet = main["preempted_s"] <= 0.05 * cpu(main)
    assert cpu(read) >= (0.35 if quiet else 0.30), (read, main)
    # Its system share against the kernel's split of the whole loop, which
    # the program reads (getrusage of its thread): 0.81-0.90 quiet, where
    # the read line is within 0.02 of it (3.9, 3.12, 3.13, 3.14t).  The
    # same bias takes the system time of the reads to the `while` line,
    # whose clock read is where the kernel preempts the thread: beside two
    # busy processes on two CPUs the line read 0.51-0.77 against 0.79-0.90
    # (3.12; and 0.49 in a loaded CI run, against the absolute 0.5 asked
    # before).  Beside four, 0.35 against 0.85 once, and the line's CPU
    # falls under the floor above as well: a main thread preempted for
    # more than its CPU is not yet read right (issue 18).
    share = read["system_s"] / cpu(read)
    loop = truth["loop_system_share"]
    assert share >= loop - (0.1 if quiet else 0.45), (share, loop, read, main)


def test_a_blocking_line_gets_its_waiting_and_none_of_the_cpu_before(run_calipers):
    """The main thread blocked at a tick answers only when the block ends:
    its interval ends there, its waiting goes to the blocking line, and the
    CPU it used before the tick that asked to where a sample last found it.
    Crediting the whole interval to the blocking line gave the sleep the
    busy loop's last stretch (one interval, mean 10 ms, per transition) and
    the loop the sleep's (the same, as waiting).  The last sleep is followed
    by open(): over 50 us of C before the call is served.

    On a loaded machine the busy loop is often preempted at a tick and
    answers late having used no CPU since, as a block would: only a look
    at the kernel's state tells them apart (runnable, or not).  Taken for
    a block, the CPU before the tick went to where a sample last found the
    thread, which after a sleep is the sleep's line: 8-17 ms of CPU there
    in 7 runs of 25 with two busy processes beside it on two cores."""
    prog = PROGRAMS / "busy_then_block.py"
    run = run_calipers(prog, TRUTH)
    assert run.returncode == 0, run.stderr
    truth = run.truth
    lines = run.lines(prog.name)
    sleep = lines[line_of(prog, "sleep-line")]
    # The loop's own lines: its `pass` is a line too (its jump back, where
    # 3.14t also marks a quiescent state), and samples find it there.
    busy = run.functions(prog.name)["busy"]["total"]
    # Three transitions at 10 ms each moved a Gamma(3, 10 ms) of CPU: below
    # 10 ms one run in twelve.  Now only what runs between the sleep's
    # return and the sample is left on it (open(), for the last).
    assert cpu(sleep) <= 0.005, sleep
    # What the sleep's interval may add: the busy loop's waiting in its
    # last interval (preemption, on a loaded machine).
    assert truth["slept"] - 0.005 <= sleep["waiting_s"] <= truth["slept"] + 0.03, (sleep, truth)
    assert cpu(busy) == pytest.approx(truth["busy_cpu"], abs=0.03)


def test_many_short_lived_threads(run_calipers):
    """Threads that come and go: each lives longer than the sampling
    interval, so each is seen, with its own kernel thread id, and all of
    its CPU time is accounted (a new thread is credited from its birth)."""
    prog = PROGRAMS / "many_threads.py"
    run = run_calipers(prog, TRUTH, options=["--interval", "1ms"])
    assert run.returncode == 0, run.stderr
    truth = run.truth
    assert len(truth) == 64
    workers = [t for t in run.profile["threads"] if not t["main"]]
    assert len(workers) == 64
    assert len({t["tid"] for t in workers}) == 64
    funcs = run.functions("many_threads.py")
    assert cpu(funcs["worker"]["total"]) == pytest.approx(sum(truth.values()), rel=0.15)


def test_native_threads_of_libraries_are_counted(run_calipers):
    """BLAS worker threads never enter Python; their CPU still belongs to the
    program and is credited, as native, to the line the main thread is on.

    The lines' kernel time is not part of that split: it is the kernel's
    own figure, a third column.  The sort line faults in two fresh 24 MB
    arrays, and its system time was 0 to 0.1 s run to run, with or without
    calipers (the program's own getrusage() agreed with the profile each
    time) against ~0.06 s of user time: a bound on native / (native +
    system) failed two runs in three.

    Ticks 2 ms apart: the sort line takes 0.05-0.1 s, 5-9 ticks at the
    default 10 ms, and one tick read as Python there is 11-17% of the line
    (the same sort in a loop of 30 read 0.1-1.2% Python on 3.9 and 3.13):
    on 3.9 one run in twenty-four failed so, under load, and none of 54 at
    2 ms (at most 1.3% Python on either line)."""
    prog = PROGRAMS / "blas.py"
    # Two BLAS threads, whatever the machine's CPU count: one is a thread
    # the library starts and Python never sees.
    run = run_calipers(prog, TRUTH, options=["--interval", "2ms"],
                       env={"OPENBLAS_NUM_THREADS": "2"})
    assert run.returncode == 0, run.stderr
    truth = run.truth["process_cpu"]
    lines = run.lines("blas.py")
    work = [lines[line_of(prog, m)] for m in ("matmul-line", "sort-line")]
    # process_time() counts every thread of the process over the same span
    # (the lines after start-line; it counts calipers' own threads too,
    # which the profile leaves out: under stress-ng --cpu 2 the matmul and
    # sort lines alone held 0.90-0.97 of it).
    spent = sum(cpu(rec) for n, rec in lines.items() if n > line_of(prog, "start-line"))
    assert spent == pytest.approx(truth, rel=0.15), (spent, truth)
    for rec in work:
        assert rec["native_s"] >= 0.9 * (rec["native_s"] + rec["python_s"]), work
    # The library's thread is in the profile, all of its CPU native.
    others = [t for t in run.profile["threads"] if not t["main"]]
    assert others, run.profile["threads"]
    assert sum(t["native_s"] for t in others) > 0.05, others
    assert all(t["python_s"] == 0 for t in others), others



def test_lines_inside_generators_coroutines_and_decorators(run_calipers, tmp_path):
    """A hot loop run per item of a generator pipeline, of awaited
    coroutines and of a decorated function: each switches frames every
    microsecond or two.  The tick's peek at the main thread's frames took
    about as long: it read a generator's frame after it had yielded (its
    `yield` line got 10-13% of a pipeline on 3.11), a coroutine's after
    it had returned (its `return` line 7-15% on 3.11 and 3.13), and a call
    that returned before the tick was served gave its time to the caller's
    line (the coroutines' hot lines read 0.73-0.84 of the truth on 3.13).

    The truth is the program's: what the loop's iterations cost in the
    same functions, a lower bound of the hot lines' time (they also set
    each loop up).  The shares read 0.94-1.10 of it now (3.9-3.14), and
    the coroutines' 0.73-0.84 before.  At 1 ms over ~0.9 s of CPU a shape's
    share has a standard error near 1.5 points; on a loaded machine a
    run in about 40 read 0.886 (3.12), hence the floor of 0.85.
    """
    free_threaded = sysconfig.get_config_var("Py_GIL_DISABLED") == 1
    read = generator_lines(run_calipers, tmp_path)
    # 3.14t does not reuse a finished coroutine's memory at once, so a
    # peek through a coroutine chain succeeds where its frames outlive the
    # reads, away from the hot lines: 0.83-0.94 of the truth, and 0.65 in
    # CI on a loaded machine.  Such a peek is now trusted only where the
    # thread held still (a native call): 0.90-1.07 in some 40 runs, some
    # with the main thread preempted for over half its CPU.  But 3.14t
    # also has runs in which the generator and coroutine shapes both read
    # low, 0.73-0.84 (one in six or more in some periods, none in others,
    # with the pending-call probe or without it; the GIL builds never
    # showed it): not understood yet (issue 18), so 3.14t's floor is 0.6.
    floor = 0.6 if free_threaded else 0.85
    for shape in ("gen", "co", "dec"):
        assert read[shape] >= floor, (shape, read)
    # The lines that took the hot lines' time: the coroutine's `return`
    # read 7-15% before, 0-2.5% on the machine of 2026-11 (4.1% once in ~50
    # runs; the same line of a generator pipeline, its `yield`, 0-3.5%).
    # On the machine of 2026-12 (3.9 and 3.14, some 140 runs, the commit
    # before 2026-12-07's changes as well as after): `return` 0.4-5.4%,
    # `yield` 0.1-4.9% but 7.1% and 7.3% once each; so 10% here.  (The
    # decorator's wrapper has real work of its own: a tuple of arguments
    # and a call.)
    assert read["gen_yield"] <= 0.10 and read["co_return"] <= 0.10, read


def generator_lines(run_calipers, tmp_path):
    """One run of the accuracy bench's generators.py at 1 ms: for each
    shape (gen, co, dec) its hot lines' share of its functions' time over
    the program's lower bound of it (1.0: right); and under gen_yield and
    co_return the share of their shape's time on the generator's `yield`
    line and the coroutine's `return` line (0: right).  Also used by the
    accuracy tier (tests/accuracy), which runs it 20 times."""
    prog = BENCH_ACCURACY / "generators.py"  # the accuracy bench's program
    truth_file = tmp_path / "truth.json"
    run = run_calipers(prog, options=["--interval", "1ms", "--cpu-only"],
                       env={"BENCH_TRUTH": str(truth_file), "BENCH_ROUNDS": "3"})
    assert run.returncode == 0, run.stderr
    truth_of = json.loads(truth_file.read_text())["shapes"]
    lines = list(run.lines("generators.py").values())
    text = prog.read_text().splitlines()
    shapes = {"gen": {"source", "work", "keep_even", "pipeline"},
              "co": {"co_leaf", "co_middle", "co_main"},
              "dec": {"wrapper", "dec_item", "dec_main"}}
    read = {}
    for shape, funcs in shapes.items():
        truth = truth_of[shape]
        least = truth["iterations"] / (truth["full"] + truth["empty"])
        spent = sum(cpu(r) for r in lines if r["function"] in funcs)
        hot = {n for n, t in enumerate(text, 1) if "# @%s_hot" % shape in t}
        read[shape] = sum(cpu(r) for r in lines if r["line"] in hot) / spent / least
    by_line = {r["line"]: r for r in lines}
    for marker, shape in (("@gen_yield", "gen"), ("@co_return", "co")):
        rec = by_line.get(line_of(prog, marker))
        spent = sum(cpu(r) for r in lines if r["function"] in shapes[shape])
        read[marker[1:]] = cpu(rec) / spent if rec else 0.0
    return read
