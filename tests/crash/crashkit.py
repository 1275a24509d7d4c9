"""Shared pieces of the crash tests and of ``scripts/soak_kill9``: a deterministic workload, a
writer process that reports every acknowledged put through a pipe, kill -9 rounds, and the
checks a store must pass afterwards.

Every message carries an ``ID`` property ``"<writer>.<seq>.<base>.<n>"`` from which all its
content (topic, queue, body, keys, tags) is derived again, so any record found in a store can be
checked byte for byte without keeping the messages around. ``base`` is the first seq of its put
and ``n`` the number of messages in it (a batch, ``put_messages``, is all or nothing).
"""
from __future__ import annotations

import hashlib
import os
import random
import select
import signal
import threading
import time
from dataclasses import dataclass, field

from rmqstore import Message, MessageStore, MessageStoreConfig, PutMessageStatus
from rmqstore.errors import StoreLockedError

TOPICS = ("CrashA", "CrashB")
QUEUES = 4
BATCH = 3


def crash_config(**kw) -> MessageStoreConfig:
    """Small segments: commitlog, consume-queue and index files all roll under load."""
    base = dict(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=100 * 20,
                max_hash_slot_num=64, max_index_num=256, flush_disk_type="SYNC_FLUSH",
                flush_interval_commit_log=50, flush_interval_consume_queue=100)
    base.update(kw)
    return MessageStoreConfig(**base)


# ------------------------------------------------------------------------------------------------
# Deterministic messages
# ------------------------------------------------------------------------------------------------

