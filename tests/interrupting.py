"""A profile hook that raises KeyboardInterrupt where CPython would raise a signal's (Ctrl-C):
as a Python function starts, and after a call to a C function returns."""
import sys


def interrupt_at(k, files):
    """The hook for sys.setprofile that raises at the k-th such place in code from `files`
    (file name endings), and removes itself."""
    seen = [0]

    def hook(frame, event, arg):
        if event in ("call", "c_return") and frame.f_code.co_filename.endswith(files):
            seen[0] += 1
            if seen[0] == k:
                sys.setprofile(None)
                raise KeyboardInterrupt

    return hook
