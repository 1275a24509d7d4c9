"""The main job: a realistic workload on an embedded store, then every read path, timed.

``run_demo(store_dir)`` writes ``messages`` messages over several topics and queues (tags, one or
two business keys each, UNIQ_KEY), waits for dispatch, then pulls every queue, queries by key, by
unique key, by offsetMsgId and by store time, reopens the store read-only and checks it, and returns
a report (counts, rates, store size). The CLI's ``rmqstore demo`` prints it and adds Spark stats.

The demo writes into a directory of its own: one it creates (or finds empty) gets a marker file,
:data:`MARKER`, and only a directory holding that marker is emptied by a later run. Any other
directory is refused (:class:`~rmqstore.errors.OutputExistsError`), and so is one whose store lock
a live process holds (:class:`~rmqstore.errors.StoreLockedError`): the demo never deletes a store it
did not make, nor one a broker or writer has open.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from .config import MessageStoreConfig
from .errors import OutputExistsError, StoreIOError, StoreLockedError
from .io import paths
from .message_store import MessageStore, lock_holder
from .types import GetMessageStatus, Message, PutMessageStatus

TOPICS = ("Orders", "Payments", "Shipments", "Audit")
QUEUES = 4
TAGS = ("created", "paid", "shipped", "cancelled")
#: written into a directory the demo creates; only a directory holding it is ever emptied by the demo
MARKER = ".rmqstore-demo"


@dataclass
class DemoReport:
    store_dir: str
    messages: int = 0
    bytes_written: int = 0
    #: (what, count, unit, seconds); count None for a step that is a wait, not work on items (no rate)
    steps: list[tuple[str, int | None, str, float]] = field(default_factory=list)
    checks: list[tuple[str, bool]] = field(default_factory=list)

    def step(self, what: str, count: int | None, seconds: float, unit: str = "messages") -> None:
        self.steps.append((what, count, unit, seconds))

    def check(self, what: str, ok: bool) -> None:
        self.checks.append((what, bool(ok)))

    @property
    def ok(self) -> bool:
        return all(ok for _, ok in self.checks)


def _body(rng: random.Random, i: int, topic: str) -> bytes:
    pad = "x" * rng.randint(40, 400)
    return (f'{{"id":{i},"topic":"{topic}","amount":{rng.randint(1, 99999) / 100},'
            f'"customer":"c{rng.randint(1, 5000)}","note":"{pad}"}}').encode()


class _Sample(NamedTuple):
    """A message written, kept to look it up again."""

    i: int
    topic: str
    qid: int
    key: str
    msg_id: str
    queue_offset: int


def _write(st: MessageStore, rep: DemoReport, rng: random.Random, messages: int, progress) -> list[_Sample]:
    """Put the messages; every 200th or so is sampled."""
    sample: list[_Sample] = []
    t0 = time.perf_counter()
    for i in range(messages):
        topic = TOPICS[i % len(TOPICS)]
        qid = rng.randrange(QUEUES)
        key = f"order-{i}"
        keys = [key, f"customer-{rng.randint(1, 5000)}"] if i % 3 else [key]
        r = st.put_message(Message.create(topic, _body(rng, i, topic), tags=TAGS[i % len(TAGS)],
                                          keys=keys, queue_id=qid))
        if r.status is not PutMessageStatus.PUT_OK:
            raise RuntimeError(f"put {i} failed: {r.status} {r.error}")
        rep.bytes_written += r.wrote_bytes
        if i % max(1, messages // 200) == 0:
            sample.append(_Sample(i, topic, qid, key, r.msg_id, r.queue_offset))
        if progress is not None and i % 1000 == 999:
            progress(1000)
    t_put = time.perf_counter() - t0
    rep.messages = messages
    rep.step("write (put_message, one at a time)", messages, t_put)
    t0 = time.perf_counter()
    st.wait_dispatched()
    # the dispatcher runs while the puts do: what is left is how far the queues and index lag behind
    rep.step("consume queues and index caught up after the last write", None, time.perf_counter() - t0, "")
    return sample


def _pull(st: MessageStore, rep: DemoReport, messages: int) -> None:
    t0 = time.perf_counter()
    pulled = 0
    for topic in TOPICS:
        for q in range(QUEUES):
            off = 0
            while True:
                g = st.get_message("demo-group", topic, q, off, 32)
                if g.status is not GetMessageStatus.FOUND:
                    break
                pulled += len(g.messages)
                off = g.next_begin_offset
    rep.step("pull every queue (get_message, 32 at a time)", pulled, time.perf_counter() - t0)
    rep.check(f"pulled every message ({pulled}/{messages})", pulled == messages)


def _consume(st: MessageStore, rep: DemoReport, messages: int) -> None:
    t0 = time.perf_counter()
    consumed = 0
    with st.consumer("demo-consumers", list(TOPICS)) as c:
        while batch := c.poll(max_messages=256, timeout_s=0):
            consumed += len(batch)
        c.commit()
        lag = sum(c.lag().values())
    rep.step("consume every topic as a group (poll, commit)", consumed, time.perf_counter() - t0)
    rep.check(f"the consumer group consumed every message and has no lag ({consumed}/{messages}, lag {lag})",
              consumed == messages and lag == 0)


def _query(st: MessageStore, rep: DemoReport, sample: list[_Sample]) -> None:
    """The sampled messages by key, by msgId and UNIQ_KEY, and by store time."""
    t0 = time.perf_counter()
    found = 0
    for s in sample:
        res = st.query_message(s.topic, s.key, max_num=32)
        found += len(res.messages) == 1 and res.messages[0].keys[0] == s.key
    rep.step("look up by business key (query_message)", len(sample), time.perf_counter() - t0, "lookups")
    rep.check(f"every sampled key found exactly once ({found}/{len(sample)})", found == len(sample))

    t0 = time.perf_counter()
    by_id = 0
    uniq_ok = 0
    for s in sample:
        rec = st.view_message_by_id(s.msg_id)
        by_id += rec is not None and rec.keys[0] == s.key
        u = st.query_message_by_unique_key(s.topic, rec.uniq_key)
        uniq_ok += [m.phy_offset for m in u.messages] == [rec.phy_offset]
    rep.step("look up by msgId and by UNIQ_KEY", 2 * len(sample), time.perf_counter() - t0, "lookups")
    rep.check("every sampled msgId and UNIQ_KEY resolves", by_id == uniq_ok == len(sample))

    t0 = time.perf_counter()
    by_time = 0
    for s in sample:
        ts = st.get_message_store_timestamp(s.topic, s.qid, s.queue_offset)
        off = st.get_offset_in_queue_by_time(s.topic, s.qid, ts, boundary="lower")
        by_time += off <= s.queue_offset and st.get_message_store_timestamp(s.topic, s.qid, off) == ts
    rep.step("find a queue offset by store time", len(sample), time.perf_counter() - t0, "lookups")
    rep.check("offset by time lands on the first message of that millisecond", by_time == len(sample))


def _reopen(store_dir: str, cfg: MessageStoreConfig | None, rep: DemoReport, messages: int) -> None:
    t0 = time.perf_counter()
    with MessageStore.open(store_dir, cfg, read_only=True) as ro:
        total = sum(ro.get_max_offset_in_queue(t, q) for t in TOPICS for q in range(QUEUES))
        rep.step("reopen read-only (recovery after a clean close)", None, time.perf_counter() - t0, "")
        rep.check(f"read-only reopen sees every message ({total})", total == messages)
        rep.check("clean shutdown: reopen needed no repair", ro.recovery_report.clean
                  and ro.recovery_report.mode == "normal")


def _refuse_if_held(path: str) -> None:
    pid = lock_holder(path)
    if pid is not None:
        who = "this process" if pid == os.getpid() else "a live process" + (f" (pid {pid})" if pid > 0 else "")
        raise StoreLockedError(f"{who} holds the store lock of the demo directory; the demo never deletes "
                               "a store in use", path=path)


@contextlib.contextmanager
def _holding_lock(path: str):
    """The directory's store lock, held while the demo empties it (no writer starts meanwhile)."""
    fd = os.open(paths.lock_path(path), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EAGAIN):
                raise StoreLockedError("a live process took the store lock of the demo directory", path=path) from e
            raise StoreIOError(f"cannot lock: {e.strerror}", path=path) from e
        yield
    finally:
        os.close(fd)  # releases the lock


