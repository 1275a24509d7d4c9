"""Transactions: END_TRANSACTION (37) and the check of half messages left open (CHECK_TRANSACTION_STATE
39 to a producer of the group). Upstream: ``EndTransactionProcessor``, ``TransactionalMessageServiceImpl``,
``TransactionalMessageCheckService``.

A prepared message is stored in RMQ_SYS_TRANS_HALF_TOPIC queue 0 (see :func:`messages.half_message`).
Commit stores it again in its real topic (with the COMMIT transaction type and the half message's
offset as preparedTransactionOffset); commit and rollback both write an op message (TAGS ``d``, body
``"<half queue offset>,"``) to RMQ_SYS_TRANS_OP_HALF_TOPIC, as upstream. The check service walks the
half queue from its progress (kept, as upstream, as the offsets of group ``CID_RMQ_SYS_TRANS`` in
consumerOffset.json): a half message without an op that is older than ``transactionTimeOut`` is stored
again with TRANSACTION_CHECK_TIMES + 1 and its producer group is asked; after ``transactionCheckMax``
checks it is dropped.
"""
from __future__ import annotations

import asyncio
import logging
import time

from ..format import properties as P
from ..types import Message, PutMessageStatus
from . import messages as M
from .metadata import PERM_READ, PERM_WRITE, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from .remoting import Header, RemotingCommand, RequestCode, ResponseCode

log = logging.getLogger("rmqstore.broker")

CHECK_GROUP = "CID_RMQ_SYS_TRANS"
REMOVE_TAG = "d"


