"""engine/batch_facts.py: a batch copied through by ``put_raw_batch`` is dispatched from its put's
facts (no walk, no decode) and writes the same consume-queue and index files, byte for byte, as the
walk of its records; a fact whose records do not match goes back to the walk."""
from __future__ import annotations

import os
import pathlib
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from rmqstore import Message, MessageStore
from rmqstore.engine import batch_facts as BF
from rmqstore.engine.put_batch import RawBatch, put_raw_batch
from rmqstore.format import hashes as H
from tests import kit

T0 = 1_700_000_000_000
#: 16 KiB segments (batches roll them), small consume-queue and index files (they fill up)
GEOMETRY = dict(mapped_file_size_commit_log=16 << 10, mapped_file_size_consume_queue=20 * 64,
                max_hash_slot_num=64, max_index_num=128)


def _props(i: int, kind: str) -> bytes:
    """The encoded properties of message ``i`` of a batch of ``kind``."""
    uniq = b"UNIQ_KEY\x017F00000100002A9F%016X\x02" % i
    return {
        "java": b"WAIT\x01true\x02TAGS\x01TagA\x02" + uniq,
        "tags-differ": b"TAGS\x01Tag%d\x02" % (i % 3) + uniq,
        "keys": b"KEYS\x01key-%d\x02" % i + uniq + b"TAGS\x01T\x02",
        "keys-tokens": b"KEYS\x01a%d  b%d \x02TAGS\x01x\x02" % (i, i * 7) + uniq,
        "keys-only": b"KEYS\x01k%d\x02" % (i * 31),
        "none": b"",
        "some-tags": (b"TAGS\x01S\x02" if i % 2 else b"") + uniq,
        "utf8-less": b"WAIT\x01false\x02",
    }[kind]


KINDS = ["java", "tags-differ", "keys", "keys-tokens", "keys-only", "none", "some-tags", "utf8-less"]


def _batch(n: int, first: int, kind: str, topic: str = "TB", queue_id: int = 0, ts: int = T0) -> RawBatch:
    t = Message(topic=topic, body=b"", queue_id=queue_id, born_timestamp=T0, born_host="10.0.0.7:4000",
                store_timestamp=ts)
    return RawBatch(t, [0] * n, [b"b%d" % (first + j) * (1 + (first + j) % 9) for j in range(n)],
                    [_props(first + j, kind) for j in range(n)])


def _derived_files(path) -> dict[str, bytes]:
    """Consume-queue files by path, index files by their place in name order (names are times)."""
    out = {}
    for root, _, files in os.walk(os.path.join(path, "consumequeue")):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, path)] = open(p, "rb").read()
    index = os.path.join(path, "index")
    for i, f in enumerate(sorted(os.listdir(index)) if os.path.isdir(index) else []):
        out[f"index#{i}"] = open(os.path.join(index, f), "rb").read()
    return out


def _store(path, cfg) -> MessageStore:
    st = MessageStore.open(str(path), cfg)
    st.reput.shutdown()  # dispatched in this thread, when the test says
    return st


@pytest.fixture
def used(monkeypatch):
    """The records dispatched from facts."""
    count = [0]
    real = BF.dispatch_facts

    def counting(store, run):
        count[0] += sum(f.starts.size for f in run)
        return real(store, run)
    monkeypatch.setattr(BF, "dispatch_facts", counting)
    return count


def _twice(tmp_path, batches, cfg, *, each: bool = False, spoil=None):
    """The derived files of the same puts dispatched from facts and by the walk (facts dropped)."""
    a, b = _store(tmp_path / "facts", cfg), _store(tmp_path / "walk", cfg)
    for st, keep in ((a, True), (b, False)):
        for x in batches:
            if isinstance(x, Message):
                assert st.put_message(x).ok
            else:
                assert put_raw_batch(st.commit_log, x).ok
            if not keep:
                st.commit_log.batch_facts.clear()
            elif spoil is not None:
                spoil(st.commit_log.batch_facts)
            if each:
                st.reput.do_reput()
        st.reput.do_reput()
        assert st.reput.reput_from == st.commit_log.confirm_offset
    a.close(), b.close()
    fa, fb = _derived_files(tmp_path / "facts"), _derived_files(tmp_path / "walk")
    assert fa and fa == fb
    return fa


def _mixed() -> list:
    out, i = [], 0
    for r, kind in enumerate(KINDS * 2):
        n = 3 + r % 6
        out.append(_batch(n, i, kind, topic="TB" if r % 3 else "Other", queue_id=r % 3, ts=T0 + r))
        i += n
        if r % 4 == 3:  # a single put between batches: walked
            out.append(kit.msg("TB", b"s", i=i, store_timestamp=T0 + r))
            i += 1
    return out


