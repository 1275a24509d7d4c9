"""Stateful model test: MessageStore against a trivial in-memory model.

The model knows only the spec's arithmetic: record length (91 + body + topic + properties for
V1/IPv4), the 8-byte blank and roll at the end of a segment, consecutive queue offsets, one
consume-queue file per pull, tag filters, exact key queries (newest ``max_num``, oldest first) and
offsets by time with ties. Segments are tiny so that commitlog, consume-queue and index files roll
all the time; the store is also closed and reopened.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from rmqstore import GetMessageStatus, Message, MessageStore, MessageStoreConfig, PutMessageStatus
from rmqstore.format.hashes import index_key_hash

SEGMENT = 1024
UNITS_PER_CQ_FILE = 5
CFG = MessageStoreConfig(mapped_file_size_commit_log=SEGMENT, mapped_file_size_consume_queue=UNITS_PER_CQ_FILE * 20,
                         max_hash_slot_num=8, max_index_num=16)
TOPICS = ("TA", "TB")
QUEUES = (0, 1)
TAGS = (None, "TagA", "TagB")
KEYS = ("k1", "k2", "k3")
T0 = 1_700_000_000_000
#: memory-backed scratch space where there is one: many small stores are opened and closed (fsync)
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
# the model assumes no Java-hash collisions between the index keys it uses
assert len({index_key_hash(t, k) for t in TOPICS for k in KEYS}) == len(TOPICS) * len(KEYS)


@dataclass
class Rec:
    phy: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    tag: str | None
    keys: tuple[str, ...]
    store_ts: int
    msg_id: str = ""


def _props(tag, keys):
    props = []
    if tag:
        props.append(("TAGS", tag))
    if keys:
        props.append(("KEYS", " ".join(keys)))
    return props


def _length(topic, body, tag, keys) -> int:
    props = "".join(f"{k}\x01{v}\x02" for k, v in _props(tag, keys)).encode()
    return 91 + len(body) + len(topic) + len(props)


bodies = st.binary(max_size=40)
key_sets = st.lists(st.sampled_from(KEYS), unique=True, max_size=3).map(tuple)


class StoreModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="rmq-model-", dir=SCRATCH)
        self.store = MessageStore.open(self.dir + "/store", CFG)
        self.recs: list[Rec] = []
        self.queues: dict[tuple[str, int], list[Rec]] = {(t, q): [] for t in TOPICS for q in QUEUES}
        self.pos = 0          # next write position in the commitlog
        self.clock = T0

    def teardown(self):
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- model arithmetic --------------------------------------------------------------------
    def _place(self, total: int) -> int:
        remaining = SEGMENT - self.pos % SEGMENT
        if total + 8 > remaining:
            self.pos += remaining  # blank record, next segment
        phy = self.pos
        self.pos += total
        return phy

    # --- writes ------------------------------------------------------------------------------
    @initialize()
    def start(self):
        assert self.store.max_phy_offset == 0

    @rule(topic=st.sampled_from(TOPICS), qid=st.sampled_from(QUEUES), body=bodies, tag=st.sampled_from(TAGS),
          keys=key_sets, tick=st.integers(0, 1500))
    def put(self, topic, qid, body, tag, keys, tick):
        self.clock += tick
        r = self.store.put_message(Message(topic=topic, body=body, queue_id=qid, properties=_props(tag, keys),
                                           store_timestamp=self.clock))
        q = self.queues[(topic, qid)]
        size = _length(topic, body, tag, keys)
        rec = Rec(self._place(size), size, topic, qid, len(q), body, tag, keys, self.clock)
        assert r.status is PutMessageStatus.PUT_OK
        assert (r.phy_offset, r.wrote_bytes, r.queue_offset, r.store_timestamp) == (
            rec.phy, rec.size, rec.queue_offset, rec.store_ts)
        rec.msg_id = r.msg_id
        q.append(rec)
        self.recs.append(rec)

    @rule(topic=st.sampled_from(TOPICS), qid=st.sampled_from(QUEUES), items=st.lists(st.tuples(bodies, key_sets),
          min_size=1, max_size=4), tag=st.sampled_from(TAGS), tick=st.integers(0, 1500))
    def put_batch(self, topic, qid, items, tag, tick):
        self.clock += tick
        msgs = [Message(topic=topic, body=b, queue_id=qid, properties=_props(tag, k), store_timestamp=self.clock)
                for b, k in items]
        r = self.store.put_messages(msgs)
        q = self.queues[(topic, qid)]
        sizes = [_length(topic, b, tag, k) for b, k in items]
        phy0 = self._place(sum(sizes))
        assert r.status is PutMessageStatus.PUT_OK
        assert (r.phy_offset, r.wrote_bytes, r.queue_offset, r.msg_num) == (phy0, sum(sizes), len(q), len(items))
        ids = r.msg_id.split(",")
        for i, ((b, k), size, mid) in enumerate(zip(items, sizes, ids)):
            rec = Rec(phy0 + sum(sizes[:i]), size, topic, qid, len(q), b, tag, k, self.clock, mid)
            q.append(rec)
            self.recs.append(rec)

    @rule()
    def reopen(self):
        self.store.close()
        self.store = MessageStore.open(self.dir + "/store", CFG)
        assert self.store.recovery_report.mode in ("normal", "empty")
        assert self.store.max_phy_offset == (self.recs[-1].phy + self.recs[-1].size if self.recs else 0)

    # --- reads -------------------------------------------------------------------------------
    @rule(topic=st.sampled_from(TOPICS), qid=st.sampled_from(QUEUES), data=st.data(),
          max_nums=st.integers(1, 8), sub=st.sampled_from([None, "*", "TagA", "TagB", "TagA || TagB"]))
    def pull(self, topic, qid, data, max_nums, sub):
        self.store.wait_dispatched()
        q = self.queues[(topic, qid)]
        offset = data.draw(st.integers(0, len(q) + 2), label="offset")
        g = self.store.get_message("g", topic, qid, offset, max_nums, subscription=sub)
        n = len(q)
        assert (g.min_offset, g.max_offset) == (0, n)
        if n == 0:
            assert (g.status, g.next_begin_offset) == (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0)
            return
        if offset >= n:
            want = (GetMessageStatus.OFFSET_OVERFLOW_ONE, offset) if offset == n else (
                GetMessageStatus.OFFSET_OVERFLOW_BADLY, n)
            assert (g.status, g.next_begin_offset) == want and g.messages == []
            return
        wanted = None if sub in (None, "*") else {t.strip() for t in sub.split("||")}
        file_end = (offset // UNITS_PER_CQ_FILE + 1) * UNITS_PER_CQ_FILE
        found, nxt = [], offset
        for qo in range(offset, min(n, file_end)):
            if found and len(found) + 1 > max_nums:
                break
            nxt = qo + 1
            if wanted is None or q[qo].tag in wanted:
                found.append(q[qo])
        assert g.status is (GetMessageStatus.FOUND if found else GetMessageStatus.NO_MATCHED_MESSAGE)
        assert g.next_begin_offset == nxt
        assert [(m.phy_offset, m.queue_offset, m.body, m.tags) for m in g.messages] == [
            (r.phy, r.queue_offset, r.body, r.tag) for r in found]

    @rule(topic=st.sampled_from(TOPICS), key=st.sampled_from(KEYS), max_num=st.integers(1, 6), exact=st.booleans())
    def query(self, topic, key, max_num, exact):
        self.store.wait_dispatched()
        matches = [r.phy for r in self.recs if r.topic == topic and key in r.keys]
        res = self.store.query_message(topic, key, max_num=max_num, exact=exact)
        assert [m.phy_offset for m in res.messages] == matches[-max_num:]
        if exact:
            assert res.truncated == (len(matches) > max_num)

    @precondition(lambda self: self.recs)
    @rule(data=st.data())
    def look(self, data):
        rec = data.draw(st.sampled_from(self.recs), label="record")
        for m in (self.store.look_message_by_offset(rec.phy), self.store.view_message_by_id(rec.msg_id)):
            assert (m.phy_offset, m.store_size, m.topic, m.queue_id, m.queue_offset, m.body, m.tags, m.store_timestamp
                    ) == (rec.phy, rec.size, rec.topic, rec.queue_id, rec.queue_offset, rec.body, rec.tag, rec.store_ts)
            assert tuple(m.keys) == rec.keys
        end = self.recs[-1].phy + self.recs[-1].size
        assert self.store.look_message_by_offset(end) is None

    @precondition(lambda self: self.recs)
    @rule(data=st.data())
    def offset_by_time(self, data):
        self.store.wait_dispatched()
        rec = data.draw(st.sampled_from(self.recs), label="record")
        q = self.queues[(rec.topic, rec.queue_id)]
        delta = data.draw(st.sampled_from([-1, 0, 1]), label="delta")
        ts = rec.store_ts + delta
        lower = next((i for i, r in enumerate(q) if r.store_ts >= ts), len(q))
        upper = max((i for i, r in enumerate(q) if r.store_ts <= ts), default=0)
        assert self.store.get_offset_in_queue_by_time(rec.topic, rec.queue_id, ts, "lower") == lower
        assert self.store.get_offset_in_queue_by_time(rec.topic, rec.queue_id, ts, "upper") == upper

    @invariant()
    def queue_offsets(self):
        for (t, qid), q in self.queues.items():
            assert self.store.get_max_offset_in_queue(t, qid, committed=False) == len(q)


StoreModel.TestCase.settings = settings(max_examples=25, stateful_step_count=40, deadline=None,
                                        suppress_health_check=[HealthCheck.too_slow])
TestStoreModel = StoreModel.TestCase
