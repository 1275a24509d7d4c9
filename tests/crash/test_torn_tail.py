"""Torn tails: the last record cut at every byte position (the rest of it zero, as a crash or a lost
page leaves it), garbage after the last record, zero-filled preallocated tails.

A cut record must never be served; the records before it must all survive; the cut bytes must be
saved under ``recovery/`` and described in the report with their segment and offset; a read-only
open must describe the same cut without changing a byte.
"""
from __future__ import annotations

import os
import shutil

import pytest

import crashkit as K

from rmqstore import MessageStore
from rmqstore.engine.verify import Finding
from tests import kit

N = 40


def _build(path: str, cfg, n: int = N) -> list:
    """A cleanly closed store with n messages; returns their put results."""
    out = []
    with MessageStore.open(path, cfg) as st:
        for i in range(n):
            r = st.put_message(K.message_for(1, i, i))
            assert r.ok
            out.append(r)
    return out


def _check_survivors(st: MessageStore, puts: list, upto: int) -> None:
    for r in puts[:upto]:
        rec = st.look_message_by_offset(r.phy_offset)
        assert rec is not None
        assert K.check_record(rec)[:2] == (1, puts.index(r))
        g = st.get_message("t", rec.topic, rec.queue_id, r.queue_offset, 1)
        assert g.messages and g.messages[0].phy_offset == r.phy_offset


@pytest.mark.parametrize("crashed", [True, False], ids=["abort", "clean"])
def test_last_record_cut_at_every_byte(tmp_path, crashed):
    cfg = K.crash_config(flush_disk_type="ASYNC_FLUSH")
    pristine = str(tmp_path / "pristine")
    puts = _build(pristine, cfg)
    last = puts[-1]
    seg, pos = kit.segment_of(pristine, last.phy_offset, cfg.mapped_file_size_commit_log)
    with open(seg, "rb") as fh:
        fh.seek(pos)
        original = fh.read(last.wrote_bytes)
    for k in range(last.wrote_bytes):
        work = str(tmp_path / f"w{k}")
        shutil.copytree(pristine, work)
        wseg = os.path.join(work, os.path.relpath(seg, pristine))
        kit.patch_file(wseg, pos + k, bytes(last.wrote_bytes - k))
        if crashed:
            with open(os.path.join(work, "abort"), "w") as fh:
                fh.write("1")
        before = K.tree_digest(work) if k % 16 == 0 else None
        with MessageStore.open(work, cfg, read_only=True) as ro:
            rep = ro.recovery_report
            assert rep.end_offset == last.phy_offset, (k, rep.summary())
            assert ro.look_message_by_offset(last.phy_offset) is None
            kept = _nonzero_len(original[:k])
            if kept:
                assert [(c.segment, c.offset, c.length) for c in rep.cuts] == \
                    [(os.path.basename(seg), last.phy_offset, kept)]
                assert rep.cuts[0].saved_to is None
            else:
                assert rep.cuts == []
        if before is not None:
            assert K.tree_digest(work) == before, "a read-only open changed the store"
        with MessageStore.open(work, cfg) as st:
            rep = st.recovery_report
            assert rep.end_offset == last.phy_offset
            assert st.max_phy_offset == last.phy_offset
            assert st.look_message_by_offset(last.phy_offset) is None
            lrec_q = K.expected(1, N - 1, N - 1)
            assert st.get_max_offset_in_queue(lrec_q["topic"], lrec_q["queue_id"]) == last.queue_offset
            if kept:
                (cut,) = rep.cuts
                with open(cut.saved_to, "rb") as fh:
                    assert fh.read() == original[:kept]
            if k % 8 == 0:
                _check_survivors(st, puts, N - 1)
                assert st.verify() == []
            # the store takes new messages where the torn one was
            r = st.put_message(K.message_for(2, 0, 0))
            assert r.ok and r.phy_offset == last.phy_offset
        with MessageStore.open(work, cfg, read_only=True) as ro:
            assert ro.recovery_report.clean
            assert K.check_record(ro.look_message_by_offset(last.phy_offset))[:2] == (2, 0)
        shutil.rmtree(work)


def _nonzero_len(b: bytes) -> int:
    return len(b.rstrip(b"\x00"))


