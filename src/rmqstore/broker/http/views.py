"""The JSON admin API's read answers, as plain dicts from a running broker's state and its store
(computed on request: nothing here is kept between requests)."""
from __future__ import annotations

import base64
import os
import shutil
import time

from ...errors import RmqStoreError
from ...format.compression import describe_sys_flag
from ..traffic import is_retry_or_dlq, is_system_group, is_system_topic

#: most messages one search answers
SEARCH_MAX = 64


def broker_info(b) -> dict:
    cfg, store = b.cfg, b.store
    ha = getattr(store, "ha", None)
    role = getattr(store.cfg, "broker_role", None) or ("SLAVE" if b.read_only else "ASYNC_MASTER")
    return {"brokerName": cfg.broker_name, "cluster": cfg.broker_cluster_name, "address": b.address,
            "role": str(getattr(role, "value", role)), "readOnly": b.read_only, "store": store.path,
            "grpc": b.grpc_address or None, "connections": len(b.server.connections),
            "minPhyOffset": store.min_phy_offset, "maxPhyOffset": store.max_phy_offset,
            "slaves": [{"peer": str(p), "ackOffset": a, "lastReportAgeMs": int((time.monotonic() - t) * 1000)}
                       for p, a, t in ha.slaves()] if ha else [],
            "inTotal": b.traffic.puts, "outTotal": b.traffic.gets, "now": int(time.time() * 1000)}


def _queue_ids(b, topic: str, stored: dict[str, list[int]] | None = None) -> list[int]:
    """The topic's configured queues and those the store holds (``stored``: ``store.topics()``,
    computed once by a caller that asks for many topics)."""
    tc = b.topics.get(topic) or {}
    n = max(int(tc.get("readQueueNums", 0)), int(tc.get("writeQueueNums", 0)))
    stored = b.store.topics() if stored is None else stored
    return sorted(set(range(n)) | set(stored.get(topic, [])))


def queues(b, topic: str, stored: dict[str, list[int]] | None = None) -> list[dict]:
    store = b.store
    out = []
    for q in _queue_ids(b, topic, stored):
        lo, hi = store.get_min_offset_in_queue(topic, q), store.get_max_offset_in_queue(topic, q)
        last = store.get_message_store_timestamp(topic, q, hi - 1) if hi > lo else 0
        out.append({"queueId": q, "minOffset": lo, "maxOffset": hi, "lastUpdateTimestamp": max(0, last)})
    return out


def topics(b) -> list[dict]:
    out = []
    stored = b.store.topics()
    for name, tc in sorted(list(b.topics.table.items())):
        qs = queues(b, name, stored)
        out.append({"topic": name, "readQueueNums": tc.get("readQueueNums"), "writeQueueNums": tc.get("writeQueueNums"),
                    "perm": tc.get("perm"), "system": is_system_topic(name) or is_retry_or_dlq(name),
                    "messages": sum(q["maxOffset"] - q["minOffset"] for q in qs)})
    return out


def _lag_pairs(b) -> list[tuple[str, str]]:
    """(group, topic) of every group with committed offsets (but the broker's own ``CID_RMQ_SYS_``
    progress groups) or a live consumer's subscription."""
    pairs = {(g, t) for t, g in b.store.consumer_offsets.table() if not is_system_group(g)}
    for name, g in list(b.clients.consumers.items()):
        pairs.update((name, t) for t in g.subscriptions)
    return sorted(pairs)


