"""The broker (``rmqstore serve``) against real clients, side by side in one run:

1. Sync sends from the C++ client (PyPI rocketmq 0.4.4), 1 and 8 concurrent producers (processes),
   against ``serve`` and against a null server (the same process, codec and processors, but a send is
   acknowledged without storing). Rounds alternate which server goes first.
2. End-to-end latency, send to push-consumer delivery (C++ client both ends): p50 and p99.
3. A consumer catching up on 1,000,000 stored messages (the harness's prebuilt store: 128 B, one key
   each, 4 queues): a remoting consumer keeping a pull in flight per queue (32 each, as RocketMQ's
   clients pull) and the C++ push consumer through the broker, beside the harness's in-process
   ``get_message`` loop on the same store.

Every server runs in its own process; its peak RSS (VmHWM) is read before it stops.

Run:  .venv/bin/python bench/broker.py [--rounds 5] [--sends 4000] [--out bench/results/broker.md]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: a server of another tree (the "old" variant): its src first, before the harness puts this tree's
TREE = os.environ.get("RMQSTORE_BENCH_TREE")
sys.path.insert(0, os.path.join(ROOT, "bench"))
import harness as H  # noqa: E402
if TREE:
    for name in [m for m in sys.modules if m == "rmqstore" or m.startswith("rmqstore.")]:
        del sys.modules[name]
    sys.path.insert(0, TREE)
OUT = os.path.join(ROOT, "bench", "out", "broker")
CPP_PY = os.path.join(ROOT, ".clients", "remoting-py", "bin", "python")
DRIVER = os.path.join(ROOT, "tests", "broker", "clients", "cpp_client.py")
N_CATCHUP = 1_000_000  # H._prebuilt's store of the harness and bench/embedded.py


# --- the server process ----------------------------------------------------------------------------
def null_put(b) -> None:
    """Make the broker ``b`` acknowledge every put with PUT_OK without storing anything (the null server)."""
    from rmqstore.types import PutMessageResult, PutMessageStatus

    counter = [0]

    def put(msgs, answer):
        counter[0] += 1
        return answer(PutMessageResult(PutMessageStatus.PUT_OK, "7F000001000027110000000000000000", 0, 100,
                                       counter[0], int(time.time() * 1000), len(msgs)))

    b.put = put


def server_main(kind: str, store: str, port: int, read_only: bool, grpc: bool = False, sync: bool = False) -> None:
    if kind == "bare":
        import broker_loads as L
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        L.bare_server(port)
        return
    from rmqstore import MessageStore, MessageStoreConfig
    from rmqstore.broker import Broker, BrokerConfig
    cfg = MessageStoreConfig(flush_disk_type="SYNC_FLUSH") if sync else None
    st = MessageStore.open(store, cfg, read_only=read_only)  # sizes from the files (the harness's store) or embedded
    b = Broker(st, BrokerConfig(broker_name="bench"), listen=f"127.0.0.1:{port}",
               grpc_listen="127.0.0.1:0" if grpc else None)
    if kind == "null":
        null_put(b)
    b.start()
    import rmqstore
    if TREE and not rmqstore.__file__.startswith(TREE):
        raise RuntimeError(f"the server runs {rmqstore.__file__}, not the tree {TREE}")
    print("READY", b.grpc_address, flush=True)
    signal.sigwait([signal.SIGTERM, signal.SIGINT])
    b.stop()
    st.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A broker in its own process: ``kind`` "serve" or "null"; ``tree`` a ``src`` directory to run
    instead of this tree's (the "old" variant); ``grpc`` also starts the gRPC endpoint."""

    def __init__(self, kind: str, store: str, read_only: bool = False, *, tree: str | None = None,
                 grpc: bool = False, sync: bool = False):
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        argv = [sys.executable, os.path.abspath(__file__), "--server", kind, "--store", store, "--port", str(self.port)]
        if read_only:
            argv.append("--read-only")
        if grpc:
            argv.append("--grpc")
        if sync:
            argv.append("--sync")
        env = dict(os.environ, RMQSTORE_BENCH_TREE=tree) if tree else None
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        if not line.startswith("READY"):
            raise RuntimeError(f"server {kind} did not start: {line!r}")
        self.grpc_address = line.split()[1] if grpc else ""

    def peak_rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> float:
        rss = self.peak_rss_mb()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        return rss


