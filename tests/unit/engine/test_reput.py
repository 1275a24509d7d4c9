"""The dispatcher takes the record starts that ``put_messages`` hands over (``batch_starts``)
instead of walking TOTALSIZE record by record: same consume queues and index, fewer records
walked, and wrong or missing hand-overs fall back to the walk."""
from __future__ import annotations

import logging
import os
import time

import numpy as np
import pytest

from rmqstore import Message
from rmqstore.engine import commit_log as CL
from rmqstore.engine import dispatch as D
from tests import kit

T0 = 1_700_000_000_000


@pytest.fixture
def walked(monkeypatch):
    """Counts the records the dispatcher finds by walking."""
    count = [0]
    real = D.M.walk_records

    def counting(*a, **kw):
        out = real(*a, **kw)
        count[0] += len(out[0])
        return out
    monkeypatch.setattr(D.M, "walk_records", counting)
    return count


#: 16 KiB segments: batches roll segments (blank records) and index files fill up
GEOMETRY = dict(mapped_file_size_commit_log=16 << 10, mapped_file_size_consume_queue=20 * 64,
                max_hash_slot_num=64, max_index_num=128)


def _nth(i: int) -> Message:
    """The i-th message: three queues, keys k<i> and x<i % 5>, a pinned UNIQ_KEY and store time."""
    return kit.msg("T", b"b%d" % i * (i % 7 + 1), i=i, keys=[f"k{i}", f"x{i % 5}"], queues=3,
                   uniq_key=f"U{i:08d}", store_timestamp=T0 + i)


def _fill(st) -> int:
    """Batches (one queue each) and single puts in turn; returns how many records were put alone."""
    i = singles = 0
    for round_ in range(14):
        if round_ % 3 == 2:
            assert st.put_message(_nth(i)).ok
            i, singles = i + 1, singles + 1
            continue
        msgs = [_nth(i + j) for j in range(5 + round_ % 4)]
        for m in msgs:
            m.queue_id = round_ % 3
        assert st.put_messages(msgs).ok
        i += len(msgs)
    return singles


def _derived_files(path) -> list[bytes]:
    """Consume-queue files by path, then index files in name order (their names are times)."""
    out = []
    for sub in ("consumequeue", "index"):
        for root, _, files in sorted(os.walk(os.path.join(path, sub))):
            out += [open(os.path.join(root, f), "rb").read() for f in sorted(files)]
    return out


def _dispatched_store(open_store, path, cfg):
    st = open_store(path, cfg)
    st.reput.shutdown()  # dispatch later, in this thread, all at once
    singles = _fill(st)
    return st, singles


def test_handed_starts_replace_the_walk(open_store, tmp_path, make_config, walked, monkeypatch):
    cfg = kit.cfg(GEOMETRY)
    st, singles = _dispatched_store(open_store, tmp_path / "hinted", cfg)
    assert len(st.commit_log.batch_starts) > 0
    st.reput.do_reput()
    hinted_walk = walked[0]
    assert not st.commit_log.batch_starts  # all taken
    st.close()

    walked[0] = 0
    monkeypatch.setattr(CL, "START_HINTS_MAX", 0)  # nothing handed over: every record is walked
    st2, _ = _dispatched_store(open_store, tmp_path / "walked", cfg)
    assert not st2.commit_log.batch_starts
    st2.reput.do_reput()
    total = st2.get_max_offset_in_queue("T", 0) + st2.get_max_offset_in_queue("T", 1) + \
        st2.get_max_offset_in_queue("T", 2)
    st2.close()
    assert walked[0] == total
    assert hinted_walk == singles  # only the records put one at a time were walked
    assert _derived_files(tmp_path / "hinted") == _derived_files(tmp_path / "walked")


def test_hints_are_bounded_and_the_rest_is_walked(open_store, tmp_path, make_config, walked, monkeypatch):
    monkeypatch.setattr(CL, "START_HINTS_MAX", 2)
    cfg = kit.cfg(GEOMETRY)
    st, _ = _dispatched_store(open_store, tmp_path / "a", cfg)
    assert len(st.commit_log.batch_starts) == 2
    st.reput.do_reput()
    st.close()
    monkeypatch.setattr(CL, "START_HINTS_MAX", 0)
    st2, _ = _dispatched_store(open_store, tmp_path / "b", cfg)
    st2.reput.do_reput()
    st2.close()
    assert _derived_files(tmp_path / "a") == _derived_files(tmp_path / "b")


