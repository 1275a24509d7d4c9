"""Drives PyPI rocketmq-python-client 5.1.2 (RocketMQ 5's gRPC client) for the broker tests.

Runs in its own virtualenv (.clients/grpc-py: its import name ``rocketmq`` clashes with the remoting
binding's). Reads one JSON command per line on stdin and answers one JSON line on stdout:
``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``. Received messages are kept by their
index (``"ref"``) so later commands can ack them or change their invisible duration.

Commands: producer {endpoints, topics, checker?}; send {topic, body, tag?, keys?, group?, delay_ms?,
props?}; send_many {topic, n, prefix, tag?}; transaction {topic, body, end: commit|rollback|none};
consumer {endpoints, group, topic, tag?, await_s?}; receive {n, invisible_s}; ack {refs};
change_invisible {ref, invisible_s}; receive_all {n_expected, invisible_s, ack, timeout_s}; shutdown.
"""
import json
import sys
import time
import traceback

from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer,
                      TransactionChecker, TransactionResolution)

state = {"producer": None, "consumer": None, "msgs": [], "checked": []}


class Checker(TransactionChecker):
    def __init__(self, answer):
        self.answer = answer

    def check(self, message):
        state["checked"].append(message.message_id)
        return TransactionResolution.COMMIT if self.answer == "commit" else TransactionResolution.ROLLBACK


def view(ref, m):
    return {"ref": ref, "id": m.message_id, "body": m.body.decode("utf-8", "replace"), "attempt": m.delivery_attempt,
            "tag": m.tag, "keys": list(m.keys or []), "group": m.message_group, "topic": m.topic,
            "props": dict(m.properties or {}), "corrupted": bool(m.corrupted)}


def message(cmd):
    m = Message()
    m.topic = cmd["topic"]
    m.body = cmd["body"].encode()
    if cmd.get("tag"):
        m.tag = cmd["tag"]
    if cmd.get("keys"):
        m.keys = cmd["keys"][0]  # the setter takes one key
    if cmd.get("group"):
        m.message_group = cmd["group"]
    if cmd.get("delay_ms") is not None:
        # this client takes the delivery time in whole seconds (it sets Timestamp.seconds from it)
        m.delivery_timestamp = int(time.time() + int(cmd["delay_ms"]) / 1000)
    for k, v in (cmd.get("props") or {}).items():
        m.add_property(k, v)
    return m


def run(cmd):
    op = cmd["op"]
    if op == "producer":
        cfg = ClientConfiguration(cmd["endpoints"], Credentials(), request_timeout=cmd.get("timeout_s", 10))
        checker = Checker(cmd["checker"]) if cmd.get("checker") else None
        p = Producer(cfg, tuple(cmd["topics"]), checker) if checker else Producer(cfg, tuple(cmd["topics"]))
        p.startup()
        state["producer"] = p
        return {}
    if op == "send":
        r = state["producer"].send(message(cmd))
        return {"id": r.message_id, "offset": getattr(r, "offset", None)}
    if op == "send_many":
        ids = []
        for i in range(cmd["n"]):
            ids.append(state["producer"].send(message(dict(cmd, body=f"{cmd['prefix']}{i}"))).message_id)
        return {"ids": ids}
    if op == "transaction":
        p = state["producer"]
        tx = p.begin_transaction()
        r = p.send(message(cmd), tx)
        if cmd["end"] == "commit":
            tx.commit()
        elif cmd["end"] == "rollback":
            tx.rollback()
        return {"id": r.message_id}
    if op == "checked":
        return {"ids": list(state["checked"])}
    if op == "consumer":
        cfg = ClientConfiguration(cmd["endpoints"], Credentials(), request_timeout=cmd.get("timeout_s", 10))
        c = SimpleConsumer(cfg, cmd["group"], {cmd["topic"]: FilterExpression(cmd.get("tag", "*"))},
                           await_duration=cmd.get("await_s", 5))
        c.startup()
        state["consumer"] = c
        return {}
    if op == "receive":
        got = state["consumer"].receive(cmd["n"], cmd["invisible_s"]) or []
        out = []
        for m in got:
            state["msgs"].append(m)
            out.append(view(len(state["msgs"]) - 1, m))
        return {"msgs": out}
    if op == "ack":
        for ref in cmd["refs"]:
            state["consumer"].ack(state["msgs"][ref])
        return {}
    if op == "ack_error":
        try:
            state["consumer"].ack(state["msgs"][cmd["ref"]])
        except Exception as e:  # noqa: BLE001 - the error is the answer
            return {"error": f"{type(e).__name__}: {e}"}
        return {"error": None}
    if op == "change_invisible":
        state["consumer"].change_invisible_duration(state["msgs"][cmd["ref"]], cmd["invisible_s"])
        return {}
    if op == "receive_all":
        seen = {}
        deadline = time.time() + cmd["timeout_s"]
        while len(seen) < cmd["n_expected"] and time.time() < deadline:
            for m in state["consumer"].receive(32, cmd["invisible_s"]) or []:
                seen.setdefault(m.message_id, 0)
                seen[m.message_id] += 1
                if cmd.get("ack", True):
                    state["consumer"].ack(m)
        return {"counts": seen}
    if op == "shutdown":
        for k in ("producer", "consumer"):
            if state[k] is not None:
                state[k].shutdown()
                state[k] = None
        return {}
    raise ValueError(f"unknown op {op!r}")


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            out = {"ok": True, **run(json.loads(line))}
        except Exception as e:  # noqa: BLE001 - reported to the test
            out = {"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