def cpp(*args, timeout: float = 600) -> subprocess.Popen:
    """A C++-client driver; its output goes to a temporary file, not a pipe (a consumer printing into
    a full pipe nobody reads yet would stall in its callback and show as latency)."""
    env = dict(os.environ, HOME=os.path.join(OUT, "home"))
    os.makedirs(env["HOME"], exist_ok=True)
    out = tempfile.TemporaryFile("w+")
    p = subprocess.Popen([CPP_PY, DRIVER, *map(str, args)], stdout=out, stderr=subprocess.DEVNULL, text=True,
                         env=env)
    p.out_file = out
    return p


def output_of(p: subprocess.Popen, timeout: float = 900) -> str:
    p.wait(timeout)
    p.out_file.seek(0)
    return p.out_file.read()


def last_line(p: subprocess.Popen, timeout: float = 900) -> dict:
    out = output_of(p, timeout)
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    if not lines or "done" not in lines[-1]:
        raise RuntimeError(f"client failed: {out[-500:]}")
    return lines[-1]


# --- 1. sends --------------------------------------------------------------------------------------
def sends_round(kind: str, producers: int, total: int) -> tuple[float, float]:
    store = os.path.join(OUT, f"sends-{kind}")
    shutil.rmtree(store, ignore_errors=True)
    srv = Server(kind, store)
    try:
        warm = cpp("produce", "--namesrv", srv.address, "--group", "P", "--topic", "Bench", "--count", 50, "--quiet")
        last_line(warm)
        procs = [cpp("produce", "--namesrv", srv.address, "--group", "P", "--topic", "Bench", "--count",
                     total // producers, "--quiet", "--body-prefix", "x" * 100) for _ in range(producers)]
        done = [last_line(p) for p in procs]
    finally:
        rss = srv.stop()
    ok = sum(d["ok"] for d in done)
    if ok != total // producers * producers:
        raise RuntimeError(f"{kind}: {ok} of {total} sends acknowledged")
    span = max(d["end"] for d in done) - min(d["start"] for d in done)
    return ok / span, rss


# --- 1b. the paired rows: C++ x1/x8, gRPC, raw batches; the server's CPU -------------------------
def row_round(variant: str, row: str, a, trees: dict) -> tuple[float, float, float, float | None, float | None]:
    """One row against one server variant: (messages/s, server CPU seconds per 100k messages, peak RSS MB,
    and for the C++ rows the median time of a producer's ``send_sync`` in ms, the median of the producers',
    and the producer processes' own CPU seconds per 100k messages, while they sent: each producer's
    process time over its send loop, the C++ client's threads included)."""
    import broker_loads as L

    store = os.path.join(OUT, f"row-{variant}")
    shutil.rmtree(store, ignore_errors=True)
    p50 = clients = None
    kind = variant if variant in ("null", "bare") else "serve"
    srv = Server(kind, store, tree=trees.get(variant), grpc=row == "grpc", sync=row == "cpp8sync")
    try:
        if row.startswith("cpp"):
            producers = 1 if row == "cpp1" else 8
            last_line(cpp("produce", "--namesrv", srv.address, "--group", "P", "--topic", "Bench", "--count", 50,
                          "--quiet"))
            c0 = L.cpu_seconds(srv.proc.pid)
            procs = [cpp("produce", "--namesrv", srv.address, "--group", "P", "--topic", "Bench", "--count",
                         a.sends // producers, "--quiet", "--body-prefix", "x" * 100) for _ in range(producers)]
            done = [last_line(p) for p in procs]
            cpu, clients = L.cpu_seconds(srv.proc.pid) - c0, sum(d["cpu"] for d in done)
            n = sum(d["ok"] for d in done)
            if n != a.sends // producers * producers:
                raise RuntimeError(f"{variant} {row}: {n} of {a.sends} sends acknowledged")
            secs = max(d["end"] for d in done) - min(d["start"] for d in done)
            p50 = statistics.median(d["p50_ms"] for d in done)
        elif row == "grpc":
            home = os.path.join(OUT, "home")
            os.makedirs(home, exist_ok=True)
            g = L.GrpcProducer(srv.grpc_address, "BenchG", home)
            try:
                g.call({"op": "send_many", "topic": "BenchG", "n": 50, "prefix": "w"})
                c0, t0 = L.cpu_seconds(srv.proc.pid), time.perf_counter()
                n = len(g.call({"op": "send_many", "topic": "BenchG", "n": a.grpc_sends, "prefix": "x" * 100})["ids"])
                secs, cpu = time.perf_counter() - t0, L.cpu_seconds(srv.proc.pid) - c0
            finally:
                g.close()
        elif row.startswith("raw"):
            conns = int(row[3:])
            L.single_load(srv.port, 8 * conns, conns)
            c0 = L.cpu_seconds(srv.proc.pid)
            n, secs = L.single_load(srv.port, a.sends, conns)
            cpu = L.cpu_seconds(srv.proc.pid) - c0
            if n != a.sends // conns * conns:
                raise RuntimeError(f"{variant} {row}: {n} of {a.sends} sends acknowledged")
        else:
            L.warm_batch(srv.port)
            c0 = L.cpu_seconds(srv.proc.pid)
            n, secs = L.batch_load(srv.port, a.batches)
            cpu = L.cpu_seconds(srv.proc.pid) - c0
            if n != a.batches * 32:
                raise RuntimeError(f"{variant} batch: {n} of {a.batches * 32} messages acknowledged")
    finally:
        rss = srv.stop()
    return n / secs, cpu / n * 100_000, rss, p50, None if clients is None else clients / n * 100_000


def paired_rows(a) -> dict:
    """``{(variant, row): [(rate, cpu per 100k, rss) per round]}``, variants in alternating order."""
    import broker_loads as L

    trees = {"old": L.export_tree(a.old, OUT)} if a.old else {}
    variants = ["null", "serve"] + (["old"] if a.old else [])
    rows = [r for r in a.rows.split(",") if r]
    res: dict[tuple, list] = {}
    for r in range(a.rounds):
        for i, row in enumerate(rows):
            vs = variants + (["bare"] if row.startswith("raw") else [])  # (the floor: raw rows only)
            order = vs if (r + i) % 2 == 0 else vs[::-1]
            for v in order:
                got = row_round(v, row, a, trees)
                res.setdefault((v, row), []).append(got)
                rate, cpu, rss, p50, clients = got
                print(f"round {r} {row:5} {v:5}: {rate:,.0f} msgs/s, server CPU {cpu:.2f} s per 100k, "
                      f"peak RSS {rss:.0f} MB" + (f", send p50 {p50:.2f} ms, producers' CPU {clients:.2f} s per 100k"
                                                  if p50 is not None else ""), flush=True)
    return res


def paired_table(a, res: dict) -> list[str]:
    """The rows as a markdown table: rates, serve/null and (with ``--old``) new/old, CPU per 100k."""
    import broker_loads as L

    med = statistics.median
    rows = [r for r in a.rows.split(",") if r]
    old = bool(a.old)
    head = ("| row | null msgs/s | serve msgs/s | serve / null | null CPU s per 100k | serve CPU s per 100k msgs |"
            + (" old msgs/s | new / old | old CPU s per 100k | CPU old / new |" if old else ""))
    lines = [head, "|---|---:|---:|---:|---:|---:|" + ("---:|---:|---:|---:|" if old else "")]
    floor = [f"| {L.ROW_TITLES[row]} | {med(x[1] for x in res[('bare', row)]):.2f} | "
             f"{med(n[1] / b[1] for n, b in zip(res[('null', row)], res[('bare', row)])):.2f} | "
             f"{med(s[1] / b[1] for s, b in zip(res[('serve', row)], res[('bare', row)])):.2f} |"
             for row in rows if ("bare", row) in res]
    for row in rows:
        s, n = res[("serve", row)], res[("null", row)]
        line = (f"| {L.ROW_TITLES[row]} | {med(x[0] for x in n):,.0f} | {med(x[0] for x in s):,.0f} | "
                f"{med(x[0] / y[0] for x, y in zip(s, n)):.2f} | {med(x[1] for x in n):.2f} | {med(x[1] for x in s):.2f} |")
        if old:
            o = res[("old", row)]
            line += (f" {med(x[0] for x in o):,.0f} | {med(x[0] / y[0] for x, y in zip(s, o)):.2f} | "
                     f"{med(x[1] for x in o):.2f} | {med(y[1] / x[1] for x, y in zip(s, o)):.2f} |")
        lines.append(line)
    if floor:
        lines += ["", "| row | bare server CPU s per 100k | null / bare CPU | serve / bare CPU |", "|---|---:|---:|---:|"]
        lines += floor
    if ("serve", "cpp1") in res and ("serve", "cpp8") in res:
        lines += ["", "| server | send p50, 1 producer (ms) | send p50, 8 producers (ms) | 8 / 1 (median of rounds) "
                  "| producers' CPU µs per send, 1 / 8 | floor of the mean 8 / 1 | the floor, had the server cost nothing |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for v in ("null", "serve") + (("old",) if old else ()):
            one, eight = res[(v, "cpp1")], res[(v, "cpp8")]
            lines.append(f"| {v} | {med(x[3] for x in one):.2f} | {med(x[3] for x in eight):.2f} | "
                         f"{med(e[3] / o[3] for o, e in zip(one, eight)):.2f} | {med(x[4] for x in one) * 10:.0f} / "
                         f"{med(x[4] for x in eight) * 10:.0f} | {med(p50_floor(o, e) for o, e in zip(one, eight)):.2f} | "
                         f"{med(p50_floor(o, e, free=True) for o, e in zip(one, eight)):.2f} |")
        lines += ["", P50_FLOOR_NOTE.format(cores=os.cpu_count())]
    return lines


#: how the last two columns of the send-time table are found
P50_FLOOR_NOTE = (
    "The floors: eight sync producers keep eight sends in flight, one producer one, so by Little's law the mean "
    "send time at eight over that at one is 8 x rate(1) / rate(8); and rate(8) can be no more than the {cores} "
    "cores divided by the CPU a message costs at eight producers, the producers' and the server's together "
    "(a ratio under the floor would need more CPU than the machine has). Had the server cost nothing, only the "
    "producers' CPU would count, and rate(1) could only have been higher: the last column is the floor of a "
    "server that costs nothing, if the producers spend per send what they spent against this one.")


def p50_floor(one: tuple, eight: tuple, free: bool = False) -> float:
    """The least mean send time at 8 producers over that at 1 that the machine's cores allow, from one
    round of each row (rate, server CPU and producers' CPU per 100k messages: see :data:`P50_FLOOR_NOTE`);
    ``free``: leaving the server's CPU out."""
    cpu8 = (eight[4] + (0 if free else eight[1])) / 100_000  # seconds a message costs at 8 producers
    return 8 * one[0] * cpu8 / os.cpu_count()


# --- 2. latency ------------------------------------------------------------------------------------
def latency(n: int) -> dict:
    store = os.path.join(OUT, "latency")
    shutil.rmtree(store, ignore_errors=True)
    srv = Server("serve", store)
    try:
        last_line(cpp("produce", "--namesrv", srv.address, "--group", "P", "--topic", "Lat", "--count", 1))
        consumer = cpp("push", "--namesrv", srv.address, "--group", "C", "--topic", "Lat", "--count", n + 1,
                       "--timeout", 120)
        time.sleep(5)
        prod = cpp("produce", "--namesrv", srv.address, "--group", "P", "--topic", "Lat", "--count", n, "--start", 1,
                   "--interval", 0.01)
        out = output_of(prod, 300)
        sent = {f"key-{x['i']}": x["t"] for x in map(json.loads, out.splitlines()) if "i" in x}
        got_out = output_of(consumer, 300)
        got = {x["keys"]: x["t"] for x in map(json.loads, got_out.splitlines()) if "keys" in x}
    finally:
        rss = srv.stop()
    delays = sorted((got[k] - t) * 1000 for k, t in sent.items() if k in got)
    if len(delays) != n:
        raise RuntimeError(f"latency: {len(delays)} of {n} delivered")
    return {"p50": statistics.median(delays), "p99": delays[int(0.99 * (n - 1))], "max": delays[-1], "rss": rss}


# --- 3. catch-up -----------------------------------------------------------------------------------
def in_process_loop(store: str) -> tuple[float, float]:
    """The harness's ``get_message`` loop (32 per pull, upstream's transfer limits), in a child."""
    res = H.run_child(H.rmq_pull, store)
    return res["ops"] / res["seconds"], res["rss_mb"]


def broker_raw_pulls(store: str) -> tuple[float, float]:
    """A remoting consumer as RocketMQ's clients pull: every queue has a pull in flight on one
    connection (32 messages each); an answer sends that queue's next pull. Messages are counted
    by walking each body's TOTALSIZE fields."""
    from rmqstore.broker import remoting as R

    srv = Server("serve", store, read_only=True)
    try:
        sock = socket.create_connection(("127.0.0.1", srv.port))
        reader = R.FrameReader()
        offsets = {q: 0 for q in range(4)}

        def ask(q: int) -> None:
            sock.sendall(R.encode(R.request(R.RequestCode.PULL_MESSAGE, {
                "consumerGroup": "G", "topic": "Bench", "queueId": q, "queueOffset": offsets[q], "maxMsgNums": 32,
                "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*"}, opaque=q)))

        t0 = time.perf_counter()
        n = 0
        for q in offsets:
            ask(q)
        open_queues = set(offsets)
        while open_queues:
            for frame in reader.feed(sock.recv(1 << 20)):
                resp = R.decode(frame)
                q = resp.opaque
                if resp.code != 0:
                    open_queues.discard(q)
                    continue
                body, pos = resp.body, 0
                while pos < len(body):
                    pos += int.from_bytes(body[pos:pos + 4], "big")
                    n += 1
                offsets[q] = int(resp.ext["nextBeginOffset"])
                ask(q)
        secs = time.perf_counter() - t0
        sock.close()
    finally:
        rss = srv.stop()
    return n / secs, rss


def cpp_push_catchup(store: str, n: int) -> tuple[float, float]:
    srv = Server("serve", store, read_only=True)
    try:
        p = cpp("push", "--namesrv", srv.address, "--group", f"C{time.time_ns()}", "--topic", "Bench", "--count", n,
                "--timeout", 900, "--quiet")
        d = last_line(p, 1000)
    finally:
        rss = srv.stop()
    if d["count"] < n:
        raise RuntimeError(f"push consumer got {d['count']} of {n}")
    return d["count"] / (d["last"] - d["first"]), rss


# --- the run ---------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", choices=["serve", "null", "bare"])
    ap.add_argument("--store")
    ap.add_argument("--port", type=int)
    ap.add_argument("--read-only", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sends", type=int, default=4000)
    ap.add_argument("--latency-messages", type=int, default=1000)
    ap.add_argument("--catchup", type=int, default=N_CATCHUP)
    ap.add_argument("--catchup-rounds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "broker.md"))
    ap.add_argument("--sends-only", action="store_true", help="only the sends rows (no report file)")
    ap.add_argument("--grpc", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sync", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--paired", action="store_true",
                    help="only the paired rows (C++ x1/x8, gRPC, raw batches; server CPU), written to --out")
    ap.add_argument("--rows", default="cpp1,cpp8,cpp8sync,grpc,batch",
                    help="also raw1,raw8: raw SEND_MESSAGE frames, against the bare server (the floor) too")
    ap.add_argument("--latency-only", action="store_true", help="only the send-to-delivery latency row")
    ap.add_argument("--grpc-sends", type=int, default=1000)
    ap.add_argument("--batches", type=int, default=1000, help="raw batches of 32 x 1 KiB per round")
    ap.add_argument("--old", default=None, help="also run the broker of this git revision (paired, old vs new)")
    a = ap.parse_args()
    if a.server:
        server_main(a.server, a.store, a.port, a.read_only, a.grpc, a.sync)
        return
    if a.latency_only:
        os.makedirs(OUT, exist_ok=True)
        lat = latency(a.latency_messages)
        print(f"latency: p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms, max {lat['max']:.2f} ms", flush=True)
        return
    if a.paired:
        os.makedirs(OUT, exist_ok=True)
        t0 = time.time()
        table = paired_table(a, paired_rows(a))
        text = "\n".join([f"Command: `.venv/bin/python bench/broker.py {shlex.join(sys.argv[1:])}`, run "
                          f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, {time.time() - t0:.0f} s; "
                          f"medians of {a.rounds} rounds, ratios the medians of the paired rounds.", ""] + table) + "\n"
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
        with open(a.out, "w") as fh:
            fh.write(text)
        print(text)
        return
    os.makedirs(OUT, exist_ok=True)
    t_start = time.time()
    res: dict[tuple, list] = {}
    for r in range(a.rounds):
        for producers in (1, 8):
            order = ("null", "serve") if (r + producers) % 2 == 0 else ("serve", "null")
            for kind in order:
                rate, rss = sends_round(kind, producers, a.sends)
                res.setdefault((kind, producers), []).append((rate, rss))
                print(f"round {r} {kind:5} x{producers}: {rate:,.0f} sends/s, peak RSS {rss:.0f} MB", flush=True)
    if a.sends_only:
        for p in (1, 8):
            n, s = (statistics.median(x[0] for x in res[(k, p)]) for k in ("null", "serve"))
            print(f"x{p}: null {n:,.0f}, serve {s:,.0f}, ratio {s / n:.2f}")
        return
    lat = latency(a.latency_messages)
    print(f"latency: p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms, max {lat['max']:.2f} ms", flush=True)
    store = H._prebuilt(a.catchup, 128, "q")  # the harness's store: 4 queues, one key each
    inproc, remote = [], []
    for r in range(max(1, a.catchup_rounds)):  # alternating, paired like the sends
        for which in (("in", "broker") if r % 2 == 0 else ("broker", "in")):
            (inproc if which == "in" else remote).append(in_process_loop(store) if which == "in"
                                                         else broker_raw_pulls(store))
        print(f"catch-up round {r}: in-process {inproc[-1][0]:,.0f}, broker {remote[-1][0]:,.0f} msgs/s "
              f"({remote[-1][0] / inproc[-1][0]:.2f})", flush=True)
    catch = {"in-process get_message loop (32 per pull)": _median_pair(inproc),
             "broker: remoting consumer, a pull in flight per queue (32 each)": _median_pair(remote),
             "broker: C++ push consumer (PyPI rocketmq 0.4.4)": cpp_push_catchup(store, a.catchup)}
    catch_paired = statistics.median(b[0] / i[0] for b, i in zip(remote, inproc))
    for k, (rate, rss) in catch.items():
        print(f"catch-up {k}: {rate:,.0f} msgs/s, peak RSS {rss:.0f} MB", flush=True)
    write_report(a, res, lat, catch, time.time() - t_start, catch_paired)


def _median_pair(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs)


def write_report(a, res, lat, catch, secs, catch_paired: float) -> None:
    import platform

    med = {k: statistics.median(x[0] for x in v) for k, v in res.items()}
    rss = {k: max(x[1] for x in v) for k, v in res.items()}
    # the ratio is the median of each round's serve/null pair (rounds alternate which goes first):
    # the machine's speed drifts between rounds more than within one
    paired = {p: statistics.median(s[0] / n[0] for s, n in zip(res[("serve", p)], res[("null", p)])) for p in (1, 8)}
    lines = [f"Command: `.venv/bin/python bench/broker.py --rounds {a.rounds} --sends {a.sends}`, run "
             f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, {secs:.0f} s. Machine: {os.cpu_count()} cores, "
             f"Python {platform.python_version()}.", "",
             f"### Sync sends from the C++ client ({a.sends} per round, 100-byte bodies; median of {a.rounds} "
             "alternating rounds)", "",
             "| producers | null server sends/s | serve sends/s | ratio (median of paired rounds) | peak RSS null / serve (MB) | goal |",
             "|---:|---:|---:|---:|---:|---|"]
    for p in (1, 8):
        ratio = paired[p]
        lines.append(f"| {p} | {med[('null', p)]:,.0f} | {med[('serve', p)]:,.0f} | {ratio:.2f} | "
                     f"{rss[('null', p)]:.0f} / {rss[('serve', p)]:.0f} | ≥ 0.8: {'met' if ratio >= 0.8 else 'NOT met'} |")
    lines += ["", f"### Send to push-consumer delivery ({a.latency_messages} messages, one per 10 ms)", "",
              "| p50 ms | p99 ms | max ms | server peak RSS (MB) | goal |", "|---:|---:|---:|---:|---|",
              f"| {lat['p50']:.2f} | {lat['p99']:.2f} | {lat['max']:.2f} | {lat['rss']:.0f} | p99 < 10 ms: "
              f"{'met' if lat['p99'] < 10 else 'NOT met'} |", "",
              f"### Catching up on {a.catchup:,} stored messages (128 B, 4 queues)", "",
              "| reader | msgs/s | ratio to in-process | peak RSS (MB) |", "|---|---:|---:|---:|"]
    base = next(iter(catch.values()))[0]
    for k, (rate, r) in catch.items():
        ratio = catch_paired if k.startswith("broker: remoting") else rate / base
        lines.append(f"| {k} | {rate:,.0f} | {ratio:.2f} | {r:.0f} |")
    lines += ["", f"(medians of {a.catchup_rounds} alternating rounds for the first two rows, the ratio the median "
              f"of the paired rounds; goal ≥ 0.5: {'met' if catch_paired >= 0.5 else 'NOT met'})"]
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as fh:
        fh.write(text)
    print(text)


if __name__ == "__main__":
    main()
