"""Startup recovery: upstream's acceptance scenario, the scanner (resynchronisation past
corruption in the middle, tails, blanks, limits), index tails cut and rebuilt, read-only dry runs."""
from __future__ import annotations

import os
import shutil

import numpy as np

from rmqstore import Message, MessageStore
from rmqstore.engine import recovery as R
from rmqstore.engine.consume_queue import ConsumeQueue
from rmqstore.format import index_file as IF
from tests import kit


#: the kit's small consume-queue and index files, a 10 MiB commitlog segment, SYNC_FLUSH
GEOMETRY = dict(mapped_file_size_commit_log=10 * 1024 * 1024, flush_disk_type="SYNC_FLUSH")


def _nth(i: int) -> Message:
    """The i-th message of upstream's DefaultMessageStoreTest (one queue, tag TAG1, key k<i>)."""
    return kit.msg("FooBar", f"Once, there was a message {i}".encode(), i=i, tags="TAG1")


def test_upstream_recovery_scenario(tmp_path):
    """DefaultMessageStoreTest: 100 messages, clean restart; 100 more and one, the last damaged
    (16 zero bytes at its topic-length field), restart -> it is gone, the rest is there, writing
    continues; the same with an abort file."""
    for crashed in (False, True):
        path = tmp_path / f"s{crashed}"
        cfg = kit.cfg(GEOMETRY)
        with MessageStore.open(path, cfg) as st:
            for i in range(100):
                st.put_message(_nth(i))
            st.wait_dispatched(timeout=10)
            max_phy, max_cq = st.max_phy_offset, st.get_max_offset_in_queue("FooBar", 0)
        with MessageStore.open(path, cfg) as st:
            assert (st.max_phy_offset, st.get_max_offset_in_queue("FooBar", 0)) == (max_phy, max_cq)
            for i in range(100, 200):
                st.put_message(_nth(i))
            second_last_end = st.max_phy_offset
            st.wait_dispatched(timeout=10)
            max_cq = st.get_max_offset_in_queue("FooBar", 0)
            last = st.put_message(_nth(200))
        body_len = len(f"Once, there was a message {200}")
        with open(path / "commitlog" / f"{0:020d}", "r+b") as fh:
            fh.seek(last.phy_offset + 84 + body_len + 4)
            fh.write(bytes(16))
        if crashed:
            (path / "abort").write_text("1")
        with MessageStore.open(path, cfg) as st:
            rep = st.recovery_report
            assert rep.mode == ("abnormal" if crashed else "normal")
            assert st.max_phy_offset == second_last_end
            assert st.get_max_offset_in_queue("FooBar", 0) == max_cq
            assert st.look_message_by_offset(last.phy_offset) is None
            assert st.query_message("FooBar", "k200").messages == []
            assert [m.queue_offset for m in st.query_message("FooBar", "k199").messages] == [199]
            r = st.put_message(_nth(201))
            assert r.ok and r.phy_offset == second_last_end and r.queue_offset == max_cq
            st.wait_dispatched(timeout=10)
            assert [m.phy_offset for m in st.query_message("FooBar", "k201").messages] == [r.phy_offset]
            assert st.verify() == []


def _small(tmp_path, n: int = 60, **kw):
    cfg = kit.cfg(GEOMETRY, mapped_file_size_commit_log=4096, **kw)
    path = tmp_path / "s"
    with MessageStore.open(path, cfg) as st:
        puts = [st.put_message(_nth(i)) for i in range(n)]
    return cfg, path, puts


def _files(path, cfg):
    from rmqstore.io.mapped_file_queue import MappedFileQueue
    q = MappedFileQueue(str(path / "commitlog"), cfg.mapped_file_size_commit_log, read_only=True)
    q.load()
    return q


def test_scan_skips_corruption_in_the_middle(tmp_path):
    cfg, path, puts = _small(tmp_path)
    bad = puts[20]
    seg = path / "commitlog" / f"{bad.phy_offset - bad.phy_offset % 4096:020d}"
    with open(seg, "r+b") as fh:
        fh.seek(bad.phy_offset % 4096 + 4)
        fh.write(b"\x00\x11\x22\x33")  # magic
    q = _files(path, cfg)
    res = R.scan_log(q.files, 0, cfg)
    assert res.end == puts[-1].phy_offset + puts[-1].wrote_bytes
    assert [(s.offset, s.length, s.kind) for s in res.corrupt] == [(bad.phy_offset, bad.wrote_bytes, "record_invalid")]
    assert res.records == len(puts) - 1
    seen = []
    R.scan_log(q.files, 0, cfg, on_batch=lambda mf, b: seen.extend((mf.file_from_offset + b.starts).tolist()))
    assert seen == [p.phy_offset for i, p in enumerate(puts) if i != 20]
    q.close()


