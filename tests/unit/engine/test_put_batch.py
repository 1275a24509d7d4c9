"""engine/put_batch.py: a batch appended from its producer's columns writes the records and answers
of ``put_messages`` for the same messages, copying the properties through only when they are
canonical (parsing and encoding them again gives the same bytes)."""
from __future__ import annotations

import pytest

from rmqstore import Message, PutMessageStatus
from rmqstore.engine.batch_facts import SEP
from rmqstore.engine.put_batch import RawBatch, batch_shape, canonical_properties, put_raw_batch
from tests import kit

T0 = 1_700_000_000_000
JAVA_LIKE = [b"WAIT\x01true\x02TAGS\x01TagA\x02UNIQ_KEY\x01AC1%03d\x02" % i for i in range(4)]


def checked_as_put(props):
    """The check of ``put_batch._put_fast``: the batch at once (:func:`batch_shape`), else message by message."""
    return batch_shape(props, SEP.join(props)) is not None or canonical_properties(props)


@pytest.mark.parametrize("props, ok", [
    (JAVA_LIKE, True),
    ([b"", b"K\x01v\x02"], True),
    ([b"K\x01v\x02K\x01w\x02"], False),      # a name twice: the map keeps one
    ([b"\x01v\x02"], False),                  # an empty name is dropped
    ([b"K\x01\x02"], False),                  # an empty value is dropped
    ([b"K\x01v"], False),                     # no closing separator: the encoder adds one
    ([b"Kv\x02"], False),                     # no name/value separator
    ([b"K\x01v\x01w\x02"], False),            # a second 0x01 (kept by the parser, not taken here)
    (["K\x01v\u00e9\x02".encode()], False),   # not ASCII
    ([b"A\x01x\x02", b"B\x01y"], False),
    ([b"A\x01x\x02B\x01y\x02", b"A\x01x\x02", b"B\x01y\x02A\x01z\x02"], True),  # names repeat across messages
    ([b"A\x01x\x02", b"B\x01y\x02A\x01z\x02B\x01w\x02"], False),  # ... and within the second
    ([b"A\x00\x01x\x02B\x01y\x02", b"A\x00\x01z\x02"], True),  # a name holding 0x00
    ([b"A\x01x\x02A\x00\x01y\x02", b"B\x01y\x02"], True),
    ([b"A\x00\x01x\x02A\x00\x01y\x02"], False),
])
def test_canonical_properties(props, ok):
    assert canonical_properties(props) is ok
    assert checked_as_put(props) is ok  # (the batch-at-once check first)


@pytest.mark.parametrize("props, ok", [
    ([b"A\x01x\x02", b"A\x01x\x02\xff\x02A\x01y\x02"], False),  # the separator inside a message
    ([b"A\x01x\x02", b"A\x01\xffx\x02"], False),
    ([b"A\x01x\x02B\x01y\x02"] * 3 + [b"B\x01y\x02A\x01x\x02"], True),  # another order: the general check
    ([b"A\x01x\x02B\x01y\x02"] * 3 + [b"A\x01x\x02"], True),
    ([b"A\x01x\x02B\x01y\x02"] * 3 + [b"A\x01x\x02B\x01\x02"], False),
    ([b"A\x01x\x02A\x01y\x02"] * 2, False),
    ([b""] * 3, True),
    ([b"A\x01x\x00\x02"] * 3, True),
])
def test_canonical_properties_of_a_batch_at_once(props, ok):
    assert checked_as_put(props) is ok
    assert canonical_properties(props) is ok


def test_batch_shape_captures_what_dispatch_reads():
    assert batch_shape(JAVA_LIKE, SEP.join(JAVA_LIKE)) == (
        (b"TAGS", b"UNIQ_KEY"), [(b"TagA", b"AC1%03d" % i, b"") for i in range(4)])
    keys = [b"KEYS\x01k%d k\x02X\x01y\x02" % i for i in range(3)]
    assert batch_shape(keys, SEP.join(keys)) == ((b"KEYS",), [(b"k%d k" % i, b"") for i in range(3)])
    plain = [b"X\x01y\x02", b"X\x01z\x02"]
    assert batch_shape(plain, SEP.join(plain)) == ((), [])


