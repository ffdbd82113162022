"""Moving the buffers' handles between ranks with whatever the caller has.

A group is one of:
  - a torch.distributed ProcessGroup (handles move with all_gather_object),
  - an mpi4py communicator (comm.allgather),
  - a callable allgather(bytes) -> list[bytes], indexed by rank (every rank calls it in step),
  - a switchyard.Group (what the three above become).
"""
import os

__all__ = ["Group", "as_group"]


class Group:
    """rank, size and allgather(bytes) -> list[bytes] indexed by rank; barrier() is an allgather of
    nothing."""

    def __init__(self, rank, size, allgather):
        self.rank = int(rank)
        self.size = int(size)
        self._allgather = allgather

    def allgather(self, mine):
        everything = [bytes(item) for item in self._allgather(bytes(mine))]
        if len(everything) != self.size:
            raise RuntimeError(f"allgather returned {len(everything)} items, expected one per rank ({self.size})")
        return everything

    def barrier(self):
        self.allgather(b"")


def _torch_group(group):
    import torch.distributed as dist

    def allgather(mine):
        everything = [None] * group.size()
        dist.all_gather_object(everything, mine, group=group)
        return everything

    return Group(group.rank(), group.size(), allgather)


def _mpi_group(comm):
    return Group(comm.Get_rank(), comm.Get_size(), comm.allgather)


def _callable_group(allgather, rank):
    if rank is not None:
        everything = allgather(b"")  # the size; also checks that every rank takes part
        return Group(rank, len(everything), allgather)
    # Each rank finds its index by a random nonce: allgather returns the contributions by rank.
    nonce = os.urandom(16)
    everything = [bytes(item) for item in allgather(nonce)]
    if everything.count(nonce) != 1:
        raise RuntimeError("allgather: could not find this rank's contribution in the result; pass rank=")
    return Group(everything.index(nonce), len(everything), allgather)


def as_group(group, rank=None):
    """A switchyard Group for a torch ProcessGroup, an mpi4py communicator or a callable."""
    if isinstance(group, Group):
        return group
    if type(group).__module__.split(".", 1)[0] == "torch" and hasattr(group, "rank") and hasattr(group, "size"):
        return _torch_group(group)
    if hasattr(group, "Get_rank") and hasattr(group, "allgather"):
        return _mpi_group(group)
    if callable(group):
        return _callable_group(group, rank)
    raise TypeError("group: expected a torch.distributed ProcessGroup, an mpi4py communicator or a callable "
                    f"allgather(bytes) -> list[bytes], got {type(group).__name__}")
