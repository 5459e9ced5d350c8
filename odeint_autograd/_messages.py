"""Catching what VODE and LSODA print, straight to file descriptor 1, during a solve.

Their messages (warnings on successful solves too) go past sys.stdout and the warnings filter.
While a solve runs, descriptor 1 points at a file of this process's (`redirect`); after it,
descriptor 1 is put back (`restore`) and the file read (`collect`): the solvers' lines are kept
for an error to quote, anything else (a print in the dynamics, another thread's) is written
back. Descriptor 1 is process-wide, so only the holder of odeint's lock redirects it.

An interrupt (Ctrl-C) can come wherever Python runs: as a function starts, as a call into C
returns. So a solve makes and closes no descriptor (one made or closed as an interrupt came
would leak), and nothing in the standard library is set up for the first time inside a solve
(tempfile's first use, cut short, leaves its lock held for good): the file, and `keep`, a
descriptor that holds descriptor 1's original while a solve redirects it, are made once per
process, at import (a forked child makes its own at the fork). Every step of `restore` repeats
safely, for the caller's `finally` to run it twice over (a second interrupt while the first is
handled can still leave descriptor 1 redirected; one as the file is read can lose what the
dynamics printed). Each descriptor is checked by the file it opens before it is read, truncated
or written over: one that someone else closed, its number reused, is never touched. A
subprocess started during a solve (by the dynamics, another thread) inherits descriptor 1
redirected: what it prints after the solve is lost.
"""
import errno
import os
import re
import sys
import tempfile
import threading

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None
import scipy.integrate  # noqa: F401 -- loads the solvers' libgfortran, for _fortran_flushes
# a line of VODE/LSODA's messages: "<ROUTINE>--  text" (their routines that print, in scipy's
# build), then lines indented by 6 or more spaces
_MESSAGE_HEAD = re.compile(r" ?(?i:dvode|dvindy|zvode|zvindy|lsoda|intdy)--")
_MESSAGE_MORE = re.compile(r" {6}")


def _identity(fd):
    """The file that descriptor `fd` opens, as (device, inode); None where it is closed."""
    try:
        status = os.fstat(fd)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def _duplicate(fd):
    """A duplicate of `fd` numbered 3 or above (never standard input, output or error, which may
    be closed now and opened later), not inherited by programs this one runs."""
    if fcntl is None:
        return os.dup(fd)
    duplicate = fcntl.fcntl(fd, fcntl.F_DUPFD, 3)
    os.set_inheritable(duplicate, False)
    return duplicate


class Catch:
    """This process's file for the solvers' messages (descriptor `fd`) and `keep`, which holds
    the file between solves and descriptor 1's original (`original`, the file it opens) while
    a solve redirects it (`holding`)."""

    def __init__(self):
        with tempfile.TemporaryFile() as file:
            self.fd = _duplicate(file.fileno())
        self.keep = _duplicate(self.fd)
        self.pid, self.file = os.getpid(), _identity(self.fd)
        self.original, self.holding = self.file, False

    def ours(self):
        """Whether this is this process's and its file still open (not another's by now)."""
        return self.pid == os.getpid() and _identity(self.fd) == self.file

    def intact(self):
        """Whether both descriptors still open what this made them open."""
        return (_identity(self.fd) == self.file and _identity(self.keep)
                in ((self.file, self.original) if self.holding else (self.file,)))


_catch = None  # this process's Catch
_redirected = []  # while descriptor 1 may be redirected: (the thread, its Catch)


def _this_process():
    """This process's Catch; a new one where someone else closed its file, a new keep where they
    closed keep alone (the closed numbers are forgotten, not closed: they may be someone else's
    now)."""
    global _catch
    if _catch is None or not _catch.ours():
        _catch = Catch()
    elif not _catch.intact():
        _catch.keep, _catch.holding = _duplicate(_catch.fd), False
    return _catch


def redirect():
    """Send descriptor 1 into this process's file, emptied first, and return its Catch; None
    where it cannot (no descriptor 1, no temporary file). The caller holds odeint's lock."""
    thread = threading.get_ident()
    try:
        catch = _this_process()
        os.ftruncate(catch.fd, 0)
        os.lseek(catch.fd, 0, os.SEEK_SET)
        _flush_fortran()  # what scipy's solvers printed before, to where it was going
        if sys.stdout is not None:
            sys.stdout.flush()
        original = _identity(1)
    except (OSError, ValueError):
        return None
    if original is None:
        return None
    catch.original, catch.holding = original, True  # before keep holds it
    _redirected[:] = [(thread, catch)]
    os.dup2(1, catch.keep, inheritable=False)
    os.dup2(catch.fd, 1)
    return catch


