"""Bit flips in a record body, a record header, a consume-queue unit and an index item.

Each must be detected (reported with the file and the byte offset inside it), the damaged message
must never be served as valid, and every other message must survive (corruption in the middle of
the log is not a torn tail: nothing after it is cut).

Upstream's record format protects TOTALSIZE/MAGIC (framing), the body (BODYCRC) and, through the
consume queue, QUEUEID/QUEUEOFFSET/TOPIC/size; FLAG, the timestamps, the hosts, RECONSUMETIMES,
PREPAREDTRANSACTIONOFFSET and most SYSFLAG bits have no redundancy at all unless the properties CRC
is on (``enabledAppendPropCRC`` + ``forceVerifyPropCRC``, which covers every byte of a record).
The tests assert exactly that coverage.
"""
from __future__ import annotations

import os
import shutil

import pytest

import crashkit as K

from rmqstore import CorruptRecordError, MessageStore
from rmqstore.format import index_file as IF
from tests import kit

N = 30
MID = 17  # the damaged message


def _build(path: str, cfg) -> list:
    out = []
    with MessageStore.open(path, cfg) as st:
        for i in range(N):
            r = st.put_message(K.message_for(1, i, i))
            assert r.ok
            out.append(r)
    return out


def _flip(path: str, pos: int, bit: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(pos)
        b = fh.read(1)[0]
        fh.seek(pos)
        fh.write(bytes([b ^ (1 << bit)]))


def _served_intact(st: MessageStore, puts: list, skip: int) -> None:
    """Every message but ``skip`` reads back whole, by offset and through its queue."""
    for i, r in enumerate(puts):
        if i == skip:
            continue
        rec = st.look_message_by_offset(r.phy_offset)
        assert K.check_record(rec)[:2] == (1, i)
        e = K.expected(1, i, i)
        g = st.get_message("t", e["topic"], e["queue_id"], r.queue_offset, 1)
        assert [m.phy_offset for m in g.messages] == [r.phy_offset], (i, g.status)


def _never_served(st: MessageStore, r, i: int) -> None:
    """The damaged message is refused everywhere it could be read from, and never stops a reader:
    a pull steps over it and says so."""
    e = K.expected(1, i, i)
    g = st.get_message("t", e["topic"], e["queue_id"], r.queue_offset, 4)
    assert all(m.phy_offset != r.phy_offset for m in g.messages)
    assert [(k.queue_offset, k.phy_offset) for k in g.skipped] == [(r.queue_offset, r.phy_offset)]
    assert g.skipped[0].path is not None and g.skipped[0].offset is not None and g.skipped[0].reason
    assert g.next_begin_offset > r.queue_offset
    for key in e["keys"]:
        q = st.query_message(e["topic"], key)
        assert all(m.phy_offset != r.phy_offset for m in q.messages)
    # a pull that starts before it hands out what precedes and follows it
    if r.queue_offset > 0:
        g = st.get_message("t", e["topic"], e["queue_id"], r.queue_offset - 1, 4)
        offs = [m.queue_offset for m in g.messages]
        assert offs[0] == r.queue_offset - 1 and r.queue_offset not in offs
        assert [k.queue_offset for k in g.skipped] == [r.queue_offset]
        assert g.next_begin_offset == offs[-1] + 1 if len(offs) > 1 else g.next_begin_offset > r.queue_offset


@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "abort"])
def test_body_bit_flip_is_found_and_never_served(tmp_path, crash_rng, crashed):
    cfg = K.crash_config(flush_disk_type="ASYNC_FLUSH")
    path = str(tmp_path / "s")
    puts = _build(path, cfg)
    r = puts[MID]
    seg, pos = kit.segment_of(path, r.phy_offset, cfg.mapped_file_size_commit_log)
    body_len = len(K.body_of(1, MID))
    assert body_len > 0
    _flip(seg, pos + 88 + crash_rng.randrange(body_len), crash_rng.randrange(8))
    if crashed:
        open(os.path.join(path, "abort"), "w").close()
    with MessageStore.open(path, cfg, read_only=True) as ro:
        with pytest.raises(CorruptRecordError) as ei:
            ro.look_message_by_offset(r.phy_offset)
        assert ei.value.path == seg
        findings = ro.verify()
        assert [(f.kind, f.path, f.offset) for f in findings] == [("record_crc", seg, pos)]
    with MessageStore.open(path, cfg) as st:
        rep = st.recovery_report
        assert rep.end_offset == puts[-1].phy_offset + puts[-1].wrote_bytes, "data after the flip was cut"
        if crashed:  # the abnormal scan covers the flipped record
            assert [(c.segment, c.offset, c.kind) for c in rep.corrupt_records] == [(seg, r.phy_offset, "record_crc")]
        assert rep.cuts == []
        _never_served(st, r, MID)
        _served_intact(st, puts, MID)
        findings = st.verify(fix=True)
        assert [(f.kind, f.path, f.offset, f.fixed) for f in findings] == [("record_crc", seg, pos, False)]
        # new messages keep flowing; the damaged one stays refused
        assert st.put_message(K.message_for(2, 0, 0)).ok
        _never_served(st, r, MID)