def test_garbage_after_the_last_record_is_cut_and_kept(tmp_path):
    cfg = K.crash_config()
    path = str(tmp_path / "s")
    puts = _build(path, cfg)
    end = puts[-1].phy_offset + puts[-1].wrote_bytes
    seg, pos = kit.segment_of(path, end, cfg.mapped_file_size_commit_log)
    junk = os.urandom(700).replace(b"\x00", b"\x01")
    kit.patch_file(seg, pos, junk)
    with open(os.path.join(path, "abort"), "w") as fh:
        fh.write("1")
    with MessageStore.open(path, cfg) as st:
        rep = st.recovery_report
        assert rep.end_offset == end
        (cut,) = rep.cuts
        assert (cut.segment, cut.offset, cut.length) == (os.path.basename(seg), end, len(junk))
        with open(cut.saved_to, "rb") as fh:
            assert fh.read() == junk
        _check_survivors(st, puts, N)
        assert st.verify() == []
    with open(seg, "rb") as fh:
        fh.seek(pos)
        assert fh.read(len(junk)) == bytes(len(junk)), "the cut bytes are still in the segment"


def test_garbage_tail_is_reported_by_a_read_only_verify(tmp_path):
    cfg = K.crash_config()
    path = str(tmp_path / "s")
    puts = _build(path, cfg)
    end = puts[-1].phy_offset + puts[-1].wrote_bytes
    seg, pos = kit.segment_of(path, end, cfg.mapped_file_size_commit_log)
    kit.patch_file(seg, pos + 10, b"\xff" * 33)
    with MessageStore.open(path, cfg, read_only=True) as ro:
        findings = ro.verify()
    assert findings == [Finding("tail_garbage", seg, pos + 10, findings[0].detail)]
    assert str(end) in findings[0].detail


def test_zero_filled_preallocated_tails(tmp_path):
    """A crash after the next segment was created (all zero) and with zeros after the last
    record: nothing to cut, nothing lost, the empty segment is dropped."""
    cfg = K.crash_config()
    path = str(tmp_path / "s")
    puts = _build(path, cfg, n=400)  # several segments
    end = puts[-1].phy_offset + puts[-1].wrote_bytes
    size = cfg.mapped_file_size_commit_log
    nxt = os.path.join(path, "commitlog", f"{end - end % size + size:020d}")
    with open(nxt, "wb") as fh:
        fh.truncate(size)
    with open(os.path.join(path, "abort"), "w") as fh:
        fh.write("1")
    with MessageStore.open(path, cfg, read_only=True) as ro:
        assert ro.recovery_report.end_offset == end and ro.recovery_report.cuts == []
    with MessageStore.open(path, cfg) as st:
        rep = st.recovery_report
        assert rep.mode == "abnormal" and rep.end_offset == end and rep.cuts == [] and rep.corrupt_records == []
        assert not os.path.exists(nxt)
        for i, r in enumerate(puts):
            rec = st.look_message_by_offset(r.phy_offset)
            assert K.check_record(rec)[:2] == (1, i)
        assert st.verify() == []
        assert st.put_message(K.message_for(2, 0, 0)).phy_offset == end


def test_segment_ending_in_a_blank_with_no_successor(tmp_path):
    """The last segment is full (ends with its blank record) and the next one was never created:
    the data ends at the segment end and the next put opens the next segment."""
    cfg = K.crash_config()
    path = str(tmp_path / "s")
    size = cfg.mapped_file_size_commit_log
    with MessageStore.open(path, cfg) as st:
        i = 0
        while True:
            r = st.put_message(K.message_for(1, i, i))
            i += 1
            if r.phy_offset >= size:
                break
        last_in_first = r.phy_offset
    seg1 = os.path.join(path, "commitlog", f"{size:020d}")
    os.unlink(seg1)  # as if the crash came right after the blank, before the new segment
    with open(os.path.join(path, "abort"), "w") as fh:
        fh.write("1")
    with MessageStore.open(path, cfg) as st:
        assert st.recovery_report.end_offset == size
        assert st.recovery_report.cuts == []
        r = st.put_message(K.message_for(2, 0, 0))
        assert r.ok and r.phy_offset == size == last_in_first
        assert st.verify() == []
