"""The cost calipers adds to os.fork(): a program that forks N children in
a row, each leaving at once with os._exit(0) (bench/programs/fork_many.py),
run without `calipers run`, with it, and with `calipers run --cpu-only`,
in turn (A B C A B C ...), with the
interpreter this script runs under (calipers installed in it).

Reports, as medians over the repetitions: the fork loop's own time (what
the program measures: the parent's hooks, each child's set-up and its
profile written at os._exit), the whole run's wall time (start-up and,
under calipers, merging the N children's profiles too), and the CPU time
per fork of the parent (all its threads) and of each child (wait4), with
the ratio to the unprofiled run.  Machine load moves these a lot: look at the ratio of
runs taken together, and at `uptime` before trusting a number.

    python bench/fork_cost.py                 # 200 forks, 7 repetitions
    python bench/fork_cost.py --forks 500 --repeat 11
    python bench/fork_cost.py --threads 4     # 4 threads forking at once
    python bench/fork_cost.py --against OTHER/bin/python   # another calipers too
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "programs", "fork_many.py")


def run_once(cmd, cwd):
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (proc.returncode, " ".join(cmd), proc.stderr[-2000:]))
    # fork_many.py prints "<ms> ms per fork", then "<ms> ms CPU per fork in
    # the parent, <ms> ms in each child".
    lines = proc.stdout.splitlines()
    words = lines[1].split()
    return float(lines[0].split()[0]), wall, float(words[0]), float(words[-5])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--forks", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1, help="threads forking at once")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--against", metavar="PYTHON",
                    help="an interpreter with another calipers installed (a virtual "
                         "environment's, built from an earlier commit): its two "
                         "configurations run in the same turns, as 'other' and 'other-cpu'")
    args = ap.parse_args()
    prog_args = [str(args.forks), str(args.threads)]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "profile.json")

        def profiled(python, *options):
            return ([python, "-m", "calipers", "run"] + list(options)
                    + ["--no-report", "-o", out, PROGRAM] + prog_args)

        cmds = {
            "plain": [sys.executable, PROGRAM] + prog_args,
            "calipers": profiled(sys.executable),
            "cpu-only": profiled(sys.executable, "--cpu-only"),
        }
        if args.against:
            cmds["other"] = profiled(args.against)
            cmds["other-cpu"] = profiled(args.against, "--cpu-only")
        rows = {name: [] for name in cmds}
        for _ in range(args.repeat):
            for name, cmd in cmds.items():
                rows[name].append(run_once(cmd, tmp))
    print("%d forks (%d thread%s), %d repetitions, %s, load average %s"
          % (args.forks, args.threads, "" if args.threads == 1 else "s", args.repeat,
             sys.version.split()[0], " ".join("%.1f" % x for x in os.getloadavg())))
    base = None
    for name in cmds:
        loop = statistics.median(r[0] for r in rows[name]) * args.forks / 1e3
        wall = statistics.median(r[1] for r in rows[name])
        parent = statistics.median(r[2] for r in rows[name])
        child = statistics.median(r[3] for r in rows[name])
        if base is None:
            base = (loop, wall, parent, child)
        print("  %-9s fork loop %6.3f s (%.2fx, %.2f ms per fork)   whole run %6.3f s (%.2fx)"
              % (name, loop, loop / base[0], loop / args.forks * 1e3, wall, wall / base[1]))
        print("  %-9s CPU per fork: parent %.3f ms (%.2fx), child %.3f ms (%.2fx)"
              % ("", parent, parent / base[2], child, child / base[3]))


if __name__ == "__main__":
    main()