# offsets inside a V1/IPv4 record header (FORMAT.md §2.1) and whether a flip there is caught
# without the properties CRC: True = caught (framing, CRC, PHYSICALOFFSET or the consume queue),
# False = not covered by anything, None = sometimes (verify compares an index item's time, in
# seconds, with STORETIMESTAMP: a flip that changes the second is caught)
HEADER_FIELDS = {
    "TOTALSIZE": (0, 4, True), "MAGICCODE": (4, 4, True), "BODYCRC": (8, 4, True), "QUEUEID": (12, 4, True),
    "FLAG": (16, 4, False), "QUEUEOFFSET": (20, 8, True), "PHYSICALOFFSET": (28, 8, True),
    "SYSFLAG.hosts": (39, 1, None), "BORNTIMESTAMP": (40, 8, False), "BORNHOST": (48, 8, False),
    "STORETIMESTAMP": (56, 8, None), "STOREHOST": (64, 8, False), "RECONSUMETIMES": (72, 4, False),
    "PREPAREDTRANSACTIONOFFSET": (76, 8, False), "BODYLENGTH": (84, 4, True),
}


def _header_flip_cases(rng):
    for name, (off, width, caught) in HEADER_FIELDS.items():
        if name == "SYSFLAG.hosts":
            yield name, off, rng.choice((4, 5)), True  # the IPv6 host bits change the record's length
            continue
        yield name, off + rng.randrange(width), rng.randrange(8), caught


@pytest.mark.parametrize("prop_crc", [False, True], ids=["default", "propcrc"])
def test_header_bit_flips(tmp_path, crash_rng, prop_crc):
    kw = dict(enabled_append_prop_crc=True, force_verify_prop_crc=True) if prop_crc else {}
    cfg = K.crash_config(flush_disk_type="ASYNC_FLUSH", **kw)
    pristine = str(tmp_path / "p")
    puts = _build(pristine, cfg)
    r = puts[MID]
    for n, (name, off, bit, caught) in enumerate(_header_flip_cases(crash_rng)):
        path = str(tmp_path / f"w{n}")
        shutil.copytree(pristine, path)
        seg, pos = kit.segment_of(path, r.phy_offset, cfg.mapped_file_size_commit_log)
        _flip(seg, pos + off, bit)
        with MessageStore.open(path, cfg) as st:
            assert st.recovery_report.end_offset == puts[-1].phy_offset + puts[-1].wrote_bytes, name
            findings = st.verify()
            if caught is None and not prop_crc:
                assert all(f.kind == "index_item" for f in findings), (name, findings)
            elif caught or prop_crc:
                assert findings, f"a flip in {name} went unnoticed"
                assert all(f.path and f.offset is not None for f in findings)
                assert any(f.path == seg and f.offset == pos for f in findings) or \
                    any("consumequeue" in f.path for f in findings), (name, findings)
                _never_served(st, r, MID)
            else:
                # no checksum covers this field without the properties CRC: documented, not detected
                assert findings == [], (name, findings)
            _served_intact(st, puts, MID)