def claim_demo_dir(store_dir: str) -> str:
    """Make ``store_dir`` ready for a new demo store and return its absolute path: created (with
    :data:`MARKER`) when missing, marked when empty, emptied when it holds the marker and no live
    process holds its lock. Raises :class:`StoreLockedError` when a live process holds the lock
    and :class:`OutputExistsError` for any other directory (or a file)."""
    path = os.path.abspath(store_dir)
    if not os.path.exists(path):
        os.makedirs(path)
    elif not os.path.isdir(path):
        raise OutputExistsError("the demo directory is a file", path=path)
    else:
        _refuse_if_held(path)
        entries = os.listdir(path)
        if entries and MARKER not in entries:
            held = f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}"
            raise OutputExistsError(f"refusing to use a directory the demo did not create (it holds {held}, "
                                    f"no {MARKER} marker)", path=path)
        if entries:
            with _holding_lock(path):
                for name in entries:
                    if name in (MARKER, paths.LOCK):
                        continue
                    p = os.path.join(path, name)
                    shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
    with open(os.path.join(path, MARKER), "w", encoding="utf-8") as fh:
        fh.write("made by `rmqstore demo`; the demo empties this directory on its next run\n")
    return path


def run_demo(store_dir: str = "data/store", messages: int = 100_000, *,
             cfg: MessageStoreConfig | None = None, seed: int = 7, progress=None) -> DemoReport:
    """Run the workload on a new store in ``store_dir`` (:func:`claim_demo_dir`: the demo's own
    directory, never another); ``progress(advance)`` is called while writing if given."""
    path = claim_demo_dir(store_dir)
    rng = random.Random(seed)
    rep = DemoReport(path)
    with MessageStore.open(path, cfg) as st:
        sample = _write(st, rep, rng, messages, progress)
        _pull(st, rep, messages)
        _consume(st, rep, messages)
        _query(st, rep, sample)
    _reopen(path, cfg, rep, messages)
    return rep
