"""Run experiments' units of work side by side: local worker processes or Ray tasks.

    python -m reproduce all|NAME [mode and flags] --executor processes [--workers N]
    python -m reproduce all|NAME [mode and flags] --executor ray [--workers N | --address ADDR]

Every unit (`python -m reproduce units NAME`) runs in a process of its own as
`python -m reproduce NAME <flags> --resume --only UNIT`, with the driver's output and checkpoint
folders; as soon as an experiment's units are all done, python -m reproduce (the driver) starts
its evaluation from what they wrote (`python -m reproduce NAME <flags> --resume`, a process of
its own, beside the units still running). Always `--resume`: a unit whose process dies is run
again (RETRIES times) and continues from its last checkpoint (one that refused its command, exit
code 2, is not); an earlier run's checkpoints with the same settings are continued too.

processes: a pool of --workers (default: the CPU count) local processes, one unit each.
ray: one Ray task per unit, placed by the CPUs (and GPU) its experiment declares in THREADS and
GPU_EXPERIMENTS; without --address a private local Ray instance (--workers CPUs, default all),
with it the cluster there, whose nodes must share the folders (see docs/cluster.md).
A unit's process runs as many BLAS and TensorFlow threads as its experiment declares.
"""
import argparse
import concurrent.futures
import ctypes
import dataclasses
import importlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

from reproduce.common import BLAS_THREADS, REFUSED, ROOT, cpus, positive

EXECUTORS = ("local", "processes", "ray")
FOLDER_FLAGS = ("--out", "--checkpoint-dir", "--weights-dir")  # `all` gives each its NAME/ there
PATH_FLAGS = FOLDER_FLAGS + ("--data-dir",)  # what a unit's process, run in ROOT, gets absolute
RETRIES = 2  # a unit whose process dies runs again up to this many times, from its checkpoint
# The threads of one unit: the latent ODE and CNF units are single-threaded numpy; MNIST's
# TensorFlow models run gpu_dynamics' 2 intra-op threads on a CPU.
THREADS = {"mnist": 2}
GPU_EXPERIMENTS = {"mnist"}  # on a Ray cluster with GPUs, each of these units takes one
THREAD_VARIABLES = BLAS_THREADS + ("GPU_DYNAMICS_THREADS",)


class UnitFailed(Exception):
    """A unit's process exited with an error (retried)."""


class UnitRefused(Exception):
    """A unit's process refused its command (exit code REFUSED: a bad flag value, a checkpoint
    it cannot resume), which running it again would not change (not retried)."""


class SharedFolderError(Exception):
    """A worker cannot see or write the driver's checkpoint folder (not retried)."""


def parse_options(argv):
    """(the runner's options, the rest of argv: the experiment's own flags)."""
    parser = argparse.ArgumentParser(prog="python -m reproduce", add_help=False,
                                     allow_abbrev=False)
    parser.add_argument("--executor", choices=EXECUTORS, default="local")
    parser.add_argument("--workers", type=positive(int), default=None)
    parser.add_argument("--address", default=None)
    options, rest = parser.parse_known_args(argv)
    if options.workers is not None and options.executor == "local":
        parser.error("--workers needs --executor processes or ray")
    if options.address is not None and options.executor != "ray":
        parser.error("--address needs --executor ray")
    if options.address is not None and options.workers is not None:
        parser.error("--workers sets the CPUs of a local Ray instance; a cluster at --address "
                     "has its own")
    return options, rest


@dataclasses.dataclass(frozen=True)
class Unit:
    """One unit of work: its experiment, name, command-line flags and declared threads."""
    experiment: str
    name: str
    argv: tuple
    ckpt_dir: str
    threads: int = 1
    gpu: bool = False

    def __str__(self):
        return f"{self.experiment}/{self.name}"

    def run(self):
        """Run the unit once in a process of its own (which dies with this one); its exit
        code."""
        env = dict(os.environ, **{v: str(self.threads) for v in THREAD_VARIABLES})
        print(f"==> {self} ({self.threads} thread{'s' * (self.threads > 1)})", flush=True)
        started = time.time()
        code = subprocess.run([sys.executable, "-m", "reproduce", self.experiment, *self.argv],
                              cwd=ROOT, env=env, preexec_fn=_die_with_parent).returncode
        print(f"<== {self}: {'done' if code == 0 else f'exit code {code}'}, "
              f"{time.time() - started:.0f} s", flush=True)
        return code


def plan(name, argv):
    """(the units that `python -m reproduce NAME argv` trains: those its selection flags choose,
    none with --evaluate-only; its Run)."""
    experiment = importlib.import_module(f"reproduce.{name}.experiment")
    argv = resolved(argv)
    run = experiment.make_run(argv)
    units = [] if run.args.evaluate_only else [
        Unit(name, unit, (*without_resume(argv), *folders(run), "--resume", "--only", unit),
             run.ckpt_dir, THREADS.get(name, 1), name in GPU_EXPERIMENTS)
        for unit in experiment.units(run)]
    return units, run


def folders(run):
    """The folder flags of a run, absolute: a unit writes where its driver reads."""
    return ["--out", run.out_dir, "--checkpoint-dir", run.ckpt_dir,
            "--weights-dir", run.weights_dir]


def without_resume(argv):
    """argv without --resume, which the units and the evaluation are given once, at the end."""
    return [arg for arg in argv if arg != "--resume"]