def test_every_byte_of_a_record_is_covered_by_the_properties_crc(tmp_path, crash_rng):
    cfg = K.crash_config(flush_disk_type="ASYNC_FLUSH", enabled_append_prop_crc=True, force_verify_prop_crc=True)
    path = str(tmp_path / "s")
    puts = _build(path, cfg)
    r = puts[MID]
    seg, pos = kit.segment_of(path, r.phy_offset, cfg.mapped_file_size_commit_log)
    with MessageStore.open(path, cfg) as st:
        for off in range(r.wrote_bytes):
            bit = crash_rng.randrange(8)
            _flip(seg, pos + off, bit)  # through the file: the store's mapping sees it at once
            with pytest.raises(CorruptRecordError):
                st.look_message_by_offset(r.phy_offset)
            _flip(seg, pos + off, bit)
        assert K.check_record(st.look_message_by_offset(r.phy_offset))[:2] == (1, MID)


def test_consume_queue_unit_bit_flip(tmp_path, crash_rng):
    cfg = K.crash_config(flush_disk_type="ASYNC_FLUSH")
    path = str(tmp_path / "s")
    puts = _build(path, cfg)
    r = puts[MID]
    e = K.expected(1, MID, MID)
    cq_dir = os.path.join(path, "consumequeue", e["topic"], str(e["queue_id"]))
    unit_pos = r.queue_offset * 20
    file_start = unit_pos - unit_pos % cfg.cq_file_size
    cq_file = os.path.join(cq_dir, f"{file_start:020d}")
    field = crash_rng.choice(("phy", "size", "tags"))
    off = {"phy": crash_rng.randrange(3, 8), "size": crash_rng.randrange(8, 12), "tags": crash_rng.randrange(12, 20)}[field]
    _flip(cq_file, unit_pos - file_start + off, crash_rng.randrange(8))
    with MessageStore.open(path, cfg) as st:
        findings = st.verify()
        assert [(f.kind, f.path, f.offset) for f in findings] == [("cq_unit", cq_file, unit_pos - file_start)], field
        # the record is intact: an unfiltered pull returns it at its queue offset (a damaged phy or
        # size: located by a walk between the sound units around it, and the unit rewritten by the
        # writer); a filtered pull may skip it while its tags code is wrong
        with MessageStore.open(path, cfg, read_only=True) as ro:  # a reader serves it too, writes nothing
            g = ro.get_message("t", e["topic"], e["queue_id"], r.queue_offset, 1)
            assert [m.phy_offset for m in g.messages] == [r.phy_offset] and not g.skipped
        assert [f.kind for f in st.verify()] == ["cq_unit"]
        g = st.get_message("t", e["topic"], e["queue_id"], r.queue_offset, 1)
        assert [m.phy_offset for m in g.messages] == [r.phy_offset] and not g.skipped
        if field != "tags":
            assert st.verify() == []  # the pull rewrote the unit
        else:
            fixed = st.verify(fix=True)
            assert [(f.kind, f.fixed) for f in fixed] == [("cq_unit", True)]
        assert st.verify() == []
        _served_intact(st, puts, -1)
        sub = e["tags"]
        g = st.get_message("t", e["topic"], e["queue_id"], r.queue_offset, 1, subscription=sub)
        assert [m.phy_offset for m in g.messages] == [r.phy_offset]