@pytest.mark.parametrize("props", [
    [b"A\x01x\x02", b"Z\x01q\x02A\x01x\x02"],  # more entries before the first's shape
    [b"A\x01x\x02", b"A\x01x\x02Z\x01q\x02"],  # ... after it
    [b"A\x01x\x02", b"A\x01x\x02\xff\x02A\x01y\x02"],  # the separator inside a message
    [b"A\x01x\x02A\x01y\x02"] * 2,
    [b"TAGS\x01x\x02", b""],
])
def test_batch_shape_refuses_messages_not_shaped_as_the_first(props):
    assert batch_shape(props, SEP.join(props)) is None


def _template(**kw):
    fields = dict(topic="TB", body=b"", queue_id=1, born_timestamp=T0, born_host="10.0.0.7:4000",
                  store_timestamp=T0 + 5)
    fields.update(kw)
    return Message(**fields)


def _records(store, result):
    mf = store.commit_log.queue.find(result.phy_offset)
    return bytes(mf.read(result.phy_offset - mf.file_from_offset, result.wrote_bytes))


@pytest.mark.parametrize("props", [JAVA_LIKE, [b"K\x01a\x02K\x01b\x02", b"\x01x\x02", b"", b"K\x01v"]],
                         ids=["copied-through", "parsed"])
def test_a_raw_batch_writes_what_put_messages_writes(open_store, tmp_path, props):
    batch = RawBatch(_template(), [0, 7, 0, 0], [b"a" * 30, b"bb", b"", b"d" * 5], props)
    a = open_store(tmp_path / "a")
    b = open_store(tmp_path / "b")
    ra = put_raw_batch(a.commit_log, batch)
    rb = b.put_messages(batch.messages())
    assert ra.status is PutMessageStatus.PUT_OK
    assert (ra.msg_id, ra.queue_offset, ra.wrote_bytes, ra.msg_num) == (rb.msg_id, rb.queue_offset, rb.wrote_bytes, 4)
    assert _records(a, ra) == _records(b, rb)


def test_canonical_properties_skip_the_messages(open_store, monkeypatch):
    st = open_store()
    monkeypatch.setattr(RawBatch, "messages", lambda self: pytest.fail("built Message objects"))
    r = put_raw_batch(st.commit_log, RawBatch(_template(born_timestamp=None), [0] * 4, [b"x"] * 4, JAVA_LIKE))
    assert r.status is PutMessageStatus.PUT_OK and r.store_timestamp == T0 + 5
    rec = st.commit_log.read_record(r.phy_offset)
    assert rec.born_timestamp == T0 + 5 and rec.properties["UNIQ_KEY"] == "AC1000"  # born time unset: the store's


@pytest.mark.parametrize("props, sys_flag", [([b"DELAY\x013\x02"], 0), ([b"K\x01v\x02"], 4)])
def test_what_needs_the_general_checks_gets_them(open_store, props, sys_flag):
    st = open_store()
    r = put_raw_batch(st.commit_log, RawBatch(_template(sys_flag=sys_flag), [0], [b"x"], props))
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL  # delayed / transactional messages cannot be batched
    assert not st.commit_log.batch_facts  # (so dispatch_facts never meets a half message)


def test_a_group_takes_a_raw_batch_in_its_turn(open_store):
    st = open_store(cfg=kit.cfg(mapped_file_size_commit_log=1 << 16))
    single = Message(topic="TB", body=b"s", queue_id=1)
    got = st.put_group([[single], RawBatch(_template(), [0, 0], [b"a", b"b"], JAVA_LIKE[:2]), [single]])
    assert [r.queue_offset for r in got] == [0, 1, 3]


def _fields(r):
    return (r.status, r.msg_id, r.phy_offset, r.wrote_bytes, r.queue_offset, r.store_timestamp, r.msg_num)


