"""The ``raw`` section: what is in the Java-written files, read with our codecs directly.

* commitlog walk (MSG / BLANK / END) with the scalar checker and the batch walker;
* every record decoded by the numpy batch decoder AND the scalar decoder;
* consume-queue units, index headers/slots/entries and the checkpoint, read from the files.
"""
from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from rmqstore.engine.commit_log import apply_delay_levels
from rmqstore.engine.dispatch import extract_dispatch_fields
from rmqstore.format import consume_queue as CQ
from rmqstore.format import index_file as IX
from rmqstore.format import message as M
from rmqstore.format import properties as P
from rmqstore.format.checkpoint import FILE_SIZE, CheckpointValues
from rmqstore.format.hashes import crc32
from tests.kit import read_bytes


def _hex32(v: int) -> str:
    return f"0x{v & 0xFFFFFFFF:08X}"


@pytest.fixture(scope="module")
def segments(vset):
    d = vset.store / "commitlog"
    return [(name, int(name), read_bytes(d / name)) for name in sorted(os.listdir(d))]


def _scalar_walk(segments, cfg):
    out = []
    for name, start, buf in segments:
        pos = 0
        while True:
            size, ok, reason = M.check_record(buf, pos, len(buf), check_crc=True,
                                              force_verify_prop_crc=cfg.enabled_append_prop_crc)
            base = {"file": name, "filePos": pos, "phyOffset": start + pos}
            if ok and size > 0:
                rec = apply_delay_levels(M.decode_message(buf, pos, len(buf), check_crc=True), cfg.delay_levels_ms)
                out.append(dict(base, totalSize=size, magic=_hex32(rec.magic), kind="MSG", topic=rec.topic,
                                queueId=rec.queue_id, queueOffset=rec.queue_offset, tagsCode=rec.tags_code,
                                storeTimestamp=rec.store_timestamp, sysFlag=rec.sys_flag,
                                keys=rec.properties.get("KEYS"), uniqKey=rec.uniq_key))
                pos += size
            elif ok:
                total = M.I32.unpack_from(buf, pos)[0]
                assert reason == "blank"
                out.append(dict(base, totalSize=total, magic=_hex32(M.BLANK_MAGIC), kind="BLANK",
                                fileRemainingFromHere=len(buf) - pos))
                break
            else:
                assert reason == "end", reason
                out.append(dict(base, totalSize=0, magic="0x00000000", kind="END", reason="zero header"))
                break
    return out


def _normalise(rec):
    r = dict(rec)
    if r["kind"] == "MSG":
        r.setdefault("keys", None)
        r.setdefault("uniqKey", None)
    return r


def test_commitlog_walk_matches(vset, segments):
    want = [_normalise(r) for r in vset.expected["raw"]["commitlogRecords"]]
    got = _scalar_walk(segments, vset.config)
    assert got == want


def test_batch_walker_finds_the_same_records(vset, segments):
    want = vset.expected["raw"]["commitlogRecords"]
    for name, start, buf in segments:
        starts, stop, stop_pos = M.walk_records(buf, 0, len(buf))
        mine = [r for r in want if r["file"] == name]
        assert [start + int(s) for s in starts] == [r["phyOffset"] for r in mine if r["kind"] == "MSG"]
        assert (stop, start + stop_pos) == (mine[-1]["kind"].lower(), mine[-1]["phyOffset"])


def test_every_segment_ends_with_a_blank_of_at_least_8_bytes(vset, segments):
    """Only the last segment may end without a blank; after the 8-byte blank header the file is
    zero (FORMAT.md §2.5)."""
    blanks = {r["file"]: r for r in vset.expected["raw"]["commitlogRecords"] if r["kind"] == "BLANK"}
    assert len(blanks) == len(segments) - 1
    for name, start, buf in segments[:-1]:
        b = blanks[name]
        assert b["totalSize"] >= 8 and b["filePos"] + b["totalSize"] == len(buf)
        assert buf[b["filePos"]:b["filePos"] + 8] == M.encode_blank(b["totalSize"])
        assert not any(buf[b["filePos"] + 8:])


def _batch(segments):
    for name, start, buf in segments:
        starts, _, _ = M.walk_records(buf, 0, len(buf))
        u8 = np.frombuffer(buf, dtype=np.uint8)
        yield start, buf, u8, M.decode_batch(u8, starts)


