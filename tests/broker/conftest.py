"""Broker test fixtures: a broker on a fresh store, a small remoting client, the real clients.

* ``start_broker(**store_overrides, broker=BrokerConfig or mapping, read_only=False, path=None)``:
  a :class:`rmqstore.broker.Broker` on 127.0.0.1 (a free port), stopped and its store closed at the end.
  ``grpc=True`` also starts the gRPC endpoint (``broker.grpc_address``).
* ``grpc_py()``: a :class:`GrpcPyClient` driving PyPI rocketmq-python-client 5.1.2 in its own process.
* ``connect(address)``: a :class:`RemotingClient` (frames requests, reads answers; blocking).
* ``cpp_client(*args)`` / ``ali_client(*args)``: run the C++-client (PyPI rocketmq 0.4.4) or
  ali-ons driver script from ``tests/broker/clients`` in its own environment (``scripts/setup_clients``)
  and return the JSON lines it printed.
"""
from __future__ import annotations

import itertools
import select
import time
import json
import os
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from rmqstore import MessageStore, MessageStoreConfig
from rmqstore.broker import Broker, BrokerConfig
from rmqstore.broker import remoting as R
from rmqstore.broker.namesrv import NameServer

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = Path(__file__).resolve().parent / "clients"
CPP_PYTHON = ROOT / ".clients" / "remoting-py" / "bin" / "python"
GRPC_PYTHON = ROOT / ".clients" / "grpc-py" / "bin" / "python"
NODE_MODULES = ROOT / ".clients" / "node" / "node_modules"
#: short delay levels so that retries and delayed messages arrive within a test
FAST_DELAYS = "1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s"


class RemotingClient:
    """A blocking remoting client for tests."""

    def __init__(self, address: str, timeout: float = 20.0):
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self._opaque = itertools.count(1)
        self.reader = R.FrameReader()
        self.pending: list[R.RemotingCommand] = []

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, code: int, ext: dict | None = None, body: bytes = b"", *, oneway: bool = False,
             serialize: int = R.JSON, version: int = R.VERSION_V4_9_4) -> int:
        cmd = R.request(code, ext, body, opaque=next(self._opaque), oneway=oneway, serialize=serialize)
        cmd.version = version
        self.sock.sendall(R.encode(cmd))
        return cmd.opaque

    def read(self) -> R.RemotingCommand:
        """The next command from the server (responses and the server's own requests)."""
        if self.pending:
            return self.pending.pop(0)
        while True:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("server closed the connection")
            frames = self.reader.feed(data)
            if frames:
                cmds = [R.decode(f) for f in frames]
                self.pending.extend(cmds[1:])
                return cmds[0]

    def response_to(self, opaque: int) -> R.RemotingCommand:
        skipped = []
        while True:
            cmd = self.read()
            if cmd.is_response and cmd.opaque == opaque:
                self.pending[:0] = skipped
                return cmd
            skipped.append(cmd)

    def call(self, code: int, ext: dict | None = None, body: bytes = b"", **kw) -> R.RemotingCommand:
        return self.response_to(self.send(code, ext, body, **kw))

    def json_call(self, code: int, ext: dict | None = None, doc=None, **kw):
        body = json.dumps(doc).encode() if doc is not None else b""
        r = self.call(code, ext, body, **kw)
        return r, (json.loads(r.body) if r.body else None)


@pytest.fixture
def connect():
    opened: list[RemotingClient] = []

    def _connect(address: str, timeout: float = 20.0) -> RemotingClient:
        c = RemotingClient(address, timeout)
        opened.append(c)
        return c

    yield _connect
    for c in opened:
        c.close()


def broker_store_config(**overrides) -> MessageStoreConfig:
    values = {"mapped_file_size_commit_log": 4 * 1024 * 1024, "mapped_file_size_consume_queue": 20 * 4000,
              "max_hash_slot_num": 4000, "max_index_num": 16000, "message_delay_level": FAST_DELAYS}
    values.update(overrides)
    return MessageStoreConfig.embedded(**values)


@pytest.fixture
def start_broker(tmp_path):
    running: list[tuple[Broker, MessageStore]] = []

    def _start(*, broker=None, read_only: bool = False, path=None, grpc: bool = False, grpc_tls=None,
               **store_overrides) -> Broker:
        p = Path(path) if path is not None else tmp_path / "store"
        st = MessageStore.open(p, broker_store_config(**store_overrides), read_only=read_only)
        bcfg = broker if isinstance(broker, BrokerConfig) else BrokerConfig.from_properties(
            {"brokerName": "broker-a", **(broker or {})})
        b = Broker(st, bcfg, listen="127.0.0.1:0", grpc_listen="127.0.0.1:0" if grpc or grpc_tls else None,
                   grpc_tls=grpc_tls)
        try:
            b.start()
        except BaseException:
            st.close()
            raise
        running.append((b, st))
        return b

    yield _start
    for b, st in reversed(running):
        b.stop()
        st.close()