@pytest.mark.parametrize("each", [False, True], ids=["one-round", "round-per-put"])
def test_facts_write_what_the_walk_writes(tmp_path, used, each):
    batches = _mixed()
    _twice(tmp_path, batches, kit.cfg(GEOMETRY), each=each)
    assert used[0] == sum(len(b) for b in batches if isinstance(b, RawBatch))  # every batch from its fact


def test_without_the_index(tmp_path, used):
    files = _twice(tmp_path, _mixed(), kit.cfg(GEOMETRY, message_index_enable=False))
    assert used[0] and not any(k.startswith("index") for k in files)


def test_a_batch_rolling_into_a_new_segment(tmp_path, used):
    cfg = kit.cfg(GEOMETRY)
    batches = [_batch(40, 40 * j, "java", ts=T0 + j) for j in range(4)]  # ~4 KiB each: the 4th rolls
    a = _store(tmp_path / "roll", cfg)
    for b in batches:
        assert put_raw_batch(a.commit_log, b).ok
    facts = list(a.commit_log.batch_facts)
    a.close()
    seg = cfg.mapped_file_size_commit_log
    assert any(f.phy % seg == 0 and f.phy for f in facts)  # one starts a new segment (after a blank)
    assert all(f.phy // seg == (f.end - 1) // seg for f in facts)
    used[0] = 0  # (closing dispatched them)
    _twice(tmp_path, batches, cfg)
    assert used[0] == 160


@pytest.mark.parametrize("field", ["phy", "end", "queue_offset", "queue_id", "sys_flag", "totals", "starts"])
def test_a_fact_that_does_not_match_its_records_goes_to_the_walk(tmp_path, used, field):
    def spoil(facts):
        f = facts.pop()
        if field in ("totals", "starts"):
            arr = getattr(f, field).copy()
            arr[-1] += 4
            facts.append(f._replace(**{field: arr}))
        else:
            facts.append(f._replace(**{field: getattr(f, field) + 1}))
    _twice(tmp_path, [_batch(5, 0, "java"), _batch(4, 5, "keys")], kit.cfg(GEOMETRY), each=True, spoil=spoil)
    assert used[0] == 0


def test_heads_match_reads_the_first_and_last_record(tmp_path):
    st = _store(tmp_path, kit.cfg(GEOMETRY))
    assert put_raw_batch(st.commit_log, _batch(6, 0, "java")).ok
    f = st.commit_log.batch_facts[0]
    mf = st.commit_log.queue.find(f.phy)
    assert BF.heads_match(mf.mm, mf.file_from_offset, f)
    empty = np.zeros(0, dtype=np.int64)
    assert not BF.heads_match(mf.mm, mf.file_from_offset, f._replace(starts=empty, totals=empty))
    mf.mm[int(f.starts[-1]) + 4] ^= 0xFF  # the last record's magic
    assert not BF.heads_match(mf.mm, mf.file_from_offset, f)
    assert put_raw_batch(st.commit_log, _batch(1, 6, "java")).ok  # one record: first and last
    one = st.commit_log.batch_facts[1]
    assert BF.heads_match(mf.mm, mf.file_from_offset, one)
    assert not BF.heads_match(mf.mm, mf.file_from_offset, one._replace(totals=one.totals + 1, end=one.end + 1))
    assert not BF.heads_match(mf.mm, mf.file_from_offset, one._replace(queue_offset=one.queue_offset + 1))
    st.close()


def test_facts_are_bounded(tmp_path, monkeypatch, used):
    monkeypatch.setattr(BF, "BATCH_FACTS_MAX", 2)
    from rmqstore.engine import commit_log as CL
    monkeypatch.setattr(CL, "BATCH_FACTS_MAX", 2)
    _twice(tmp_path, [_batch(3, 3 * j, "java") for j in range(5)], kit.cfg(GEOMETRY))
    assert used[0] == 6  # two batches from facts, the rest walked


@pytest.mark.parametrize("keys", [[b"7F00000100002A9F%016X" % i for i in range(50)],
                                  [b"k", b"key-10", b"x" * 70, b"a b"]])
def test_key_hashes(keys):
    for topic in ("T", "TopicTest"):
        prefix = H.java_hash(topic + "#") & 0xFFFFFFFF
        want = [H.index_key_hash(topic, k.decode()) for k in keys]
        assert BF.key_hashes(prefix, keys).tolist() == want
        assert BF.key_hashes(np.full(len(keys), prefix, dtype=np.uint64), keys).tolist() == want


def test_key_hashes_of_integer_min_value():
    """A key whose ``topic#key`` hashes to Integer.MIN_VALUE gets 0 (``Math.abs`` stays negative)."""
    key = b"a" * 6  # find a prefix hash p with p * 31**6 + hash(key) = 2**31 (mod 2**32)
    inv = pow(pow(31, 6, 1 << 32), -1, 1 << 32)
    prefix = ((1 << 31) - H.java_hash(key.decode())) * inv % (1 << 32)
    assert BF.key_hashes(prefix, [key, b"b" * 6]).tolist()[0] == 0
    assert BF.key_hashes(np.array([prefix], dtype=np.uint64), [key]).tolist() == [0]
    assert BF.key_hashes(prefix, [key, b"bb"]).tolist()[0] == 0  # (the ranges path)


_NAMES = hs.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "X"])
_VALUES = hs.text(alphabet="ab #", min_size=1, max_size=6)
_MESSAGE = hs.dictionaries(_NAMES, _VALUES, max_size=4)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hs.lists(hs.lists(_MESSAGE, min_size=1, max_size=6), min_size=1, max_size=5))
def test_random_batches_write_what_the_walk_writes(batches):
    raw = []
    for j, msgs in enumerate(batches):
        t = Message(topic="TH", body=b"", queue_id=j % 2, born_timestamp=T0, born_host="10.0.0.7:4000",
                    store_timestamp=T0 + j)
        raw.append(RawBatch(t, [0] * len(msgs), [b"x"] * len(msgs),
                            ["".join(f"{k}\x01{v}\x02" for k, v in m.items()).encode() for m in msgs]))
    with tempfile.TemporaryDirectory() as d:
        _twice(pathlib.Path(d), raw, kit.cfg(GEOMETRY))


