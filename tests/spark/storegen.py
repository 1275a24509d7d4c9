"""Deterministic generated stores for the Spark tests and the benchmark (bench/spark_bench.py).

Messages go in with ``MessageStore.put_messages`` batches (one topic/queue each) with pinned store
times, plus a few single messages the batch path refuses (transactional PREPARED/COMMIT/ROLLBACK,
a delayed message on SCHEDULE_TOPIC_XXXX, IPv6 hosts), so every dispatch rule is exercised: keys
that repeat across messages, UNIQ_KEYs that are duplicated on purpose, non-ASCII keys and tags,
empty bodies, records without properties, and enough messages to roll many commitlog segments,
consume-queue files and index files.
"""
from __future__ import annotations

import os
import random

from rmqstore import Message, MessageStore, MessageStoreConfig

TOPICS = ("Orders", "Payments", "Shipments", "Audit")
QUEUES = 4
TAGS = ("created", "paid", "shipped", "cancelled", "退款", "📦")
BASE_TS = 1_700_000_000_000


def small_config(commitlog: int = 1 << 20) -> MessageStoreConfig:
    """Small segments so that a few hundred thousand messages span many files of every kind."""
    return MessageStoreConfig(mapped_file_size_commit_log=commitlog, mapped_file_size_consume_queue=3000,
                              max_hash_slot_num=512, max_index_num=2048)


def generate(path: str, messages: int, cfg: MessageStoreConfig | None = None, *, seed: int = 11,
             batch: int = 128, body_max: int = 300) -> dict:
    """Write ``messages`` messages into a fresh store at ``path``; returns what was written."""
    cfg = cfg or small_config()
    rng = random.Random(seed)
    ts = BASE_TS
    written = 0
    n_batches = 0
    with MessageStore.open(path, cfg) as st:
        while written < messages:
            topic = TOPICS[n_batches % len(TOPICS)]
            qid = rng.randrange(QUEUES)
            k = min(batch, messages - written)
            msgs = []
            for j in range(k):
                i = written + j
                props: dict[str, str] = {}
                if i % 97 != 5:  # a few records without any property
                    props["TAGS"] = TAGS[i % len(TAGS)]
                    keys = [f"order-{i}"]
                    if i % 3 == 0:
                        keys.append(f"cust-{rng.randrange(500)}")
                    if i % 50 == 0:
                        keys.append("客户-" + str(i % 7))
                    props["KEYS"] = " ".join(keys)
                    # every 1000th message reuses the previous UNIQ_KEY (a duplicate send)
                    u = i - 1 if i % 1000 == 999 else i
                    props["UNIQ_KEY"] = f"7F00000100{u:022X}"
                body = b"" if i % 113 == 0 else rng.randbytes(rng.randint(1, body_max))
                msgs.append(Message(topic=topic, body=body, queue_id=qid, properties=props,
                                    born_timestamp=ts - 5, born_host="10.1.2.3:5000", store_timestamp=ts))
            r = st.put_messages(msgs)
            assert r.ok, r
            written += k
            n_batches += 1
            ts += rng.choice((0, 1, 7, 250, 1000))
            if n_batches % 200 == 1:
                _singles(st, n_batches, ts)
        st.wait_dispatched()
    return {"messages": written, "batches": n_batches, "last_ts": ts}


def _singles(st: MessageStore, n: int, ts: int) -> None:
    """Messages that take the store's general put path."""
    uniq = f"AC10000100{n:022X}"
    for sys_flag in (0x4, 0x8, 0xC):  # PREPARED, COMMIT, ROLLBACK
        st.put_message(Message(topic="TxTopic", body=b"tx", queue_id=0, sys_flag=sys_flag, store_timestamp=ts,
                               properties={"TAGS": "tx", "KEYS": f"tx-{n}", "UNIQ_KEY": uniq}))
    st.put_message(Message(topic="SCHEDULE_TOPIC_XXXX", body=b"later", queue_id=2, store_timestamp=ts,
                           properties={"DELAY": "3", "TAGS": "d", "REAL_TOPIC": "Orders", "REAL_QID": "1",
                                       "KEYS": f"delayed-{n}"}))
    st.put_message(Message(topic="V6Topic", body=b"v6", queue_id=1, born_host="[::1]:7000",
                           store_host="[2001:db8::1]:10911", store_timestamp=ts,
                           properties={"TAGS": "v6", "KEYS": f"v6-{n} v6-{n}"}))


if __name__ == "__main__":  # pragma: no cover - manual use
    import sys
    import time

    t = time.perf_counter()
    out = generate(sys.argv[1], int(sys.argv[2]))
    print(out, f"{time.perf_counter() - t:.1f}s", sum(os.path.getsize(os.path.join(dp, f))
                                                        for dp, _, fs in os.walk(sys.argv[1]) for f in fs))
