"""What every solver in the package shares: the error a failed solve raises, the counts of what a
solve did, and the check for non-finite values."""
import dataclasses
from contextlib import contextmanager

import numpy as np

# the fix for an error weight rtol * |y| + atol of zero, in the forward solve or a backward one
GIVE_ATOL = "give atol > 0 (adjoint_atol for a backward solve, whose state is [z, a, a_args, a_t])"


class ODESolverError(RuntimeError):
    """A solve failed. `t` is the time the solver reached (None when it did not start),
    `method` the solver that failed and `solve` which solve it was: 'forward', or 'adjoint' for
    the backward solves of a gradient."""

    def __init__(self, reason, t=None, method=None, solve="forward"):
        super().__init__(reason)
        self.reason, self.t, self.method, self.solve = reason, t, method, solve

    def __str__(self):
        solver = f" ({self.method})" if self.method else ""
        which = (" in the adjoint (backward) solve, after the forward solve succeeded"
                 if self.solve == "adjoint" else "")
        where = "" if self.t is None else f" at t = {self.t!r}"
        return f"odeint{solver} failed{which}{where}: {self.reason}"


class NestedSolveError(ODESolverError):
    """A solve by one of scipy's compiled solvers (VODE, LSODA) started inside the dynamics of
    another by the same solver, which cannot nest. Where no odeint was the inner or the outer
    solve (`method` None: scipy's own inside scipy's), the message is the reason alone."""

    def __str__(self):
        return super().__str__() if self.method else self.reason


def all_finite(f):
    """Whether a float array holds no nan or inf: its sum is nan or inf if any entry is (or if it
    overflows, when the entry-wise check decides). One pass and no boolean array, and no BLAS:
    a BLAS dot would wake numpy's OpenBLAS threads, whose spinning after the call takes a core
    from the dynamics' own threads. Call it under np.errstate(over="ignore"), as the solves do
    (an errstate here would cost every evaluation of the dynamics a microsecond)."""
    return bool(np.isfinite(np.sum(f)) or np.isfinite(f).all())


@dataclasses.dataclass
class Counts:
    """What one direction of solving did: dynamics evaluations, accepted steps, solver calls."""

    nfe: int = 0
    steps: int = 0
    solves: int = 0

    def add(self, nfe, steps):
        self.nfe += nfe
        self.steps += steps
        self.solves += 1


@contextmanager
def counting(sink):
    """A fresh Counts that one solve fills as it goes, added to `sink` (a Counts, or None) however
    the solve ends: a failed solve's evaluations are counted too."""
    counts = Counts()
    try:
        yield counts
    finally:
        if sink is not None:
            sink.add(counts.nfe, counts.steps)