@pytest.mark.parametrize("master_keys", [b"TWO", b"the-master's-own-longer-keys-"])
def test_a_cut_tail_drops_what_the_puts_told_of_the_records_cut(tmp_path, master_keys):
    """A writer's divergent tail cut (an old master rejoining) and the master's records appended in
    its place, of the same sizes or of other sizes: dispatch indexes the records there, not what the
    cut batch's facts and record starts (handed over by its put) said."""
    cfg = kit.cfg(GEOMETRY)

    def batch(keys: bytes) -> RawBatch:
        b = _batch(4, 0, "none")
        b.props = [b"KEYS\x01%s%d\x02" % (keys, j) for j in range(4)]
        return b

    master = _store(tmp_path / "master", cfg)
    for b in (batch(b"one"), batch(master_keys)):
        assert put_raw_batch(master.commit_log, b).ok
    second = master.commit_log.batch_facts[1].phy
    master.reput.do_reput()
    tail = bytes(master.commit_log.get_data(second, master.commit_log.confirm_offset - second))
    master.close()

    from rmqstore.engine.ha.replica import append_replicated, cut_tail
    writer = _store(tmp_path / "writer", cfg)
    for b in (batch(b"one"), batch(b"two")):
        assert put_raw_batch(writer.commit_log, b).ok
    assert writer.commit_log.batch_starts  # (not dispatched yet)
    assert cut_tail(writer, second, "test") == second
    assert not writer.commit_log.batch_facts and not writer.commit_log.batch_starts
    append_replicated(writer.commit_log, second, tail)
    writer.reput.do_reput()
    assert writer.query_message("TB", master_keys.decode() + "1", 10, 0, 1 << 62).messages  # the master's keys
    assert not writer.query_message("TB", "two1", 10, 0, 1 << 62).messages
    assert writer.get_max_offset_in_queue("TB", 0) == 8
    writer.close()
    assert _derived_files(tmp_path / "writer") == _derived_files(tmp_path / "master")


def test_the_dispatcher_thread_takes_facts_while_batches_are_put(tmp_path, used):
    """The background dispatcher pops facts while another thread appends batches and single
    messages: the files are those of the walk."""
    cfg = kit.cfg(GEOMETRY)
    batches = _mixed() * 3
    live = MessageStore.open(str(tmp_path / "facts"), cfg)  # its dispatcher thread runs
    for x in batches:
        assert (live.put_message(x) if isinstance(x, Message) else put_raw_batch(live.commit_log, x)).ok
    live.wait_dispatched(timeout=30)
    live.close()
    assert used[0] > 0
    walk = _store(tmp_path / "walk", cfg)
    for x in batches:
        assert (walk.put_message(x) if isinstance(x, Message) else put_raw_batch(walk.commit_log, x)).ok
        walk.commit_log.batch_facts.clear()
    walk.reput.do_reput()
    walk.close()
    assert _derived_files(tmp_path / "facts") == _derived_files(tmp_path / "walk")
