"""Ctrl-C at random moments of odeint's and scipy's solves: nothing may be left held.

A timer signal raises KeyboardInterrupt at a random moment of each solve (10 us to 2 ms, or to
1.5 times the median time of that kind of solve, measured first, where that is longer), in turn
odeint by LSODA, odeint by VODE's Adams and scipy's own ode('lsoda'), while a second thread
keeps the interpreter switching (which sets how long a solve takes: each call that lets go of
the GIL can wait one switch interval for it). After each solve, interrupted or not, the locks on
scipy's solvers and odeint's own must be free and file descriptor 1 (where odeint catches the
solvers' messages) must be back; no file descriptor may leak (exit status 1 if anything was left
held or leaked). A solve that never returns (a lock left held where this does not look) ends the
run with every thread's stack after --seconds + 120 s. POSIX only (SIGALRM).

    python benchmarks/interrupts.py --seconds 20
"""
import argparse
import faulthandler
import os
import signal
import sys
import threading
import time

import numpy as np
from scipy.integrate import _ode, ode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from odeint_autograd import _scipy, odeint  # noqa: E402
from reproduce.common import machine, now, write_json  # noqa: E402


def solve(how):
    if how == "scipy lsoda":
        solver = ode(lambda t, z: -z).set_integrator("lsoda").set_initial_value(np.ones(3), 0.0)
        return solver.integrate(1.0), solver.integrate(2.0)
    return odeint(lambda y, t: -y, np.ones(3), np.linspace(0.0, 2.0, 5), method=how.split()[1])


def median_time(how, count=7):
    """The median time in seconds of `count` uninterrupted solves."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        solve(how)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def plain(lock):
    """The lock itself, or the plain lock inside a wrapper of the code before (812e0fd)."""
    return getattr(lock, "lock", lock)


def held(lock):
    """Whether this thread holds `lock` (a plain lock, as in the code before the locks knew
    their owner: whether anyone does)."""
    return lock._is_owned() if hasattr(lock, "_is_owned") else plain(lock).locked()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.path.join(ROOT, "figures", "benchmarks",
                                                      "interrupts.json"))
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    locks = [_ode.LSODA_LOCK, _ode.VODE_LOCK, _scipy._lock]
    stdout = os.readlink("/proc/self/fd/1")
    armed, done = [False], threading.Event()

    def interrupt(*_):
        if armed[0]:
            armed[0] = False
            raise KeyboardInterrupt

    def switching():
        while not done.is_set():
            sum(range(100))

    def left_held():
        return any(map(held, locks)) or os.readlink("/proc/self/fd/1") != stdout

    hows = ["odeint lsoda", "odeint adams", "scipy lsoda"]
    tally = {how: {"finished": 0, "interrupted": 0, "left_held": 0} for how in hows}
    previous = signal.signal(signal.SIGALRM, interrupt)
    thread = threading.Thread(target=switching, daemon=True)
    thread.start()
    faulthandler.dump_traceback_later(args.seconds + 120, exit=True)
    longest = {how: max(2e-3, 1.5 * median_time(how)) for how in hows}
    descriptors = len(os.listdir("/proc/self/fd"))
    end, count, first = time.monotonic() + args.seconds, 0, None
    try:
        while time.monotonic() < end:
            how, count = hows[rng.integers(len(hows))], count + 1
            try:
                armed[0] = True
                signal.setitimer(signal.ITIMER_REAL, rng.uniform(1e-5, longest[how]))
                solve(how)
                armed[0] = False
                tally[how]["finished"] += 1
                bad = left_held()
            except KeyboardInterrupt:
                tally[how]["interrupted"] += 1
                bad = left_held()  # while the exception, and what its frames hold, lives on
            signal.setitimer(signal.ITIMER_REAL, 0)
            armed[0] = False
            if bad:
                tally[how]["left_held"] += 1
                first = count if first is None else first
                for lock in locks:
                    while held(lock):
                        plain(lock).release()
    finally:
        faulthandler.cancel_dump_traceback_later()
        done.set()
        thread.join()
        signal.signal(signal.SIGALRM, previous)
    leaked = len(os.listdir("/proc/self/fd")) - descriptors
    left_held = sum(row["left_held"] for row in tally.values())
    record = {"command": "python benchmarks/interrupts.py " + " ".join(argv or sys.argv[1:]),
              "date": now(),
              "seconds": args.seconds, "machine": machine(), "solves": tally,
              "longest_interrupt_s": longest,
              "left_held": left_held, "first_left_held": first, "descriptors_leaked": leaked}
    write_json(args.out, record, indent=1)
    print(f"wrote {args.out}: {tally}, file descriptors leaked: {leaked}")
    return 1 if left_held or leaked else 0


if __name__ == "__main__":
    sys.exit(main())
