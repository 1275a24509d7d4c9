"""MessageStore's queue-offset answers (message_store.py): offsets by time (lower and upper bound,
ties), store times by queue offset, the earliest message time, min and max offsets (committed or
not), all clamped to a raised queue minimum (FORMAT.md §5.7)."""
from __future__ import annotations

import pytest

from rmqstore import GetMessageStatus, PutMessageStatus
from tests.kit import fill_queue, msg

S = GetMessageStatus
T0 = 1_700_000_000_000


@pytest.fixture
def big_store(open_store, make_config):
    return open_store(cfg=make_config(mapped_file_size_commit_log=1 << 16))


def test_offset_by_time_ten_messages_10ms_apart(big_store):
    rs = fill_queue(big_store, 10, ts=lambda i: T0 + 10 * i)
    for i, r in enumerate(rs):
        assert big_store.get_offset_in_queue_by_time("T", 0, r.store_timestamp) == i
        assert big_store.get_offset_in_queue_by_time("T", 0, r.store_timestamp - 2) == i
        assert big_store.get_message_store_timestamp("T", 0, i) == r.store_timestamp
    assert big_store.get_offset_in_queue_by_time("T", 0, T0 - 20_000) == 0
    assert big_store.get_offset_in_queue_by_time("T", 1, T0) == 0           # wrong queue
    for off in (-1, 0, 5):
        assert big_store.get_message_store_timestamp("T", 1, off) == -1
    assert big_store.get_message_store_timestamp("T", 0, 10) == -1


@pytest.mark.parametrize("cq_size", [1000, 60])  # one CQ file, or 3 units per file
def test_offset_by_time_with_ties(open_store, make_config, cq_size):
    st = open_store(cfg=make_config(mapped_file_size_consume_queue=cq_size, mapped_file_size_commit_log=8192))
    times = [1000, 2000, 2000, 2000, 3000, 3000, 5000]
    fill_queue(st, len(times), ts=lambda i: T0 + times[i])
    cases = {  # ts: (lower, upper)
        T0 + 500: (0, 0),      # before everything: LOWER 0, UPPER 0
        T0 + 1000: (0, 0),
        T0 + 1500: (1, 0),
        T0 + 2000: (1, 3),     # ties: first / last equal entry
        T0 + 2500: (4, 3),
        T0 + 3000: (4, 5),
        T0 + 4000: (6, 5),
        T0 + 5000: (6, 6),
        T0 + 9000: (7, 6),     # past the end: LOWER max, UPPER the last
    }
    for ts, (lower, upper) in cases.items():
        got = (st.get_offset_in_queue_by_time("T", 0, ts, "lower"), st.get_offset_in_queue_by_time("T", 0, ts, "upper"))
        assert got == (lower, upper), ts - T0
        assert st.get_offset_in_queue_by_time("T", 0, ts) == lower
        assert st.get_offset_in_queue_by_time("T", 0, ts, "UPPER") == upper


def test_earliest_message_time(big_store):
    assert big_store.get_earliest_message_time() == -1
    fill_queue(big_store, 2, queue_id=1, ts=lambda i: T0 + 7 + i)
    fill_queue(big_store, 2, queue_id=0, ts=lambda i: T0 + 100 + i)
    assert big_store.get_earliest_message_time() == T0 + 7
    assert big_store.get_earliest_message_time("T", 0) == T0 + 100
    assert big_store.get_earliest_message_time("T", 1) == T0 + 7
    assert big_store.get_earliest_message_time("T", 2) == -1


def test_max_offset_committed_and_uncommitted(big_store):
    fill_queue(big_store, 3)
    assert big_store.get_max_offset_in_queue("T", 0) == 3
    with big_store.reput.lock:  # the dispatcher cannot run while we hold its lock
        for i in range(2):
            assert big_store.put_message(msg("T")).status is PutMessageStatus.PUT_OK
        assert big_store.get_max_offset_in_queue("T", 0) == 3
        assert big_store.get_max_offset_in_queue("T", 0, committed=False) == 5
        assert big_store.get_message("g", "T", 0, 3).status is S.OFFSET_OVERFLOW_ONE
    big_store.wait_dispatched()
    assert big_store.get_max_offset_in_queue("T", 0) == 5
    assert big_store.get_message("g", "T", 0, 3).status is S.FOUND


def test_answers_clamp_to_a_raised_queue_minimum(big_store):
    """After the queue minimum moved (correctMinOffset, as retention does), offsets by time are
    clamped into [min, max] and the earliest time is that of the unit at the minimum."""
    rs = fill_queue(big_store, 6, ts=lambda i: T0 + 1000 * i)
    big_store.find_consume_queue("T", 0).correct_min_offset(rs[3].phy_offset)
    assert big_store.get_min_offset_in_queue("T", 0) == 3
    assert big_store.get_offset_in_queue_by_time("T", 0, T0, "lower") == 3
    assert big_store.get_offset_in_queue_by_time("T", 0, T0 + 1000, "upper") == 3
    assert big_store.get_offset_in_queue_by_time("T", 0, T0 + 4000, "lower") == 4
    assert big_store.get_earliest_message_time("T", 0) == T0 + 3000
    assert big_store.get_commit_log_offset_in_queue("T", 0, 1) == 0  # below the minimum: absent
    assert big_store.get_message_store_timestamp("T", 0, 1) == -1
