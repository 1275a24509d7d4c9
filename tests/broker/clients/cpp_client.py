"""Drives PyPI ``rocketmq==0.4.4`` (RocketMQ's C++ client in a Python binding) for the broker tests.

Runs in the client's own virtualenv (its import name ``rocketmq`` is shared with other packages), so
it is a script: ``python cpp_client.py <command> --namesrv ADDR ...``; it prints one JSON object per
line (sends, received messages) and ends with ``{"done": ...}``.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from rocketmq.client import Message, Producer, PullConsumer, PushConsumer, RecvMessage
from rocketmq.exceptions import ProducerSendSyncFailed
from rocketmq.ffi import _CConsumeStatus, dll


def out(doc: dict) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def received(msg: RecvMessage, extra_props=()) -> dict:
    doc = {"topic": msg.topic, "tags": (msg.tags or b"").decode(), "keys": (msg.keys or b"").decode(),
           "body": msg.body.decode("utf-8", "replace"), "msg_id": msg.id, "queue_id": msg.queue_id,
           "queue_offset": msg.queue_offset, "reconsume_times": msg.reconsume_times,
           "born_timestamp": msg.born_timestamp, "store_timestamp": msg.store_timestamp,
           "commit_log_offset": msg.commit_log_offset, "t": time.time()}
    for name in extra_props:
        v = msg.get_property(name)
        doc["prop_" + name] = v.decode() if v else None
    return doc


def send(p: Producer, m: Message, tries: int = 5):
    """``send_sync``, tried again when the client trips on its own connection race.

    rocketmq-client-cpp 1.2.4 connects to a broker (for a heartbeat, just after it learns the route)
    while holding its transport table's lock; a send made meanwhile fails "GetTransport ... get
    timed_mutex timeout" on every retry within a millisecond and is reported as "No route info of
    this topic". In that race nothing reaches a broker, so sending again is safe; any other failure,
    or this one five times, is raised.
    """
    for attempt in range(1, tries + 1):
        try:
            return p.send_sync(m)
        except ProducerSendSyncFailed as e:
            if "No route info" not in str(e) or attempt == tries:
                raise
            print(f"retrying a send ({attempt}): {e}", file=sys.stderr, flush=True)
            time.sleep(0.2 * attempt)


def produce(a) -> None:
    p = Producer(a.group)
    p.set_namesrv_addr(a.namesrv)
    p.start()
    ok = 0
    took: list[float] = []  # each send_sync's seconds
    t_start, cpu_start = time.time(), time.process_time()
    try:
        for i in range(a.start, a.start + a.count):
            m = Message(a.topic)
            m.set_keys(f"key-{i}")
            tags = a.tags.split(",")
            m.set_tags(tags[i % len(tags)])
            m.set_property("index", str(i))
            if a.delay_level:
                m.set_delay_time_level(a.delay_level)
            m.set_body(f"{a.body_prefix}{i}")
            t0 = time.time()
            c0 = time.perf_counter()
            r = send(p, m)
            took.append(time.perf_counter() - c0)
            ok += int(r.status) == 0
            if not a.quiet:
                out({"i": i, "status": int(r.status), "msg_id": r.msg_id, "offset": r.offset, "t": t0})
            if a.interval:
                time.sleep(a.interval)
        t_end, cpu = time.time(), time.process_time() - cpu_start  # (every thread of the process: the C++ client's too)
    finally:
        p.shutdown()
    took.sort()
    out({"done": True, "ok": ok, "start": t_start, "end": t_end, "cpu": cpu,
         "p50_ms": took[len(took) // 2] * 1e3 if took else None})


def push(a) -> None:
    """A push consumer; ``--reconsume-later N`` answers RECONSUME_LATER to the first N deliveries of
    each message (a raw callback: the binding's own wrapper cannot)."""
    c = PushConsumer(a.group)
    c.set_namesrv_addr(a.namesrv)
    c.set_thread_count(a.threads)
    seen: dict[str, int] = {}
    count = [0]
    first, last = [0.0], [0.0]
    lock = threading.Lock()
    props = a.props.split(",") if a.props else []

    def on_message(consumer, handle):
        msg = RecvMessage(handle)
        doc = received(msg, props)
        with lock:
            key = doc["keys"]
            n = seen.get(key, 0)
            seen[key] = n + 1
            later = n < a.reconsume_later
            doc["answer"] = "later" if later else "ok"
            if not a.quiet:
                out(doc)
            first[0] = first[0] or doc["t"]
            last[0] = doc["t"]
            if not later:
                count[0] += 1
        return (_CConsumeStatus.RECONSUME_LATER if later else _CConsumeStatus.CONSUME_SUCCESS).value

    from rocketmq.client import MSG_CALLBACK_FUNC, _to_bytes
    dll.Subscribe(c._handle, _to_bytes(a.topic), _to_bytes(a.expr))
    func = MSG_CALLBACK_FUNC(on_message)
    c._callback_refs.append(func)
    dll.RegisterMessageCallback(c._handle, func)
    c.start()
    out({"started": True, "t": time.time()})
    deadline = time.time() + a.timeout
    while time.time() < deadline and count[0] < a.count:
        time.sleep(0.05)
    if a.linger:
        time.sleep(a.linger)
    c.shutdown()
    out({"done": True, "count": count[0], "first": first[0], "last": last[0]})


def pull(a) -> None:
    c = PullConsumer(a.group)
    c.set_namesrv_addr(a.namesrv)
    c.start()
    n = 0
    try:
        for msg in c.pull(a.topic, a.expr):
            out(received(msg))
            n += 1
            if n >= a.count:
                break
    finally:
        c.shutdown()
    out({"done": True, "count": n})


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("produce", "push", "pull"):
        s = sub.add_parser(name)
        s.add_argument("--namesrv", required=True)
        s.add_argument("--group", required=True)
        s.add_argument("--topic", required=True)
        s.add_argument("--count", type=int, default=10)
    for name in ("produce", "push"):
        sub.choices[name].add_argument("--quiet", action="store_true", help="print only the summary line")
    s = sub.choices["produce"]
    s.add_argument("--tags", default="TagA,TagB")
    s.add_argument("--start", type=int, default=0)
    s.add_argument("--body-prefix", default="body-")
    s.add_argument("--delay-level", type=int, default=0)
    s.add_argument("--interval", type=float, default=0.0)
    for name in ("push", "pull"):
        sub.choices[name].add_argument("--expr", default="*")
    s = sub.choices["push"]
    s.add_argument("--timeout", type=float, default=30)
    s.add_argument("--reconsume-later", type=int, default=0)
    s.add_argument("--props", default="")
    s.add_argument("--linger", type=float, default=0.0)
    s.add_argument("--threads", type=int, default=1, help="the client's consume threads")
    a = ap.parse_args()
    {"produce": produce, "push": push, "pull": pull}[a.cmd](a)


if __name__ == "__main__":
    main()
