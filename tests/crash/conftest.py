"""Crash tests: kill -9 of a writer process, torn tails, bit flips, a full disk, rollover under
load, readers in other processes. Helpers live in :mod:`crashkit` (also used by
``scripts/soak_kill9``)."""
from __future__ import annotations

import os
import random
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def crash_rng(request) -> random.Random:
    """A seeded RNG; the seed is printed so that a failure can be replayed with RMQ_CRASH_SEED."""
    seed = int(os.environ.get("RMQ_CRASH_SEED", random.randrange(1 << 31)))
    print(f"{request.node.name}: RMQ_CRASH_SEED={seed}")
    return random.Random(seed)
