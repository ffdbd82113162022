"""switchyard's errors as Python exceptions; the C++ messages (which name the argument, what was
expected and what was given) are kept as they are."""
import builtins

__all__ = ["Error", "InvalidArgument", "Unsupported", "TimeoutError", "SystemError", "CapacityError"]


class Error(Exception):
    """Base of every error switchyard raises (switchyard::Error)."""


class InvalidArgument(Error, ValueError):
    """The caller passed something the library cannot accept; nothing was written."""


class Unsupported(Error, NotImplementedError):
    """The feature exists in the API but not for this backend, engine or topology (yet)."""


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001 - the library's name for it
    """A bounded wait expired: a peer did not arrive, or a ring did not drain. The message names the
    rank, role and channel."""


class SystemError(Error, OSError):  # noqa: A001
    """The platform failed underneath (CUDA, shared memory, mmap)."""


class CapacityError(Error):
    """An expert received more rows than the dispatch's expert_capacity (symmetric engine): rows
    past it were not written, the counts are the true ones; every rank raises it and the Buffer stays
    usable."""


for _class in (Error, InvalidArgument, Unsupported, TimeoutError, SystemError, CapacityError):
    _class.__module__ = "switchyard"  # shown as switchyard.InvalidArgument in tracebacks
del _class
