"""engine/lifecycle.py: the service chain (start order, reverse shutdown, failures), the store's
services as the facade wires them, a service added to an open store (as the HA service is), the
abort file, the writer lock's holder and retired mappings."""
from __future__ import annotations

import os
import types

import pytest

from rmqstore import MessageStore, StoreLockedError
from rmqstore.engine import lifecycle as LC
from tests.kit import msg


class _Svc:
    def __init__(self, name, log, fail_start=False, fail_stop=False):
        self.name, self.log, self.fail_start, self.fail_stop = name, log, fail_start, fail_stop

    def start(self):
        if self.fail_start:
            raise RuntimeError(f"{self.name} cannot start")
        self.log.append(("start", self.name))

    def shutdown(self):
        self.log.append(("stop", self.name))
        if self.fail_stop:
            raise RuntimeError(f"{self.name} cannot stop")


def test_services_start_in_order_and_stop_in_reverse():
    log: list = []
    chain = LC.ServiceChain()
    a, b = _Svc("a", log), _Svc("b", log)
    chain.start(a, b)
    c = chain.add(_Svc("c", log))
    assert c.name == "c" and chain.running == (a, b, c)
    assert chain.shutdown() is True
    assert log == [("start", "a"), ("start", "b"), ("start", "c"), ("stop", "c"), ("stop", "b"), ("stop", "a")]
    assert chain.running == () and chain.shutdown() is True  # once only


def test_a_service_that_fails_to_start_is_not_stopped_and_those_before_it_are():
    log: list = []
    chain = LC.ServiceChain()
    with pytest.raises(RuntimeError, match="b cannot start"):
        chain.start(_Svc("a", log), _Svc("b", log, fail_start=True), _Svc("c", log))
    assert [s.name for s in chain.running] == ["a"]
    chain.shutdown()
    assert log == [("start", "a"), ("stop", "a")]


def test_a_failing_shutdown_is_logged_and_the_others_still_stop(caplog):
    log: list = []
    chain = LC.ServiceChain()
    chain.start(_Svc("a", log), _Svc("b", log, fail_stop=True))
    assert chain.shutdown() is False
    assert log[-2:] == [("stop", "b"), ("stop", "a")]
    assert [r.getMessage() for r in caplog.records if "shutting down" in r.getMessage()] != []


def test_a_writer_runs_reput_flusher_and_keeper_in_that_order(open_store):
    st = open_store()
    assert st.services.running == (st.reput, st.flush_service, st.derived_files)
    assert st.reput.running and st.flush_service.running
    st.close()
    assert st.services.running == () and not st.reput.running and not st.flush_service.running


def test_a_reader_runs_only_the_keeper(open_store, store_dir):
    open_store().put_message(msg())
    ro = open_store(read_only=True)
    assert ro.services.running == (ro.derived_files,)
    assert not ro.reput.running


def test_a_service_added_to_an_open_store_stops_first_at_close(open_store, store_dir):
    """What the HA service gets: started after open, shut down before the flusher and the reput
    stop and before the final flush (abort is still there, the lock still held)."""
    st = open_store()
    seen = {}

    class Late:
        def start(self):
            seen["started"] = True

        def shutdown(self):
            seen.update(reput=st.reput.running, flusher=st.flush_service.running,
                        abort=os.path.exists(store_dir / "abort"), locked=st.lifecycle.locked)

    late = st.services.add(Late())
    assert st.services.running[-1] is late and seen == {"started": True}
    st.put_message(msg())
    st.close()
    assert seen == {"started": True, "reput": True, "flusher": True, "abort": True, "locked": True}
    assert not os.path.exists(store_dir / "abort")


def test_abort_file_holds_the_pid_and_goes_at_a_clean_close(tmp_path):
    life = LC.StoreLifecycle(types.SimpleNamespace(path=str(tmp_path)))
    assert life.last_exit_ok()
    life.write_abort()
    assert not life.last_exit_ok()
    assert (tmp_path / "abort").read_text() == str(os.getpid())
    life.remove_abort()
    life.remove_abort()  # already gone: nothing to do
    assert life.last_exit_ok()


def test_the_lock_is_taken_once_per_process_and_released(tmp_path):
    a = LC.StoreLifecycle(types.SimpleNamespace(path=str(tmp_path)))
    b = LC.StoreLifecycle(types.SimpleNamespace(path=str(tmp_path)))
    a.take_lock()
    try:
        assert a.locked
        with pytest.raises(StoreLockedError, match="already open for writing in this process"):
            b.take_lock()
        assert not b.locked
    finally:
        a.unlock()
    assert not a.locked
    b.take_lock()
    b.unlock()


def test_lock_holder_of_an_unlocked_or_missing_lock_is_nobody(tmp_path):
    assert LC.lock_holder(str(tmp_path)) is None  # no such file
    (tmp_path / "lock").write_bytes(b"lock")
    assert LC.lock_holder(str(tmp_path)) is None  # nobody holds it


def test_retired_mappings_close_after_the_grace_period(monkeypatch):
    life = LC.StoreLifecycle(types.SimpleNamespace(path="/nonexistent"))
    closed: list = []
    old, young = (types.SimpleNamespace(close=lambda n=n: closed.append(n)) for n in ("old", "young"))
    clock = [100.0]
    monkeypatch.setattr(LC.time, "monotonic", lambda: clock[0])
    life.retire(old)
    clock[0] += LC.RETIRE_GRACE_S
    life.retire(young)
    life.close_retired()
    assert closed == ["old"]
    life.close_retired(force=True)
    assert closed == ["old", "young"]
    life.close_retired(force=True)
    assert closed == ["old", "young"]


def test_an_open_that_fails_after_starting_services_stops_them(store_dir, small_config, monkeypatch):
    from rmqstore.engine import derived_files as DF

    def boom(self):
        raise RuntimeError("restore failed")
    monkeypatch.setattr(DF.DerivedFilesKeeper, "start", boom)
    stores = []
    real_init = MessageStore.__init__
    monkeypatch.setattr(MessageStore, "__init__", lambda self, *a: (stores.append(self), real_init(self, *a))[1])
    with pytest.raises(RuntimeError, match="restore failed"):
        MessageStore.open(store_dir, small_config)
    st, = stores
    assert st.closed and st.services.running == () and not st.reput.running and not st.flush_service.running
    assert not st.lifecycle.locked and os.path.exists(store_dir / "abort")  # not a clean close
    monkeypatch.undo()
    with MessageStore.open(store_dir, small_config) as again:  # the lock was released
        assert again.recovery_report.mode in ("abnormal", "empty")


def test_writer_lock_keeps_writers_out_while_held_and_lets_them_in_after(tmp_path):
    path = tmp_path / "s"
    with MessageStore.open(path) as st:
        st.put_message(msg())
        with pytest.raises(StoreLockedError):  # a writer holds it: the offline edit is refused
            with LC.writer_lock(path):
                pass
    with LC.writer_lock(path):
        assert LC.lock_holder(path) == os.getpid()
        with pytest.raises(StoreLockedError):  # no writer opens the store meanwhile
            MessageStore.open(path)
    assert LC.lock_holder(path) is None
    with MessageStore.open(path) as st:
        assert st.max_phy_offset > 0