def body_of(wid: int, seq: int) -> bytes:
    n = (seq * 37 + wid * 11) % 300
    seed = hashlib.blake2b(f"{wid}.{seq}".encode(), digest_size=64).digest()
    return (seed * (n // 64 + 1))[:n]


def expected(wid: int, seq: int, base: int) -> dict:
    return {
        "topic": TOPICS[(wid + base) % len(TOPICS)],
        "queue_id": (wid * 7 + base) % QUEUES,
        "body": body_of(wid, seq),
        "keys": [f"k{wid}.{seq}"] + ([f"x{wid}.{seq}"] if seq % 5 == 0 else []),
        "tags": f"T{seq % 3}",
    }


def message_for(wid: int, seq: int, base: int, n: int = 1) -> Message:
    e = expected(wid, seq, base)
    return Message.create(e["topic"], e["body"], tags=e["tags"], keys=e["keys"], queue_id=e["queue_id"],
                          properties={"ID": f"{wid}.{seq}.{base}.{n}"})


def parse_id(rec) -> tuple[int, int, int, int]:
    w, s, b, n = rec.properties["ID"].split(".")
    return int(w), int(s), int(b), int(n)


def check_record(rec) -> tuple[int, int, int, int]:
    """The record's ID after checking every field against the content its ID implies."""
    wid, seq, base, _n = parse_id(rec)
    e = expected(wid, seq, base)
    assert rec.topic == e["topic"], (rec.phy_offset, rec.topic, e["topic"])
    assert rec.queue_id == e["queue_id"], (rec.phy_offset, rec.queue_id)
    assert rec.body == e["body"], (rec.phy_offset, "body differs")
    assert rec.keys == e["keys"], (rec.phy_offset, rec.keys, e["keys"])
    assert rec.tags == e["tags"], (rec.phy_offset, rec.tags)
    return wid, seq, base, _n


# ------------------------------------------------------------------------------------------------
# The writer process
# ------------------------------------------------------------------------------------------------

def writer_main(store_path: str, cfg: MessageStoreConfig, ack_fd: int, wid_base: int, threads: int, seed: int,
                batch_p: float) -> None:
    """Open the store and put messages from ``threads`` threads forever. After each PUT_OK,
    ``A wid seq n phy qoff`` is written to ``ack_fd`` (one write: atomic on a pipe), so the parent
    counts a put only once the store has acknowledged it."""
    try:
        st = MessageStore.open(store_path, cfg)
    except StoreLockedError:
        os.write(ack_fd, b"L\n")
        return
    os.write(ack_fd, b"R\n")

    def work(t: int) -> None:
        wid = wid_base + t
        rng = random.Random(seed * 1009 + t)
        seq = 0
        while True:
            if rng.random() < batch_p:
                r = st.put_messages([message_for(wid, seq + j, seq, BATCH) for j in range(BATCH)])
                n = BATCH
            else:
                r = st.put_message(message_for(wid, seq, seq))
                n = 1
            if r.status is PutMessageStatus.PUT_OK:
                os.write(ack_fd, f"A {wid} {seq} {n} {r.phy_offset} {r.queue_offset}\n".encode())
            else:
                os.write(ack_fd, f"F {wid} {seq} {n} {r.status.value}\n".encode())
            seq += n

    ts = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


@dataclass
class Ack:
    wid: int
    seq: int
    n: int
    phy: int
    qoff: int


@dataclass
class RoundResult:
    acks: list[Ack] = field(default_factory=list)
    failed: int = 0
    ready: bool = False
    killed_after_s: float = 0.0


def kill_round(store_path: str, cfg: MessageStoreConfig, rng: random.Random, *, wid_base: int, threads: int = 3,
               max_run_s: float = 0.5, early_kill_p: float = 0.15, batch_p: float = 0.1) -> RoundResult:
    """Fork a writer, let it run a random time (sometimes killing it while it is still opening
    and recovering the store), SIGKILL it, and return the puts it reported as acknowledged."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(r)
            writer_main(store_path, cfg, w, wid_base, threads, rng.randrange(1 << 30), batch_p)
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    res = RoundResult()
    buf = bytearray()
    t0 = time.monotonic()
    early = rng.random() < early_kill_p
    deadline = t0 + (rng.uniform(0.0, 0.3) if early else 30.0)
    ready_at = None
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                break
            rl, _, _ = select.select([r], [], [], max(0.0, deadline - now))
            if rl:
                chunk = os.read(r, 65536)
                if not chunk:
                    break
                buf += chunk
                if ready_at is None and b"R\n" in buf:
                    ready_at = time.monotonic()
                    res.ready = True
                    if not early:
                        deadline = ready_at + rng.uniform(0.0, max_run_s)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    res.killed_after_s = time.monotonic() - t0
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        buf += chunk
    os.close(r)
    for line in bytes(buf).split(b"\n")[:-1]:  # a line without its newline was never complete
        parts = line.split()
        if parts and parts[0] == b"A":
            res.acks.append(Ack(*(int(x) for x in parts[1:6])))
        elif parts and parts[0] == b"F":
            res.failed += 1
        elif parts and parts[0] == b"L":
            raise AssertionError("the writer found the store locked")
    return res


# ------------------------------------------------------------------------------------------------
# Checks
# ------------------------------------------------------------------------------------------------

def all_records(st: MessageStore):
    """Every message reachable through the consume queues: ``{id: record}``, checked field by
    field; duplicates are an error."""
    found = {}
    for topic, qids in st.topics().items():
        for qid in qids:
            off = st.get_min_offset_in_queue(topic, qid)
            hi = st.get_max_offset_in_queue(topic, qid)
            while off < hi:
                g = st.get_message("check", topic, qid, off, 32)
                assert g.messages or g.next_begin_offset > off, (topic, qid, off, g.status)
                for rec in g.messages:
                    key = check_record(rec)
                    assert key not in found, f"message {key} appears twice"
                    assert rec.queue_offset >= off
                    found[key] = rec
                off = g.next_begin_offset
    return found


def check_store(st: MessageStore, acked: list[Ack], *, query_sample: list[Ack] | None = None) -> dict:
    """After a crash: every acknowledged message readable and identical (by its commitlog offset,
    through its consume queue, by key), nothing else half-visible (every record complete and
    consistent with its ID, batches all or nothing), verify() clean. Key queries run for
    ``query_sample`` (default: every acknowledged put); verify() proves the rest: it fails when any
    keyed record in the commitlog has a key no index item finds, or an item's chain is broken."""
    found = all_records(st)
    by_id = {(w, s): rec for (w, s, b, n), rec in found.items()}
    for a in acked:
        for j in range(a.n):
            hit = by_id.get((a.wid, a.seq + j))
            assert hit is not None, f"acknowledged message {a.wid}.{a.seq + j} is lost"
        rec = st.look_message_by_offset(a.phy)
        assert rec is not None and parse_id(rec)[:2] == (a.wid, a.seq), (a, rec and rec.properties)
        check_record(rec)
        g = st.get_message("check", rec.topic, rec.queue_id, a.qoff, 1)
        assert g.messages and g.messages[0].phy_offset == a.phy, (a, g.status)
    # puts are all or nothing: every put whose messages are visible is visible whole
    puts: dict[tuple[int, int], list[int]] = {}
    for (w, s, b, n) in found:
        puts.setdefault((w, b), [n, 0])[1] += 1
    for (w, b), (n, seen) in puts.items():
        assert seen == n, f"put {w}.{b} is partly visible ({seen} of {n} messages)"
    for a in (query_sample if query_sample is not None else acked):
        for j in range(a.n):
            e = expected(a.wid, a.seq + j, a.seq)
            for key in e["keys"]:
                q = st.query_message(e["topic"], key)
                ids = [parse_id(m)[:2] for m in q.messages]
                assert ids == [(a.wid, a.seq + j)], (key, ids)
    findings = st.verify()
    assert findings == [], findings
    return found


def tree_digest(root: str) -> str:
    """sha256 over every file's path and bytes under ``root`` (the lock file excluded)."""
    h = hashlib.sha256()
    for dp, dns, fns in sorted(os.walk(root)):
        dns.sort()
        for fn in sorted(fns):
            if fn == "lock":
                continue
            p = os.path.join(dp, fn)
            h.update(os.path.relpath(p, root).encode())
            with open(p, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()
