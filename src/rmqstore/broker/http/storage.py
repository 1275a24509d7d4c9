"""The storage view: where one message lives on disk, field by field.

* its commit-log record: every field with its offset in the record, its size, the raw bytes and the
  decoded value (the fixed part from the one field list, ``format.record_layout``; then body, topic
  and properties);
* its consume-queue unit: the file, the position and the 20 bytes (commit-log offset, size, tags code);
* for each of its keys (``KEYS`` words and ``UNIQ_KEY``): the index file, the hash of ``topic#key``, the
  slot it falls in and the hash chain from the slot's newest item back to the item naming this record.
"""
from __future__ import annotations

import os
import struct

from ...format import consume_queue as CQ
from ...format import index_file as IX
from ...format import record_layout as RL
from ...format.hashes import crc32, index_key_hash

#: the most chain items one key's walk shows
CHAIN_MAX = 64


def _field(name, offset, raw: bytes, value) -> dict:
    return {"name": name, "offset": offset, "size": len(raw), "hex": raw.hex(), "value": value}


def record_fields(raw: bytes) -> list[dict]:
    """Every field of the record ``raw`` (one whole record) in order."""
    sys_flag = struct.unpack_from(">i", raw, RL.V4.offset["sys_flag"])[0]
    layout = RL.layout_of(sys_flag)
    values = layout.struct.unpack_from(raw, 0)
    out = []
    for (name, pos), value in zip(layout.offset.items(), values):
        size = struct.calcsize(">" + layout.formats[name])
        if isinstance(value, bytes):
            value = ".".join(str(x) for x in value) if len(value) == 4 else value.hex()
        out.append(_field(name, pos, raw[pos:pos + size], value))
    pos = layout.size
    body_len = values[-1]
    body = raw[pos:pos + max(body_len, 0)]
    out.append(_field("body", pos, body, {"crc32": crc32(body), "length": len(body)}))
    pos += len(body)
    width = RL.TOPIC_LEN_V2 if values[1] == RL.MAGIC_V2 else RL.TOPIC_LEN_V1
    tlen = int.from_bytes(raw[pos:pos + width], "big")
    out.append(_field("topic_len", pos, raw[pos:pos + width], tlen))
    pos += width
    out.append(_field("topic", pos, raw[pos:pos + tlen], raw[pos:pos + tlen].decode("utf-8", "replace")))
    pos += tlen
    plen = struct.unpack_from(">h", raw, pos)[0]
    out.append(_field("properties_len", pos, raw[pos:pos + 2], plen))
    pos += 2
    props = raw[pos:pos + max(plen, 0)]
    out.append(_field("properties", pos, props, props.decode("utf-8", "replace").replace("\x01", "=")
                      .replace("\x02", "; ")))
    for f in out:
        if len(f["hex"]) > 512:
            f["hex"] = f["hex"][:512] + "..."
    return out


def cq_unit(store, topic: str, queue_id: int, queue_offset: int) -> dict | None:
    cq = store.find_consume_queue(topic, queue_id)
    pos = queue_offset * CQ.UNIT_SIZE
    mf = cq.queue.find(pos)
    unit = cq.get_unit(queue_offset)
    if mf is None or unit is None:
        return None
    at = pos - mf.file_from_offset
    raw = bytes(mf.read(at, CQ.UNIT_SIZE))
    return {"file": os.path.relpath(mf.path, store.path), "position": at, "logicOffset": pos,
            "hex": raw.hex(), "phyOffset": unit[0], "size": unit[1], "tagsCode": unit[2]}


def _chain(f, key_hash: int, phy: int) -> dict:
    slot = key_hash % f.slot_num
    mm = f.mf.mm
    head = IX.SLOT.unpack_from(mm, IX.slot_pos(slot))[0]
    items, n, found = [], head, False
    while 0 < n < min(f.index_count, f.index_num) and len(items) < CHAIN_MAX:
        h, item_phy, diff, prev = IX.ITEM.unpack_from(mm, IX.item_pos(f.slot_num, n))
        hit = h == key_hash and item_phy == phy
        items.append({"item": n, "position": IX.item_pos(f.slot_num, n), "keyHash": h, "phyOffset": item_phy,
                      "timeDiff": diff, "prevIndex": prev, "match": hit})
        if hit:
            found = True
            break
        if prev <= 0 or prev >= n:
            break
        n = prev
    return {"file": f.name, "slotNum": f.slot_num, "slot": slot, "slotPosition": IX.slot_pos(slot),
            "slotHead": head, "chain": items, "found": found}


def index_chains(store, rec) -> list[dict]:
    keys = [k for k in (rec.properties.get("KEYS") or "").split(" ") if k]
    uniq = rec.properties.get("UNIQ_KEY")
    out = []
    files = [f for f in list(store.index_service.files) if f.begin_phy <= rec.phy_offset <= f.end_phy or
             f.begin_phy == 0]
    for key in keys + ([uniq] if uniq else []):
        h = index_key_hash(rec.topic, key)
        walks = [_chain(f, h, rec.phy_offset) for f in files]
        hit = [w for w in walks if w["found"]]
        out.append({"key": key, "uniqKey": key == uniq, "indexKey": f"{rec.topic}#{key}", "keyHash": h,
                    "files": hit or walks[-1:]})
    return out


def storage_view(store, phy: int) -> dict | None:
    """The storage of the record at commit-log offset ``phy`` (None when no record starts there)."""
    rec = store.look_message_by_offset(phy)
    if rec is None:
        return None
    raw = store.commit_log.get_data(phy, rec.store_size)
    if raw is None:
        return None
    seg = store.commit_log.queue.find(phy)
    return {"phyOffset": phy, "storeSize": rec.store_size,
            "segment": {"file": os.path.relpath(seg.path, store.path), "position": phy - seg.file_from_offset},
            "fields": record_fields(bytes(raw)),
            "consumeQueue": cq_unit(store, rec.topic, rec.queue_id, rec.queue_offset),
            "index": index_chains(store, rec)}


__all__ = ["storage_view", "record_fields", "cq_unit", "index_chains", "CHAIN_MAX"]
