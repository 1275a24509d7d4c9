"""Executor-side code without a JVM: byte-range spans, resynchronisation, the chain of spans, the
Arrow columns and the safe end of a live store, checked against MessageStore."""
from __future__ import annotations

import os
import shutil

import pytest

from rmqstore import Message, MessageStore
from rmqstore.layout import infer_config
from rmqstore.spark import columns as C
from rmqstore.spark import scan as S
from rmqstore.spark import tail as T

from tests.kit import record_offsets, row_of, store_records


def scan_all(path: str, seg_size: int, split: int, **kw):
    segs = S.list_segments(path, seg_size)
    spans = S.plan_spans(segs, seg_size, split)
    offs, summaries = [], []
    for sp in spans:
        sm = S.SpanSummary(sp)
        for seg, b in S.iter_span_batches(path, seg_size, sp, sm, **kw):
            offs.extend((b.starts + seg.start).tolist())
        summaries.append(sm)
    return segs, offs, summaries


@pytest.mark.parametrize("split", [64, 91, 200, 333, 1000, 4096, 1 << 20])
def test_every_record_in_exactly_one_span(vector, split):
    cfg = infer_config(vector.path, vector.config)
    seg_size = cfg.mapped_file_size_commit_log
    segs, offs, summaries = scan_all(vector.path, seg_size, split)
    with MessageStore.open(vector.path, cfg, read_only=True) as st:
        assert offs == record_offsets(st)
        end = S.stitch_chain(segs, seg_size, summaries)
        assert end.offset == st.max_phy_offset and end.kind in (S.END, S.BLANK)
    assert all(not sm.breaks for sm in summaries)


def test_generated_store_spans(generated):
    seg_size = generated.config.mapped_file_size_commit_log
    segs, offs, summaries = scan_all(generated.path, seg_size, 300_000, check_crc=True)
    with MessageStore.open(generated.path, generated.config, read_only=True) as st:
        assert offs == record_offsets(st)
        assert S.stitch_chain(segs, seg_size, summaries).offset == st.max_phy_offset


def test_columns_match_message_store(vector):
    cfg = infer_config(vector.path, vector.config)
    seg_size = cfg.mapped_file_size_commit_log
    rows = []
    for sp in S.plan_spans(S.list_segments(vector.path, seg_size), seg_size, 1 << 20):
        topics = C.TopicDecoder()
        for seg, b in S.iter_span_batches(vector.path, seg_size, sp, batch_records=7):
            rows.extend(C.record_batch_to_arrow(seg, b, C.ARROW_SCHEMA, topics).to_pylist())
    recs = store_records(vector.path, cfg)
    assert len(rows) == len(recs)
    for row, rec in zip(rows, recs):
        want = row_of(rec)
        got = dict(row, properties=dict(row["properties"]))
        for k in ("bornTimestamp", "storeTimestamp"):  # Arrow gives aware UTC datetimes
            got[k] = int(got[k].timestamp() * 1000)
            want[k] = getattr(rec, "born_timestamp" if k == "bornTimestamp" else "store_timestamp")
        assert got == want


def _torn_copy(src: str, dst: str, cfg, cut: int) -> int:
    """A copy of ``src`` whose last record has its last ``cut`` bytes zeroed (a torn write)."""
    shutil.copytree(src, dst)
    for root, _, files in os.walk(dst):
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    with MessageStore.open(dst, cfg, read_only=True) as st:
        last = record_offsets(st)[-1]
        size = st.look_message_by_offset(last).store_size
    seg_size = cfg.mapped_file_size_commit_log
    seg0 = last - last % seg_size
    with open(S.segment_path(dst, seg0), "r+b") as fh:
        fh.seek(last - seg0 + size - cut)
        fh.write(b"\0" * cut)
    return last


