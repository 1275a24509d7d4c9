"""engine/group_commit.py: puts that arrived together appended as one group (``MessageStore.put_group``):
the same files and results as the one-by-one puts, one result per item in order, one flush wait."""
from __future__ import annotations

import pytest

from rmqstore import PutMessageStatus
from rmqstore.engine import group_commit as G
from tests import kit
from tests.kit import msg

OK = PutMessageStatus.PUT_OK
T0 = 1_700_000_000_000


def _items():
    """Singles on two queues (one needs the general path: an IPv6 born host), a batch, more singles."""
    out = [[msg("T", b"a" * 40, i=i, queues=2, born_timestamp=T0 + i, store_timestamp=T0 + 100 + i,
                uniq_key=f"U{i}")] for i in range(5)]
    out.insert(2, [msg("T", b"v6", [("TAGS", "x")], queue_id=1, born_host="[2001:db8::1]:40000",
                       store_timestamp=T0 + 50)])
    out.insert(4, [msg("T", b"batch%d" % j, {"KEYS": f"b{j}"}, queue_id=0, store_timestamp=T0 + 60)
                   for j in range(3)])
    return out


def _result_fields(r):
    return (r.status, r.msg_id, r.phy_offset, r.wrote_bytes, r.queue_offset, r.store_timestamp, r.msg_num)


def test_a_group_writes_what_the_one_by_one_puts_write(open_store, tmp_path):
    cfg = kit.cfg(mapped_file_size_commit_log=1024)  # small segments: the group rolls over one
    one = open_store(tmp_path / "one", cfg)
    expected = [one.put_message(m[0]) if len(m) == 1 else one.put_messages(m) for m in _items()]
    grouped = open_store(tmp_path / "group", cfg)
    got = grouped.put_group(_items())
    assert [_result_fields(r) for r in got] == [_result_fields(r) for r in expected]
    assert all(r.status is OK for r in got) and len(grouped.commit_log.queue.files) > 1
    one.wait_dispatched(10)
    grouped.wait_dispatched(10)
    one.close()
    grouped.close()
    a, b = kit.tree_hashes(tmp_path / "group"), kit.tree_hashes(tmp_path / "one")
    logs = [k for k in b if k.startswith(("commitlog/", "consumequeue/"))]
    assert logs and {k: a.get(k) for k in logs} == {k: b[k] for k in logs}
    index = sorted(v for k, v in b.items() if k.startswith("index/"))  # (files named by their creation time)
    assert index and sorted(v for k, v in a.items() if k.startswith("index/")) == index


def test_a_field_out_of_range_is_refused_alone(open_store):
    st = open_store()
    bad = msg("T", b"x", flag=1 << 40)
    got = st.put_group([[msg("T", b"a")], [bad], [msg("T", b"b")]])
    assert [r.status for r in got] == [OK, PutMessageStatus.MESSAGE_ILLEGAL, OK]
    assert "flag" in got[1].error
    assert [got[0].queue_offset, got[2].queue_offset] == [0, 1]
    assert got[2].phy_offset == got[0].phy_offset + got[0].wrote_bytes  # nothing written for the refused one


def test_sync_flush_waits_once_for_the_group(open_store, monkeypatch):
    st = open_store(cfg=kit.cfg(flush_disk_type="SYNC_FLUSH"))
    waits = []
    sync_to = st.commit_log.sync_to
    monkeypatch.setattr(st.commit_log, "sync_to", lambda end: waits.append(end) or sync_to(end))
    got = st.put_group([[msg("T", b"%d" % i)] for i in range(4)])
    assert waits == [st.commit_log.confirm_offset]
    assert all(r.status is OK for r in got) and st.commit_log.flushed_offset == st.commit_log.confirm_offset
    no_wait = st.put_group([[msg("T", b"w", {"WAIT": "false"})]])
    assert no_wait[0].status is OK and len(waits) == 1  # WAIT=false: no flush wait


