"""engine/flush_service.py: the flusher thread as a service, the explicit flushes (now, the drain
and the final flush of a close), and the supervision that restarts a dispatcher stopped by an
error, at most once a second. (Flush timing against the configuration: tests/unit/message_store/test_flush.py.)"""
from __future__ import annotations

import os
import threading
import types

from rmqstore import MessageStore
from rmqstore.engine import flush_service as FS
from rmqstore.format.checkpoint import CheckpointValues
from tests.kit import msg


class _Reput:
    """What supervision looks at of a dispatcher."""

    def __init__(self, error=None, running=False):
        self.error, self.running, self.lock, self.reput_from, self.starts = error, running, threading.Lock(), 0, 0

    def start(self):
        self.starts += 1
        self.running = True


def _service(reput) -> FS.FlushService:
    store = types.SimpleNamespace(reput=reput, cfg=types.SimpleNamespace(message_index_enable=False), path="/x")
    return FS.FlushService(store, close_retired=lambda: None)


def test_a_dispatcher_stopped_by_an_error_is_restarted_at_most_once_a_second(caplog):
    r = _Reput(error=OSError(28, "No space left on device"))
    svc = _service(r)
    svc.supervise_reput(1000.0)
    assert r.starts == 1 and r.error is None
    assert any("restarting the dispatcher" in x.getMessage() for x in caplog.records)
    r.error, r.running = OSError(28, "again"), False
    svc.supervise_reput(1000.5)  # within the second: not yet
    assert r.starts == 1 and r.error is not None
    svc.supervise_reput(1000.0 + FS.REPUT_RESTART_INTERVAL_S)
    assert r.starts == 2 and r.error is None


def test_a_running_or_healthy_dispatcher_is_left_alone():
    for r in (_Reput(), _Reput(error=OSError("x"), running=True)):
        _service(r).supervise_reput(1000.0)
        assert r.starts == 0
    _service(None).supervise_reput(1000.0)  # (no dispatcher yet)


def test_the_flusher_runs_as_a_service(open_store):
    st = open_store()
    assert st.flush_service.running
    st.flush_service.shutdown()
    assert not st.flush_service.running
    st.flush_service.shutdown()  # twice: nothing more


def test_flush_now_writes_commitlog_and_checkpoint(open_store, store_dir):
    st = open_store()
    r = st.put_message(msg())
    assert st.flush_service.flush_now() == st.max_phy_offset == r.phy_offset + r.wrote_bytes
    cp = CheckpointValues.unpack(open(store_dir / "checkpoint", "rb").read())
    assert cp.physic_msg_timestamp == r.store_timestamp


def test_drain_dispatches_everything_and_says_whether_it_could(open_store):
    st = open_store()
    st.reput.shutdown()  # on purpose: the drain dispatches in this thread
    rs = [st.put_message(msg(i=i)) for i in range(5)]
    assert st.get_max_offset_in_queue("T", 0) == 0
    assert st.flush_service.drain() is True
    assert st.get_max_offset_in_queue("T", 0) == rs[-1].queue_offset + 1
    st.reput.error = OSError("dispatch failed")
    assert st.flush_service.drain() is False
    st.reput.error = None


def test_final_flush_reports_a_failure(open_store, monkeypatch, caplog):
    st = open_store()
    st.put_message(msg())
    assert st.flush_service.final_flush() is True
    monkeypatch.setattr(st.checkpoint, "flush", lambda *a: (_ for _ in ()).throw(OSError(5, "EIO")))
    assert st.flush_service.final_flush() is False
    assert any("final flush failed" in x.getMessage() for x in caplog.records)
    monkeypatch.undo()


def test_the_flush_loop_persists_offsets_and_flushes_on_its_own(store_dir, make_config):
    cfg = make_config(flush_interval_commit_log=10, flush_commit_log_least_pages=0, flush_interval_consume_queue=10,
                      flush_consumer_offset_interval=10)
    with MessageStore.open(store_dir, cfg) as st:
        st.consumer_offsets.commit_offset("g", "T", 0, 1)
        st.put_message(msg())
        st.wait_dispatched()
        path = os.path.join(str(store_dir), "config", "consumerOffset.json")
        for _ in range(500):
            if os.path.exists(path) and st.commit_log.flushed_offset == st.max_phy_offset:
                break
            threading.Event().wait(0.01)
        assert os.path.exists(path) and st.commit_log.flushed_offset == st.max_phy_offset