def _group():
    """Producers' batches arriving together: three queues, one twice, flags, born times and reconsume
    times differing between batches; then one refused (DELAY), and one for another topic."""
    def keyed(q, n, tag=b"TagA"):
        return [b"WAIT\x01true\x02TAGS\x01%s\x02UNIQ_KEY\x01Q%dM%03d\x02KEYS\x01k%d\x02" % (tag, q, i, i) for i in range(n)]
    return [
        RawBatch(_template(queue_id=0), [0, 0, 0], [b"a" * 30, b"", b"c" * 7], keyed(0, 3)),
        RawBatch(_template(queue_id=2, born_timestamp=None), [0, 5], [b"d", b"e" * 100], keyed(2, 2, b"TagB")),
        RawBatch(_template(queue_id=0, reconsume_times=3), [1, 1, 1, 1], [b"f"] * 4, keyed(0, 4)),
        RawBatch(_template(queue_id=1, sys_flag=0x1), [0], [b"compressed?"], keyed(1, 1)),
        RawBatch(_template(queue_id=1), [0], [b"later"], [b"DELAY\x013\x02"]),
        RawBatch(_template(queue_id=1), [0], [b"again"], keyed(1, 1)),
        RawBatch(_template(topic="TC", queue_id=1), [0, 0], [b"x", b"y"], keyed(1, 2)),
    ]


def test_batches_arriving_together_write_what_one_by_one_puts_write(open_store, tmp_path, monkeypatch):
    one = open_store(tmp_path / "one")
    expected = [put_raw_batch(one.commit_log, b) for b in _group()]
    grouped = open_store(tmp_path / "group")
    appends = []
    real = grouped.commit_log.append_batch
    monkeypatch.setattr(grouped.commit_log, "append_batch", lambda batch, parts, *a: appends.append(len(parts))
                        or real(batch, parts, *a))
    got = grouped.put_group(_group())
    assert [_fields(r) for r in got] == [_fields(r) for r in expected]
    assert [r.status for r in got] == [PutMessageStatus.PUT_OK] * 4 + [PutMessageStatus.MESSAGE_ILLEGAL] + \
        [PutMessageStatus.PUT_OK] * 2
    assert [r.queue_offset for r in got[:4]] == [0, 0, 3, 0]
    assert appends == [4, 1, 1], appends  # one write for the first four; the last two are for two topics
    for st in (one, grouped):
        st.wait_dispatched(10)
        st.close()
    a, b = kit.tree_hashes(tmp_path / "group"), kit.tree_hashes(tmp_path / "one")
    logs = [k for k in b if k.startswith(("commitlog/", "consumequeue/"))]
    assert len(logs) == 5 and {k: a.get(k) for k in logs} == {k: b[k] for k in logs}
    index = sorted(v for k, v in b.items() if k.startswith("index/"))
    assert index and sorted(v for k, v in a.items() if k.startswith("index/")) == index


def test_batches_together_are_pulled_and_queried_as_put(open_store):
    st = open_store()
    got = st.put_group(_group()[:4])
    st.wait_dispatched(10)
    assert st.get_max_offset_in_queue("TB", 0) == 7 and st.get_max_offset_in_queue("TB", 2) == 2
    pulled = st.get_message("G", "TB", 0, 0).messages
    assert [m.body for m in pulled] == [b"a" * 30, b"", b"c" * 7] + [b"f"] * 4
    assert [m.reconsume_times for m in pulled] == [0] * 3 + [3] * 4 and [m.flag for m in pulled] == [0] * 3 + [1] * 4
    assert [m.msg_id for m in pulled[3:]] == got[2].msg_id.split(",")
    second = st.look_message_by_offset(got[1].phy_offset)
    assert second.queue_id == 2 and second.born_timestamp == second.store_timestamp == T0 + 5  # born time unset
    found = st.query_message("TB", "k1", 10).messages  # KEYS k1: the second message of each multi-message batch
    assert sorted((m.queue_id, m.queue_offset) for m in found) == [(0, 1), (0, 4), (2, 1)]