def test_scan_resyncs_at_the_next_segment(tmp_path):
    """The last record of a segment (and its blank) destroyed: valid data goes on in the next."""
    cfg, path, puts = _small(tmp_path)
    first_seg = [p for p in puts if p.phy_offset < 4096]
    last = first_seg[-1]
    with open(path / "commitlog" / f"{0:020d}", "r+b") as fh:
        fh.seek(last.phy_offset)
        fh.write(b"\xee" * (4096 - last.phy_offset))
    q = _files(path, cfg)
    res = R.scan_log(q.files, 0, cfg)
    assert res.end == puts[-1].phy_offset + puts[-1].wrote_bytes
    assert [(s.offset, s.length) for s in res.corrupt] == [(last.phy_offset, 4096 - last.phy_offset)]
    q.close()


def test_scan_stops_at_a_torn_tail_and_respects_limits(tmp_path):
    cfg, path, puts = _small(tmp_path)
    last = puts[-1]
    seg = path / "commitlog" / f"{last.phy_offset - last.phy_offset % 4096:020d}"
    with open(seg, "r+b") as fh:
        fh.seek(last.phy_offset % 4096 + 40)
        fh.write(bytes(last.wrote_bytes - 40))
    q = _files(path, cfg)
    res = R.scan_log(q.files, 0, cfg)
    assert res.end == last.phy_offset and res.corrupt == [] and str(last.phy_offset) in res.reason
    mid = puts[30].phy_offset
    res = R.scan_log(q.files, 0, cfg, limit_phy=mid)
    assert res.end == mid and res.records == 30
    res = R.scan_log(q.files, puts[10].phy_offset, cfg)
    assert res.records == len(puts) - 11
    q.close()


def test_choose_start_segment(tmp_path):
    cfg, path, puts = _small(tmp_path)
    q = _files(path, cfg)
    assert len(q.files) >= 3
    seg2_first = next(p for p in puts if p.phy_offset >= 2 * 4096)
    i = R.choose_start_segment(q.files, cfg, normal=False, dispatch_from_phy=-1,
                               min_timestamp=seg2_first.store_timestamp, index_msg_timestamp=0)
    assert q.files[i].file_from_offset <= seg2_first.phy_offset
    assert R.choose_start_segment(q.files, cfg, normal=False, dispatch_from_phy=-1, min_timestamp=0,
                                  index_msg_timestamp=0) == 0
    assert R.choose_start_segment(q.files, cfg, normal=True, dispatch_from_phy=2 * 4096 + 1, min_timestamp=0,
                                  index_msg_timestamp=0) == 2
    q.close()


def test_index_tail_cut_repairs_slots_ahead_of_the_header(tmp_path):
    """A crash between an index put's slot writes and its header write leaves slots pointing past
    the item count: recovery cuts the file back and the re-dispatch adds the items again."""
    cfg = kit.cfg(GEOMETRY, mapped_file_size_commit_log=64 * 1024, max_index_num=1024)
    path = tmp_path / "s"
    with MessageStore.open(path, cfg) as st:
        puts = [st.put_message(_nth(i)) for i in range(40)]
        st.wait_dispatched(timeout=10)
        shutil.copytree(path, tmp_path / "crash", ignore=shutil.ignore_patterns("lock", "*.creating"))
    crash = tmp_path / "crash"
    (name,) = os.listdir(crash / "index")
    ipath = crash / "index" / name
    with open(ipath, "r+b") as fh:
        data = bytearray(fh.read())
        count = IF.HEADER.unpack_from(data, 0)[5]
        # the header goes back 10 items (its write was lost); the items and slots stay
        IF.HEADER.pack_into(data, 0, *IF.HEADER.unpack_from(data, 0)[:5], count - 10)
        fh.seek(0)
        fh.write(data)
    with MessageStore.open(crash, cfg) as st:
        rep = st.recovery_report
        assert rep.mode == "abnormal" and rep.index_files_rebuilt == [name]
        for i, r in enumerate(puts):
            assert [m.phy_offset for m in st.query_message("FooBar", f"k{i}").messages] == [r.phy_offset]
        assert st.verify() == []