def stop_broker(b: Broker) -> None:
    """Stop a broker started by ``start_broker`` and close its store (for restart tests)."""
    b.stop()
    b.store.close()


@pytest.fixture(name="stop_broker")
def _stop_broker_fixture():
    return stop_broker


def _run(argv: list[str], home: Path, timeout: float) -> list[dict]:
    env = dict(os.environ, HOME=str(home), ALI_ONS_MODULES=str(NODE_MODULES))
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not lines or "done" not in lines[-1]:
        raise AssertionError(f"{argv[1]} {argv[2]} failed (exit {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return lines


@pytest.fixture
def cpp_client(tmp_path):
    """Run ``tests/broker/clients/cpp_client.py <args>`` with PyPI rocketmq 0.4.4."""
    if not CPP_PYTHON.exists():
        pytest.fail(f"{CPP_PYTHON} missing: run ./scripts/setup_clients")
    home = tmp_path / "cpp-home"
    home.mkdir(exist_ok=True)

    def _run_cpp(*args: str, timeout: float = 120) -> list[dict]:
        return _run([str(CPP_PYTHON), str(CLIENTS / "cpp_client.py"), *map(str, args)], home, timeout)

    return _run_cpp


@pytest.fixture
def cpp_client_async(tmp_path):
    """Start the C++-client driver in the background: returns the Popen (stdout piped)."""
    home = tmp_path / "cpp-home"
    home.mkdir(exist_ok=True)
    procs: list[subprocess.Popen] = []

    def _start(*args: str) -> subprocess.Popen:
        # output to files, not pipes: a consumer printing into a full pipe that nobody reads yet
        # would block in its callback
        env = dict(os.environ, HOME=str(home))
        out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        p = subprocess.Popen([str(CPP_PYTHON), str(CLIENTS / "cpp_client.py"), *map(str, args)],
                             stdout=out, stderr=err, text=True, env=env)
        p.out_files = (out, err)
        procs.append(p)
        return p

    yield _start
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def lines_of(p: subprocess.Popen, timeout: float = 120) -> list[dict]:
    p.wait(timeout)
    for f in p.out_files:
        f.seek(0)
    stdout, stderr = (f.read() for f in p.out_files)
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not lines or "done" not in lines[-1]:
        raise AssertionError(f"client failed (exit {p.returncode}):\n{stdout[-2000:]}\n{stderr[-3000:]}")
    return lines


@pytest.fixture(name="lines_of")
def _lines_of_fixture():
    return lines_of


@pytest.fixture
def ali_client(tmp_path):
    """Run ``tests/broker/clients/ali_client.js <args>`` with npm ali-ons 3.12.0."""
    if not (NODE_MODULES / "ali-ons").exists():
        pytest.fail(f"{NODE_MODULES / 'ali-ons'} missing: run ./scripts/setup_clients")
    home = tmp_path / "ali-home"
    home.mkdir(exist_ok=True)

    def _run_ali(*args: str, timeout: float = 120) -> list[dict]:
        return _run(["node", str(CLIENTS / "ali_client.js"), *map(str, args)], home, timeout)

    return _run_ali


def send_v2(client: RemotingClient, topic: str, body: bytes, *, props: str = "", queue_id: int = -1,
            code: int = R.RequestCode.SEND_MESSAGE_V2, group: str = "PG", batch: str | None = None,
            reconsume: int = 0, sys_flag: int = 0, born: int = 1_700_000_000_000, version: int = R.VERSION_V4_9_4,
            extra: dict | None = None) -> R.RemotingCommand:
    """A send as RocketMQ's Java producer makes it (V2 short header names for 310/320, V1 for 10)."""
    v1 = {"producerGroup": group, "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
          "queueId": queue_id, "sysFlag": sys_flag, "bornTimestamp": born, "flag": 0, "properties": props,
          "reconsumeTimes": reconsume, "unitMode": "false", "batch": batch}
    v1.update(extra or {})
    if code != R.RequestCode.SEND_MESSAGE:
        names = {"producerGroup": "a", "topic": "b", "defaultTopic": "c", "defaultTopicQueueNums": "d", "queueId": "e",
                 "sysFlag": "f", "bornTimestamp": "g", "flag": "h", "properties": "i", "reconsumeTimes": "j",
                 "unitMode": "k", "maxReconsumeTimes": "l", "batch": "m"}
        v1 = {names.get(k, k): v for k, v in v1.items()}
    return client.call(code, v1, body, version=version)


@pytest.fixture(name="send_v2")
def _send_v2_fixture():
    return send_v2


def pull(client: RemotingClient, group: str, topic: str, queue_id: int, offset: int, *, max_nums: int = 32,
         sub: str = "*", suspend_ms: int = 0, commit: int | None = None) -> R.RemotingCommand:
    flag = 4 | (2 if suspend_ms else 0) | (1 if commit is not None else 0)
    return client.call(R.RequestCode.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset, "maxMsgNums": max_nums,
        "sysFlag": flag, "commitOffset": commit if commit is not None else 0, "suspendTimeoutMillis": suspend_ms,
        "subscription": sub, "subVersion": 0, "expressionType": "TAG"})


