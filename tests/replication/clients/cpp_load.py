"""Load from RocketMQ's C++ client (PyPI ``rocketmq==0.4.4``) for the replication tests, the soak
and the bench. Runs in the client's own virtualenv: ``python cpp_load.py produce|consume ...``.

``produce``: ``--threads`` producer threads (one C++ producer shared, as an application would)
send until ``--seconds`` pass, ``--count`` sends per thread are done, or a thread saw
``--max-failures`` failures in a row (its broker is gone). Every send the client saw acknowledged
is printed as one JSON line ``{"k": key, "s": status, "o": queue offset, "t": time}`` right after
``send_sync`` returned (and flushed), so the lines a killed broker leaves behind are exactly the
acknowledged sends; failures print ``{"k": key, "err": text}``. Keys are ``<run>-<thread>-<i>``.

``consume``: a push consumer in a consumer group; prints ``{"k": key, "q": queue id, "o": queue
offset, "s": store time ms, "t": time}`` per message, until ``--count`` distinct keys arrived,
``--seconds`` passed, nothing arrived for ``--idle`` seconds after the first message, or the file
``--stop-file`` exists.

Both end with one ``{"done": ...}`` line.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

from rocketmq.client import MSG_CALLBACK_FUNC, Message, Producer, PushConsumer, RecvMessage, _to_bytes
from rocketmq.ffi import _CConsumeStatus, dll

_out_lock = threading.Lock()


def out(doc: dict) -> None:
    line = json.dumps(doc, separators=(",", ":")) + "\n"
    with _out_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def produce(a) -> None:
    p = Producer(a.group, timeout=a.send_timeout_ms)
    p.set_namesrv_addr(a.namesrv)
    p.start()
    out({"started": True, "t": time.time()})
    deadline = time.monotonic() + a.seconds
    counts = {"ok": 0, "not_ok": 0, "failed": 0}
    lock = threading.Lock()
    body = "x" * a.body_size

    def run(tid: int) -> None:
        streak = 0
        for i in range(a.count):
            if time.monotonic() >= deadline or streak >= a.max_failures:
                return
            key = f"{a.run}-{tid}-{i}"
            m = Message(a.topic)
            m.set_keys(key)
            m.set_tags(a.tags)
            m.set_body(f"{key}:{body}")
            try:
                r = p.send_sync(m)
            except Exception as e:  # noqa: BLE001 - the broker is gone or refused: not acknowledged
                streak += 1
                with lock:
                    counts["failed"] += 1
                if not a.quiet:
                    out({"k": key, "err": str(e).splitlines()[0][:200] if str(e) else type(e).__name__})
                if a.retry_pause:
                    time.sleep(a.retry_pause)
                continue
            streak = 0
            status = int(r.status)
            with lock:
                counts["ok" if status == 0 else "not_ok"] += 1
            if not a.quiet or status != 0:
                out({"k": key, "s": status, "o": r.offset, "t": time.time()})
            if a.interval:
                time.sleep(a.interval)

    t0 = time.time()
    threads = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(a.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t1 = time.time()
    # the summary first: the C++ client's shutdown sometimes aborts (boost::thread_interrupted
    # from a timer thread) after everything was sent; the harness accepts that after "done"
    out({"done": True, **counts, "start": t0, "end": t1})
    p.shutdown()


def consume(a) -> None:
    c = PushConsumer(a.group)
    c.set_namesrv_addr(a.namesrv)
    c.set_thread_count(a.threads)
    seen: set[str] = set()
    state = {"first": 0.0, "last": 0.0, "deliveries": 0}
    lock = threading.Lock()

    def on_message(consumer, handle):
        msg = RecvMessage(handle)
        key = (msg.keys or b"").decode()
        now = time.time()
        with lock:
            seen.add(key)
            state["deliveries"] += 1
            state["first"] = state["first"] or now
            state["last"] = now
        if not a.quiet:
            out({"k": key, "q": msg.queue_id, "o": msg.queue_offset, "s": msg.store_timestamp, "t": now})
        return _CConsumeStatus.CONSUME_SUCCESS.value

    dll.Subscribe(c._handle, _to_bytes(a.topic), _to_bytes(a.expr))
    func = MSG_CALLBACK_FUNC(on_message)
    c._callback_refs.append(func)
    dll.RegisterMessageCallback(c._handle, func)
    c.start()
    out({"started": True, "t": time.time()})
    deadline = time.time() + a.seconds
    while time.time() < deadline:
        with lock:
            n, last = len(seen), state["last"]
        if a.count and n >= a.count:
            break
        if a.idle and last and time.time() - last > a.idle:
            break
        if a.stop_file and os.path.exists(a.stop_file):
            break
        time.sleep(0.05)
    if a.linger:
        time.sleep(a.linger)
    with lock:
        out({"done": True, "distinct": len(seen), **state})
    c.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("produce", "consume"):
        s = sub.add_parser(name)
        s.add_argument("--namesrv", required=True)
        s.add_argument("--group", required=True)
        s.add_argument("--topic", required=True)
        s.add_argument("--threads", type=int, default=1)
        s.add_argument("--seconds", type=float, default=30.0)
        s.add_argument("--quiet", action="store_true", help="print only failures and the summary")
    s = sub.choices["produce"]
    s.add_argument("--run", default="r0", help="key prefix")
    s.add_argument("--count", type=int, default=1 << 40, help="sends per thread at most")
    s.add_argument("--tags", default="T")
    s.add_argument("--body-size", type=int, default=100)
    s.add_argument("--interval", type=float, default=0.0, help="pause after each acknowledged send (s)")
    s.add_argument("--max-failures", type=int, default=3, help="a thread stops after this many failures in a row")
    s.add_argument("--retry-pause", type=float, default=0.05, help="pause after a failed send (s)")
    s.add_argument("--send-timeout-ms", type=int, default=3000)
    s = sub.choices["consume"]
    s.add_argument("--count", type=int, default=0, help="stop once this many distinct keys arrived")
    s.add_argument("--idle", type=float, default=0.0, help="stop after this long without a message (s)")
    s.add_argument("--stop-file", default="", help="stop once this file exists")
    s.add_argument("--expr", default="*")
    s.add_argument("--linger", type=float, default=0.0)
    a = ap.parse_args()
    {"produce": produce, "consume": consume}[a.cmd](a)


if __name__ == "__main__":
    main()