def redirected_here():
    """Whether descriptor 1 is redirected by this thread (and so is this thread's to restore)."""
    return bool(_redirected) and _redirected[0][0] == threading.get_ident()


def restore():
    """Put descriptor 1 back, once what the solvers and sys.stdout buffered is in the file, then
    keep back on the file (so that it holds nothing of the caller's open). The record is cleared
    last: a second call completes what an interrupt cut short."""
    if not redirected_here():
        return
    catch = _redirected[0][1]
    try:
        _flush_fortran()
        if sys.stdout is not None:
            sys.stdout.flush()
    finally:
        try:
            if _identity(1) in (catch.file, None):  # not moved on by the dynamics: put back
                if _identity(catch.keep) != catch.original:
                    catch.holding = False  # keep holds nothing of the caller's
                    raise OSError(errno.EBADF, f"descriptor {catch.keep}, which held descriptor "
                                  "1's original during the solve, was closed by the dynamics; "
                                  "descriptor 1 is left on odeint's file for the solvers' "
                                  "messages")
                os.dup2(catch.keep, 1)
            if _identity(catch.keep) == catch.original:
                if _identity(catch.fd) == catch.file:
                    os.dup2(catch.fd, catch.keep, inheritable=False)
                else:  # the dynamics closed the file: its number may be theirs now
                    os.close(catch.keep)
            catch.holding = False
        except OSError:
            _redirected.clear()
            raise
        _redirected.clear()


def collect(catch):
    """The solvers' message lines caught in `catch`'s file (VODE/LSODA's, whitespace collapsed);
    every other line written back to descriptor 1. The caller holds odeint's lock."""
    if catch is None or not catch.ours():
        return []
    os.lseek(catch.fd, 0, os.SEEK_SET)
    chunks = list(iter(lambda: os.read(catch.fd, 1 << 16), b""))
    os.ftruncate(catch.fd, 0)
    os.lseek(catch.fd, 0, os.SEEK_SET)
    text = b"".join(chunks).replace(b"\0", b"").decode(errors="replace")
    theirs, other = split_messages(text.splitlines(True))
    other = other.encode()
    while other:
        other = other[os.write(1, other):]
    return theirs


def split_messages(lines):
    """VODE/LSODA's message lines (whitespace collapsed), and the other lines as they were."""
    theirs, other, inside = [], [], False
    for line in lines:
        inside = bool(_MESSAGE_HEAD.match(line) or inside and _MESSAGE_MORE.match(line))
        if inside:
            theirs.append(" ".join(line.split()))
        else:
            other.append(line)
    return theirs, "".join(other)


def _fortran_flushes():
    """The FLUSH of every libgfortran in this process (scipy's wheels load more than one, all
    there once scipy.integrate is imported; found in /proc/self/maps, so on Linux only)."""
    import ctypes
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(maxsplit=5)[-1].strip().removesuffix(" (deleted)")
                     for line in maps if "libgfortran" in line}
    except OSError:
        return ()
    flushes = []
    for path in sorted(paths):
        try:
            flushes.append(ctypes.CDLL(path)._gfortran_flush_i4)
        except (OSError, AttributeError):
            pass
    return tuple(flushes)


def _flush_fortran():
    """Flush every Fortran output unit: unit 6, descriptor 1, is buffered when that is a regular
    file, and would otherwise write the solvers' text out later, at exit."""
    for flush in _FORTRAN_FLUSHES:
        flush(None)  # a null unit: every unit


def _start_in_child():
    """A forked child: descriptor 1 back where the fork came during a solve (the child's own
    output is not caught), the parent's descriptors closed (here still the child's copies) and
    a Catch of its own."""
    global _catch
    if _redirected:
        catch = _redirected[0][1]
        if _identity(1) == catch.file and _identity(catch.keep) == catch.original:
            os.dup2(catch.keep, 1)
        _redirected.clear()
    if _catch is not None and _catch.intact():
        for fd in (_catch.fd, _catch.keep):
            try:
                os.close(fd)
            except OSError:
                pass
    _catch = None
    try:
        _catch = Catch()
    except OSError:
        pass


_FORTRAN_FLUSHES = _fortran_flushes()
try:
    _catch = Catch()
except OSError:  # no temporary folder: made in a solve, once there is one
    pass
if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_start_in_child)
