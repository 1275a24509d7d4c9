"""engine/contract.py: the names the engine may use of a store, and the facade that provides them."""
from __future__ import annotations

import threading

import pytest

from rmqstore.engine.contract import CONTRACT_NAMES, StoreParts

METHODS = {"retire", "refresh", "wait_dispatched", "dispatch_end", "on_dispatched", "notify_dispatched",
           "find_consume_queue"}
ATTRIBUTES = {"path", "cfg", "read_only", "delay_levels_ms", "disk_full", "commit_log", "consume_queues",
              "index_service", "checkpoint", "reput", "consumer_offsets", "maintenance_lock", "cq_lock"}


def test_the_contract_names_the_protocols_attributes_and_methods():
    assert CONTRACT_NAMES == METHODS | ATTRIBUTES
    assert not any(n.startswith("_") for n in CONTRACT_NAMES)
    assert set(StoreParts.__annotations__) == ATTRIBUTES


@pytest.mark.parametrize("read_only", [False, True])
def test_an_open_store_provides_every_name(open_store, read_only):
    if read_only:
        open_store().close()
    st = open_store(read_only=read_only)
    missing = sorted(n for n in CONTRACT_NAMES if not hasattr(st, n))
    assert missing == []
    assert all(callable(getattr(st, n)) for n in METHODS)
    assert st.read_only is read_only and st.cfg.mapped_file_size_commit_log == 4096
    assert tuple(st.delay_levels_ms) == tuple(st.cfg.delay_levels_ms)
    assert isinstance(st.cq_lock, type(threading.Lock()))
    assert hasattr(st.maintenance_lock, "acquire") and hasattr(st.maintenance_lock, "release")


def test_find_consume_queue_creates_on_first_use_and_then_returns_the_same(open_store):
    st = open_store()
    cq = st.find_consume_queue("Contract", 3)
    assert st.find_consume_queue("Contract", 3) is cq
    assert st.consume_queues[("Contract", 3)] is cq