def resolved(argv):
    """argv with the values of its path flags absolute: units and evaluations run in ROOT."""
    return with_flag_values(argv, PATH_FLAGS,
                            lambda path: os.path.abspath(path) if path.strip() else path)


def with_flag_values(argv, flags, change):
    """argv with change(value) for the value of each of `flags` (--flag VALUE or --flag=VALUE)."""
    argv = list(argv)
    for i, arg in enumerate(argv):
        flag, equals, value = arg.partition("=")
        if flag in flags and equals:
            argv[i] = f"{flag}={change(value)}"
        elif flag in flags and i + 1 < len(argv):
            argv[i + 1] = change(argv[i + 1])
    return argv


def completed(units, options):
    """Run the units with the chosen executor; yields (unit, None or the exception it failed
    with) as each one ends, so that the driver can evaluate an experiment while the units of
    the others still run."""
    if options.executor == "processes":
        return _processes(units, options.workers or cpus())
    return _ray(units, options.workers, options.address)


def evaluate(name, argv):
    """Start the evaluation of one experiment whose units have finished (`python -m reproduce
    NAME argv --resume`, its paths resolved, in a process of its own, which dies with this one);
    its Popen."""
    argv = [*without_resume(resolved(argv)), "--resume"]
    print(f"==> python -m reproduce {name} {' '.join(argv)}", flush=True)
    return subprocess.Popen([sys.executable, "-m", "reproduce", name, *argv],
                            cwd=ROOT, preexec_fn=_die_with_parent)


def _processes(units, workers):
    """A pool of `workers` threads, each running one unit's process at a time, retrying a unit
    whose process fails (not one interrupted by Ctrl-C)."""
    stopping = threading.Event()

    def run(unit):
        for attempt in range(RETRIES + 1):
            if attempt:
                print(f"    {unit}: attempt {attempt + 1} of {RETRIES + 1}, from its last "
                      "checkpoint", flush=True)
            code = unit.run()
            if code in (0, REFUSED, -signal.SIGINT) or stopping.is_set():  # done, or Ctrl-C
                break
        if code == REFUSED:
            raise UnitRefused(f"{unit}: refused (exit code {code}), not retried")
        if code:
            raise UnitFailed(f"{unit}: exit code {code} ({attempt + 1} attempts)")

    pool = concurrent.futures.ThreadPoolExecutor(workers)
    futures = {pool.submit(run, unit): unit for unit in units}
    try:
        for future in concurrent.futures.as_completed(futures):
            yield futures[future], future.exception()
    finally:
        stopping.set()
        pool.shutdown(cancel_futures=True)


def _ray(units, workers, address):
    """One Ray task per unit: `max_retries` runs it again when its worker dies, and when the
    unit's process fails."""
    import ray

    if address is None:  # its workers at normal priority, as processes' (Ray's default: nice 15)
        ray.init(address="local", num_cpus=workers, include_dashboard=False,
                 _system_config={"worker_niceness": 0})
    else:
        ray.init(address=address)
    tokens = {}
    try:
        gpus = ray.cluster_resources().get("GPU", 0) > 0
        task = ray.remote(_ray_task)
        tokens.update({folder: _leave_token(folder) for folder in {u.ckpt_dir for u in units}})
        refs = {task.options(name=str(u), num_cpus=u.threads,
                             num_gpus=1 if u.gpu and gpus else 0, max_retries=RETRIES,
                             retry_exceptions=[UnitFailed]).remote(u, tokens[u.ckpt_dir]): u
                for u in units}
        pending = list(refs)
        while pending:
            [ref], pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(ref)
                yield refs[ref], None
            except ray.exceptions.RayTaskError as error:
                yield refs[ref], getattr(error, "cause", None) or error
            except ray.exceptions.RayError as error:  # e.g. its worker died on every attempt
                yield refs[ref], error
    finally:
        for folder, token in tokens.items():
            os.remove(os.path.join(folder, token))
        ray.shutdown()


def _leave_token(folder):
    """Write a file with a fresh name in the driver's checkpoint folder; its name."""
    os.makedirs(folder, exist_ok=True)
    token = f".driver-{uuid.uuid4().hex}"
    open(os.path.join(folder, token), "w").close()
    return token


def check_shared(folder, token):
    """Raise SharedFolderError unless this machine sees the driver's token in `folder` and can
    write there."""
    where = f"{socket.gethostname()} cannot %s the driver's checkpoint folder {folder}"
    shared = " (on a cluster every node must see it at the same path, e.g. over NFS)"
    if not os.path.exists(os.path.join(folder, token)):
        raise SharedFolderError(where % "see" + shared)
    probe = os.path.join(folder, f"{token}.{socket.gethostname()}.{os.getpid()}")
    try:
        open(probe, "w").close()
        os.remove(probe)
    except OSError as error:
        raise SharedFolderError(where % "write to" + f" ({error.strerror})") from None


def _ray_task(unit, token):
    check_shared(unit.ckpt_dir, token)
    code = unit.run()
    if code == REFUSED:
        raise UnitRefused(f"{unit}: refused (exit code {code}) on {socket.gethostname()}")
    if code:
        raise UnitFailed(f"{unit}: exit code {code} on {socket.gethostname()}")


def _die_with_parent():
    """In a child before exec: on Linux, be killed when the parent dies (a unit must not go on
    writing its checkpoint after its worker was killed and the unit retried elsewhere)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


try:
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
except (OSError, AttributeError):
    _PRCTL = None
