import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # ranks.py and reference.py, here and in the workers

from ranks import Ranks  # noqa: E402

_pools = {}


@pytest.fixture(scope="session")
def ranks():
    """ranks(R): R worker processes, started once per session and reused by every test."""

    def get(num_ranks):
        if num_ranks not in _pools:
            _pools[num_ranks] = Ranks(num_ranks)
        return _pools[num_ranks]

    yield get
    for pool in _pools.values():
        pool.close()
    _pools.clear()
