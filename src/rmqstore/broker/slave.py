"""SlaveSynchronize: a slave copies its master's broker state, and a master answers any slave's
requests for it (a Java slave's too).

Request codes and bodies are upstream's: GET_ALL_TOPIC_CONFIG 21 (``TopicConfigSerializeWrapper``;
a 5.x Java master pages it with ``topicSeq``/``maxTopicNum`` and answers ``totalTopicNum``, which
this slave follows; this master answers every topic at once without ``totalTopicNum``, the older
masters' answer that 5.x slaves accept), GET_ALL_CONSUMER_OFFSET 43 (``ConsumerOffsetSerializeWrapper``),
GET_ALL_DELAY_OFFSET 45 (the ``delayOffset.json`` text) and GET_ALL_SUBSCRIPTIONGROUP_CONFIG 201.
Topics and groups are applied when the master's ``dataVersion`` differs from the last applied one
(the slave's table becomes the master's); delay offsets replace the slave's.

Offsets committed to the slave are not lost when the master returns (upstream's ``putAll``
overwrites them with the master's older ones, and consumers see messages again: apache/rocketmq
#1094, #2513). The slave remembers which queues consumers committed to it; at the next sync, where
its offset is ahead of the master's, it keeps its own and sends it to the master with
UPDATE_CONSUMER_OFFSET (15), and forgets the queue once the master has it. Every other offset is
the master's, as upstream.
"""
from __future__ import annotations

import asyncio
import logging

from ..engine.consumer_offsets import parse_broker_json
from .remoting import RemotingCommand, ResponseCode
from .routes import data_version_key, encode_fastjson

log = logging.getLogger("rmqstore.broker")

GET_ALL_TOPIC_CONFIG = 21
UPDATE_CONSUMER_OFFSET = 15
GET_ALL_CONSUMER_OFFSET = 43
GET_ALL_DELAY_OFFSET = 45
GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
#: ``BrokerConfig.syncBrokerMemberGroupPeriod``-free paging size of 5.x (``getMaxPageSize``)
PAGE_SIZE = 2000


class SyncError(RuntimeError):
    """The master answered a sync request with an error code."""


def offsets_body(broker) -> bytes:
    """``ConsumerOffsetSerializeWrapper`` as fastjson writes it (queue ids bare)."""
    table = {f"{t}@{g}": dict(q) for (t, g), q in broker.store.consumer_offsets.table().items()}
    return encode_fastjson({"dataVersion": {"counter": 0, "stateVersion": 0, "timestamp": 0},
                            "offsetTable": table}, quote_int_keys=False)


def delay_body(broker) -> bytes:
    d = broker.delay_offsets
    return encode_fastjson({"dataVersion": d.file.data_version(), "offsetTable": dict(d.table)},
                           quote_int_keys=False)


