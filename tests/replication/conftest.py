"""Replication tests: master and slave brokers, name servers and RocketMQ's C++ client as processes
on 127.0.0.1. The harness is :mod:`clusterkit` (also used by ``scripts/soak_replication`` and
``bench/replication.py``)."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import clusterkit as K  # noqa: E402


@pytest.fixture
def cluster(tmp_path):
    """A :class:`clusterkit.Cluster` under ``tmp_path``; every process it started is killed at the end."""
    if not K.CPP_PYTHON.exists():
        pytest.fail(f"{K.CPP_PYTHON} missing: run ./scripts/setup_clients")
    with K.Cluster(tmp_path / "cluster") as c:
        yield c
