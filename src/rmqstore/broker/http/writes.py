"""The JSON API's write calls (only with ``--http-admin`` and the bearer token; the server checks):
create and delete a topic, reset a group's offsets by time (telling its live consumers), resend a
dead-letter message to its original topic, run a store verify."""
from __future__ import annotations

import asyncio
import time

from aiohttp import web

from .. import messages as M
from ..admin_ops import RESET_CONSUMER_CLIENT_OFFSET, reset_target_offsets, tell_consumers_to_reset
from ..metadata import PERM_READ, PERM_WRITE, topic_config, validate_topic


def _json(doc, status: int = 200) -> web.Response:
    return web.json_response(doc, status=status)


async def _body(request: web.Request) -> dict:
    try:
        doc = await request.json()
    except ValueError:
        raise ValueError("the request body is not JSON") from None
    if not isinstance(doc, dict):
        raise ValueError("the request body must be a JSON object")
    return doc


class Writes:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.last_verify: dict | None = None

    def _writable(self) -> None:
        if self.broker.read_only:
            raise web.HTTPConflict(text='{"error": "the broker is read-only"}', content_type="application/json")

    async def create_topic(self, request):
        self._writable()
        doc = await _body(request)
        topic = str(doc.get("topic") or "")
        bad = validate_topic(topic)
        if bad:
            raise ValueError(bad)
        queues = int(doc.get("queues", self.broker.cfg.default_topic_queue_nums))
        if not 0 < queues <= 1024:
            raise ValueError(f"queues={queues}: expected 1..1024")
        cfg = topic_config(topic, queues, int(doc.get("perm", PERM_READ | PERM_WRITE)))
        self.broker.topics.update(cfg, str(doc.get("attributes") or ""),  # as updateTopic -a alters them
                                  mixed_allowed=self.broker.cfg.enable_mixed_message_type)
        return _json(cfg, 201)

    async def delete_topic(self, request):
        """Drop the topic's configuration; its messages (and the groups' offsets in it) stay in the commit
        log until retention removes them (as RocketMQ's deleteTopic, the queues' files are not
        rewritten)."""
        self._writable()
        b, topic = self.broker, request.match_info["topic"]
        if b.topics.get(topic) is None:
            return _json({"error": f"no topic {topic!r}"}, 404)
        with b.topics.file.lock:
            b.topics.table.pop(topic, None)
        b.topics.persist()
        return _json({"deleted": topic})

    async def reset_by_time(self, request):
        """Each queue of the topic to the first message stored at or after ``timestamp`` (ms;
        -1: the queue's end), committed, and sent to the group's live consumers."""
        self._writable()
        b, group = self.broker, request.match_info["group"]
        doc = await _body(request)
        topic, ts = str(doc.get("topic") or ""), int(doc.get("timestamp", -1))
        if b.topics.get(topic) is None:
            return _json({"error": f"no topic {topic!r}"}, 404)
        offsets = reset_target_offsets(b.store, topic, int(b.topics.get(topic)["readQueueNums"]), ts)
        for q, off in offsets.items():
            b.commit_offset(group, topic, q, off)
        b.store.consumer_offsets.clear_pull_offsets(group, topic)
        told = tell_consumers_to_reset(b, group, topic, ts, offsets)
        return _json({"group": group, "topic": topic, "offsets": offsets, "consumersTold": told})

    async def resend_dlq(self, request):
        """Store a copy of a dead-letter message in its original topic (``RETRY_TOPIC``), reconsume
        times reset."""
        self._writable()
        b = self.broker
        phy = int(request.match_info["phy"])
        rec = b.store.look_message_by_offset(phy)
        if rec is None:
            return _json({"error": f"no message at commit-log offset {phy}"}, 404)
        if not rec.topic.startswith("%DLQ%"):
            raise ValueError(f"the message at {phy} is in {rec.topic}, not a dead-letter topic")
        props = dict(rec.properties)
        target = props.get(M.RETRY_TOPIC) or props.get("DLQ_ORIGIN_TOPIC") or ""
        tc = b.topics.get(target)
        if tc is None:
            raise ValueError(f"the message's original topic {target!r} does not exist")
        props.pop("DELAY", None)
        msg = M.copy_of(rec, target, rec.queue_offset % max(1, int(tc["writeQueueNums"])), props,
                        store_host=b.store_host)
        msg.reconsume_times = 0
        result = await asyncio.get_running_loop().run_in_executor(None, b.store.put_message, msg)
        if not result.ok:
            raise ValueError(f"resend failed: {result.status.value} {result.error or ''}")
        b.schedule_dispatch()
        return _json({"topic": target, "phyOffset": result.phy_offset, "msgId": result.msg_id})

    async def verify(self, request):
        """Run a store verify (on a worker thread) and keep its summary for ``/api/health``."""
        b = self.broker
        t0 = time.time()
        findings = await asyncio.get_running_loop().run_in_executor(None, b.store.verify)
        self.last_verify = {"at": int(t0 * 1000), "seconds": round(time.time() - t0, 3), "ok": not findings,
                            "findings": [str(f) for f in findings[:50]], "count": len(findings)}
        return _json(self.last_verify)


__all__ = ["Writes", "RESET_CONSUMER_CLIENT_OFFSET"]