def group_lag_rows(b, per_queue: bool = False) -> list[dict]:
    """Lag per (group, topic), as RocketMQ 5's ``ConsumerLagCalculator`` counts it: ``inflight``
    (messages a consumer holds: pulled past its committed offset -- the broker's pull offsets -- or
    received by pop and not acked), ``lag`` (messages not committed; a pop group's received-but-not-
    acked ones included, its offset having moved past them), so that ``lag - inflight`` is what is
    ready to be delivered; ``earliest_unconsumed_ms`` (store time of the oldest not committed, 0 when
    none); with ``per_queue`` each queue's broker and consumer offsets."""
    store = b.store
    rows = []
    stored = store.topics()
    popped = b.pops.in_flight_by_queue()
    for group, topic in _lag_pairs(b):
        committed = store.consumer_offsets.query_offsets(group, topic)
        pulled = store.consumer_offsets.query_pull_offsets(group, topic)
        lag, inflight, earliest, detail = 0, 0, 0, []
        for q in sorted(set(_queue_ids(b, topic, stored)) | set(committed)):
            hi = store.get_max_offset_in_queue(topic, q)
            lo = store.get_min_offset_in_queue(topic, q)
            off = committed.get(q)
            at = lo if off is None or off < lo else off
            received = popped.get((group, topic, q), 0)  # by pop, not acked
            held = received
            if off is not None and q in pulled:
                held += max(0, min(pulled[q], hi) - at)
            n = max(0, hi - at) + received
            lag += n
            inflight += held
            if n:
                ts = store.get_message_store_timestamp(topic, q, at)
                if ts > 0 and (earliest == 0 or ts < earliest):
                    earliest = ts
            if per_queue:
                detail.append({"queueId": q, "brokerOffset": hi, "consumerOffset": -1 if off is None else off,
                               "lag": n, "inflight": held})
        row = {"group": group, "topic": topic, "lag": lag, "earliest_unconsumed_ms": earliest, "inflight": inflight}
        if per_queue:
            row["queues"] = detail
        rows.append(row)
    return rows


def groups(b) -> list[dict]:
    rows = group_lag_rows(b)
    names = sorted(set(b.groups.table) | set(b.clients.consumers) | {r["group"] for r in rows})
    out = []
    for name in names:
        live = b.clients.consumers.get(name)
        mine = [r for r in rows if r["group"] == name]
        out.append({"group": name, "online": len(live.channels) if live else 0,
                    "consumeType": live.consume_type if live else None,
                    "messageModel": live.message_model if live else None, "system": is_system_group(name),
                    "lag": sum(r["lag"] for r in mine), "topics": [r["topic"] for r in mine]})
    return out


def group_detail(b, group: str) -> dict:
    rows = [r for r in group_lag_rows(b, per_queue=True) if r["group"] == group]
    now = int(time.time() * 1000)
    for r in rows:
        r["lagLatencyMs"] = now - r["earliest_unconsumed_ms"] if r["earliest_unconsumed_ms"] else 0
    return {"group": group, "topics": rows, "lag": sum(r["lag"] for r in rows), "now": now}


def clients(b) -> dict:
    def conn(c):
        return {"clientId": getattr(c, "client_id", None), "addr": c.peer, "language": c.language,
                "version": c.version}
    return {"producers": [{"group": g, "connections": [conn(c) for c in list(chans)]}
                          for g, chans in sorted(list(b.clients.producers.items())) if chans],
            "consumers": [{"group": n, "consumeType": g.consume_type, "messageModel": g.message_model,
                           "subscriptions": sorted(g.subscriptions), "connections": [conn(c) for c in list(g.channels)]}
                          for n, g in sorted(list(b.clients.consumers.items()))]}


def message(rec) -> dict:
    """One record, decoded: its body (decompressed when the producer compressed it) as text when it
    is UTF-8, and always as base64; every SYSFLAG bit by name."""
    flags = describe_sys_flag(rec.sys_flag)
    body, note = bytes(rec.body), None
    if flags["compression"]:
        try:
            body = rec.decoded_body
        except (ImportError, ValueError) as e:  # a missing codec, damaged bytes: the stored bytes shown
            note = f"stored bytes shown: {e}"
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {"msgId": rec.msg_id, "uniqKey": rec.properties.get("UNIQ_KEY"), "topic": rec.topic,
            "queueId": rec.queue_id, "queueOffset": rec.queue_offset, "phyOffset": rec.phy_offset,
            "storeSize": rec.store_size, "flag": rec.flag, "sysFlag": rec.sys_flag, "bodyCRC": rec.body_crc,
            "bornTimestamp": rec.born_timestamp, "bornHost": rec.born_host, "storeTimestamp": rec.store_timestamp,
            "storeHost": rec.store_host, "reconsumeTimes": rec.reconsume_times,
            "preparedTransactionOffset": rec.prepared_transaction_offset, "tags": rec.properties.get("TAGS"),
            "keys": rec.properties.get("KEYS"), "properties": dict(rec.properties), "bodyLength": len(body),
            "storedBodyLength": len(rec.body), "sysFlagBits": flags, "bodyNote": note,
            "body": text, "bodyBase64": base64.b64encode(body).decode()}