def test_batches_that_would_roll_between_them_are_put_one_by_one(open_store, tmp_path):
    cfg = kit.cfg(mapped_file_size_commit_log=4096)
    big = [RawBatch(_template(queue_id=q), [0] * 3, [b"z" * 300] * 3, JAVA_LIKE[:3]) for q in range(4)]
    one = open_store(tmp_path / "one", cfg)
    expected = [put_raw_batch(one.commit_log, b) for b in big + big + big[:1] + big]
    grouped = open_store(tmp_path / "group", cfg)
    put_raw_batch(grouped.commit_log, big[0])
    got = grouped.put_group(big[1:]) + grouped.put_group(big) + grouped.put_group(big[:1]) + grouped.put_group(big)
    assert [_fields(r) for r in got] == [_fields(r) for r in expected[1:]]
    assert all(r.status is PutMessageStatus.PUT_OK for r in got)
    # three that fit a segment together but not the rest of this one, where the first fits: one by
    # one; then four that fit no segment together, twice (the second time the first does not fit the
    # rest of the segment either: rolled as one, they would overflow the next)
    assert [r.phy_offset // 4096 for r in got] == [0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4]
    for st in (one, grouped):
        st.close()
    a, b = kit.tree_hashes(tmp_path / "group"), kit.tree_hashes(tmp_path / "one")
    assert {k: a.get(k) for k in b if k.startswith("commitlog/")} == {k: v for k, v in b.items()
                                                                       if k.startswith("commitlog/")}


def test_a_group_of_batches_waits_once_and_times_out_only_those_that_wait(open_store, monkeypatch):
    st = open_store(cfg=kit.cfg(flush_disk_type="SYNC_FLUSH"))
    waits = []
    monkeypatch.setattr(st.commit_log, "sync_to", lambda end: waits.append(end) and False)
    no_wait = [b"WAIT\x01false\x02TAGS\x01T\x02"]
    got = st.put_group([RawBatch(_template(queue_id=q), [0], [b"x"], JAVA_LIKE[:1] if q else no_wait)
                        for q in range(3)])
    assert waits == [st.commit_log.confirm_offset]
    assert [r.status for r in got] == [PutMessageStatus.PUT_OK] + [PutMessageStatus.FLUSH_DISK_TIMEOUT] * 2


def test_an_io_error_fails_every_batch_of_the_group(open_store, monkeypatch):
    st = open_store()
    cl = st.commit_log
    before = cl.confirm_offset

    def full(total):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cl, "_segment_for", full)
    got = st.put_group([RawBatch(_template(queue_id=q), [0], [b"x"], JAVA_LIKE[:1]) for q in range(2)])
    assert [r.status for r in got] == [PutMessageStatus.CREATE_MAPPED_FILE_FAILED] * 2
    assert cl.confirm_offset == before and not cl.batch_facts


@pytest.mark.parametrize("field", ["reconsume_times", "sys_flag", "flags", "same_flags"])
def test_a_field_out_of_range_is_refused_alone_in_a_group(open_store, field):
    """Out of int range, a field would wrap in a column of the merged batch (one flag for the whole
    batch too, merged with batches of other flags)."""
    st = open_store()
    bad = _template(queue_id=0, **({} if "flags" in field else {field: 1 << 31}))
    flags = {"flags": [0, 1 << 31], "same_flags": [1 << 31, 1 << 31]}.get(field, [0, 0])
    got = st.put_group([RawBatch(_template(queue_id=0, reconsume_times=1), [0], [b"a"], JAVA_LIKE[:1]),
                        RawBatch(bad, flags, [b"b", b"c"], JAVA_LIKE[:2]),
                        RawBatch(_template(queue_id=0), [0], [b"d"], JAVA_LIKE[:1])])
    assert [r.status for r in got] == [PutMessageStatus.PUT_OK, PutMessageStatus.MESSAGE_ILLEGAL,
                                       PutMessageStatus.PUT_OK]
    assert [got[0].queue_offset, got[2].queue_offset] == [0, 1]  # nothing of the refused batch written
    assert st.commit_log.read_record(got[2].phy_offset).body == b"d"
