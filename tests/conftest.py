"""Shared pytest fixtures and helpers for every test folder.

Kept generic on purpose: folders such as tests/crash, tests/spark or tests/cli add their own
conftest.py next to their tests. What lives here:

* ``store_dir`` / ``small_config`` / ``make_config`` / ``open_store``: a fresh store directory, a
  configuration with tiny segments (and a factory for variants), and a factory that opens stores
  and closes whatever the test left open.
* ``vectors``: the reference-vector helpers (:class:`Vectors`): ``vectors.load(name)`` gives a
  cached :class:`VectorSet` (``input.json``, ``expected.json[.gz]``, config, store path),
  ``vectors.message(m, wrote)`` one input message as a :class:`rmqstore.Message`,
  ``vectors.body_of(m)`` and ``vectors.tree_hashes(dir)``.

Helpers are handed out as fixtures rather than imported (``from conftest import ...`` would pick
whichever folder's conftest.py was imported last). The reference vectors live outside the
repository (``../shared/vectors`` next to the checkout, as ARCHITECTURE.md lays out);
``RMQSTORE_VECTORS`` points elsewhere.
"""
from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from rmqstore import Message, MessageStore, MessageStoreConfig

VECTOR_SETS = ("basic", "propcrc", "rollover")


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

def make_config(**overrides) -> MessageStoreConfig:
    """Small segments so that rolls happen after a handful of messages (override as needed)."""
    base = dict(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=1000,
                max_hash_slot_num=64, max_index_num=256)
    base.update(overrides)
    return MessageStoreConfig(**base)


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

def vectors_root() -> Path:
    env = os.environ.get("RMQSTORE_VECTORS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "vectors"


@dataclass(frozen=True)
class VectorSet:
    name: str
    root: Path
    input: dict
    expected: dict

    @property
    def store(self) -> Path:
        return self.root / "store"

    @property
    def config(self) -> MessageStoreConfig:
        return MessageStoreConfig.from_properties(self.input["config"])

    @property
    def messages_by_phy(self) -> dict[int, dict]:
        return {m["phyOffset"]: m for m in self.expected["raw"]["messages"]}


@functools.lru_cache(maxsize=None)
def load_vector(name: str) -> VectorSet:
    root = vectors_root() / name
    if not root.is_dir():
        pytest.skip(f"reference vectors not found at {root} (set RMQSTORE_VECTORS)")
    with open(root / "input.json", encoding="utf-8") as fh:
        inp = json.load(fh)
    exp_path = root / "expected.json"
    if exp_path.exists():
        with open(exp_path, encoding="utf-8") as fh:
            exp = json.load(fh)
    else:
        with gzip.open(str(exp_path) + ".gz", "rt", encoding="utf-8") as fh:
            exp = json.load(fh)
    return VectorSet(name, root, inp, exp)


def body_of(m: dict) -> bytes:
    """Body of an input.json message (``text``, ``base64`` or ``repeat``/``count``)."""
    b = m["body"]
    if "text" in b:
        return b["text"].encode("utf-8")
    if "base64" in b:
        return base64.b64decode(b["base64"])
    if "repeat" in b:
        return (b["repeat"] * b["count"]).encode("utf-8")
    raise ValueError(f"unknown body form {sorted(b)}")


def message_from_input(m: dict, wrote: list[int]) -> Message:
    """An input.json message as a :class:`Message` with every stored field given (replay).

    ``wrote`` holds the phy offsets of the messages replayed so far, for
    ``preparedTransactionOffsetFromIndex``."""
    pto = m.get("preparedTransactionOffset", 0)
    if "preparedTransactionOffsetFromIndex" in m:
        pto = wrote[m["preparedTransactionOffsetFromIndex"]]
    return Message(topic=m["topic"], body=body_of(m), queue_id=m["queueId"], flag=m["flag"],
                   sys_flag=m["sysFlag"], properties=[tuple(p) for p in m["properties"]],
                   born_timestamp=m["bornTimestamp"], born_host=m["bornHost"], store_host=m["storeHost"],
                   store_timestamp=m["storeTimestamp"], reconsume_times=m["reconsumeTimes"],
                   prepared_transaction_offset=pto)


def tree_hashes(root) -> dict[str, str]:
    """``relative path -> sha256`` of every file under ``root``."""
    out = {}
    root = str(root)
    for dp, _, fs in os.walk(root):
        for f in fs:
            p = os.path.join(dp, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


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
