"""A differentiable ODE solver: scipy's VODE/LSODA with gradients by the adjoint method.

    from odeint_autograd import odeint, ODESolverError
    ys = odeint(func, y0, t, args=(theta,), rtol=1e-3, atol=1e-3, method="adams")

See `odeint` for the options and `SolverStats` for the counts of function evaluations.
"""
from ._odeint import (ADJOINT_METHODS, BACKWARD_METHODS, DEFAULT_TOL, DIRECT_METHODS, METHODS,
                      Counts, SolverStats, odeint)
from .errors import NestedSolveError, ODESolverError

__all__ = ["odeint", "ODESolverError", "NestedSolveError", "SolverStats", "Counts", "METHODS",
           "ADJOINT_METHODS", "DIRECT_METHODS", "BACKWARD_METHODS", "DEFAULT_TOL"]
__version__ = "0.1.0"