def test_torn_tail_record_is_not_returned(vector, tmp_path):
    cfg = infer_config(vector.path, vector.config)
    seg_size = cfg.mapped_file_size_commit_log
    last = _torn_copy(vector.path, str(tmp_path / "s"), cfg, 3)
    segs, offs, summaries = scan_all(str(tmp_path / "s"), seg_size, 1 << 20)
    with MessageStore.open(vector.path, cfg, read_only=True) as st:
        assert offs == record_offsets(st)[:-1]
    end = S.stitch_chain(segs, seg_size, summaries)
    assert (end.offset, end.kind) == (last, S.CRC)


def test_salvage_after_a_corrupt_record(vectors, tmp_path):
    v = vectors["basic"]
    cfg = infer_config(v.path, v.config)
    dst = str(tmp_path / "s")
    shutil.copytree(v.path, dst)
    os.chmod(S.segment_path(dst, 0), 0o644)
    offs = [m["phyOffset"] for m in v.messages()]
    with open(S.segment_path(dst, 0), "r+b") as fh:  # break the magic of record 10
        fh.seek(offs[10] + 4)
        fh.write(b"\0\0\0\0")
    segs, got, summaries = scan_all(dst, cfg.mapped_file_size_commit_log, 1 << 20)
    assert got == offs[:10] + offs[11:]
    assert summaries[0].breaks[0][:2] == (offs[10], S.INVALID)
    end = S.stitch_chain(segs, cfg.mapped_file_size_commit_log, summaries)
    assert (end.offset, end.kind) == (offs[10], S.INVALID)
    _, got, _ = scan_all(dst, cfg.mapped_file_size_commit_log, 1 << 20, salvage=False)
    assert got == offs[:10]


def test_safe_end_follows_a_writer(tmp_path):
    """Records become visible to a stream only once complete: the tail record needs to be seen
    unchanged twice (settle time), or to be followed by another record."""
    from storegen import small_config

    cfg = small_config(commitlog=64 * 1024)
    path = str(tmp_path / "live")
    state = T.TailState()
    with MessageStore.open(path, cfg) as st:
        r1 = st.put_message(Message("T", b"one", properties={"KEYS": "a"}))
        seg = cfg.mapped_file_size_commit_log
        now = 100.0
        assert T.safe_end(path, seg, 0, None, state, now=now) == 0  # first sight of the tail
        assert T.safe_end(path, seg, 0, None, state, now=now + 1) == r1.phy_offset + r1.wrote_bytes
        r2 = st.put_message(Message("T", b"two"))
        r3 = st.put_message(Message("T", b"three"))
        end = T.safe_end(path, seg, 0, None, state, now=now + 2)
        assert end == r3.phy_offset  # r2 is followed by r3; r3 not settled yet
        assert T.safe_end(path, seg, 0, 10, T.TailState(), now=now) == 10  # maxBytes cap
        # fill the segment: a blank closes it and the next segment starts
        big = b"x" * 20000
        while st.commit_log.confirm_offset < seg:
            last = st.put_message(Message("T", big))
        assert last.phy_offset >= seg
        end = T.safe_end(path, seg, r2.phy_offset, None, state, now=now + 3)
        assert end == last.phy_offset  # the whole first segment, and the second up to its tail


def test_the_vector_check_sees_a_changed_or_added_file(tmp_path):
    """The session's check that the vector stores stay as RocketMQ wrote them (conftest) notices an
    added file and a changed one."""
    import dataclasses
    import shutil

    from tests.kit import load_vector, vector_changes

    vs = load_vector("basic")
    assert vector_changes(vs) == []
    copy = tmp_path / "store"
    shutil.copytree(vs.path, copy)
    (copy / "extra").write_bytes(b"x")
    seg = copy / "commitlog" / "00000000000000000000"
    seg.chmod(0o644)
    data = bytearray(seg.read_bytes())
    data[100] ^= 1
    seg.write_bytes(bytes(data))
    moved = dataclasses.replace(vs, root=tmp_path)  # the same set, its store at tmp_path/store
    assert vector_changes(moved) == ["basic: commitlog/00000000000000000000 changed", "basic: extra added"]
