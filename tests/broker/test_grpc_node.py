"""RocketMQ 5's gRPC client for Node.js (npm rocketmq-client-nodejs 1.0.8, unmodified) against
``rmqstore serve``'s gRPC endpoint: Producer, SimpleConsumer, PushConsumer."""
from __future__ import annotations

import pytest

from .conftest import CLIENTS, NODE_MODULES, _run

#: short long polls: the Node client waits for its receives in flight when it shuts down
FAST = {"minInvisibleTimeMillsForRecv": 1000, "grpcClientConsumerMinLongPollingTimeoutMillis": 500,
        "grpcClientConsumerMaxLongPollingTimeoutMillis": 2000}


@pytest.fixture
def node_grpc(tmp_path):
    if not (NODE_MODULES / "rocketmq-client-nodejs").exists():
        pytest.fail(f"{NODE_MODULES / 'rocketmq-client-nodejs'} missing: run ./scripts/setup_clients")
    home = tmp_path / "node-home"
    home.mkdir(exist_ok=True)

    def _node(*args, timeout: float = 180) -> list[dict]:
        return _run(["node", str(CLIENTS / "grpc_node_client.js"), *map(str, args)], home, timeout)

    _node.log = home / "logs" / "rocketmq" / "rocketmq_client_nodejs.log"
    return _node


def _counts(lines: list[dict]) -> dict:
    return next(d["counts"] for d in lines if "counts" in d)


def test_node_producer_and_simple_consumer(start_broker, node_grpc):
    b = start_broker(grpc=True, broker=FAST)
    sent = next(d["sent"] for d in node_grpc("produce", "--endpoints", b.grpc_address, "--topic", "NT",
                                               "--count", 20, "--tag", "red") if "sent" in d)
    assert len(set(sent)) == 20
    lines = node_grpc("simple", "--endpoints", b.grpc_address, "--topic", "NT", "--group", "NG", "--count", 20,
                      "--tag", "red", "--timeout", 60)
    counts = _counts(lines)
    assert sorted(counts) == sorted(sent) and set(counts.values()) == {1}
    msgs = [d["msg"] for d in lines if "msg" in d]
    by_body = {m["body"]: m for m in msgs}
    m7 = by_body["node-7"]
    assert m7["tag"] == "red" and m7["keys"] == ["node-key-7"] and m7["props"] == {"n": "7"}
    assert m7["attempt"] == 1 and not any(m["corrupted"] for m in msgs)
    # the stored record is what a RocketMQ broker behind the proxy stores
    rec = next(r for q in range(8) for r in b.store.get_message("x", "NT", q, 0, 32).messages
               if r.body == b"node-7")
    assert rec.properties["TAGS"] == "red" and rec.properties["KEYS"] == "node-key-7"
    assert rec.properties["UNIQ_KEY"] == m7["id"] and rec.properties["n"] == "7"
    assert rec.properties["PGROUP"] == "NT"  # the proxy names a gRPC message's producer group after its topic


def test_node_push_consumer_consumes_1000_without_a_corrupted_message(start_broker, node_grpc):
    b = start_broker(grpc=True, broker=FAST)
    sent = next(d["sent"] for d in node_grpc("produce", "--endpoints", b.grpc_address, "--topic", "PT",
                                               "--count", 1000) if "sent" in d)
    counts = _counts(node_grpc("push", "--endpoints", b.grpc_address, "--topic", "PT", "--group", "PG",
                               "--count", 1000, "--timeout", 120))
    assert sorted(counts) == sorted(sent)
    assert set(counts.values()) == {1}
    log = node_grpc.log.read_text(errors="replace")
    assert "Assignments of topic=PT" in log  # the log is where the test looks
    assert "corrupted" not in log.lower()
    assert b.pops.in_flight("PG") == 0