@pytest.mark.parametrize("damage", ["shifted", "short", "inside_a_record"])
def test_wrong_hints_fall_back_to_the_walk(open_store, tmp_path, make_config, caplog, damage):
    cfg = kit.cfg(GEOMETRY)
    st, _ = _dispatched_store(open_store, tmp_path / "a", cfg)
    hints = st.commit_log.batch_starts
    first, end, starts = hints.popleft()
    if damage == "shifted":
        hints.appendleft((first, end, starts + 1))
    elif damage == "short":  # claims the batch ends before it does
        hints.appendleft((first, end - 1, starts))
    else:  # the hint for the next batch starts inside the first record, which is walked
        nxt = hints.popleft()
        hints.appendleft((nxt[0] - 3, nxt[1], nxt[2]))
    with caplog.at_level(logging.WARNING, logger=D.log.name):
        st.reput.do_reput()
    st.close()
    assert st.reput.reput_from == st.commit_log.confirm_offset
    st2, _ = _dispatched_store(open_store, tmp_path / "b", cfg)
    st2.commit_log.batch_starts.clear()
    st2.reput.do_reput()
    st2.close()
    assert _derived_files(tmp_path / "a") == _derived_files(tmp_path / "b")
    if damage != "inside_a_record":
        assert "do not match the records" in caplog.text


def test_live_dispatcher_with_hints_answers_queries(open_store, make_config):
    st = open_store(cfg=kit.cfg(GEOMETRY))
    _fill(st)
    st.wait_dispatched(10)
    for i in (0, 7, 20, 40):
        res = st.query_message("T", f"k{i}", begin_ms=0, end_ms=T0 + 10**6)
        assert [r.properties["UNIQ_KEY"] for r in res.messages] == [f"U{i:08d}"]
    got = st.get_message("g", "T", 1, 0, 64)
    offsets = [r.queue_offset for r in got.messages]
    assert offsets == list(range(len(offsets))) and offsets
    assert np.all(np.diff([r.phy_offset for r in got.messages]) > 0)


def test_the_dispatcher_says_whether_its_thread_runs(open_store, monkeypatch):
    """``running``: after start, not after shutdown, and not once an error stopped the thread (what
    the flush service's supervision asks before a restart)."""
    st = open_store()
    r = st.reput
    assert r.running and not r.stopped
    r.shutdown()
    assert not r.running and r.stopped
    fresh = type(r)(st, r.reput_from)
    assert not fresh.running  # never started
    monkeypatch.setattr(fresh, "do_reput", lambda: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    fresh.start()
    fresh.wake_now()
    assert fresh.wait_until(1 << 62, timeout=10) and isinstance(fresh.error, OSError)
    for _ in range(1000):
        if not fresh.running:
            break
        time.sleep(0.01)
    assert not fresh.running
    fresh.shutdown()


def test_with_a_writer_dispatching_the_thread_is_only_a_safety_net(open_store, monkeypatch):
    """``set_background_dispatch(False)``: appends do not wake the dispatcher and it no longer polls
    every millisecond behind the writer (it took the lock and the GIL from a broker's event loop);
    records the writer leaves undispatched for a whole interval are dispatched by the thread; asking
    for them (``wait_dispatched``) dispatches at once; ``True`` restores waking on every append."""
    from rmqstore.engine import reput as RP

    monkeypatch.setattr(RP, "SAFETY_NET_S", 1.0)
    st = open_store()
    st.set_background_dispatch(False)
    time.sleep(0.12)  # (the thread's wait begun before the switch is over)
    done = lambda: st.reput.reput_from >= st.dispatch_end()  # noqa: E731
    st.put_message(Message(topic="T", body=b"a", properties={"KEYS": "k"}))
    time.sleep(0.05)
    assert not done()  # nobody polled it: the writer has not dispatched yet
    st.dispatch()  # the writer's round
    assert done() and st.get_message("g", "T", 0, 0, 8).messages
    st.put_message(Message(topic="T", body=b"b"))
    kit.wait_for(done, 10, what="the safety net's round")  # left behind: the safety net takes it
    st.put_message(Message(topic="T", body=b"c"))
    st.wait_dispatched(10)  # asked for: at once
    assert done() and len(st.get_message("g", "T", 0, 0, 8).messages) == 3
    st.set_background_dispatch(True)
    st.put_message(Message(topic="T", body=b"d"))
    kit.wait_for(done, 0.8, what="a round woken by the append")  # (before the safety net's interval)
