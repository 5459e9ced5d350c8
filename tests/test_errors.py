"""Bad input gets a ValueError naming the problem; a failed solve an ODESolverError with the time
reached; never a warning and a garbage array."""
import os
import subprocess
import sys
import tempfile
import warnings

import autograd.numpy as anp
import numpy as np
import pytest
from autograd import grad
from scipy.integrate import _ode as scipy_ode

from odeint_autograd import DEFAULT_TOL, METHODS, ODESolverError, odeint
from odeint_autograd._messages import redirect
from odeint_autograd._scipy import SCIPY_INTEGRATORS, _let_go, _lock
from odeint_autograd.errors import all_finite as _all_finite

from scripted import interrupt_at

decay = lambda y, t: -y  # noqa: E731
Y0 = np.array([1.0, 2.0])
# an rtol (atol = 0) the solvers refuse for Y0: LSODA below 100 eps, VODE below eps
TOO_TIGHT = {"lsoda": 1e-15, "adams": 1e-16, "bdf": 1e-16}


@pytest.fixture(autouse=True)
def no_warnings():
    """Everything in this file must raise, not warn."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


@pytest.mark.parametrize("t, match", [
    ([0.0, 1.0, 0.5], "strictly increasing or strictly decreasing"),
    ([0.0, 1.0, 1.0, 2.0], "repeats a time"),
    ([0.0, np.nan, 1.0], "non-finite"),
    ([0.0, np.inf], "non-finite"),
    ([0.0], "at least two times"),
    ([], "at least two times"),
    (0.5, "1-D"),
    ([[0.0, 1.0]], "1-D"),
    (["a", "b"], "real numbers"),
    ([[0.0, 1.0], [2.0]], "t must be an array of real numbers"),
    ([0.0, 0.3, np.nextafter(0.3, 1.0), 1.0], "too close for method='lsoda' to step between"),
    ([0.0, 1.0, 1.0 + 3 * np.spacing(1.0)], "fewer than 4 ulps apart"),  # lsoda failed at 2
    ([1e15, 1e15 + 1.0], "float64 resolves times that large only to 0.12"),  # 8 ulps apart
])
def test_bad_times(t, match):
    with pytest.raises(ValueError, match=match):
        odeint(decay, Y0, t)


@pytest.mark.parametrize("method", METHODS)
def test_times_too_large_for_their_span_are_refused_not_solved_wrong(method):
    # at t ~ 1e12 float64 resolves 2e-4: the solvers printed warnings and were off by 1e-4 (the
    # Fortran ones by 10 % at 1e15); s = t - t[0] solves the same problem exactly
    options = dict(step_size=0.01) if method == "rk4" else dict(rtol=1e-8, atol=1e-8)
    if method == "rk4":  # no tolerance to resolve: fixed steps of the times it is given
        odeint(decay, Y0, [1e12, 1e12 + 1.0], method=method, **options)
        return
    with pytest.raises(ValueError, match="float64 resolves times that large only to"):
        odeint(decay, Y0, [1e12, 1e12 + 1.0], method=method, **options)
    ys = odeint(decay, Y0, [1e6, 1e6 + 1.0], method=method, **options)  # 2e-10 of the span
    np.testing.assert_allclose(ys[-1], Y0 * np.exp(-1.0), rtol=1e-6)


def test_times_a_method_can_step_across_are_taken_however_close():
    # refused only below what each method was measured to fail at (MIN_ULPS); rk4 never fails
    t = np.array([0.0, 1.0, 1.0 + 4 * np.spacing(1.0), 2.0])
    for method, options in (("lsoda", {}), ("adams", {}), ("rk4", dict(step_size=0.01))):
        ys = odeint(decay, Y0, t, method=method, **options)
        np.testing.assert_allclose(ys, np.exp(-t)[:, None] * Y0, rtol=1e-6)
    for method in ("dopri5", "bosh3", "rkf23"):
        with pytest.raises(ValueError, match=f"too close for method='{method}'"):
            odeint(decay, Y0, t, method=method)
    with pytest.raises(ValueError, match="too close for method='dopri5'"):  # its backward solve
        odeint(decay, Y0, t, method="adams", adjoint_method="dopri5")
    t = np.array([0.0, 0.3, np.nextafter(0.3, 1.0), 1.0])
    g = grad(lambda a: anp.sum(odeint(lambda y, t, a: -a * y, Y0, t, (a,), method="rk4",
                                      step_size=0.01)))(1.0)
    assert g == pytest.approx(np.sum(Y0) * np.sum(-t * np.exp(-t)), rel=1e-8)


@pytest.mark.parametrize("method", ["adams", "lsoda", "bdf"])
def test_checkpoints_a_few_ulps_from_an_output_time_are_dropped(method):
    # np.linspace(1.2, 0, 5) holds 0.30000000000000004 beside the output time 0.3: the backward
    # solve failed on that 5e-17 interval although the forward one had passed
    f = lambda y, t, a: -a * y  # noqa: E731
    t = np.array([1.2, 0.7, 0.3, 0.0])
    loss = lambda a, **kw: anp.sum(odeint(f, Y0, t, (a,), method=method, rtol=1e-9,  # noqa
                                          atol=1e-9, **kw))
    exact = np.sum(Y0) * np.sum(-(t - 1.2) * np.exp(-(t - 1.2)))  # d/da of sum(Y0 e^{-a(t-1.2)})
    for checkpoints in (3, [np.nextafter(0.3, 1.0), 0.5, np.nextafter(0.5, 1.0)]):
        np.testing.assert_allclose(grad(loss)(1.0, checkpoints=checkpoints), exact, rtol=1e-6)
    with pytest.raises(ValueError, match="at most"):
        odeint(f, Y0, t, (1.0,), method=method, checkpoints=10 ** 9)  # was an 8 GB linspace


@pytest.mark.parametrize("y0, match", [
    (np.array([1.0, np.nan]), "non-finite"),
    (np.array([np.inf]), "non-finite"),
    (np.array([]), "empty"),
    (np.array([1 + 1j]), "real numbers"),
    (["x"], "real numbers"),
    ([[1.0, 2.0], [1.0]], "y0 must be an array of real numbers"),  # ragged: numpy's text alone
])
def test_bad_initial_state(y0, match):
    with pytest.raises(ValueError, match=match):
        odeint(decay, y0, [0.0, 1.0])


@pytest.mark.parametrize("options, match", [
    (dict(rtol=-1e-3), "rtol"),
    (dict(atol=np.nan), "atol"),
    (dict(atol=np.inf), "atol"),
    (dict(rtol=0.0, atol=0.0), "both be zero"),
    (dict(rtol="tight"), "rtol"),
    (dict(rtol=[1e-3, 1e-3]), "rtol"),
    (dict(adjoint_atol=-1.0), "adjoint_atol"),
    (dict(method="euler"), "unknown method"),
    (dict(method="LSODA "), "unknown method"),
    (dict(adjoint_method="rk4"), "unknown adjoint_method"),
    (dict(max_steps=0), "max_steps"),
    (dict(max_steps=2.5), "max_steps"),
    (dict(method="rk4", step_size=-0.1), "step_size"),
    (dict(method="adams", step_size=0.1), "step_size"),
    (dict(checkpoints=0), "checkpoints"),
    (dict(checkpoints=[0.5, 3.0]), "checkpoint times"),
    (dict(method="bdf", jacobian="sparse"), "jacobian"),
    (dict(method="adams", jacobian="dense"), "jacobian applies"),
    (dict(method="adams", adjoint_method="bosh3", jacobian="diagonal"), "jacobian applies"),
    (dict(method="dopri5", step_size=0.1), "step_size applies"),
    (dict(method="rk4", adjoint_rtol=1e-3), "adjoint_rtol applies"),
    (dict(method="rk4", rtol=1e-10), "do not apply to method='rk4'"),
    (dict(method="rk4", atol=1e-10, step_size=0.1), "do not apply to method='rk4'"),
    (dict(method="rk4", rtol=DEFAULT_TOL), "do not apply to method='rk4'"),
    (dict(method="dopri5", checkpoints=3), "checkpoints applies"),
    (dict(method="dopri5", adjoint_seminorm=True), "adjoint_seminorm applies"),
    (dict(args=0.5), "args must be a tuple"),
    (dict(args=np.ones(3)), "args must be a tuple"),
    (dict(max_steps=10 ** 20), "max_steps"),
    (dict(max_steps=2 ** 31), "max_steps"),
    (dict(method="dopri5", max_steps=10 ** 20), "max_steps"),
    (dict(max_steps=True), "max_steps"),
    (dict(max_steps=np.True_), "max_steps"),
    (dict(max_steps="10"), "max_steps"),
    (dict(checkpoints=True), "checkpoints"),
    (dict(checkpoints=10 ** 20), "checkpoints"),
    (dict(checkpoints=["a"]), "checkpoints"),
    (dict(rtol="1e-3"), "rtol"),
    (dict(method="dopri5", rtol="1e-3"), "rtol"),
    (dict(method="bdf", atol=b"1e-3"), "atol"),
    (dict(rtol=True), "rtol"),
    (dict(adjoint_rtol="1e-3"), "adjoint_rtol"),
    (dict(method="rk4", step_size=True), "step_size"),
    (dict(method="rk4", step_size="0.1"), "step_size"),
    (dict(stats=5), "stats must be a SolverStats"),
    (dict(stats={}), "stats must be a SolverStats"),
    (dict(adjoint_seminorm="yes"), "adjoint_seminorm"),
    (dict(adjoint_seminorm=1), "adjoint_seminorm"),
    (dict(method="dopri5", adjoint_seminorm="yes"), "adjoint_seminorm"),
    (dict(method="lsoda", jacobian=5), "jacobian"),
    (dict(method=["lsoda"]), "unknown method"),
    (dict(adjoint_method=np.array(["adams"])), "unknown adjoint_method"),
])
def test_bad_options(options, match):
    with pytest.raises(ValueError, match=match):
        odeint(decay, Y0, [0.0, 1.0, 2.0], **options)


def test_func_must_be_callable():
    with pytest.raises(ValueError, match="callable"):
        odeint("not a function", Y0, [0.0, 1.0])


@pytest.mark.parametrize("method", METHODS)
def test_func_returning_the_wrong_shape(method):
    with pytest.raises(ValueError, match=r"shape \(3,\).*y's shape \(2,\)"):
        odeint(lambda y, t: np.ones(3), Y0, [0.0, 1.0], method=method)


@pytest.mark.parametrize("method", METHODS)
def test_complex_dynamics_are_an_error_not_a_dropped_imaginary_part(method):
    with pytest.raises(ValueError, match="dtype complex128.*real"):
        odeint(lambda y, t: -1j * y, Y0, [0.0, 1.0], method=method)
    with pytest.raises(ValueError, match="real"):  # traced by autograd too
        grad(lambda k: anp.sum(odeint(lambda y, t, k: -k * y * (1 + 1j), Y0, [0.0, 1.0], (k,),
                                      method=method)))(0.5)


def test_good_option_types_are_accepted():
    """What the checks must not refuse: numpy scalars, ints, tolerances of 0 beside a non-zero."""
    ys = odeint(decay, Y0, np.array([0, 1]), rtol=0, atol=np.float32(1e-7), max_steps=np.int64(500),
                adjoint_seminorm=np.bool_(True), checkpoints=np.int32(2))
    np.testing.assert_allclose(ys[-1], Y0 * np.exp(-1), rtol=1e-5)


@pytest.mark.parametrize("method", METHODS)
def test_finite_time_blowup_is_an_error_with_the_time_reached(method):
    """y' = y^2, y(0) = 1 has y = 1 / (1 - t): it blows up at t = 1."""
    with pytest.raises(ODESolverError) as info:
        odeint(lambda y, t: y ** 2, np.array([1.0]), [0.0, 2.0], method=method,
               step_size=1e-3 if method == "rk4" else None)
    assert isinstance(info.value, RuntimeError)
    assert 0.9 < info.value.t < 1.01
    assert f"t = {info.value.t!r}" in str(info.value) and method in str(info.value)