def search(b, q: dict) -> list[dict]:
    """Messages by key, by (offset) msgId, by unique key (client msgId), or by store time; ``q``
    holds ``topic``, ``key``, ``msgId``, ``uniqKey``, ``begin`` and ``end`` (ms), each optional."""
    store = b.store
    topic, key, msg_id, uniq_key = (str(q.get(k) or "") for k in ("topic", "key", "msgId", "uniqKey"))
    begin_ms, end_ms = int(q.get("begin") or 0), int(q.get("end") or 0) or 2**63 - 1
    if msg_id:
        try:
            rec = store.view_message_by_id(msg_id)
        except (RmqStoreError, ValueError):
            rec = None
        if rec is not None:
            return [message(rec)]
        if not topic:
            return []
        uniq_key = msg_id
    if not topic:
        raise ValueError("a search by key, unique key or time needs a topic")
    if uniq_key:
        return [message(r) for r in store.query_message_by_unique_key(topic, uniq_key, begin_ms, end_ms).messages]
    if key:
        return [message(r) for r in store.query_message(topic, key, SEARCH_MAX, begin_ms, end_ms).messages]
    return _by_time(b, topic, begin_ms, end_ms)


def _by_time(b, topic: str, begin_ms: int, end_ms: int) -> list[dict]:
    store = b.store
    out = []
    for q in _queue_ids(b, topic):
        off = store.get_offset_in_queue_by_time(topic, q, begin_ms, "lower")
        hi = store.get_max_offset_in_queue(topic, q)
        while off < hi and len(out) < SEARCH_MAX:
            rec = store.look_message_by_offset(store.get_commit_log_offset_in_queue(topic, q, off))
            off += 1
            if rec is None or rec.store_timestamp > end_ms:
                break
            if rec.store_timestamp >= begin_ms:
                out.append(message(rec))
    return sorted(out, key=lambda m: m["storeTimestamp"])


def dispatch_behind(store) -> int:
    reput = getattr(store, "reput", None)
    return reput.behind_bytes() if reput is not None else 0


def health(b, last_verify: dict | None) -> dict:
    store = b.store
    cl = store.commit_log
    usage = shutil.disk_usage(store.path)
    segs = [{"name": os.path.basename(mf.path), "fromOffset": mf.file_from_offset, "fileSize": mf.file_size,
             "wrotePosition": mf.wrote_position} for mf in list(cl.queue.files)]
    idx = [{"name": f.name, "indexCount": f.index_count - 1, "maxIndex": f.index_num, "beginTimestamp": f.begin_ts,
            "endTimestamp": f.end_ts, "beginPhyOffset": f.begin_phy, "endPhyOffset": f.end_phy}
           for f in list(store.index_service.files)]
    return {"disk": {"path": store.path, "total": usage.total, "used": usage.total - usage.free, "free": usage.free,
                     "usedRatio": round((usage.total - usage.free) / usage.total, 4) if usage.total else 0},
            "commitlog": {"minOffset": cl.min_offset, "confirmOffset": cl.confirm_offset,
                          "flushedOffset": cl.flushed_offset, "segments": segs},
            "consumeQueues": len(store.consume_queues), "indexFiles": idx,
            "flushBehindBytes": max(0, cl.confirm_offset - cl.flushed_offset),
            "dispatchBehindBytes": dispatch_behind(store), "lastVerify": last_verify}


__all__ = ["broker_info", "topics", "queues", "group_lag_rows", "groups", "group_detail", "clients", "message",
           "search", "health", "SEARCH_MAX"]