def test_truncate_index_file_unit(tmp_path):
    cfg = kit.cfg(GEOMETRY, mapped_file_size_commit_log=64 * 1024, max_index_num=1024)
    path = tmp_path / "s"
    with MessageStore.open(path, cfg) as st:
        puts = [st.put_message(_nth(i)) for i in range(30)]
        st.wait_dispatched(timeout=10)
        f = st.index_service.files[-1]
        ts_at = R.store_ts_reader(st.commit_log.queue.files)
        before = f.index_count
        cut = R.truncate_index_file(f, puts[20].phy_offset, ts_at, (0, 0))
        assert cut == before - f.index_count == 2 * 10  # UNIQ_KEY + KEYS per message
        assert f.end_phy == puts[19].phy_offset and f.end_ts == puts[19].store_timestamp
        slots = np.frombuffer(f.mf.mm, dtype=">i4", count=f.slot_num, offset=IF.HEADER_SIZE)
        assert int(slots.max()) < f.index_count and f.slot_count == int(np.count_nonzero(slots))
        out: list[int] = []
        from rmqstore.format.hashes import index_key_hash
        f.select_phy_offsets(out, index_key_hash("FooBar", "k5"), 10, 0, 2**62)
        assert out == [puts[5].phy_offset]
        out = []
        f.select_phy_offsets(out, index_key_hash("FooBar", "k25"), 10, 0, 2**62)
        assert out == []
        del slots


def test_read_only_recovery_is_a_dry_run(tmp_path):
    cfg, path, puts = _small(tmp_path)
    last = puts[-1]
    seg = path / "commitlog" / f"{last.phy_offset - last.phy_offset % 4096:020d}"
    with open(seg, "r+b") as fh:
        fh.seek(last.phy_offset % 4096 + last.wrote_bytes + 3)
        fh.write(b"junk")
    (path / "abort").write_text("1")
    snapshot = {p: open(p, "rb").read() for p in (str(x) for x in path.rglob("*") if x.is_file() and x.name != "lock")}
    with MessageStore.open(path, cfg, read_only=True) as ro:
        rep = ro.recovery_report
        assert not rep.applied and rep.mode == "abnormal"
        assert [(c.offset, c.saved_to) for c in rep.cuts] == [(last.phy_offset + last.wrote_bytes, None)]
        assert "dry run" in rep.summary()
    after = {p: open(p, "rb").read() for p in snapshot}
    assert after == snapshot and not (path / "recovery").exists()


def test_a_readers_queue_view_ends_its_commitlog_end_with_its_last_unit(tmp_path):
    """A reader ends a queue's view after its last unit that matches its record
    (:func:`validate_read_views`); units left out of the view (here two that point past the data)
    must not count as the queue's end in the commitlog: a record that follows the view is allowed
    as many queue offsets past it as records fit after that end, and a stale end refused records
    ("too far back"). (A reader normally answers such a queue from a stand-in built from the
    commitlog; the view itself is checked here, on the queue as loaded.)"""
    cfg, path, puts = _small(tmp_path)
    last = puts[-1]
    per_file = cfg.mapped_file_size_consume_queue // 20
    for q in (58, 59):
        cq_file = path / "consumequeue" / "FooBar" / "0" / f"{q // per_file * per_file * 20:020d}"
        kit.patch_file(cq_file, q % per_file * 20, (last.phy_offset + 1000).to_bytes(8, "big") + (300).to_bytes(4, "big"))
    with MessageStore.open(path, cfg, read_only=True) as ro:
        cq = ConsumeQueue(str(path), "FooBar", 0, cfg, read_only=True)
        cq.load()
        cq.recover()
        assert cq.max_offset == 60 and cq.max_physic_offset == last.phy_offset + 1300
        R.validate_read_views(ro, from_phy=0, cqs=[cq])
        assert cq.max_offset == 58
        assert cq.max_physic_offset == puts[57].phy_offset + puts[57].wrote_bytes
        cq.close()


def test_queue_hints_are_the_units_record_offsets_per_segment_and_bounded(tmp_path):
    cfg, path, puts = _small(tmp_path)
    start = puts[10].phy_offset
    with MessageStore.open(path, cfg, read_only=True) as ro:
        hints = R.QueueHints(ro, start)
        assert hints.phys.tolist() == [p.phy_offset for p in puts[10:]]
        for mf in ro.commit_log.queue.files:  # per segment, relative to its first byte
            base = mf.file_from_offset
            want = [p.phy_offset - base for p in puts[10:] if base <= p.phy_offset < base + mf.file_size]
            assert hints(mf).tolist() == want
        assert R.QueueHints(ro, start, most=5).phys.tolist() == [p.phy_offset for p in puts[10:15]]
