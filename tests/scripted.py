"""What the error tests share with the scripts they run in fresh processes (which import this
from the tests folder): an interrupt raised where Ctrl-C's would be, and a solve whose solver
prints its message."""
import sys

import numpy as np

from odeint_autograd import ODESolverError, odeint

# how the message of odeint's method's solver starts
_SOLVER_MESSAGE = {"lsoda": "lsoda--", "adams": "DVODE--", "bdf": "DVODE--"}


def interrupt_at(k, files):
    """A hook for sys.setprofile that raises KeyboardInterrupt at the k-th place where CPython
    would raise a signal's (as a Python function starts, after a call to a C function returns)
    in code from `files` (file name endings), and removes itself."""
    seen = [0]

    def hook(frame, event, arg):
        if event in ("call", "c_return") and frame.f_code.co_filename.endswith(files):
            seen[0] += 1
            if seen[0] == k:
                sys.setprofile(None)
                raise KeyboardInterrupt

    return hook


def quoted(method="lsoda"):
    """Whether a solve by `method` at a tolerance its solver refuses (it prints why) fails with
    an error that quotes the solver's message."""
    try:
        odeint(lambda y, t: -y, np.ones(1), [0.0, 1.0], method=method, rtol=1e-16, atol=0.0)
    except ODESolverError as error:
        return f"(the solver printed: {_SOLVER_MESSAGE[method]}" in str(error)
    return False
