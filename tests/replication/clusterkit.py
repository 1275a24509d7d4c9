"""Process harness for the replication tests, ``scripts/soak_replication`` and ``bench/replication.py``.

Everything runs as real processes on 127.0.0.1:

* :class:`Cluster` owns what it starts and kills all of it at the end: ``namesrv()`` starts
  ``rmqstore namesrv``, ``broker(...)`` a :class:`Node` running ``rmqstore serve`` on its own store
  with a broker.conf written from RocketMQ's keys (:func:`broker_conf`).
* :class:`Node`: ``start`` (waits until the listen port accepts), ``kill9``, ``stop`` (SIGTERM,
  clean exit expected), ``restart(**conf changes)``; its output goes to files in its directory.
* :class:`Load`: the C++ client's driver (``clients/cpp_load.py``) in the background; ``acks()``
  are the sends it saw acknowledged (status SEND_OK), ``received()`` what a consumer got.
* oracles that read only the files: :func:`commitlog_bytes`, :func:`valid_end` (the end of the
  complete records), :func:`keys_in_commitlog`, :func:`assert_prefix` (the slave's commitlog is a
  byte-identical prefix of the master's), :func:`assert_queues_as_rebuilt` (consume queues and
  index equal what ``rmqstore rebuild`` makes from the same bytes).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # scripts import this module directly
    sys.path.insert(0, str(ROOT))

from tests.kit import free_port, tree_bytes, tree_hashes  # noqa: E402

CPP_PYTHON = ROOT / ".clients" / "remoting-py" / "bin" / "python"
CPP_LOAD = Path(__file__).resolve().parent / "clients" / "cpp_load.py"
RMQSTORE = [sys.executable, "-m", "rmqstore.cli.main"]
HOST = "127.0.0.1"
SEGMENT = 4 * 1024 * 1024
#: store keys every test broker gets: small files (rollover within a test), small index files
SMALL_STORE = {"mappedFileSizeCommitLog": SEGMENT, "mappedFileSizeConsumeQueue": 20 * 8000,
               "maxHashSlotNum": 5000, "maxIndexNum": 40000, "flushDiskType": "ASYNC_FLUSH"}
_BLANK_MAGIC = 0xCBD43194
_HEAD = struct.Struct(">iI")


class ProcessFailed(AssertionError):
    """A process of the harness did not start or stop as expected (its output attached)."""


def wait_port(addr: str, timeout: float = 60.0, alive: Callable[[], bool] = lambda: True) -> None:
    """Until ``addr`` accepts a TCP connection; fails when ``alive()`` turns false or time is up."""
    host, _, port = addr.rpartition(":")
    end = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1.0):
                return
        except OSError:
            pass
        if not alive():
            raise ProcessFailed(f"process exited before {addr} accepted connections")
        if time.monotonic() > end:
            raise ProcessFailed(f"{addr} accepts no connection after {timeout} s")
        time.sleep(0.05)


def wait_until(cond: Callable[[], object], timeout: float, what: str, every: float = 0.05):
    """Poll ``cond`` until it returns something true (returned); AssertionError naming ``what``."""
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def broker_conf(name: str, role: str, *, ha_port: int, master_ha: str | None = None, cluster: str = "RepCluster",
                **extra) -> dict:
    """broker.conf keys of a test broker: ``role`` ASYNC_MASTER/SYNC_MASTER (brokerId 0) or SLAVE
    (brokerId 1, ``master_ha`` its master's HA address when given statically)."""
    conf = {"brokerClusterName": cluster, "brokerName": name, "brokerId": 1 if role == "SLAVE" else 0,
            "brokerRole": role, "haListenPort": ha_port, "haHousekeepingInterval": 3000,
            "haSendHeartbeatInterval": 1000, "haReconnectInterval": 500, **SMALL_STORE}
    if master_ha:
        conf["haMasterAddress"] = master_ha
    conf.update(extra)
    return conf


def write_conf(path: Path, conf: dict) -> None:
    path.write_text("".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n" for k, v in conf.items()))


@dataclass
class Node:
    """One ``rmqstore serve`` (``kind="broker"``) or ``rmqstore namesrv`` process and its directory."""

    root: Path
    name: str
    port: int
    kind: str = "broker"
    conf: dict = field(default_factory=dict)
    namesrv: str | None = None
    proc: subprocess.Popen | None = None
    starts: int = 0

    @property
    def addr(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def ha_addr(self) -> str:
        return f"{HOST}:{self.conf['haListenPort']}"

    @property
    def store(self) -> Path:
        return self.root / "store"

    @property
    def conf_path(self) -> Path:
        return self.root / "broker.conf"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def argv(self) -> list[str]:
        if self.kind == "namesrv":
            return [*RMQSTORE, "namesrv", "--listen", self.addr]
        write_conf(self.conf_path, self.conf)
        argv = [*RMQSTORE, "serve", "--store", str(self.store), "--listen", self.addr, "--config", str(self.conf_path)]
        return argv + (["--namesrv-addr", self.namesrv] if self.namesrv else [])

    def start(self, timeout: float = 60.0) -> "Node":
        self.spawn()
        return self.wait_started(timeout)

    def spawn(self) -> None:
        assert not self.running, f"{self.name} is running"
        self.root.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        out = open(self.root / f"out.{self.starts}.log", "w")
        err = open(self.root / f"err.{self.starts}.log", "w")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(self.argv(), stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                     cwd=self.root)
        out.close()
        err.close()

    def wait_started(self, timeout: float = 60.0) -> "Node":
        try:
            wait_port(self.addr, timeout, lambda: self.proc.poll() is None)
        except ProcessFailed as e:
            raise ProcessFailed(f"{self.name}: {e}\n{self.log()[-3000:]}") from None
        return self

    def kill9(self) -> None:
        if self.running:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM; the process must exit 0 within ``timeout``."""
        if not self.running:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise ProcessFailed(f"{self.name} did not stop within {timeout} s\n{self.log()[-3000:]}") from None
        if rc != 0:
            raise ProcessFailed(f"{self.name} exited {rc} on SIGTERM\n{self.log()[-3000:]}")

    def restart(self, timeout: float = 60.0, **conf_changes) -> "Node":
        self.stop()
        self.conf.update(conf_changes)
        return self.start(timeout)

    def log(self, start: int | None = None) -> str:
        """stderr (and stdout) of the ``start``-th run (default: the latest)."""
        n = start or self.starts
        parts = []
        for kind in ("out", "err"):
            p = self.root / f"{kind}.{n}.log"
            if p.exists():
                parts.append(p.read_text(errors="replace"))
        return "\n".join(parts)

    def all_logs(self) -> str:
        return "\n".join(self.log(i) for i in range(1, self.starts + 1))


class Cluster:
    """Starts nodes under ``root`` and kills every process it started at :meth:`close`."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.nodes: list[Node] = []
        self.loads: list["Load"] = []

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def namesrv(self, name: str = "namesrv") -> Node:
        n = Node(self.root / name, name, free_port(), kind="namesrv")
        self.nodes.append(n)
        return n.start()

    def broker(self, name: str, conf: dict, *, namesrv: str | None = None, start: bool = True) -> Node:
        n = Node(self.root / name, name, free_port(), conf=dict(conf), namesrv=namesrv)
        self.nodes.append(n)
        return n.start() if start else n

    def group(self, name: str, *, role: str = "ASYNC_MASTER", namesrv: str | None = None, start: bool = True,
              master_extra: dict | None = None, slave_extra: dict | None = None) -> tuple[Node, Node]:
        """A broker group: master (``role``) and one slave whose haMasterAddress is the master's."""
        m_ha, s_ha = free_port(), free_port()
        master = self.broker(f"{name}-m", broker_conf(name, role, ha_port=m_ha, **(master_extra or {})),
                             namesrv=namesrv, start=start)
        slave = self.broker(f"{name}-s", broker_conf(name, "SLAVE", ha_port=s_ha, master_ha=master.ha_addr,
                                                     **(slave_extra or {})), namesrv=namesrv, start=start)
        return master, slave

    def start_all(self, *nodes: Node, timeout: float = 60.0) -> None:
        """Start several nodes at once (each process's start-up overlaps the others')."""
        for n in nodes:
            n.spawn()
        for n in nodes:
            n.wait_started(timeout)

    def load(self, *args: str) -> "Load":
        ld = Load(self.root / f"load{len(self.loads)}", args)
        self.loads.append(ld)
        return ld

    def close(self) -> None:
        for ld in self.loads:
            ld.kill()
        for n in reversed(self.nodes):
            n.kill9()


class Load:
    """``clients/cpp_load.py <args>`` in the client's virtualenv, output in files under ``root``."""

    def __init__(self, root: Path, args: tuple[str, ...]):
        if not CPP_PYTHON.exists():
            raise ProcessFailed(f"{CPP_PYTHON} missing: run ./scripts/setup_clients")
        root.mkdir(parents=True, exist_ok=True)
        (root / "home").mkdir(exist_ok=True)
        self.root = root
        self.out_path, self.err_path = root / "out.jsonl", root / "err.log"
        env = dict(os.environ, HOME=str(root / "home"))
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen([str(CPP_PYTHON), str(CPP_LOAD), *map(str, args)], stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL, env=env)

    def lines(self) -> list[dict]:
        out = []
        for line in self.out_path.read_text(errors="replace").splitlines():
            if line.startswith("{") and line.endswith("}"):
                out.append(json.loads(line))
        return out

    def started(self, timeout: float = 120.0) -> None:
        """Wait for the client's ``started`` line. The C++ client's start (name-server route, broker
        connections) took over 60 s once on a loaded 2-core machine: the wait is long, and a client
        that did not start is killed and its output shown."""
        try:
            wait_until(lambda: any("started" in d for d in self.lines()) or self.proc.poll() is not None, timeout,
                       "the client to start")
        except AssertionError:
            self.kill()
        if not any("started" in d for d in self.lines()):
            raise ProcessFailed(f"client did not start within {timeout} s (exit {self.proc.poll()}):\n{self.output()}")

    def wait(self, timeout: float = 120.0, grace: float = 10.0) -> dict:
        """Wait for the client to end; its ``done`` line (ProcessFailed when it failed). The driver
        prints ``done`` before the C++ client's shutdown, which can take long (offsets committed to a
        dead broker time out one by one) or abort: ``grace`` seconds after ``done`` the process is
        killed and the run counts (the shutdown also aborts at times: boost::thread_interrupted)."""
        end = time.monotonic() + timeout
        done_at = None
        while self.proc.poll() is None:
            if done_at is None and any(d.get("done") for d in self.lines()):
                done_at = time.monotonic()
            if done_at is not None and time.monotonic() - done_at > grace:
                self.kill()
                break
            if time.monotonic() > end:
                self.kill()
                raise ProcessFailed(f"client still running after {timeout} s:\n{self.output()}")
            time.sleep(0.05)
        done = [d for d in self.lines() if d.get("done")]
        if not done:  # (an exit status after "done" is the shutdown's: it printed everything before)
            raise ProcessFailed(f"client exited {self.proc.returncode} without its summary:\n{self.output()}")
        return done[-1]

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")[-2000:] + "\n" + self.err_path.read_text(errors="replace")[-3000:]

    def acks(self) -> list[dict]:
        """Sends the client saw acknowledged (SEND_OK)."""
        return [d for d in self.lines() if d.get("s") == 0 and "k" in d]

    def received(self) -> list[dict]:
        return [d for d in self.lines() if "k" in d and "q" in d]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def produce(cluster: Cluster, namesrv: str, topic: str, *, threads: int = 4, seconds: float = 5.0, run: str = "r0",
            group: str = "RepPG", extra: tuple = ()) -> Load:
    return cluster.load("produce", "--namesrv", namesrv, "--group", group, "--topic", topic, "--threads", threads,
                        "--seconds", seconds, "--run", run, *extra)


# --- oracles over the files ----------------------------------------------------------------------

def segments(store: Path) -> list[tuple[int, Path]]:
    """(start offset, path) of every commitlog segment of ``store``, in order."""
    d = Path(store) / "commitlog"
    if not d.is_dir():
        return []
    return sorted((int(p.name), p) for p in d.iterdir() if p.name.isdigit() and len(p.name) == 20)


def commitlog_bytes(store: Path) -> tuple[int, bytes]:
    """(first offset, the bytes of every segment from there, concatenated)."""
    segs = segments(store)
    if not segs:
        return 0, b""
    return segs[0][0], b"".join(p.read_bytes() for _, p in segs)


def _segment_records(start: int, data: bytes) -> tuple[list[tuple[int, int]], int, bool]:
    """([(position, size)] of the complete records of one segment, end position, whether the
    segment is complete: it ends with its blank filler or exactly at its end)."""
    records, pos = [], 0
    while pos + 8 <= len(data):
        size, magic = _HEAD.unpack_from(data, pos)
        if size <= 0:
            return records, pos, False
        if magic == _BLANK_MAGIC:
            return records, len(data), True
        if pos + size > len(data):
            return records, pos, False
        records.append((pos, size))
        pos += size
    return records, pos, pos == len(data)


def walk(store: Path):
    """Yield (segment start, segment bytes, [(position, size)] of its complete records) along a
    store's commitlog, following TOTALSIZE and each segment's blank end; stops at the first
    segment that ends early (the end of the log)."""
    expected = None
    for start, path in segments(store):
        if expected is not None and start != expected:
            raise AssertionError(f"{path}: segment does not follow the previous one (expected {expected:020d})")
        data = path.read_bytes()
        records, end, complete = _segment_records(start, data)
        yield start, data, records, end
        if not complete:
            return
        expected = start + len(data)


def log_range(store: Path) -> tuple[int, int]:
    """(first offset, end of the last complete record) of a store's commitlog."""
    first = end = None
    for start, _, _, pos in walk(store):
        first = start if first is None else first
        end = start + pos
    return (first or 0), (end or 0)


def valid_end(store: Path) -> int:
    return log_range(store)[1]


def keys_in_commitlog(store: Path, since: int = 0) -> set[str]:
    """The KEYS property of every complete record of ``store``'s commitlog (from offset ``since``)."""
    from rmqstore.format.message import decode_message

    keys: set[str] = set()
    for start, data, records, _ in walk(store):
        for pos, n in records:
            if start + pos < since:
                continue
            k = decode_message(data, pos, pos + n).properties.get("KEYS")
            if k:
                keys.add(k)
    return keys


def assert_prefix(slave: Path, master: Path, *, equal: bool = False) -> int:
    """The slave's commitlog bytes equal the master's over the slave's whole range (files
    compared byte for byte; the slave's last file may end earlier, with zeros after); with
    ``equal`` the two also end at the same record. Returns the slave's end."""
    s_first, s_end = log_range(slave)
    m_first, m_end = log_range(master)
    assert s_first >= m_first, f"slave starts at {s_first}, before the master's {m_first}"
    m_segs = dict(segments(master))
    for start, path in segments(slave):
        if start not in m_segs:
            raise AssertionError(f"slave segment {path.name} missing on the master")
        sd, md = path.read_bytes(), m_segs[start].read_bytes()
        n = len(sd.rstrip(b"\0"))
        if sd[:n] != md[:n]:
            bad = next(i for i in range(n) if sd[i] != md[i])
            raise AssertionError(f"slave {path.name} differs from the master at offset {start + bad}")
    assert s_end <= m_end, f"slave ends at {s_end} past the master's {m_end}"
    if equal:
        assert s_end == m_end, f"slave ends at {s_end}, master at {m_end}"
    return s_end


def assert_queues_as_rebuilt(store: Path, work: Path, config: Path | None = None) -> None:
    """The consume queues and index files of ``store`` are what ``rmqstore rebuild`` makes from its
    commitlog (index files compared in name order: they are named by creation time)."""
    out = Path(work) / f"rebuilt-{Path(store).parent.name}"
    config = config or Path(store).parent / "broker.conf"  # its index sizes (rebuild's default differs)
    p = subprocess.run([*RMQSTORE, "rebuild", str(out), "--store", str(store), "--config", str(config)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    ours, theirs = tree_bytes(Path(store) / "consumequeue"), tree_bytes(out / "consumequeue")
    assert sorted(ours) == sorted(theirs), (sorted(ours), sorted(theirs))
    for k in theirs:
        assert ours[k] == theirs[k], f"consume queue {k} differs from the rebuilt one"
    a, b = tree_hashes(Path(store) / "index"), tree_hashes(out / "index")
    assert [a[k] for k in sorted(a)] == [b[k] for k in sorted(b)], "index files differ from the rebuilt ones"


def tmp_root(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


# --- a small blocking remoting client (admin calls, pulls) ----------------------------------------

class Remoting:
    """One connection to a broker or name server; ``call`` sends a request and reads its answer."""

    def __init__(self, addr: str, timeout: float = 10.0):
        from rmqstore.broker import remoting as R

        self.R = R
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.reader = R.FrameReader()
        self.opaque = 0
        self.pending: list = []

    def __enter__(self) -> "Remoting":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def call(self, code: int, ext: dict | None = None, body: bytes = b""):
        R = self.R
        self.opaque += 1
        cmd = R.request(code, ext, body, opaque=self.opaque)
        cmd.version = R.VERSION_V4_9_4
        self.sock.sendall(R.encode(cmd))
        while True:
            while self.pending:
                got = self.pending.pop(0)
                if got.is_response and got.opaque == cmd.opaque:
                    return got
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("connection closed by the server")
            self.pending.extend(R.decode(f) for f in self.reader.feed(data))


def call(addr: str, code: int, ext: dict | None = None, body: bytes = b"", timeout: float = 10.0):
    with Remoting(addr, timeout) as r:
        return r.call(code, ext, body)


def route(namesrv: str, topic: str) -> dict | None:
    """GET_ROUTEINFO_BY_TOPIC's answer (``brokerDatas``, ``queueDatas``), None when there is none."""
    r = call(namesrv, 105, {"topic": topic})
    return json.loads(r.body) if r.code == 0 and r.body else None


def brokers_in_route(namesrv: str, topic: str) -> dict[str, dict[str, str]]:
    """brokerName -> {brokerId: address} of a topic's route."""
    rt = route(namesrv, topic) or {}
    return {bd["brokerName"]: {str(k): v for k, v in bd.get("brokerAddrs", {}).items()}
            for bd in rt.get("brokerDatas", [])}


def create_topic(broker: str, topic: str, queues: int = 4) -> None:
    r = call(broker, 17, {"topic": topic, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6,
                          "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
    assert r.code == 0, (r.code, r.remark)


def send(addr: str, topic: str, body: bytes, keys: str = "", queue_id: int = 0):
    """One SEND_MESSAGE (10, the v1 header) to the broker at ``addr``; the answer."""
    props = f"KEYS\x01{keys}\x02" if keys else ""
    return call(addr, 10, {"producerGroup": "RepProbe", "topic": topic, "defaultTopic": "TBW102",
                           "defaultTopicQueueNums": 4, "queueId": queue_id, "sysFlag": 0,
                           "bornTimestamp": int(time.time() * 1000), "flag": 0, "properties": props,
                           "reconsumeTimes": 0, "unitMode": "false"}, body)


def wait_replicating(master: Node, topic: str, timeout: float = 30.0) -> None:
    """Until a send to the (SYNC_)master is acknowledged SEND_OK: its slave is connected and acks."""
    n = [0]

    def ok() -> bool:
        n[0] += 1
        return send(master.addr, topic, b"probe", keys=f"probe-{n[0]}").code == 0

    wait_until(ok, timeout, f"a send to {master.name} acknowledged (its slave attached)", every=0.1)


def pull(addr: str, group: str, topic: str, queue_id: int, offset: int, max_nums: int = 32):
    """One PULL_MESSAGE (no suspend, no commit) to ``addr``: the answer (code, ext, body)."""
    return call(addr, 11, {"consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
                           "maxMsgNums": max_nums, "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0,
                           "subscription": "*", "subVersion": 0, "expressionType": "TAG"})


def records_of(body: bytes) -> list:
    """The records of a pull body."""
    from rmqstore.format.message import decode_message

    out, pos = [], 0
    while pos < len(body):
        rec = decode_message(body, pos, len(body))
        out.append(rec)
        pos += rec.store_size
    return out


# --- SYNC_MASTER kill -9 rounds (the suite's test and scripts/soak_replication) ------------------

@dataclass
class KillRound:
    acks: set[str]
    not_ok: int
    killed_after_s: float
    missing: set[str]


def sync_kill_round(cluster: Cluster, master: Node, slave: Node, rng, run: str, *, topic: str = "RepSync",
                    threads: int = 4, min_acks: int = 20, max_wait_s: float = 0.6, full_check: bool = True) -> KillRound:
    """One round: C++ producers send to the SYNC_MASTER ``master``; once ``min_acks`` sends were
    acknowledged, after a random pause up to ``max_wait_s``, the master is killed with SIGKILL. When
    the client has stopped, every send it saw acknowledged must be in the slave's commitlog
    (``missing`` lists those that are not). The master is restarted for the next round."""
    if not master.running:
        master.start()
    wait_replicating(master, topic)  # else the first sends get SLAVE_NOT_AVAILABLE, which the C++ client throws
    since = valid_end(slave.store)  # this round's records are all past it
    ld = produce(cluster, master.addr, topic, threads=threads, seconds=60, run=run,
                 extra=("--max-failures", "1", "--send-timeout-ms", "800"))
    ld.started()
    t0 = time.monotonic()
    wait_until(lambda: len(ld.acks()) >= min_acks or ld.proc.poll() is not None, 30,
               f"{min_acks} acknowledged sends (slave connected?)\n{master.log()[-2000:]}\n{slave.log()[-2000:]}")
    time.sleep(rng.uniform(0, max_wait_s))
    master.kill9()
    killed_after = time.monotonic() - t0
    ld.wait(60)
    acks = {a["k"] for a in ld.acks()}
    missing = acks - keys_in_commitlog(slave.store, since=0 if full_check else since)
    not_ok = sum(1 for d in ld.lines() if d.get("s") not in (None, 0))
    master.start()
    return KillRound(acks, not_ok, killed_after, missing)