def test_messages_batch_decode(vset, segments):
    exp = vset.messages_by_phy
    cfg = vset.config
    seen = 0
    for start, buf, u8, b in _batch(segments):
        assert b.valid.all()
        assert M.body_crc_ok(buf, b).all()
        _, tags_codes, key_lists = extract_dispatch_fields(buf, b, cfg.delay_levels_ms, {})
        for i in range(len(b)):
            m = exp[start + int(b.starts[i])]
            seen += 1
            bh, sh, body = (int(b.born_host_pos[i]), int(b.store_host_pos[i]), int(b.body_pos[i]))
            tp, pp = int(b.topic_pos[i]), int(b.props_pos[i])
            got = {
                "phyOffset": int(b.phy_offset[i]), "storeSize": int(b.total[i]), "magic": _hex32(int(b.magic[i])),
                "queueId": int(b.queue_id[i]), "queueOffset": int(b.queue_offset[i]), "flag": int(b.flag[i]),
                "sysFlag": int(b.sys_flag[i]), "bodyCRC": int(b.body_crc[i]),
                "bornTimestamp": int(b.born_timestamp[i]), "storeTimestamp": int(b.store_timestamp[i]),
                "bornHostBytes": u8[bh:bh + int(b.born_host_len[i])].tobytes().hex().upper(),
                "storeHostBytes": u8[sh:sh + int(b.store_host_len[i])].tobytes().hex().upper(),
                "reconsumeTimes": int(b.reconsume_times[i]),
                "preparedTransactionOffset": int(b.prepared_transaction_offset[i]),
                "bodyLength": int(b.body_len[i]),
                "bodySha256": hashlib.sha256(u8[body:body + int(b.body_len[i])].tobytes()).hexdigest(),
                "topic": u8[tp:tp + int(b.topic_len[i])].tobytes().decode("utf-8"),
                "propertiesRaw": u8[pp:pp + int(b.props_len[i])].tobytes().decode("utf-8"),
                "dispatchTagsCode": int(tags_codes[i]),
            }
            assert got == {k: m[k] for k in got}
            keys = ([f"{m['topic']}#{m['uniqKey']}"] if m.get("uniqKey") else []) + [
                f"{m['topic']}#{k}" for k in (m.get("keys") or "").split(" ") if k]
            assert key_lists[i] == keys
    assert seen == len(vset.input["messages"])


def test_messages_scalar_decode(vset, segments):
    exp = vset.messages_by_phy
    cfg = vset.config
    seen = 0
    for name, start, buf in segments:
        starts, _, _ = M.walk_records(buf, 0, len(buf))
        for pos in starts.tolist():
            m = exp[start + pos]
            seen += 1
            rec = apply_delay_levels(M.decode_message(buf, pos, len(buf), check_crc=True,
                                                      force_verify_prop_crc=cfg.enabled_append_prop_crc),
                                     cfg.delay_levels_ms)
            lay = M.read_layout(buf, pos, len(buf))
            got = {
                "phyOffset": rec.phy_offset, "storeSize": rec.store_size, "magic": _hex32(rec.magic),
                "topic": rec.topic, "queueId": rec.queue_id, "queueOffset": rec.queue_offset, "flag": rec.flag,
                "sysFlag": rec.sys_flag, "bodyCRC": rec.body_crc, "bornTimestamp": rec.born_timestamp,
                "bornHost": rec.born_host, "storeTimestamp": rec.store_timestamp, "storeHost": rec.store_host,
                "reconsumeTimes": rec.reconsume_times, "preparedTransactionOffset": rec.prepared_transaction_offset,
                "bodyLength": len(rec.body), "bodySha256": hashlib.sha256(rec.body).hexdigest(),
                "properties": rec.properties, "offsetMsgId": rec.msg_id, "transactionType": rec.transaction_type,
                "dispatchTagsCode": rec.tags_code,
                "propertiesRaw": buf[pos + lay.props_pos:pos + lay.props_pos + lay.props_len].decode("utf-8"),
            }
            assert got == {k: m[k] for k in got}
            assert rec.tags == m.get("tags") and rec.uniq_key == m.get("uniqKey")
            assert crc32(rec.body) == m["bodyCRC"] or not rec.body
            if "bodyText" in m:
                assert rec.body.decode("utf-8") == m["bodyText"]
    assert seen == len(vset.input["messages"])


def test_property_crc_entries(vset, segments):
    """propcrc: every record carries ``__CRC32#`` = crc32(record minus its last 20 bytes), written
    least-significant digit first; other sets carry none."""
    crc_mode = vset.config.enabled_append_prop_crc
    assert crc_mode == (vset.name == "propcrc")
    n = 0
    for name, start, buf in segments:
        starts, _, _ = M.walk_records(buf, 0, len(buf))
        for pos in starts.tolist():
            lay = M.read_layout(buf, pos, len(buf))
            props = buf[pos + lay.props_pos:pos + lay.props_pos + lay.props_len]
            if not crc_mode:
                assert P.CRC32_KEY.encode() not in props
                continue
            n += 1
            want = crc32(buf[pos:pos + lay.total - 20])
            assert props.endswith(b"__CRC32#\x01" + P.crc_digits(want) + b"\x02")
            assert P.parse_crc_digits(P.parse_properties(props)[P.CRC32_KEY]) == want
            assert M.verify_prop_crc(buf, pos, lay) == ""
    assert n == (len(vset.input["messages"]) if crc_mode else 0)