class SlaveSync:
    """The master's answers (:meth:`handlers`) and the slave's :meth:`sync_all`."""

    def __init__(self, broker, client):
        self.broker = broker
        self.client = client
        self.master_addr: str | None = None
        #: (group, topic, queue id) consumers committed to this slave, not yet known to the master
        self.pending: set[tuple[str, str, int]] = set()
        self._topics_version: tuple | None = None
        self._groups_version: tuple | None = None
        self.rounds = 0
        self._running: asyncio.Lock | None = None

    def handlers(self) -> dict:
        return {GET_ALL_CONSUMER_OFFSET: self.all_offsets, GET_ALL_DELAY_OFFSET: self.all_delay}

    def all_offsets(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, None, offsets_body(self.broker))

    def all_delay(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, None, delay_body(self.broker))

    def on_commit(self, group: str, topic: str, queue_id: int) -> None:
        self.pending.add((group, topic, queue_id))

    # --- the slave's side ------------------------------------------------------------------------
    async def _call(self, code: int, ext: dict | None = None, body: bytes = b"") -> RemotingCommand:
        r = await self.client.invoke(self.master_addr, code, ext, body, timeout=30.0)
        if r.code != ResponseCode.SUCCESS:
            raise SyncError(f"the master {self.master_addr} answered request code {code} with {r.code}: {r.remark}")
        return r

    async def sync_all(self) -> bool:
        """One round (``syncAll``): topics, consumer offsets, delay offsets, subscription groups.
        True when every part succeeded."""
        if not self.master_addr or self.master_addr == self.broker.advertised:
            return False
        if self._running is None:
            self._running = asyncio.Lock()
        async with self._running:  # one round at a time (the timer's and a new master's)
            return await self._sync_parts()

    async def _sync_parts(self) -> bool:
        ok = True
        for part in (self.sync_topics, self.sync_offsets, self.sync_delay, self.sync_groups):
            try:
                await part()
            except (OSError, TimeoutError, ConnectionError, SyncError, ValueError) as e:
                ok = False
                log.warning("slave sync %s from %s failed: %s", part.__name__, self.master_addr, e)
        self.rounds += 1
        return ok

    @staticmethod
    def _doc(r: RemotingCommand) -> dict:
        doc = parse_broker_json(r.body.decode("utf-8")) if r.body else {}
        if not isinstance(doc, dict):
            raise ValueError("the body is not a JSON object")
        return doc

    async def _paged(self, code: int, seq_key: str, num_key: str, table_key: str, total_key: str):
        """A table the master answers a page at a time (GET_ALL_TOPIC_CONFIG, GET_ALL_SUBSCRIPTIONGROUP_CONFIG:
        ``seq_key`` the first entry wanted, ``num_key`` the page size); the whole table and its dataVersion.
        A master that answers without ``total_key`` (older than 5.x) sends everything in one page."""
        table: dict = {}
        version = None
        seq = 0
        for _ in range(10_000):
            r = await self._call(code, {seq_key: seq, num_key: PAGE_SIZE, "dataVersion": ""})
            doc = self._doc(r)
            page = doc.get(table_key) or {}
            table.update({str(k): dict(v) for k, v in page.items() if isinstance(v, dict)})
            seq += len(page)
            version = version or doc.get("dataVersion")
            total = r.ext.get(total_key)
            if total is None or not page or seq >= int(total) - 1:
                break
        return table, version

    async def sync_topics(self) -> None:
        table, version = await self._paged(GET_ALL_TOPIC_CONFIG, "topicSeq", "maxTopicNum", "topicConfigTable",
                                           "totalTopicNum")
        key = data_version_key(version)
        if key == self._topics_version:
            return
        topics = self.broker.topics
        with topics.file.lock:
            topics.table.clear()
            topics.table.update(table)
            topics.persist()
        self._topics_version = key
        log.info("slave: %d topics from the master %s", len(table), self.master_addr)

    async def sync_offsets(self) -> None:
        doc = self._doc(await self._call(GET_ALL_CONSUMER_OFFSET))
        offsets = self.broker.store.consumer_offsets
        master: dict[tuple[str, str, int], int] = {}
        for key, queues in (doc.get("offsetTable") or {}).items():
            topic, _, group = str(key).partition("@")
            for qid, off in (queues or {}).items():
                master[(group, topic, int(qid))] = int(off)
        for entry in sorted(self.pending):
            group, topic, qid = entry
            mine = offsets.query_offset(group, topic, qid)
            theirs = master.get(entry)
            if mine is not None and (theirs is None or mine > theirs):
                await self._call(UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": qid,
                                                          "commitOffset": mine})
                master[entry] = mine
                log.info("slave: offset %d of %s %s/%d, committed here while the master was away, sent to the "
                         "master (it had %s)", mine, group, topic, qid, theirs)
            self.pending.discard(entry)
        for (group, topic, qid), off in master.items():
            offsets.commit_offset(group, topic, qid, off)
        offsets.persist()

    async def sync_delay(self) -> None:
        r = await self._call(GET_ALL_DELAY_OFFSET)
        doc = self._doc(r)
        d = self.broker.delay_offsets
        for level, off in (doc.get("offsetTable") or {}).items():
            d.set(int(level), int(off))
        d.persist()

    async def sync_groups(self) -> None:
        table, version = await self._paged(GET_ALL_SUBSCRIPTIONGROUP_CONFIG, "groupSeq", "maxGroupNum",
                                           "subscriptionGroupTable", "totalGroupNum")
        key = data_version_key(version)
        if key == self._groups_version:
            return
        groups = self.broker.groups
        with groups.file.lock:
            groups.table.clear()
            groups.table.update(table)
            groups.file.write({"subscriptionGroupTable": groups.table})
        self._groups_version = key
        log.info("slave: %d subscription groups from the master %s", len(table), self.master_addr)


__all__ = ["SlaveSync", "SyncError", "offsets_body", "delay_body"]