class TransactionProcessor:
    def __init__(self, broker):
        self.broker = broker
        self._done: set[int] = set()  # half queue offsets with an op, at or above the check progress
        self._ops_read = 0
        self.checks_sent = 0

    def handlers(self) -> dict:
        return {RequestCode.END_TRANSACTION: self.end_transaction}

    # --- END_TRANSACTION ----------------------------------------------------------------------------
    def end_transaction(self, conn, cmd: RemotingCommand):
        b = self.broker
        h = Header(cmd)
        kind = h.int("commitOrRollback")
        if kind not in (M.TRANSACTION_COMMIT_TYPE, M.TRANSACTION_ROLLBACK_TYPE):
            return None  # unknown state: nothing to do, no answer (upstream returns null)
        if b.read_only:
            return cmd.response(ResponseCode.NO_PERMISSION, "the broker is read-only")
        phy, table_offset = h.long("commitLogOffset"), h.long("tranStateTableOffset")
        rec = b.store.look_message_by_offset(phy)
        if rec is None or rec.topic != TRANS_HALF_TOPIC:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")
        props = dict(rec.properties)
        if props.get(M.PRODUCER_GROUP) != h.str("producerGroup"):
            return cmd.response(ResponseCode.SYSTEM_ERROR, "The producer group wrong")
        if rec.queue_offset != table_offset:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong")
        error = self.resolve(rec, commit=kind == M.TRANSACTION_COMMIT_TYPE)
        if error:
            return cmd.response(ResponseCode.SYSTEM_ERROR, error)
        return cmd.response(ResponseCode.SUCCESS)

    def resolve(self, rec, *, commit: bool) -> str | None:
        """Commit (store the half message ``rec`` in its real topic) or roll back, and write the op
        message; the error text when the commit could not be stored (for both protocols)."""
        b = self.broker
        if commit:
            props = dict(rec.properties)
            topic, qid = props.get(M.REAL_TOPIC), props.get(M.REAL_QID)
            if not topic or qid is None:
                return "prepared message has no REAL_TOPIC/REAL_QID"
            msg = M.copy_of(rec, topic, int(qid), props, store_host=rec.store_host)
            msg.sys_flag = (rec.sys_flag & ~M.TRANSACTION_MASK) | M.TRANSACTION_COMMIT_TYPE
            msg.prepared_transaction_offset = rec.phy_offset
            result = b.store.put_message(msg)
            b.schedule_dispatch()
            if result.status is not PutMessageStatus.PUT_OK:
                return f"commit failed: {result.status.value}"
        self._write_op(rec.queue_offset)
        return None

    def _write_op(self, half_offset: int) -> None:
        b = self.broker
        b.topics.create_if_absent(TRANS_OP_HALF_TOPIC, 1, PERM_READ | PERM_WRITE)
        props = {P.TAGS: REMOVE_TAG, P.UNIQ_KEY: b.new_uniq_key()}
        b.store.put_message(Message(topic=TRANS_OP_HALF_TOPIC, body=f"{half_offset},".encode(), queue_id=0,
                                    properties=M.java_properties(props), born_timestamp=int(time.time() * 1000),
                                    born_host=b.store_host, store_host=b.store_host))
        b.schedule_dispatch()
        self._done.add(half_offset)

    # --- the check service ----------------------------------------------------------------------------
    async def run_checks(self) -> None:
        interval = max(0.05, self.broker.cfg.transaction_check_interval / 1000)
        while True:
            await asyncio.sleep(interval)
            try:
                self.check_once()
            except Exception:  # noqa: BLE001 - retried on the next round
                log.exception("transaction check failed")

    def _read_ops(self) -> None:
        store = self.broker.store
        max_q = store.get_max_offset_in_queue(TRANS_OP_HALF_TOPIC, 0)
        while self._ops_read < max_q:
            r = store.get_message(CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0, self._ops_read, 256, transfer_limits=False)
            if not r.messages and r.next_begin_offset <= self._ops_read:
                break
            for m in r.messages:
                for part in m.body.decode("ascii", "replace").split(","):
                    if part.strip().isdigit():
                        self._done.add(int(part))
            self._ops_read = r.next_begin_offset

    def check_once(self, now_ms: int | None = None) -> int:
        """One round over the half queue; returns how many producers were asked."""
        b = self.broker
        store = b.store
        self._read_ops()
        offsets = store.consumer_offsets
        q = offsets.query_offset(CHECK_GROUP, TRANS_HALF_TOPIC, 0) or 0
        q = max(q, store.get_min_offset_in_queue(TRANS_HALF_TOPIC, 0))
        end = store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0)
        now = int(time.time() * 1000) if now_ms is None else now_ms
        asked = 0
        while q < end:
            if q in self._done:
                self._done.discard(q)
                q += 1
                continue
            phy = store.get_commit_log_offset_in_queue(TRANS_HALF_TOPIC, 0, q)
            rec = store.look_message_by_offset(phy) if phy >= 0 else None
            if rec is None:
                q += 1
                continue
            props = dict(rec.properties)
            if now - rec.born_timestamp < b.cfg.transaction_time_out:
                break
            times = int(props.get(M.TRANSACTION_CHECK_TIMES, "0") or 0)
            if times >= b.cfg.transaction_check_max:
                log.warning("half message %s checked %d times: dropped", props.get(P.UNIQ_KEY), times)
                q += 1
                continue
            props[M.TRANSACTION_CHECK_TIMES] = str(times + 1)
            again = M.copy_of(rec, TRANS_HALF_TOPIC, 0, props, store_host=rec.store_host)
            result = store.put_message(again)
            b.schedule_dispatch()
            if not result.ok:
                break
            asked += self._ask(props, result.phy_offset, result.queue_offset)
            q += 1
        offsets.commit_offset(CHECK_GROUP, TRANS_HALF_TOPIC, 0, q)
        self._done = {d for d in self._done if d >= q}
        return asked

    def _ask(self, props: dict, phy: int, queue_offset: int) -> int:
        """Send CHECK_TRANSACTION_STATE for the half message at ``phy`` to one producer of its group."""
        b = self.broker
        group = props.get(M.PRODUCER_GROUP, "")
        conns = b.clients.producer_connections(group)
        rec = b.store.look_message_by_offset(phy) if conns or b.messaging is not None else None
        if rec is None:
            return 0
        if not conns:  # a gRPC producer, asked over its telemetry stream
            return int(b.messaging.ask_transaction(group, rec, phy))
        conn = conns[self.checks_sent % len(conns)]
        self.checks_sent += 1
        uniq = props.get(P.UNIQ_KEY)
        conn.send_request_oneway(RequestCode.CHECK_TRANSACTION_STATE, {
            "tranStateTableOffset": queue_offset, "commitLogOffset": phy, "msgId": uniq, "transactionId": uniq,
            "offsetMsgId": rec.msg_id, "brokerName": b.cfg.broker_name}, b.store.records_bytes([rec]))
        return 1