# ------------------------------------------------------------------------------------------------
# Consume queues, index files, checkpoint
# ------------------------------------------------------------------------------------------------

def test_consume_queue_units(vset):
    raw = vset.expected["raw"]["consumeQueues"]
    root = vset.store / "consumequeue"
    assert sorted(os.listdir(root)) == sorted(raw)
    for topic, queues in raw.items():
        assert sorted(os.listdir(root / topic), key=int) == sorted(queues, key=int)
        for qid, q in queues.items():
            d = root / topic / qid
            names = sorted(os.listdir(d))
            assert [{"name": n, "size": os.path.getsize(d / n)} for n in names] == q["files"]
            data = b"".join(read_bytes(d / n) for n in names)
            units = CQ.decode_units(data)
            n = len(q["units"])
            got = [[i, int(u["phy_offset"]), int(u["size"]), int(u["tags_code"])] for i, u in enumerate(units[:n])]
            assert got == q["units"]
            assert [list(CQ.UNIT.unpack_from(data, i * 20)) for i in range(n)] == [u[1:] for u in q["units"]]
            assert not any(data[n * 20:])  # the rest of the queue is zero
            assert int(names[0]) == 0 and all(int(b) - int(a) == vset.config.cq_file_size
                                              for a, b in zip(names, names[1:]))


def test_index_files(vset):
    raw = vset.expected["raw"]["indexFiles"]
    cfg = vset.config
    d = vset.store / "index"
    names = sorted(os.listdir(d))
    assert names == [f["name"] for f in raw]
    for name, f in zip(names, raw):
        buf = read_bytes(d / name)
        assert len(buf) == f["size"] == IX.file_size(cfg.max_hash_slot_num, cfg.max_index_num)
        hdr = IX.HEADER.unpack_from(buf, 0)
        assert list(hdr) == [f["beginTimestamp"], f["endTimestamp"], f["beginPhyOffset"], f["endPhyOffset"],
                             f["hashSlotCount"], f["indexCount"]]
        slots = np.frombuffer(buf, dtype=">i4", count=cfg.max_hash_slot_num, offset=IX.HEADER_SIZE)
        assert [[int(s), int(slots[s])] for s in np.flatnonzero(slots)] == f["slots"]
        assert len(f["slots"]) == f["hashSlotCount"]
        count = f["indexCount"]
        entries = [[n, *IX.ITEM.unpack_from(buf, IX.item_pos(cfg.max_hash_slot_num, n))] for n in range(1, count)]
        assert entries == f["entries"]
        items = np.frombuffer(buf, dtype=IX.ITEM_DTYPE, offset=IX.item_pos(cfg.max_hash_slot_num, 0))
        assert [[n, *map(int, items[n].tolist())] for n in range(1, count)] == f["entries"]
        assert not any(buf[IX.item_pos(cfg.max_hash_slot_num, 0):IX.item_pos(cfg.max_hash_slot_num, 1)])
        assert not any(buf[IX.item_pos(cfg.max_hash_slot_num, count):])


def test_index_file_timediff_is_seconds_since_begin(vset):
    """timeDiff of each entry is (storeTime - beginTimestamp) // 1000 of the record it points to,
    except the first entry of a successor file (computed against the previous file's end)."""
    by_phy = vset.messages_by_phy
    raw = vset.expected["raw"]["indexFiles"]
    prev_end = 0
    for f in raw:
        for n, h, phy, diff, prev in f["entries"]:
            ts = by_phy[phy]["storeTimestamp"]
            begin = prev_end if (n == 1 and prev_end > 0) else f["beginTimestamp"]
            want = 0 if begin <= 0 else max(0, min((ts - begin) // 1000, 2**31 - 1))
            assert diff == want == IX.time_diff_seconds(ts, begin), (f["name"], n)
        prev_end = f["endTimestamp"]


def test_checkpoint_file(vset):
    buf = read_bytes(vset.store / "checkpoint")
    assert len(buf) == FILE_SIZE
    cp = CheckpointValues.unpack(buf)
    want = vset.expected["raw"]["checkpoint"]
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp,
            cp.master_flushed_offset, cp.confirm_phy_offset) == (
        want["physicMsgTimestamp"], want["logicsMsgTimestamp"], want["indexMsgTimestamp"],
        want["masterFlushedOffset"], want["confirmPhyOffset"])
    assert cp.pack() == buf