def test_a_flush_timeout_answers_only_the_messages_that_wait(open_store, monkeypatch):
    st = open_store(cfg=kit.cfg(flush_disk_type="SYNC_FLUSH"))
    monkeypatch.setattr(st.commit_log, "sync_to", lambda end: False)
    got = st.put_group([[msg("T", b"a")], [msg("T", b"w", {"WAIT": "false"})]])
    assert [r.status for r in got] == [PutMessageStatus.FLUSH_DISK_TIMEOUT, OK]


def test_an_io_error_fails_the_messages_not_written(open_store, monkeypatch):
    st = open_store()
    cl = st.commit_log
    real = cl.append_fast
    calls = []

    def flaky(*a):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(*a)

    monkeypatch.setattr(cl, "append_fast", flaky)
    got = G.put_run(cl, [msg("T", b"%d" % i) for i in range(3)])
    assert got[0].status is OK
    assert [r.status for r in got[1:]] == [PutMessageStatus.CREATE_MAPPED_FILE_FAILED] * 2
    assert cl.confirm_offset == got[0].phy_offset + got[0].wrote_bytes


def test_a_read_only_store_refuses_a_group(open_store, store_dir):
    from rmqstore import ReadOnlyStoreError

    open_store().close()
    ro = open_store(read_only=True)
    with pytest.raises(ReadOnlyStoreError):
        ro.put_group([[msg()]])


def _singles(n: int = 12):
    """Single sends as a broker builds them: TAGS, several KEYS, a UNIQ_KEY, other properties, some none."""
    out = []
    for i in range(n):
        props = [("KEYS", f"k{i} kk{i}  x"), ("TAGS", f"t{i % 3}"), ("UNIQ_KEY", f"U{i:04d}"), ("idx", "é" * (i % 2)),
                 ("WAIT", "true")] if i % 4 else None
        out.append([msg("T", b"s%d" % i, props, queue_id=i % 3, born_timestamp=T0 + i, store_timestamp=T0 + 9 + i)])
    return out


def _derived(path):
    hashes = kit.tree_hashes(path)
    cq = {k: v for k, v in hashes.items() if k.startswith("consumequeue/")}
    return cq, sorted(v for k, v in hashes.items() if k.startswith("index/"))


@pytest.mark.parametrize("tamper", [False, True])
def test_the_dispatcher_writes_a_groups_units_from_the_puts_facts(open_store, tmp_path, monkeypatch, tamper):
    """The consume queues and index of a group dispatched from the facts its put left are those of
    the same records read back from the commitlog; a fact that does not match its record's head is
    not taken (the record is read instead)."""
    from rmqstore.engine import reput as RP

    read = []
    real_scan = RP.M.scan_v4
    monkeypatch.setattr(RP.M, "scan_v4", lambda *a: read.append(a[1]) or real_scan(*a))
    plain = open_store(tmp_path / "plain")
    plain.set_background_dispatch(False)
    for item in _singles():
        plain.put_message(item[0])  # (no facts: read back)
    plain.dispatch()
    assert len(read) == 12
    read.clear()
    st = open_store(tmp_path / "facts")
    st.set_background_dispatch(False)
    st.put_group(_singles()[:5])
    facts = st.commit_log.put_facts
    assert len(facts) == 5
    if tamper:
        phy, total, qoff, *rest = facts[2]
        facts[2] = (phy, total, qoff + 1, *rest)  # (says another queue offset than its record holds)
    st.dispatch()
    st.put_group(_singles()[5:])
    st.dispatch()
    assert not facts and len(read) == (3 if tamper else 0)  # (the round from the bad fact on is read back)
    plain.close()
    st.close()
    assert _derived(tmp_path / "facts") == _derived(tmp_path / "plain")


def test_facts_are_bounded_and_those_behind_the_dispatcher_dropped(open_store, monkeypatch):
    monkeypatch.setattr(G, "FACTS_MAX", 3)
    st = open_store()
    st.set_background_dispatch(False)
    st.put_group([[msg("T", b"%d" % i)] for i in range(5)])
    assert len(st.commit_log.put_facts) == 3
    st.put_message(msg("T", b"one"))  # (no fact)
    st.dispatch()
    assert not st.commit_log.put_facts and st.reput.reput_from == st.dispatch_end()
    assert st.get_message("g", "T", 0, 0, 32).messages[-1].body == b"one"
