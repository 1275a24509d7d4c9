"""Damage whole stores at random and read everything back (the default suite's fuzz cases and
``scripts/fuzz_stores`` use this).

A store with small files (several commitlog segments, consume-queue and index files; three topics,
two queues each; keys, tags, batches, zlib/lz4/zstd-compressed bodies) is built once; each case
copies it, applies one seeded damage — byte flips, zeroed ranges, truncated or deleted files, in
every kind of file (commitlog, consume queue, index, checkpoint, abort, lock, consumerOffset.json,
rmqstore-queues.json) — then
opens the copy read-only and writable and reads everything: every queue pulled from its min to its
max offset, every key and UNIQ_KEY queried, every msgId looked up. The checks:

* no open refuses the damaged store, and nothing escapes a pull or a query (a damaged record is
  stepped over and reported); only ``view_message_by_id`` of a damaged record raises, and only
  :class:`~rmqstore.errors.RmqStoreError`;
* nothing hangs (every case runs under an alarm);
* nothing damaged is served: every message returned anywhere has the body, topic, queue and queue
  offset of the message stored at its commitlog offset;
* every intact message is served: whatever the damage, each record whose bytes it did not touch is
  pulled at its queue offset and found by each of its keys and its UNIQ_KEY, by the read-only open
  (which answers from a scan of the commitlog where derived files are missing, damaged or behind)
  and by the writable one (which rebuilds them). A consume-queue unit damaged in place is stepped
  over by locating its record between the sound units around it; an index file changed since the
  last clean close is checked against the commitlog at open.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
from dataclasses import dataclass

from rmqstore import Message, MessageStore, MessageStoreConfig
from rmqstore.errors import RmqStoreError
from rmqstore.format.compression import compress

CFG = MessageStoreConfig(mapped_file_size_commit_log=8192, mapped_file_size_consume_queue=20 * 16,
                         max_hash_slot_num=16, max_index_num=64)
TOPICS = ("FuzzA", "FuzzB", "FuzzC")
KINDS = ("flip", "zero", "truncate", "delete")
TARGETS = ("commitlog", "consumequeue", "index", "checkpoint", "abort", "lock", "config", "extents")
DERIVED = {"consumequeue", "index", "checkpoint", "abort", "lock", "config", "extents"}
CASE_SECONDS = 30


@dataclass(frozen=True)
class Stored:
    topic: str
    queue_id: int
    queue_offset: int
    phy: int
    body: bytes
    keys: tuple[str, ...]
    uniq_key: str
    msg_id: str
    size: int = 0  # bytes in the commitlog


def build(path: str) -> list[Stored]:
    """The reference store: 150 messages, single puts and batches of 4, a few compressed bodies."""
    rng = random.Random(1234)
    out: list[Stored] = []
    with MessageStore.open(path, CFG) as st:
        i = 0
        while i < 150:
            topic, qid = TOPICS[i % 3], (i // 3) % 2
            batch = i % 7 == 0
            n = 4 if batch else 1
            msgs = []
            for j in range(i, i + n):
                body = bytes(rng.randrange(256) for _ in range(rng.randrange(10, 200)))
                m = Message.create(topic, body, tags=f"t{j % 3}", keys=[f"k{j}", f"g{j % 10}"], queue_id=qid)
                if j % 11 == 5 and not batch:
                    data, flag = compress(body * 30, ("zlib", "lz4", "zstd")[j % 3])
                    m.body, m.sys_flag = data, flag
                msgs.append(m)
            r = st.put_messages(msgs) if batch else st.put_message(msgs[0])
            assert r.ok, r
            st.wait_dispatched()
            for m, phy in zip(msgs, _phys(r, n)):
                rec = st.look_message_by_offset(phy)
                out.append(Stored(rec.topic, rec.queue_id, rec.queue_offset, phy, rec.body, tuple(rec.keys),
                                  rec.uniq_key, rec.msg_id, rec.store_size))
            i += n
        c = st.consumer("fuzz-group", list(TOPICS))  # config/consumerOffset.json, a target too
        c.poll(max_messages=60, timeout_s=0)
        c.commit()
    return out


def _phys(r, n: int) -> list[int]:
    """Commitlog offsets of a put's records (a batch's msgId is its offsetMsgIds joined by ',')."""
    return [r.phy_offset] if n == 1 else [int(mid[-16:], 16) for mid in r.msg_id.split(",")]


def _files(path: str, target: str) -> list[str]:
    roots = {"commitlog": "commitlog", "consumequeue": "consumequeue", "index": "index"}
    if target in roots:
        out = []
        for root, _, names in os.walk(os.path.join(path, roots[target])):
            out += [os.path.join(root, n) for n in names]
        return sorted(out)
    name = {"checkpoint": "checkpoint", "abort": "abort", "lock": "lock",
            "config": os.path.join("config", "consumerOffset.json"),
            "extents": os.path.join("config", "rmqstore-queues.json")}[target]
    return [os.path.join(path, name)]


def damage(path: str, rng: random.Random) -> tuple[str, str, str, tuple[int, int]]:
    """Apply one damage; returns (kind, target, file, the damaged byte range of that file)."""
    target = rng.choice(TARGETS)
    kind = rng.choice(KINDS)
    files = _files(path, target)
    if not files:
        return kind, target, "", (0, 0)
    f = rng.choice(files)
    if target == "abort" and not os.path.exists(f):
        with open(f, "w") as fh:  # a crash: the writer's abort file left behind
            fh.write("12345")
        return "create", target, f, (0, 0)
    if not os.path.exists(f):
        return kind, target, "", (0, 0)
    size = os.path.getsize(f)
    span = (0, size)
    if kind == "delete":
        os.unlink(f)
    elif kind == "truncate":
        cut = rng.randrange(size) if size else 0
        os.truncate(f, cut)
        span = (cut, size)
    elif size:
        pos = rng.randrange(size)
        n = rng.choice((1, 1, 2, 4, 16, 64)) if kind == "flip" else rng.choice((8, 20, 64, 512))
        with open(f, "r+b") as fh:
            fh.seek(pos)
            old = fh.read(n)
            fh.seek(pos)
            fh.write(bytes(b ^ (1 << rng.randrange(8)) for b in old) if kind == "flip" else bytes(len(old)))
        span = (pos, pos + len(old))
    return kind, target, f, span


class _Hang(Exception):
    pass


def _alarm(signum, frame):  # pragma: no cover - only on a hang
    raise _Hang(f"a read took longer than {CASE_SECONDS}s")


def read_everything(st: MessageStore, by_phy: dict[int, Stored], stored: list[Stored],
                    skipped: set | None = None) -> tuple[set, set]:
    """Pull every queue, query every key, UNIQ_KEY and msgId; check every message returned; return
    the (phy offsets pulled at their queue offset, phy offsets found by every key); the queue
    offsets pulls reported as skipped go into ``skipped`` as (topic, queue, queue offset)."""
    pulled, found = set(), set()
    for topic, queues in st.topics().items():
        for qid in queues:
            off, hi = st.get_min_offset_in_queue(topic, qid), st.get_max_offset_in_queue(topic, qid)
            while off < hi:
                g = st.get_message("fuzz", topic, qid, off, 32)
                for m in g.messages:
                    check_served(m, by_phy)
                    pulled.add(m.phy_offset)
                if skipped is not None:
                    skipped.update((topic, qid, k.queue_offset) for k in g.skipped)
                if g.next_begin_offset <= off:
                    break
                off = g.next_begin_offset
    for s in stored:
        hits = []
        for key in s.keys:
            res = st.query_message(s.topic, key, max_num=64)
            for m in res.messages:
                check_served(m, by_phy)
            hits.append(any(m.phy_offset == s.phy for m in res.messages))
        u = st.query_message_by_unique_key(s.topic, s.uniq_key)
        for m in u.messages:
            check_served(m, by_phy)
        if all(hits) and any(m.phy_offset == s.phy for m in u.messages):
            found.add(s.phy)
        try:
            rec = st.view_message_by_id(s.msg_id)
        except RmqStoreError:
            continue
        if rec is not None:
            check_served(rec, by_phy)
    return pulled, found


def check_served(m, by_phy: dict[int, Stored]) -> None:
    s = by_phy.get(m.phy_offset)
    assert s is not None, f"served a message at {m.phy_offset}, where none was stored"
    assert (m.topic, m.queue_id, m.queue_offset, m.body) == (s.topic, s.queue_id, s.queue_offset, s.body), \
        f"served a damaged message at {m.phy_offset}"


def run_case(reference: str, stored: list[Stored], work: str, seed: int) -> str:
    """One seeded case; returns a description (raises AssertionError on a broken promise)."""
    rng = random.Random(seed)
    path = os.path.join(work, f"case-{seed}")
    shutil.copytree(reference, path)
    kind, target, f, (lo, hi) = damage(path, rng)
    by_phy = {s.phy: s for s in stored}
    what = f"seed {seed}: {kind} {target} {os.path.relpath(f, path) if f else '(nothing there)'}"
    intact = stored
    if target == "commitlog" and f:  # the records whose bytes the damage did not touch
        base = int(os.path.basename(f))
        intact = [s for s in stored if s.phy + s.size <= base + lo or s.phy >= base + hi]
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_SECONDS)
    try:
        for read_only in (True, False):
            with MessageStore.open(path, CFG, read_only=read_only) as st:  # no damage makes it refuse the store
                pulled, found = read_everything(st, by_phy, stored)
                lost = [s for s in intact if s.phy not in pulled]
                assert not lost, f"{what} ({'read-only' if read_only else 'writable'}): {len(lost)} intact " \
                                 f"messages not pullable, e.g. {lost[0]}"
                unfound = [s for s in intact if s.phy not in found]
                assert not unfound, f"{what} ({'read-only' if read_only else 'writable'}): {len(unfound)} " \
                                        f"intact messages not found by key, e.g. {unfound[0]}"
    except _Hang as e:
        raise AssertionError(f"{what}: {e}") from e
    except AssertionError:
        raise
    except Exception as e:  # noqa: BLE001 - the promise: nothing escapes
        raise AssertionError(f"{what}: {type(e).__name__} escaped: {e}") from e
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        shutil.rmtree(path, ignore_errors=True)
    return what
