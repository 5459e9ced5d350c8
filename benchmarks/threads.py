"""odeint and scipy's own ode solving side by side on two threads, every answer checked.

scipy's VODE and LSODA keep their state in global variables, guarded by a handle per integrator
and (scipy 1.16) a lock per run; scipy checks the handle before it takes the lock. For each
method one thread runs odeint in a loop and the other scipy's ode with the same solver over the
same 20 output times; each answer is compared with exp(-t). What may happen: right answers, and
scipy's loud IntegratorConcurrencyError where its solve truly interleaved with odeint's. What
must not: a wrong answer from either ('failed': scipy's ode said its solve failed), or an error
from odeint (it holds the lock for its whole solve).

    python benchmarks/threads.py --seconds 5 --switch-interval 1e-6

A small switch interval makes the threads swap often, so that the races show within seconds.
"""
import argparse
import os
import sys
import threading
import time
import warnings
from collections import Counter

import numpy as np
from scipy.integrate import ode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from odeint_autograd import odeint  # noqa: E402
from odeint_autograd._scipy import SCIPY_INTEGRATORS  # noqa: E402
from reproduce.common import machine, now, write_json  # noqa: E402

TIMES = np.linspace(0.1, 2.0, 20)


def side_by_side(method, seconds):
    """{'odeint': outcomes, 'scipy': outcomes} of `seconds` of both solving on two threads."""
    scipy_name = SCIPY_INTEGRATORS[method]
    done = threading.Event()
    by_odeint, by_scipy = Counter(), Counter()

    def odeint_loop():
        while not done.is_set():
            try:
                ys = odeint(lambda y, t: -y, np.ones(1), TIMES, method=method, rtol=1e-10,
                            atol=1e-12)
                right = np.allclose(ys[:, 0], np.exp(TIMES[0] - TIMES), rtol=1e-6)
                by_odeint["right" if right else "wrong"] += 1
            except Exception as error:  # noqa: BLE001 -- counted by type
                by_odeint[type(error).__name__] += 1

    thread = threading.Thread(target=odeint_loop)
    thread.start()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        solver = ode(lambda t, z: -z).set_integrator(scipy_name, rtol=1e-10, atol=1e-12)
        solver.set_initial_value(np.ones(1), 0.0)
        try:
            ys = np.array([solver.integrate(t)[0] for t in TIMES])
            right = np.allclose(ys, np.exp(-TIMES), rtol=1e-6)
            by_scipy["right" if right else "wrong" if solver.successful() else "failed"] += 1
        except Exception as error:  # noqa: BLE001 -- counted by type
            by_scipy[type(error).__name__] += 1
    done.set()
    thread.join()
    return {"method": method, "scipy": f"ode('{scipy_name}')", "odeint_outcomes": dict(by_odeint),
            "scipy_outcomes": dict(by_scipy)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per method")
    parser.add_argument("--switch-interval", type=float, default=1e-6)
    parser.add_argument("--methods", nargs="+", default=["lsoda", "adams", "bdf"])
    parser.add_argument("--out", default=os.path.join(ROOT, "figures", "benchmarks",
                                                      "threads.json"))
    args = parser.parse_args(argv)
    rows, interval = [], sys.getswitchinterval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's warnings of its failed runs: counted instead
        sys.setswitchinterval(args.switch_interval)
        try:
            for method in args.methods:
                rows.append(side_by_side(method, args.seconds))
                print(rows[-1], flush=True)
        finally:
            sys.setswitchinterval(interval)
    record = {"command": "python benchmarks/threads.py " + " ".join(argv or sys.argv[1:]),
              "date": now(),
              "seconds": args.seconds, "switch_interval": args.switch_interval,
              "machine": machine(), "rows": rows}
    # odeint holds the lock for its whole solve: anything but a right answer is a failure; scipy's
    # ode may raise its IntegratorConcurrencyError, never answer wrong
    wrong = sum(sum(n for key, n in row["odeint_outcomes"].items() if key != "right")
                + row["scipy_outcomes"].get("wrong", 0) + row["scipy_outcomes"].get("failed", 0)
                for row in rows)
    record["wrong_or_failed"] = wrong
    write_json(args.out, record, indent=1)
    print(f"wrote {args.out}; odeint's answers not right, scipy's wrong or failed: {wrong}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