@pytest.mark.parametrize("method", METHODS)
def test_non_finite_dynamics_are_an_error(method):
    def f(y, t):
        return -y if t < 0.5 else y * np.nan

    with pytest.raises(ODESolverError, match="non-finite") as info:
        odeint(f, Y0, [0.0, 1.0], method=method, step_size=0.1 if method == "rk4" else None)
    assert info.value.t >= 0.5


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("method", ["lsoda", "adams"])
def test_a_single_non_finite_entry_among_many_is_an_error(method, bad):
    """One bad number in a large state (the finite check sums the state; nan/inf survive the
    sum), while huge finite values whose sum overflows are not mistaken for bad ones."""
    def f(y, t):
        out = -y
        if t > 0.3:
            out[1234] = bad
        return out

    with pytest.raises(ODESolverError, match="non-finite"):
        odeint(f, np.ones(5000), [0.0, 1.0], method=method)
    huge = np.full(1000, 1e306)  # finite, but its sum overflows
    with np.errstate(all="ignore"):  # as inside the solves
        assert _all_finite(huge) and _all_finite(-huge)
        huge[-1] = bad
        assert not _all_finite(huge)


@pytest.mark.parametrize("method", ["lsoda", "adams", "bdf", "dopri5", "bosh3", "rkf23"])
def test_too_many_steps_is_an_error(method):
    with pytest.raises(ODESolverError, match="max_steps=5") as info:
        odeint(lambda y, t: np.cos(50 * t) * y, Y0, [0.0, 10.0], method=method, max_steps=5)
    assert 0.0 <= info.value.t < 10.0


