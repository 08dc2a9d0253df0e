"""Processes for test_processes.py.  procs.py MODE [ARG] [TRUTH]:

pool METHOD      Pool(2).map of a CPU-heavy function, start method METHOD
                 (prints the start method before and after, to compare)
process METHOD   one Process of the same function
executor METHOD  ProcessPoolExecutor(2).map
fork             os.fork(): the child works and leaves by os._exit
forkreturn       os.fork(): the child works and returns normally
subprocess       subprocess.run([sys.executable, procs.py, work])
python3          subprocess.run(["python3", procs.py, work]) (python3 from PATH)
sh               sh -c 'echo hi; exit 3' (its output and status printed)
kill9            a child that SIGKILLs itself
work             the function, in this process
env              print the environment the program sees

TRUTH, when given, receives {"work_cpu_s": CPU seconds spent in work(),
measured by each process with its own thread clock}.
"""
import json
import os
import signal
import subprocess
import sys
import time


def work(n=1_500_000):
    t0 = time.thread_time()
    s = 0
    for i in range(n):  # hot
        s += i * i  # hot2
    return time.thread_time() - t0


def main():
    mode = sys.argv[1]
    arg = sys.argv[2] if len(sys.argv) > 2 else None
    spent = 0.0
    if mode == "pool":
        import multiprocessing as mp

        print("before", mp.get_start_method(allow_none=True))
        with mp.get_context(arg).Pool(2) as pool:
            spent = sum(pool.map(work, [6_000_000] * 4))
        print("after", mp.get_start_method(allow_none=True))
    elif mode == "process":
        import multiprocessing as mp

        # 0.3-0.6 s of the child's CPU: at work(3_000_000) the run took some
        # 20 samples, and once in CI 9, which the profile notes as rough.
        p = mp.get_context(arg).Process(target=work, args=(9_000_000,))
        p.start()
        p.join()
        print("exitcode", p.exitcode)
    elif mode == "executor":
        import concurrent.futures as cf
        import multiprocessing as mp

        with cf.ProcessPoolExecutor(2, mp_context=mp.get_context(arg)) as ex:
            spent = sum(ex.map(work, [6_000_000] * 4))
    elif mode in ("fork", "forkreturn"):
        pid = os.fork()
        if pid == 0:
            work(3_000_000)
            if mode == "fork":
                os._exit(7)
            return
        _, status = os.waitpid(pid, 0)
        print("child status", os.waitstatus_to_exitcode(status))
    elif mode in ("subprocess", "python3"):
        exe = sys.executable if mode == "subprocess" else "python3"
        r = subprocess.run([exe, __file__, "work"])
        print("child status", r.returncode)
    elif mode == "sh":
        r = subprocess.run(["sh", "-c", "echo hi; exit 3"], capture_output=True, text=True)
        print(repr(r.stdout), r.returncode)
    elif mode == "kill9":
        pid = os.fork()
        if pid == 0:
            work(500_000)
            os.kill(os.getpid(), signal.SIGKILL)
        os.waitpid(pid, 0)
        work(500_000)
    elif mode == "work":
        work(3_000_000)
    elif mode == "env":
        for key in sorted(os.environ):
            if key.startswith(("CALIPERS", "PYTHONPATH", "LD_PRELOAD")):
                print(key, os.environ[key])
        print("end")
    if len(sys.argv) > 3:
        with open(sys.argv[3], "w") as f:
            json.dump({"work_cpu_s": spent}, f)


if __name__ == "__main__":
    main()
