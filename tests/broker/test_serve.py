"""``rmqstore serve`` as a process: the listening line, clean stop on SIGTERM, and kill -9 under load
with SYNC_FLUSH (every acknowledged send survives; offsets at most one commit interval behind)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from rmqstore import MessageStore
from rmqstore.broker import remoting as R
from tests.kit import free_port
from tests import kit

C, RC = R.RequestCode, R.ResponseCode
RMQSTORE = [sys.executable, "-m", "rmqstore.cli.main"]


def _serve(store: Path, *extra: str, config: Path | None = None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    argv = [*RMQSTORE, "serve", "--store", str(store), "--listen", f"127.0.0.1:{port}", *extra]
    if config is not None:
        argv += ["--config", str(config)]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith(f"listening on 127.0.0.1:{port}"), (line, p.stderr.read() if p.poll() is not None else "")
    return p, f"127.0.0.1:{port}"



def test_serve_prints_listening_and_stops_cleanly_on_sigterm(tmp_path, connect, send_v2):
    store = tmp_path / "store"
    p, addr = _serve(store)
    try:
        c = connect(addr)
        for i in range(10):
            assert send_v2(c, "Cli", f"m{i}".encode(), queue_id=0).code == RC.SUCCESS
        c.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "Cli", "queueId": 0, "commitOffset": 7})
    finally:
        err = kit.sigterm_and_wait(p)
    assert "client connected" in err and "stopped: store closed cleanly" in err
    assert len(re.findall(r"^\S+ listening on ", err, flags=re.M)) == 1  # the broker's line (not HA's)
    assert not (store / "abort").exists()  # a clean close: no recovery on the next open
    with MessageStore.open(store, read_only=True) as st:
        assert st.get_max_offset_in_queue("Cli", 0) == 10
        assert st.consumer_offsets.query_offset("G", "Cli", 0) == 7


def test_serve_read_only_refuses_a_missing_store(tmp_path):
    p = subprocess.run([*RMQSTORE, "serve", "--store", str(tmp_path / "none"), "--read-only"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode != 0 and "needs an existing store" in p.stderr


def test_serve_with_grpc_listen(tmp_path):
    import grpc

    from rmqstore.broker.messaging.protocol import pb, services

    store = tmp_path / "store"
    gport = free_port()
    p, addr = _serve(store, "--grpc-listen", f"127.0.0.1:{gport}")
    try:
        line = p.stdout.readline()
        assert line.startswith(f"gRPC MessagingService on 127.0.0.1:{gport}"), line
        with grpc.insecure_channel(f"127.0.0.1:{gport}") as ch:
            stub = services.MessagingServiceStub(ch)
            r = stub.SendMessage(pb.SendMessageRequest(messages=[pb.Message(
                topic=pb.Resource(name="G5"), body=b"over grpc",
                system_properties=pb.SystemProperties(message_id="0A0B0C"))]), timeout=20)
            assert r.status.code == pb.OK
    finally:
        kit.sigterm_and_wait(p)
    with MessageStore.open(store, read_only=True) as st:
        assert [m.body for m in st.query_message_by_unique_key("G5", "0A0B0C").messages] == [b"over grpc"]


def test_serve_grpc_options_are_checked(tmp_path):
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    for extra, says in ((["--grpc-listen", "nowhere"], "--grpc-listen"),
                        (["--grpc-listen", "127.0.0.1:0", "--grpc-tls-cert", str(cert)], "go together"),
                        (["--grpc-tls-cert", str(cert), "--grpc-tls-key", str(cert)], "need --grpc-listen")):
        p = subprocess.run([*RMQSTORE, "serve", "--store", str(tmp_path / "s"), *extra], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 2 and says in p.stderr, (extra, p.stderr)


def test_kill9_under_load_with_sync_flush_loses_no_acknowledged_send(tmp_path, connect, send_v2):
    store = tmp_path / "store"
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=kill9\nflushDiskType=SYNC_FLUSH\nflushConsumerOffsetInterval=500\n"
                    "mappedFileSizeCommitLog=1048576\n")
    p, addr = _serve(store, config=conf)
    acked: list[tuple[str, bytes]] = []
    stop = threading.Event()

    def producer(n: int) -> None:
        c = connect(addr)
        i = 0
        while not stop.is_set():
            body = f"p{n}-{i}".encode()
            try:
                r = send_v2(c, "K9", body, queue_id=n % 4)
            except OSError:
                return
            if r.code == RC.SUCCESS:
                acked.append((r.ext["msgId"], body))
            i += 1

    try:
        c = connect(addr)
        send_v2(c, "K9", b"seed", queue_id=0)
        c.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "K9", "queueId": 0, "commitOffset": 1})
        time.sleep(1.2)  # persisted at least once (every 500 ms)
        threads = [threading.Thread(target=producer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        time.sleep(1.5)
        c.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "K9", "queueId": 0, "commitOffset": 2})
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
    finally:
        stop.set()
        if p.poll() is None:
            p.kill()
    for t in threads:
        t.join(10)
    assert len(acked) > 50
    with MessageStore.open(store) as st:  # recovery
        for msg_id, body in acked:
            rec = st.view_message_by_id(msg_id)
            assert rec is not None and rec.body == body, f"acknowledged {msg_id} lost"
        assert st.consumer_offsets.query_offset("G", "K9", 0) in (1, 2)