@pytest.mark.parametrize("method", ["lsoda", "adams", "bdf"])
def test_impossible_accuracy_is_an_error(method):
    with pytest.raises(ODESolverError, match="more accuracy than float64 holds"):
        odeint(lambda y, t: np.cos(t) * y, np.array([1e10]), [0.0, 1.0], method=method,
               rtol=1e-30, atol=1e-30)


@pytest.mark.parametrize("method", ["lsoda", "adams", "bdf"])
def test_why_vode_and_lsoda_refused_to_start_is_named(method):
    # istate -3 has several causes; each message named "atol = 0" before
    with pytest.raises(ODESolverError, match=r"component 1 of the state is zero \(or subnormal"):
        odeint(decay, np.array([1.0, 1e-310]), [0.0, 1.0], method=method, rtol=1e-6, atol=0.0)
    with pytest.raises(ODESolverError, match="adjoint .backward. solve.*adjoint_atol"):
        grad(lambda y0: odeint(decay, y0, [0.0, 1.0], method=method, rtol=1e-6,  # dL/dy0[1]
                               atol=0.0)[-1, 0])(Y0)  # = 0: a component of the adjoint state
    with pytest.raises(ODESolverError, match="more accuracy than float64 holds"):
        odeint(decay, Y0, [0.0, 1.0], method=method, rtol=TOO_TIGHT[method], atol=0.0)
    odeint(decay, np.array([1.0, 0.0]), [0.0, 1.0], method=method, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("method", ["lsoda", "adams", "bdf"])
def test_the_solvers_print_nothing_and_a_failure_quotes_them(method, capfd):
    """VODE and LSODA write their messages to descriptor 1 (under capfd a regular file, which
    their Fortran runtime buffers): a solve prints nothing, and a failure's error quotes them."""
    with pytest.raises(ODESolverError, match=r"\(the solver printed: (DVODE|lsoda)-- .*accuracy"):
        odeint(decay, Y0, [0.0, 1.0], method=method, rtol=TOO_TIGHT[method], atol=0.0)
    if method != "adams":  # warned 'T + H = T' on the way; right all the same
        ys = odeint(lambda y, t: -1e6 * (y - 1.0), 0.0, 86400 + np.array([0.0, 1.0]),
                    method=method, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(ys[-1], 1.0)
    assert capfd.readouterr() == ("", "")


def _script(source, *args, **options):
    """Run `source` in a fresh Python process, the tests folder importable (for `scripted`)."""
    path = os.pathsep.join(filter(None, [os.path.dirname(os.path.abspath(__file__)),
                                         os.environ.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", source, *map(str, args)], text=True,
                          env=dict(os.environ, PYTHONPATH=path), **options)


def _caught_while(write):
    """The solvers' lines caught while `write` runs, descriptor 1 redirected under odeint's lock
    and let go as `solve` does."""
    _lock.acquire()
    catch = redirect()
    try:
        write()
    finally:
        caught = _let_go(None, catch)
    return caught


def test_other_output_during_a_solve_is_written_back(capfd, monkeypatch):
    """While a solve runs, descriptor 1 goes to a file: the solvers' lines (they start with a
    space) are kept for an error, anything else (another thread's print) is written back."""
    other = "another thread\n[[1. 0.]\n [0. 1.]]\n   indented\n XYZ--  not a solver's\n"

    def write():
        os.write(1, b" DVODE--  a   message\n       goes on\n      In above,  R1 = 0.1D+01\n")
        os.write(1, other.encode())
        os.write(1, b" lsoda--  another\n")
    caught = _caught_while(write)
    assert caught == ["DVODE-- a message", "goes on", "In above, R1 = 0.1D+01", "lsoda-- another"]
    assert capfd.readouterr().out == other
    assert not _lock._is_owned()
    # no temporary file to be had (a new process, no temporary folder): nothing caught or lost
    with monkeypatch.context() as patch:
        patch.setattr(os, "getpid", lambda: -1)
        patch.setattr(tempfile, "tempdir", "/nonexistent")
        caught = _caught_while(lambda: os.write(1, b" DVODE--  printed\n"))
    assert caught == [] and capfd.readouterr().out == " DVODE--  printed\n"


# Processes forked before a solve and during one; what each prints, and whether its solver's
# message was caught in its own file and quoted.
_FORKED = """
import os, sys
import numpy as np
from odeint_autograd import odeint
from scripted import quoted

ORIGINAL = os.fstat(1)

def solve(dynamics):
    return odeint(dynamics, np.ones(1), [0.0, 1.0])[-1, 0]

def forks_in_the_dynamics(y, t):
    if not hasattr(forks_in_the_dynamics, "done"):
        forks_in_the_dynamics.done = True
        child = os.fork()
        if child == 0:
            print("forked in a solve, its stdout the original:",
                  os.path.samestat(os.fstat(1), ORIGINAL), flush=True)
            os._exit(0)
        os.waitpid(child, 0)
    return -y

go, gone = os.pipe(), os.pipe()
overlapping = os.fork()
if overlapping == 0:  # solves while the parent's solve has descriptor 1 redirected
    os.read(go[0], 1)
    print("overlapping child quoted:", quoted(), flush=True)
    os.write(gone[1], b"x")
    os._exit(0)

def lets_the_child_solve(y, t):
    if not hasattr(lets_the_child_solve, "done"):
        lets_the_child_solve.done = True
        os.write(1, b"printed in the parent's dynamics\\n")
        os.write(go[1], b"x")
        os.read(gone[0], 1)
    return -y

print("parent:", solve(lets_the_child_solve), flush=True)
os.waitpid(overlapping, 0)
import signal, threading
from odeint_autograd import _messages
parents = _messages._catch.file
started, finish = threading.Event(), threading.Event()

def waits(y, t):
    started.set()
    finish.wait()
    return -y

other = threading.Thread(target=odeint, args=(waits, np.ones(1), [0.0, 1.0]))
other.start()
started.wait()
during = os.fork()
if during == 0:  # forked while another thread's solve holds odeint's locks and descriptor 1
    signal.alarm(60)
    print("forked during another thread's solve, its own file:",
          _messages._catch.pid == os.getpid() and _messages._catch.file != parents,
          "its stdout the original:", os.path.samestat(os.fstat(1), ORIGINAL), flush=True)
    print("and solves:", solve(lambda y, t: -y), quoted(), flush=True)
    os._exit(0)
os.waitpid(during, 0)
finish.set()
other.join()
daemon = os.fork()
if daemon == 0:  # closes every descriptor it inherited, as a daemon does, then opens its own
    os.closerange(3, 1024)
    log = os.open(os.path.join(sys.argv[1], "log"), os.O_RDWR | os.O_CREAT, 0o600)
    os.write(log, b"the daemon's log\\n")
    print("daemon quoted:", quoted(), flush=True)
    os.lseek(log, 0, os.SEEK_SET)
    print("daemon's log intact:", os.read(log, 100) == b"the daemon's log\\n", flush=True)
    os._exit(0)
os.waitpid(daemon, 0)
print("parent:", solve(forks_in_the_dynamics), quoted(), flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX")
def test_forked_processes_catch_their_own_messages_and_leave_their_descriptors_alone(tmp_path):
    """A child forked before a solve solves while the parent's is under way (one file between
    them would lose the parent's output); a child forked while another thread solves has its
    own file, descriptor 1 back and odeint's locks free (their holder is not in the child); a
    daemon closes what it inherited and opens its own descriptors (closing odeint's by number
    in its first solve would close its own); a child forked in the dynamics prints to the
    original descriptor 1."""
    run = _script(_FORKED, tmp_path, timeout=120, capture_output=True)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    for expected in ["overlapping child quoted: True", "printed in the parent's dynamics",
                     "daemon quoted: True", "daemon's log intact: True",
                     "forked in a solve, its stdout the original: True",
                     "forked during another thread's solve, its own file: True its stdout the "
                     "original: True"]:
        assert expected in lines, lines
    during = next(line.split() for line in lines if line.startswith("and solves:"))
    np.testing.assert_allclose(float(during[2]), np.exp(-1.0), rtol=1e-6)
    assert during[3] == "True", lines
    finals = [line.split() for line in lines if line.startswith("parent:")]
    np.testing.assert_allclose([float(final[1]) for final in finals], np.exp(-1.0), rtol=1e-6)
    assert finals[1][2] == "True", lines


# Descriptors odeint keeps, closed by others and their numbers reused for others' files (the
# file standard output goes to, too): never written over or kept open; the solve that closed
# odeint's file still succeeds. Standard output is a regular file here, as under pytest's capfd.
_CLOSED = """
import os, sys
import numpy as np
from scipy.integrate import ode
from odeint_autograd import odeint
from odeint_autograd import _messages
from scripted import quoted

folder, stdout = sys.argv[1:]

def opened(path):  # how many descriptors open `path`
    return sum(os.path.realpath(os.path.join("/proc/self/fd", fd)) == path
               for fd in os.listdir("/proc/self/fd"))

def take_over(name, path, text):  # close odeint's descriptor `name`, open `path` in its place
    number = getattr(_messages._catch, name)
    os.close(number)
    mine = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    assert mine == number
    os.write(mine, text)
    return mine

def taking_over(name):
    def dynamics(y, t):
        if not hasattr(dynamics, "done"):
            dynamics.done = True
            theirs.append(take_over(name, os.path.join(folder, name), b"the dynamics' own file"))
        return -y
    return dynamics

saved, theirs = os.dup(1), []

# scipy's own solver, then odeint's: what scipy printed reaches standard output
r = ode(lambda t, z: -z).set_integrator("lsoda", rtol=1e-15, atol=0.0).set_initial_value([1.0])
r.integrate(1.0)
value = odeint(taking_over("fd"), np.ones(1), [0.0, 1.0])[-1, 0]
print("solved:", value, quoted(), opened(os.path.join(folder, "fd")), flush=True)
file = _messages._catch.fd
log = take_over("keep", stdout, b"")  # between solves: a log of the program's, on stdout's file
print("log kept:", quoted(), os.path.realpath("/proc/self/fd/%d" % log) == stdout,
      _messages._catch.fd == file, flush=True)  # the file kept (a new keep only), not leaked
try:
    odeint(taking_over("keep"), np.ones(1), [0.0, 1.0])
except OSError as error:
    os.write(2, ("keep: " + str(error) + "\\n").encode())
os.dup2(saved, 1)  # stdout back; the program's log on stdout's file where keep was
log = os.open(stdout, os.O_WRONLY | os.O_APPEND)
os.dup2(log, theirs[-1])
os.close(log)
print("log kept after the error:", quoted(),
      os.path.realpath("/proc/self/fd/%d" % theirs[-1]) == stdout, flush=True)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/fd"), reason="Linux's /proc")
def test_descriptors_closed_and_reopened_by_others_are_not_written_over(tmp_path):
    stdout = tmp_path / "stdout"
    with open(stdout, "w") as out:
        run = _script(_CLOSED, tmp_path, stdout, timeout=120, stdout=out,
                      stderr=subprocess.PIPE)
    assert run.returncode == 0, run.stderr
    lines = stdout.read_text().splitlines()
    assert any(line.startswith(" lsoda--") for line in lines), lines  # scipy's own, kept
    solved = next(line.split() for line in lines if line.startswith("solved:"))
    np.testing.assert_allclose(float(solved[1]), np.exp(-1.0), rtol=1e-6)
    assert solved[2:] == ["True", "1"], lines  # quoted; the dynamics' file open once, theirs
    assert "log kept: True True True" in lines and "log kept after the error: True True" in lines
    assert "1's original during the solve, was closed by the dynamics" in run.stderr
    for name in ("fd", "keep"):
        assert (tmp_path / name).read_bytes() == b"the dynamics' own file", name


@pytest.mark.parametrize("closed", [1, 2])
def test_a_process_started_without_standard_output_or_error_solves(closed):
    """odeint's descriptors are numbered 3 or above: made while descriptor 1 or 2 is closed,
    one of them would otherwise become the process's standard output or error (every solve
    then failed, or wrote stderr into odeint's file)."""
    script = (f"import os; os.close({closed})\n"
              "import numpy as np\n"
              "from odeint_autograd import odeint\n"
              "from scripted import quoted\n"
              "out = os.open(os.devnull, os.O_WRONLY)  # takes the closed number\n"
              "y = odeint(lambda y, t: -y, np.ones(1), [0.0, 1.0], rtol=1e-10, atol=1e-12)\n"
              f"os.write({3 - closed}, f'{{y[-1, 0]}} {{quoted()}} {{out}}'.encode())\n")
    run = _script(script, timeout=120, capture_output=True)
    assert run.returncode == 0, run.stderr
    value, quoted, out = (run.stdout if closed == 2 else run.stderr).split()
    np.testing.assert_allclose(float(value), np.exp(-1.0), rtol=1e-8)
    assert int(out) == closed
    if closed == 2:  # (with no descriptor 1 as it loads, the Fortran runtime prints nothing)
        assert quoted == "True"


def test_lsodas_repeated_illegal_input_keeps_its_diagnosis():
    """After five refusals in a row LSODA answers istate -8, 'repeated occurrences of illegal
    input', in place of the -3 whose cause odeint names."""
    for _ in range(7):
        with pytest.raises(ODESolverError, match="component 0 of the state is zero"):
            odeint(lambda y, t: 1.0 - y, np.array([0.0, 1.0]), [0.0, 1.0], method="lsoda",
                   rtol=1e-6, atol=0.0)


@pytest.mark.parametrize("method", ["lsoda", "adams", "bdf"])
def test_a_success_at_an_output_time_never_stepped_to_is_an_error(method):
    # VODE extrapolated y(1e-162) = -9 (exact 4.5e-5) from its one step of 2e-176, and LSODA
    # returned y0 after a step of size 0, both as successes
    fast = lambda y, t: -y * (1e163 if t < 1e-160 else 1.0)  # noqa: E731
    with pytest.raises(ODESolverError) as info:  # BDF finds its dynamics overflow first
        odeint(fast, np.ones(1), [0.0, 1e-162, 1.0], method=method, rtol=1e-6, atol=1e-9)
    assert method == "bdf" or "success at t = 1e-162 without stepping there" in str(info.value)
    with pytest.raises(ODESolverError, match=r"success at t = 1e-200 without stepping there.*"
                                             "interval from 0.0 is too short"):
        odeint(decay, Y0, [0.0, 1e-200, 1.0], method=method)
    ys = odeint(decay, Y0, [0.0, 1e-12, 1.0], method=method)  # a short interval is stepped
    np.testing.assert_allclose(ys[1:], [Y0 * np.exp(-1e-12), Y0 * np.exp(-1)], rtol=1e-6)


@pytest.mark.parametrize("method", ["dopri5", "bosh3", "rkf23"])
def test_a_component_held_at_zero_under_atol_zero_is_solved(method):
    # 0 error over 0 weight counts as no error (it was nan: "step size underflow")
    ys = odeint(decay, np.array([0.0, 1.0]), [0.0, 1.0], method=method, rtol=1e-8, atol=0.0)
    np.testing.assert_allclose(ys[-1], [0.0, np.exp(-1)], rtol=1e-6)
    # one that moves has no step that meets a zero weight: said so (was "step size underflow")
    with pytest.raises(ODESolverError, match="component 0 of the state is zero at the start "
                                             "and moves, and atol is 0"):
        odeint(lambda y, t: np.ones(2), np.array([0.0, 1.0]), [0.0, 1.0], method=method,
               rtol=1e-8, atol=0.0)


def test_lsodas_success_without_a_step_is_an_error():
    # rates near 1e150: LSODA returned y0 unchanged as a success, its step size 0
    for y0, f in ((np.ones(1), lambda y, t: -1e150 * y),
                  (np.zeros(1), lambda y, t: 1e150 * (1 - y))):
        with pytest.raises(ODESolverError, match="success at t = 1.0 without stepping there"):
            odeint(f, y0, [0.0, 1.0], method="lsoda")
    np.testing.assert_allclose(odeint(lambda y, t: -1e100 * y, np.ones(1), [0.0, 1.0],
                                      method="lsoda")[-1], 0.0, atol=1e-12)


@pytest.mark.parametrize("method", [m for m in METHODS if m != "rk4"])
def test_a_span_beyond_what_the_adaptive_methods_handle_is_refused(method):
    # y' = -y / T over [0, T]: at T = 1e-150 VODE and LSODA returned y0 or 0 without an error
    def fast(y, t, k):
        return -k * y

    for span in (1e-150, 1e150):
        with pytest.raises(ValueError, match="rescale time"):
            odeint(fast, Y0, [0.0, span], (1.0 / span,), method=method)
    for span in (1e-100, 1e100):  # the limits themselves are solved
        ys = odeint(fast, Y0, [0.0, span], (1.0 / span,), method=method)
        np.testing.assert_allclose(ys[-1], Y0 * np.exp(-1), rtol=1e-6)
    ys = odeint(fast, Y0, [0.0, 1e-150], (1e150,), method="rk4")  # fixed steps take any span
    np.testing.assert_allclose(ys[-1], Y0 * (1 - 1 + 1 / 2 - 1 / 6 + 1 / 24))
    with pytest.raises(ValueError, match="t spans inf"):  # without an overflow warning
        odeint(fast, Y0, [-1e308, 1e308], (1.0,), method=method)


@pytest.mark.parametrize("method", [m for m in METHODS if m != "rk4"])
def test_slow_dynamics_over_a_long_span_far_from_zero_are_solved(method):
    # Hairer's fallback starting step (1e-6, for time of order 1) is taken relative to the
    # span: at t = 1e14 it lay below float64's resolution ("step size underflow")
    ys = odeint(lambda y, t: -1e-14 * y, Y0, [1e14, 2e14], method=method)
    np.testing.assert_allclose(ys[-1], Y0 * np.exp(-1), rtol=1e-6)


@pytest.mark.parametrize("method", METHODS)
def test_exceptions_from_func_propagate_unchanged(method):
    class Boom(Exception):
        pass

    raised = Boom("from inside the dynamics")

    def f(y, t):
        if t > 0.3:
            raise raised
        return -y

    with pytest.raises(Boom) as info:
        odeint(f, Y0, [0.0, 1.0], method=method, step_size=0.1 if method == "rk4" else None)
    assert info.value is raised


def test_exceptions_from_func_in_the_backward_solve_propagate():
    calls = []

    def f(y, t, k):
        calls.append(1)
        if len(calls) > 40:
            raise KeyError("late")
        return -k * y

    with pytest.raises(KeyError, match="late"):
        grad(lambda k: anp.sum(odeint(f, Y0, [0.0, 1.0], (k,))))(0.5)


@pytest.mark.parametrize("method", ["lsoda", "dopri5"])
def test_a_complex_value_being_differentiated_is_refused(method):
    def loss(c):
        return anp.sum(odeint(lambda y, t, z: -anp.real(z) * y, Y0, [0.0, 1.0],
                              (c * (1 + 1j),), method=method))

    if method == "lsoda":  # the adjoint takes real float arrays (it gave the closure message)
        with pytest.raises(ValueError, match="complex one as its real and imaginary parts"):
            grad(loss)(0.5)
    else:  # backprop through the solver's own operations handles it
        np.testing.assert_allclose(grad(loss)(0.5), -np.sum(Y0) * np.exp(-0.5), rtol=1e-6)
    ys = odeint(lambda y, t, z: -anp.real(z) * y, Y0, [0.0, 1.0], (np.array(1 + 1j),))
    np.testing.assert_allclose(ys[-1], Y0 * np.exp(-1), rtol=1e-6)  # untraced: passed through


def test_an_adjoint_tolerance_finer_than_the_times_resolve_is_refused():
    # ulp(1e12) = 1.2e-4 of a span of 1: fine for rtol 1e-3, not for an adjoint at 1e-8
    f = lambda y, t, k: -k * y  # noqa: E731
    loss = lambda k, **kw: anp.sum(odeint(f, Y0, [1e12, 1e12 + 1.0], (k,), rtol=1e-3,  # noqa
                                          atol=1e-3, **kw))
    grad(loss)(0.5)
    with pytest.raises(ValueError, match="coarser than the adjoint tolerance 1e-08"):
        grad(lambda k: loss(k, adjoint_rtol=1e-8, adjoint_atol=1e-8))(0.5)
    loss(0.5, adjoint_rtol=1e-8, adjoint_atol=1e-8)  # no gradient: no adjoint solve to refuse


def test_closing_over_a_traced_value_is_an_error_naming_args():
    def loss(theta):
        return anp.sum(odeint(lambda y, t: -theta * y, Y0, [0.0, 1.0]))

    with pytest.raises(ValueError, match="args"):
        grad(loss)(0.5)
    # the same through args works
    g = grad(lambda th: anp.sum(odeint(lambda y, t, th: -th * y, Y0, [0.0, 1.0], (th,))))(0.5)
    np.testing.assert_allclose(g, -np.sum(Y0) * np.exp(-0.5), rtol=1e-6)


@pytest.mark.parametrize("inner", ["lsoda", "adams", "bdf"])
def test_nested_scipy_solves_are_refused_and_leave_the_outer_state_intact(inner):
    def f(y, t):
        return -odeint(decay, np.ones(1), [0.0, 1.0], method=inner)[-1] * y

    with pytest.raises(ODESolverError, match="cannot be nested.*dopri5"):
        odeint(f, Y0, [0.0, 1.0], method="adams")
    # a later solve is unaffected
    np.testing.assert_allclose(odeint(decay, Y0, [0.0, 1.0])[-1], Y0 * np.exp(-1), rtol=1e-7)


# Each case in a process of its own, since a regression would wait forever on scipy's lock.
_SCIPY_NESTED = """
import sys, threading, time
import numpy as np
from scipy.integrate import ode, solve_ivp
from odeint_autograd import ODESolverError, odeint
from odeint_autograd._scipy import SCIPY_INTEGRATORS

def scipy_solve(f, y, t1, how):  # z(t1) of dz/dt = f(z) from z(0) = y by one of scipy's solvers
    if how == "solve_ivp LSODA":
        return solve_ivp(lambda t, z: f(z), [0, t1], y, method="LSODA", rtol=1e-10,
                         atol=1e-12).y[:, -1]
    r = ode(lambda t, z: f(z.real)).set_integrator(how.split()[1], rtol=1e-10, atol=1e-12)
    r.set_initial_value(y, 0.0).integrate(t1 / 2)  # two runs: the second checks scipy's handle
    return r.integrate(t1).real

def decay(z):
    return -z

def caught(inner, y):  # inner(y), or, where it is refused, its exact value
    try:
        return inner(y)
    except ODESolverError:
        return y * np.exp(-0.1)

def odeint_decay(z):  # z(0.1) of dz/dt = -z by odeint
    return odeint(lambda y, t: -y, z, [0.0, 0.1], method=method, rtol=1e-10, atol=1e-12)[-1]

def solve(where, y0):  # dz/dt = exp(-0.1) z over [0, 1]: one solver nested in the other
    t = [0.0, 0.5, 1.0]
    if where == "inside odeint":
        return odeint(lambda y, t: scipy_solve(decay, y, 0.1, how), y0, t, method=method,
                      rtol=1e-10, atol=1e-10)[-1]
    if where == "caught inside odeint":
        return odeint(lambda y, t: caught(lambda y: scipy_solve(decay, y, 0.1, how), y), y0, t,
                      method=method, rtol=1e-10, atol=1e-10)[-1]
    if where == "inside odeint's adjoint":  # only the gradient's backward solve nests
        import autograd
        from autograd.extend import primitive, defvjp
        g = primitive(lambda y: y)
        defvjp(g, lambda ans, y: lambda v: scipy_solve(decay, v, 0.1, how) * np.exp(0.1))
        return autograd.grad(lambda y: odeint(lambda y, t: -g(y), y, t,
                             method="lsoda" if method != "lsoda" else "adams",
                             adjoint_method=method, rtol=1e-10, atol=1e-10)[-1].sum())(y0)
    if where == "odeint caught inside it":
        return scipy_solve(lambda z: caught(odeint_decay, z), y0, 1.0, how)
    if where.startswith("scipy's "):  # where: "scipy's <inner> inside it"
        inner = where[len("scipy's "):-len(" inside it")]
        return scipy_solve(lambda z: scipy_solve(decay, z, 0.1, inner), y0, 1.0, how)
    return scipy_solve(odeint_decay, y0, 1.0, how)

method, how, where = sys.argv[1:]
ode_name = SCIPY_INTEGRATORS[method]  # scipy's name of odeint's solver
if how == "other thread":  # another thread's solve by the same solver waits for odeint's
    out = {}
    def other():
        out["y"] = scipy_solve(decay, np.ones(1), 0.1, "ode " + ode_name)
    def f(y, t):
        if "thread" not in out:
            out["thread"] = threading.Thread(target=other)
            out["thread"].start()
            time.sleep(0.2)
        return -y
    ys = odeint(f, np.ones(1), [0.0, 0.5, 1.0], method=method)
    out["thread"].join()
    print("ok", ys[-1][0], out["y"][0])
elif how == "two threads":  # odeint in scipy's LSODA on one thread, odeint's LSODA on another
    out = {}
    def other():
        out["y"] = odeint(lambda y, t: -y, np.ones(1), [0.0, 1.0], method="lsoda")[-1]
    def f(z):
        if "thread" not in out:
            out["thread"] = threading.Thread(target=other)
            out["thread"].start()
            time.sleep(0.2)  # the other thread is waiting on a lock now
        return odeint_decay(z)
    y = ode(lambda t, z: f(z)).set_integrator("lsoda", rtol=1e-10, atol=1e-12).set_initial_value(
        np.ones(1), 0.0).integrate(1.0)  # one run, which the other thread's solve must not split
    out["thread"].join()
    print("ok", y[0], out["y"][0])
elif how == "between steps":  # a solve by scipy on odeint's thread between two of its runs
    seen = []
    def hook(frame, event, arg):  # as a signal handler's would: when odeint checks a run
        if event == "call" and frame.f_code.co_name == "successful" and not seen:
            seen.append("ran")
            try:
                scipy_solve(lambda z: 5 * z, np.ones(1), 0.3, "ode " + ode_name)
            except ODESolverError as e:
                seen[0] = type(e).__name__
    times = [0.0, 0.5, 1.0, 1.5, 2.0]
    sys.setprofile(hook)
    ys = odeint(lambda y, t: -y, np.ones(1), times, method=method, rtol=1e-10, atol=1e-12)
    sys.setprofile(None)
    print("ok" if np.allclose(ys[:, 0], np.exp(-np.array(times)), rtol=1e-7) else "wrong",
          seen[0])
elif how == "crossed threads":  # scipy VODE in odeint LSODA on one thread, odeint VODE on another
    out = {}
    def other():
        out["y"] = odeint(lambda y, t: -y, np.ones(1), [0.0, 1.0], method="adams")[-1]
    def f(y, t):
        if "thread" not in out:
            out["thread"] = threading.Thread(target=other)
            out["thread"].start()
            time.sleep(0.2)  # the other thread holds scipy's VODE lock now
        return scipy_solve(decay, y, 0.1, "ode vode")
    y = odeint(f, np.ones(1), [0.0, 0.5, 1.0], method="lsoda", rtol=1e-10, atol=1e-10)[-1]
    out["thread"].join()
    print("ok", y[0], out["y"][0])
else:
    try:
        print("ok", solve(where, np.ones(1))[0])
    except ODESolverError as e:
        print("refused", type(e).__name__, str(e).replace(chr(10), " "))
    # either way, both solvers still work in this process
    print(scipy_solve(decay, np.ones(1), 1.0, how)[0], odeint(
        lambda y, t: -y, np.ones(1), [0.0, 1.0], method=method, rtol=1e-10, atol=1e-12)[-1][0])
"""


def _run_nested(*args):
    run = _script(_SCIPY_NESTED, *args, timeout=120, capture_output=True)
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines()


_SAME = [("lsoda", "solve_ivp LSODA"), ("lsoda", "ode lsoda"), ("adams", "ode vode"),
         ("bdf", "ode vode"), ("adams", "ode zvode")]  # scipy's lock on the solver odeint runs
_OTHER = [("lsoda", "ode vode"), ("adams", "ode lsoda"), ("bdf", "solve_ivp LSODA")]


@pytest.mark.parametrize("where", ["inside odeint", "odeint inside it", "caught inside odeint",
                                   "odeint caught inside it"])
@pytest.mark.parametrize("method,how", _SAME + _OTHER)
def test_scipy_solver_nested_with_odeint_is_refused_only_where_scipy_would_wait_forever(
        method, how, where):
    first, after = _run_nested(method, how, where)
    name = SCIPY_INTEGRATORS[method].upper()
    if (method, how) in _SAME and "caught" not in where:
        assert first.startswith(f"refused NestedSolveError odeint ({method}) failed"), first
        assert "would wait forever" in first and f"scipy's {name}" in first, first
        assert "'dopri5'" in first, first
    else:  # dy/dt = exp(-0.1) y, solved; a refusal caught inside the outer solve leaves it whole
        assert first.startswith("ok"), first
        np.testing.assert_allclose(float(first.split()[1]), np.exp(np.exp(-0.1)), rtol=1e-6)
    np.testing.assert_allclose([float(v) for v in after.split()], np.exp(-1.0), rtol=1e-7)


@pytest.mark.parametrize("method,how", [("lsoda", "ode lsoda"), ("adams", "ode vode"),
                                        ("lsoda", "ode vode")])
def test_scipy_solver_in_the_adjoint_solve_is_refused_there(method, how):
    first = _run_nested(method, how, "inside odeint's adjoint")[0]
    if SCIPY_INTEGRATORS[method].upper() in how.upper():
        assert first.startswith("refused") and "in the adjoint (backward) solve" in first, first
        assert "adjoint_method=" in first, first
    else:  # d/dy0 of y0 exp(-1), the backward dynamics' vjp e^0.1 e^-0.1 v = v: exp(-1)
        np.testing.assert_allclose(float(first.split()[1]), np.exp(-1.0), rtol=1e-6)


@pytest.mark.parametrize("method,outer,inner", [("lsoda", "ode lsoda", "solve_ivp LSODA"),
                                                ("lsoda", "solve_ivp LSODA", "ode lsoda"),
                                                ("adams", "ode vode", "ode zvode")])
def test_scipy_nested_in_scipy_is_refused_without_naming_odeint(method, outer, inner):
    first, after = _run_nested(method, outer, f"scipy's {inner} inside it")
    assert first.startswith("refused NestedSolveError scipy's"), first
    assert "would wait forever" in first, first
    np.testing.assert_allclose([float(v) for v in after.split()], np.exp(-1.0), rtol=1e-7)


@pytest.mark.parametrize("method", ["lsoda", "adams"])
def test_scipy_solver_on_another_thread_waits_its_turn_and_runs(method):
    first = _run_nested(method, "other thread", "-")[0]
    assert first.startswith("ok"), first
    np.testing.assert_allclose([float(v) for v in first.split()[1:]],
                               [np.exp(-1.0), np.exp(-0.1)], rtol=1e-6)


@pytest.mark.parametrize("method", ["lsoda", "adams"])
def test_scipy_solver_run_on_odeints_thread_between_its_steps_is_refused(method):
    assert _run_nested(method, "between steps", "-")[0] == "ok NestedSolveError"


@pytest.mark.parametrize("case", ["two threads", "crossed threads"])
def test_solvers_nested_on_one_thread_and_odeint_on_another_do_not_wait_on_each_other(case):
    first = _run_nested("adams", case, "-")[0]
    assert first.startswith("ok"), first
    np.testing.assert_allclose([float(v) for v in first.split()[1:]],
                               [np.exp(np.exp(-0.1)), np.exp(-1.0)], rtol=1e-6)


@pytest.mark.skipif(not hasattr(scipy_ode, "LSODA_LOCK"), reason="scipy 1.16's locks")
@pytest.mark.parametrize("method,name", [("lsoda", "lsoda"), ("adams", "vode")])
def test_a_scipy_run_that_waited_while_odeint_solved_is_refused_or_starts_afresh(method, name):
    """scipy checks an integrator's handle before it takes its lock: a run that passed the check
    and then waited while an odeint solve ran (simulated: its check skipped) must not go on from
    the state odeint left; a first run starts afresh and keeps going."""
    def fresh():
        return scipy_ode.ode(lambda t, z: -z).set_integrator(
            name, rtol=1e-10, atol=1e-12).set_initial_value(np.ones(1), 0.0)

    def skip_check(integrator):
        integrator.check_handle = lambda: None

    part_way = fresh()
    part_way.integrate(0.5)
    odeint(decay, Y0, [0.0, 2.0], method=method)
    skip_check(part_way._integrator)
    with pytest.raises(scipy_ode.IntegratorConcurrencyError):
        part_way.integrate(1.0)

    first = fresh()
    first._integrator.acquire_new_handle()  # its first run's, before it waited for the lock
    first._integrator.initialized = True
    skip_check(first._integrator)
    odeint(decay, Y0, [0.0, 2.0], method=method)
    assert first.integrate(0.5)[0] == pytest.approx(np.exp(-0.5), rel=1e-8)
    del first._integrator.check_handle  # scipy's own check again
    assert first.integrate(1.0)[0] == pytest.approx(np.exp(-1.0), rel=1e-8)


@pytest.mark.skipif(not hasattr(scipy_ode, "LSODA_LOCK") or not os.path.exists("/proc/self/fd"),
                    reason="scipy 1.16's locks; Linux's /proc")
@pytest.mark.parametrize("method,name", [("lsoda", "lsoda"), ("adams", "vode")])
@pytest.mark.parametrize("solver", ["odeint", "scipy"])
def test_an_interrupt_anywhere_in_a_solve_leaves_both_solvers_usable(method, name, solver):
    """A KeyboardInterrupt (Ctrl-C) raised in turn at each place in odeint's and scipy's solver
    code where CPython would raise a signal's: as a Python function starts, and after a call to
    a C function returns. Neither lock is left held, descriptor 1 is restored."""
    from odeint_autograd import _scipy
    scipy_lock, stdout = getattr(scipy_ode, name.upper() + "_LOCK"), os.readlink("/proc/self/fd/1")

    def solve():
        if solver == "odeint":
            return odeint(decay, Y0, [0.0, 1.0, 2.0], method=method)[-1]
        r = scipy_ode.ode(lambda t, z: -z).set_integrator(name).set_initial_value(Y0, 0.0)
        return r.integrate(1.0), r.integrate(2.0)

    def let_go_at(k):  # whether an interrupt came at the k-th place, and left nothing held
        sys.setprofile(interrupt_at(k, ("_scipy.py", "_messages.py", "_ode.py", "contextlib.py")))
        try:
            solve()
        except KeyboardInterrupt:  # checked while the exception, and what it holds, lives on
            assert not scipy_lock._is_owned() and not _scipy._lock._is_owned(), k
            assert scipy_lock.own is None, k
            assert os.readlink("/proc/self/fd/1") == stdout, k
            return True
        finally:
            sys.setprofile(None)
        return False

    k = 1
    while let_go_at(k):
        k += 1
    assert k > 20  # the interrupts landed in that many places
    np.testing.assert_allclose(odeint(decay, Y0, [0.0, 1.0], method=method, rtol=1e-10,
                                      atol=1e-12)[-1], Y0 * np.exp(-1.0), rtol=1e-8)


# A fresh process, interrupted at each place in odeint's code (and tempfile's, where a solve
# calls it) in turn; after each interrupt, descriptor 1 moved on (as pytest's capfd does) and a
# solve that must quote its solver's message.
_INTERRUPTED_FIRST_SOLVES = """
import os, sys, tempfile
import numpy as np
from odeint_autograd import odeint
from scripted import interrupt_at, quoted

def let_go_at(k):  # whether an interrupt came at the k-th place
    sys.setprofile(interrupt_at(k, ("_scipy.py", "_messages.py", "tempfile.py")))
    try:
        odeint(lambda y, t: -y, np.ones(1), [0.0, 1.0], method=sys.argv[1])
    except KeyboardInterrupt:
        return True
    finally:
        sys.setprofile(None)
    return False

def quoted_with_descriptor_1_moved():
    real = os.dup(1)
    with tempfile.TemporaryFile() as moved:
        os.dup2(moved.fileno(), 1)
        caught = quoted(sys.argv[1])
        os.dup2(real, 1)
        os.close(real)
        moved.seek(0)
        return caught and not moved.read()

descriptors, k, lost = len(os.listdir("/proc/self/fd")), 1, []
while let_go_at(k):
    if not quoted_with_descriptor_1_moved():
        lost.append(k)
    k += 1
print(k - 1, len(os.listdir("/proc/self/fd")) - descriptors, len(lost),
      odeint(lambda y, t: -y, np.ones(1), [0.0, 1.0], method=sys.argv[1], rtol=1e-10,
             atol=1e-12)[-1, 0])
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/fd"), reason="Linux's /proc")
@pytest.mark.parametrize("method", ["lsoda", "adams"])
def test_interrupts_in_the_first_solves_of_a_process_leak_nothing_and_lose_no_message(method):
    """A process's first solve once made odeint's file for the solvers' messages (tempfile's
    first use, cut short, left its lock held and every later solve waiting for good), and each
    solve a descriptor for descriptor 1's original (leaked where an interrupt came as os.dup
    returned). Interrupted anywhere, a solve leaks no descriptor, and the next, with descriptor
    1 moved on since, quotes its solver's message and prints nothing."""
    run = _script(_INTERRUPTED_FIRST_SOLVES, method, timeout=300, capture_output=True)
    assert run.returncode == 0, run.stderr
    interrupted, leaked, lost, value = run.stdout.split()
    assert int(interrupted) > 100  # the interrupts landed in that many places
    assert int(leaked) == 0 and int(lost) == 0
    np.testing.assert_allclose(float(value), np.exp(-1.0), rtol=1e-8)


def test_nested_solve_with_a_python_solver_works():
    def f(y, t):
        return -odeint(decay, np.ones(1), [0.0, 1.0], method="dopri5", rtol=1e-10,
                       atol=1e-10)[-1] * y

    ys = odeint(f, Y0, [0.0, 1.0], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(ys[-1], Y0 * np.exp(-np.exp(-1)), rtol=1e-8)
