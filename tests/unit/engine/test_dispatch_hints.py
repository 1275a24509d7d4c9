"""Append hints: records a producer hands the dispatcher (engine/dispatch.py) are dispatched to the
same consume-queue units and index items as the same records read back from the commitlog, and
anything the hint cannot describe exactly is read back instead."""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqstore import Message, MessageStore, PutMessageStatus
from rmqstore.engine import commit_log as CL
from rmqstore.engine import dispatch as D
from rmqstore.format import properties as P

T0 = 1_700_000_000_000
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _files(root) -> dict[str, bytes]:
    out = {}
    for dp, _, fs in os.walk(os.path.join(root, "consumequeue")):
        for f in fs:
            with open(os.path.join(dp, f), "rb") as fh:
                out[os.path.relpath(os.path.join(dp, f), root)] = fh.read()
    for i, n in enumerate(sorted(os.listdir(os.path.join(root, "index")))):  # (names are creation times)
        with open(os.path.join(root, "index", n), "rb") as fh:
            out[f"index#{i}"] = fh.read()
    return out


@pytest.fixture
def hinted(monkeypatch):
    """Counts the records dispatched from hints."""
    seen = {"records": 0}
    real = D.dispatch_hints

    def counting(run, **kw):
        done = real(run, **kw)
        if done:
            seen["records"] += sum(h[6].size for h in run)
        return done
    monkeypatch.setattr(D, "dispatch_hints", counting)
    return seen


def _twins(make_config, d, **cfg):
    """Two stores fed the same puts: ``a`` dispatches from hints, ``b`` reads every record back."""
    c = make_config(**cfg)
    a = MessageStore.open(os.path.join(d, "a"), c)
    b = MessageStore.open(os.path.join(d, "b"), c)
    b.commit_log.hints = None
    return a, b


def _put_both(stores, batches):
    for s in stores:
        for msgs in batches:
            if isinstance(msgs, Message):
                assert s.put_message(msgs).status is PutMessageStatus.PUT_OK
            else:
                assert s.put_messages(msgs).status is PutMessageStatus.PUT_OK
        s.wait_dispatched()


def _batch(topic, qid, n, start=0, tags=True, keys=True, uniq=True, spaced=False):
    out = []
    for i in range(start, start + n):
        props = {}
        if tags:
            props["TAGS"] = f"Tag{i % 3}"
        if keys:
            props["KEYS"] = f"order-{i} user-{i % 7}" if spaced else f"order-{i}"
        if uniq:
            props["UNIQ_KEY"] = f"{i:032X}"
        out.append(Message(topic=topic, body=b"b%d" % i, queue_id=qid, properties=props, store_timestamp=T0 + i))
    return out


def test_hinted_dispatch_writes_what_reading_back_writes(make_config, tmp_path, hinted):
    a, b = _twins(make_config, str(tmp_path), mapped_file_size_commit_log=1 << 14)
    batches = [_batch("T", i % 3, 20, start=20 * i, tags=i % 2 == 0, keys=i % 3 != 1, uniq=i % 4 != 3,
                      spaced=i % 5 == 0) for i in range(40)]
    # single puts between batches leave gaps with no hint; small segments make batches roll
    batches.insert(5, Message(topic="T", body=b"single", queue_id=0, properties={"KEYS": "lone"}))
    batches.insert(9, _batch("Other", 1, 7))
    _put_both((a, b), batches)
    a.close()
    b.close()
    assert hinted["records"] > 600  # most records were dispatched from hints
    fa, fb = _files(str(tmp_path / "a")), _files(str(tmp_path / "b"))
    assert fa.keys() == fb.keys() and len(fa) > 3
    for k in fa:
        assert fa[k] == fb[k], k


def test_records_without_hints_are_read_back(make_config, tmp_path, hinted, monkeypatch):
    # the dispatcher held up: hints pile up to MAX_HINTS, the rest of the records have none
    monkeypatch.setattr(CL, "_MAX_HINTS", 3)
    a, b = _twins(make_config, str(tmp_path))
    for s in (a, b):
        with s.reput.lock:
            for i in range(8):
                assert s.put_messages(_batch("T", i % 2, 5, start=5 * i)).status is PutMessageStatus.PUT_OK
            if s is a:
                assert len(a.reput.hints) == 3
        s.wait_dispatched()
    assert hinted["records"] == 15 and not b.reput.hints
    assert a.reput.reput_from == b.reput.reput_from == a.commit_log.confirm_offset
    fa, fb = _files(str(tmp_path / "a")), _files(str(tmp_path / "b"))
    # with the dispatcher stopped, producers hint nothing
    assert a.commit_log.hints is a.reput.hints
    a.reput.shutdown()
    assert a.commit_log.hints is None
    assert a.put_messages(_batch("T", 0, 5, start=40)).status is PutMessageStatus.PUT_OK
    assert not a.reput.hints
    a.close()  # dispatches that batch itself, and exits clean
    assert not (tmp_path / "a" / "abort").exists()
    with MessageStore.open(tmp_path / "a", make_config(), read_only=True) as ra:
        assert ra.get_max_offset_in_queue("T", 0) == 25
    b.close()
    assert fa == fb


value = st.text(st.sampled_from("ab7 -\x01\x02中"), max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["T", "U"]), st.integers(0, 2),
                          st.lists(st.fixed_dictionaries({}, optional={"TAGS": value, "KEYS": value,
                                                                       "UNIQ_KEY": value, "x": value}),
                                   min_size=1, max_size=5)), min_size=1, max_size=6))
def test_any_batch_dispatches_identically(make_config, batches):
    """Whatever the values (empty, spaces, separators, non-ASCII): hint or read-back, same files."""
    d = tempfile.mkdtemp(prefix="rmq-hints-", dir=SCRATCH)
    try:
        a, b = _twins(make_config, d)
        puts = []
        for topic, qid, props in batches:
            keys = tuple(props[0])  # a batch takes the vectorised path when every dict has the same keys
            puts.append([Message(topic=topic, body=b"x", queue_id=qid, store_timestamp=T0,
                                 properties={k: p.get(k, "v") for k in keys}) for p in props])
        _put_both((a, b), puts)
        a.close()
        b.close()
        assert _files(os.path.join(d, "a")) == _files(os.path.join(d, "b"))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_a_hint_is_only_taken_where_parsing_gives_its_values():
    def columns(props):
        keys, cols = P.uniform_columns(props)
        blob = b"\x00".join(P.encode_columns(keys, cols, len(props)))
        return keys, cols, blob

    plain = columns([{"KEYS": "k1 k2", "UNIQ_KEY": "U", "x": "1"}])
    assert CL._hint_columns(*plain, "T", 1) == (None, ["U"], ["k1 k2"])
    # a separator inside a value (here "x" would add a TAGS property when parsed)
    assert CL._hint_columns(*columns([{"KEYS": "k", "UNIQ_KEY": "U", "x": "1\x02TAGS\x01t"}]), "T", 1) is None
    assert CL._hint_columns(*columns([{"KEYS": 7, "UNIQ_KEY": "U", "x": "1"}]), "T", 1) is None  # not a str
    assert CL._hint_columns(*plain, "SCHEDULE_TOPIC_XXXX", 1) is None