@pytest.fixture(name="pull")
def _pull_fixture():
    return pull


def props_text(**props: str) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items())


@pytest.fixture(name="props_text")
def _props_text_fixture():
    return props_text


def stored_bytes(store, phy: int, size: int) -> bytes:
    """``size`` bytes at commitlog offset ``phy``, read from the segment file on disk (an oracle
    independent of the store's read path)."""
    seg = store.cfg.mapped_file_size_commit_log
    start = phy - phy % seg
    with open(os.path.join(store.path, "commitlog", f"{start:020d}"), "rb") as fh:
        fh.seek(phy - start)
        return fh.read(size)


@pytest.fixture(name="stored_bytes")
def _stored_bytes_fixture():
    return stored_bytes


def records_in(body: bytes) -> list:
    """The records of a pull/query body (each a stored commitlog record), decoded with CRC checks."""
    from rmqstore.format.message import decode_message
    out, pos = [], 0
    while pos < len(body):
        rec = decode_message(body, pos, len(body), check_crc=True)
        out.append(rec)
        pos += rec.store_size
    return out


@pytest.fixture(name="records_in")
def _records_in_fixture():
    return records_in


class GrpcPyClient:
    """The rocketmq-python-client 5.1.2 driver (``clients/grpc_py_client.py``): one JSON command per
    line in, one JSON answer per line out."""

    def __init__(self, home: Path):
        home.mkdir(exist_ok=True)
        env = dict(os.environ, HOME=str(home))
        self.home = home
        self.err = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen([str(GRPC_PYTHON), str(CLIENTS / "grpc_py_client.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err, text=True, env=env)

    def call(self, op: str, timeout: float = 120, **args) -> dict:
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, left))
            if not ready:
                raise AssertionError(f"grpc client: no answer to {op} within {timeout} s")
            line = self.proc.stdout.readline()
            if not line:
                self.err.seek(0)
                raise AssertionError(f"grpc client exited (code {self.proc.poll()}):\n{self.err.read()[-3000:]}")
            if line.startswith("{"):
                out = json.loads(line)
                if not out.get("ok"):
                    raise AssertionError(f"grpc client {op} failed: {out.get('error')}\n{out.get('trace', '')}")
                return out

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("shutdown", timeout=30)
            except AssertionError:
                pass
            self.proc.stdin.close()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def grpc_py(tmp_path):
    """Start rocketmq-python-client drivers: ``grpc_py()`` returns a :class:`GrpcPyClient`."""
    if not GRPC_PYTHON.exists():
        pytest.fail(f"{GRPC_PYTHON} missing: run ./scripts/setup_clients")
    started: list[GrpcPyClient] = []

    def _start() -> GrpcPyClient:
        c = GrpcPyClient(tmp_path / f"grpc-home-{len(started)}")
        started.append(c)
        return c

    yield _start
    for c in started:
        c.close()


@pytest.fixture
def namesrv():
    """Start standalone name servers on free loopback ports: ``namesrv(scan=5.0, kv_config_path=None)``; all
    stopped after the test."""
    servers = []

    def _start(scan: float = 5.0, kv_config_path: str | None = None) -> NameServer:
        ns = NameServer("127.0.0.1:0", scan_interval_s=scan, kv_config_path=kv_config_path).start()
        servers.append(ns)
        return ns

    yield _start
    for ns in servers:
        ns.stop()
