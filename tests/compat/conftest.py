"""Fixtures for the RocketMQ reference vectors (FORMAT.md; /work/shared/vectors/README.md).

Every fixture is session-scoped and parametrized over the three vector sets, so each set's store
is copied, opened read-only and replayed once per run however many tests use it.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from rmqstore import MessageStore, PutMessageResult


@pytest.fixture(scope="session", params=("basic", "propcrc", "rollover"))
def vset(request, vectors):
    return vectors.load(request.param)


@pytest.fixture(scope="session")
def ro_store(vset, vectors, tmp_path_factory):
    """The vector store (a private copy) opened read-only with the set's own config."""
    path = vectors.copy_store(vset, tmp_path_factory.mktemp(f"ro-{vset.name}") / "store")
    st = MessageStore.open(path, vset.config, read_only=True)
    yield st
    st.close()


@dataclass
class Replay:
    path: object
    results: list[PutMessageResult]


@pytest.fixture(scope="session")
def replayed(vset, vectors, tmp_path_factory) -> Replay:
    """input.json put through ``put_message`` one by one into a fresh store, then closed cleanly."""
    path = tmp_path_factory.mktemp(f"replay-{vset.name}") / "store"
    results: list[PutMessageResult] = []
    wrote: list[int] = []
    with MessageStore.open(path, vset.config) as st:
        for m in vset.input["messages"]:
            r = st.put_message(vectors.message(m, wrote))
            results.append(r)
            wrote.append(r.phy_offset)
        st.wait_dispatched()
    return Replay(path, results)
