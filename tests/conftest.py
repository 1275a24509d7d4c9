"""Shared pytest fixtures for every test folder, thin wrappers over the kit (tests/kit.py).

Kept generic on purpose: folders such as tests/crash, tests/spark or tests/cli add their own
conftest.py next to their tests. What lives here:

* ``store_dir`` / ``small_config`` / ``make_config`` / ``open_store``: a fresh store directory, a
  configuration with tiny segments (``make_config`` is :func:`tests.kit.cfg`), and a factory that
  opens stores and closes whatever the test left open.
* ``vectors``: the reference-vector helpers of the kit (:class:`Vectors`): ``vectors.load(name)``
  gives a cached :class:`tests.kit.VectorSet`, ``vectors.message(m, wrote)`` one input message as a
  :class:`rmqstore.Message`, ``vectors.body_of(m)`` and ``vectors.tree_hashes(dir)``.

Plain helpers are imported from the kit (``from tests.kit import ...``), never from a conftest
(``from conftest import ...`` would pick whichever folder's conftest.py was imported last).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rmqstore import MessageStore, MessageStoreConfig
from tests.kit import (VECTOR_SETS, VectorSet, body_of, load_vector, message_from_input, tree_hashes,
                       vectors_root)
from tests.kit import cfg as make_config


# ------------------------------------------------------------------------------------------------
# The machine's disk is not an input
# ------------------------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _disk_use_is_low(monkeypatch):
    """Every test sees a disk 10% used, whatever the machine's disk holds: past 85% retention
    deletes unexpired files at once (upstream's clean-forcibly rule), and a test's answer must not
    depend on what else shares the disk. Tests of the disk rules set their own ratio; the one test
    of the real ``statvfs`` reading calls ``monkeypatch.undo()``."""
    from rmqstore.engine import retention

    monkeypatch.setattr(retention, "disk_used_ratio", lambda path: 0.10)


# ------------------------------------------------------------------------------------------------
# Generic store fixtures
# ------------------------------------------------------------------------------------------------

@pytest.fixture(name="make_config", scope="session")
def _make_config_fixture():
    """``make_config(**overrides)``: :func:`make_config` as a fixture."""
    return make_config


@pytest.fixture
def small_config() -> MessageStoreConfig:
    return make_config()


@pytest.fixture
def store_dir(tmp_path) -> Path:
    """Path of a store directory that does not exist yet."""
    return tmp_path / "store"


@pytest.fixture
def open_store(store_dir, small_config):
    """Factory ``open_store(path=None, cfg=None, read_only=False)``; stores still open at the end
    of the test are closed (so a failing test never leaks a lock)."""
    opened: list[MessageStore] = []

    def _open(path=None, cfg=None, read_only=False) -> MessageStore:
        st = MessageStore.open(path or store_dir, cfg or small_config, read_only=read_only)
        opened.append(st)
        return st

    yield _open
    for st in reversed(opened):
        st.close()


# ------------------------------------------------------------------------------------------------
# Reference vectors
# ------------------------------------------------------------------------------------------------

class Vectors:
    """The vector helpers, handed to tests by the ``vectors`` fixture."""

    names = VECTOR_SETS
    root = staticmethod(vectors_root)
    load = staticmethod(load_vector)
    body_of = staticmethod(body_of)
    message = staticmethod(message_from_input)
    tree_hashes = staticmethod(tree_hashes)

    @staticmethod
    def copy_store(vs: VectorSet, dst) -> Path:
        """A private copy of a vector's store directory (the originals are shared by every run)."""
        shutil.copytree(vs.store, dst)
        return Path(dst)


@pytest.fixture(scope="session")
def vectors() -> Vectors:
    return Vectors()