def test_index_item_bit_flip(tmp_path, crash_rng):
    cfg = K.crash_config(flush_disk_type="ASYNC_FLUSH", max_index_num=4096)  # one index file
    path = str(tmp_path / "s")
    puts = _build(path, cfg)
    idx_dir = os.path.join(path, "index")
    (name,) = os.listdir(idx_dir)
    ipath = os.path.join(idx_dir, name)
    with open(ipath, "rb") as fh:
        data = fh.read()
    count = IF.HEADER.unpack_from(data, 0)[5]
    n = crash_rng.randrange(2, count)
    item = IF.item_pos(cfg.max_hash_slot_num, n)
    field = crash_rng.choice(("hash", "phy", "time", "prev"))
    off = {"hash": crash_rng.randrange(0, 4), "phy": crash_rng.randrange(5, 12), "time": crash_rng.randrange(15, 16),
           "prev": crash_rng.randrange(16, 20)}[field]
    bit = crash_rng.randrange(8) if field != "prev" else crash_rng.randrange(2, 8)
    if field == "hash" and off == 0:
        bit = crash_rng.randrange(7)  # keep the hash >= 0 as a real one is
    _, phy, _, _ = IF.ITEM.unpack_from(data, item)
    _flip(ipath, item + off, bit)
    # the open checks an index file changed since the last clean close: the writer rebuilds it
    copy = str(tmp_path / "copy")
    shutil.copytree(path, copy)
    with MessageStore.open(copy, cfg) as st:
        assert st.derived_files_restored == ["index"], field
        assert st.verify() == []
        for i, r in enumerate(puts):
            e = K.expected(1, i, i)
            for key in e["keys"]:
                assert [m.phy_offset for m in st.query_message(e["topic"], key).messages] == [r.phy_offset]
    # without the record of that close (a store a Java broker closed), verify finds it
    os.unlink(os.path.join(path, "config", "rmqstore-index.json"))
    with MessageStore.open(path, cfg) as st:
        assert st.derived_files_restored == []
        findings = st.verify()
        assert findings, field
        assert any(f.kind == "index_item" and f.path == ipath and f.offset == item for f in findings), (field, findings)
        assert all(f.kind == "index_item" for f in findings)
        # whatever the index now points at, a key query never returns another message
        for i, r in enumerate(puts):
            e = K.expected(1, i, i)
            for key in e["keys"]:
                for m in st.query_message(e["topic"], key).messages:
                    assert K.parse_id(m)[:2] == (1, i)
        fixed = st.verify(fix=True)
        assert fixed and all(f.fixed for f in fixed)
        assert st.verify() == []
        for i, r in enumerate(puts):
            e = K.expected(1, i, i)
            for key in e["keys"]:
                assert [m.phy_offset for m in st.query_message(e["topic"], key).messages] == [r.phy_offset]


def test_corrupt_header_in_the_middle_keeps_the_rest_after_a_crash(tmp_path, crash_rng):
    """A flipped TOTALSIZE in the middle of the data scanned by an abnormal recovery: the bad bytes
    are skipped (not a tail), the queue keeps its offsets (the lost message's unit points at the
    bad bytes and is refused), everything after is dispatched again and served."""
    cfg = K.crash_config(flush_disk_type="ASYNC_FLUSH")
    path = str(tmp_path / "s")
    puts = _build(path, cfg)
    r = puts[MID]
    seg, pos = kit.segment_of(path, r.phy_offset, cfg.mapped_file_size_commit_log)
    _flip(seg, pos + 2, crash_rng.randrange(8))  # TOTALSIZE
    open(os.path.join(path, "abort"), "w").close()
    # the consume queues lose their tail as if the crash came before dispatch
    with MessageStore.open(path, cfg) as st:
        rep = st.recovery_report
        assert [(c.segment, c.offset, c.kind) for c in rep.corrupt_records] == [(seg, r.phy_offset, "record_invalid")]
        assert rep.end_offset == puts[-1].phy_offset + puts[-1].wrote_bytes
        _never_served(st, r, MID)
        _served_intact(st, puts, MID)
        # the bad bytes, the unit pointing at them, and the queue offset missing from the log
        kinds = sorted({f.kind for f in st.verify()})
        assert kinds == ["cq_gap", "cq_unit", "record_invalid"], kinds
