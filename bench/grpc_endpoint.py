"""The gRPC endpoint (``rmqstore serve --grpc-listen``) against RocketMQ 5's Python client
(PyPI rocketmq-python-client 5.1.2, in .clients/grpc-py), side by side with a null server in one run:

* sends/s: sync sends of 100-byte messages from 1 and 8 concurrent clients (processes);
* receive+ack/s: SimpleConsumer receives (32 per call, 30 s invisible time) each followed by an ack
  per message, 1 and 8 concurrent consumers of one group.

The null server is the same process, gRPC service, codec and settings, with the work removed: a send
is acknowledged without storing, a receive answers 32 ready-made messages (with receipt handles)
without reading the store or writing a checkpoint, an ack is answered OK without writing. So the
ratio is what the store and the pop state cost on top of the gRPC service itself. Rounds alternate
which server goes first; the median of the paired ratios is reported. Every server runs in its own
process; its peak RSS (VmHWM) is read before it stops.

Run:  .venv/bin/python bench/grpc_endpoint.py [--rounds 3] [--sends 2000] [--out bench/results/grpc.md]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "out", "grpc")
CLIENT_PY = os.path.join(ROOT, ".clients", "grpc-py", "bin", "python")


# --- the server process --------------------------------------------------------------------------------
def server_main(kind: str, store: str, port: int, preload: int) -> None:
    from rmqstore import Message, MessageStore
    from rmqstore.broker import Broker, BrokerConfig
    from rmqstore.broker.pop import Popped
    st = MessageStore.open(store)
    b = Broker(st, BrokerConfig(broker_name="bench"), listen="127.0.0.1:0", grpc_listen=f"127.0.0.1:{port}")
    b.topics.create_if_absent("Bench", 8)
    if preload:
        for i in range(0, preload, 256):
            for q in range(8):
                st.put_messages([Message.create("Bench", b"x" * 100, queue_id=q) for _ in range(32)])
        st.wait_dispatched()
    if kind == "null":
        from broker import null_put  # bench/broker.py: the remoting bench's null server does the same

        null_put(b)
        sample = st.get_message("x", "Bench", 0, 0, 32).messages if preload else []

        class NullPops:
            def pop(self, group, topic, queues, batch, invisible, **kw):
                now = int(time.time() * 1000)
                return [Popped(r, topic, f"0 {now} {invisible} 0 0 bench 0 {r.queue_offset} {r.phy_offset}", 1,
                               invisible) for r in sample[:batch]]

            def ack(self, group, topic, handle):
                return None

            def revive_due(self, *args, **kwargs):
                return 0

            def recover(self):
                return 0

        b.pops = NullPops()
    b.start()
    print("READY", flush=True)
    signal.sigwait([signal.SIGTERM, signal.SIGINT])
    b.stop()
    st.close()


# --- the client process (runs in .clients/grpc-py) ---------------------------------------------------------
def client_main(mode: str, endpoints: str, n: int) -> None:
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer

    cfg = ClientConfiguration(endpoints, Credentials(), request_timeout=30)
    if mode == "send":
        p = Producer(cfg, ("Bench",))
        p.startup()
        for _ in range(20):  # warm-up
            m = Message()
            m.topic, m.body = "Bench", b"w" * 100
            p.send(m)
        t0 = time.time()
        for _ in range(n):
            m = Message()
            m.topic, m.body = "Bench", b"x" * 100
            p.send(m)
        t1 = time.time()
        p.shutdown()
    else:
        c = SimpleConsumer(cfg, "BenchGroup", {"Bench": FilterExpression("*")}, await_duration=5)
        c.startup()
        done = 0
        t0 = time.time()
        while done < n:
            msgs = c.receive(32, 30)
            for m in msgs:
                c.ack(m)
            done += len(msgs)
            if not msgs:
                break
        t1 = time.time()
        c.shutdown()
    print(json.dumps({"n": done if mode != "send" else n, "start": t0, "end": t1}), flush=True)


# --- the harness ------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, kind: str, store: str, preload: int = 0):
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        argv = [sys.executable, os.path.abspath(__file__), "--server", kind, "--store", store, "--port", str(self.port),
                "--preload", str(preload)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("READY"):
            raise RuntimeError(f"server {kind} did not start: {line!r}")

    def stop(self) -> float:
        rss = float("nan")
        with open(f"/proc/{self.proc.pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    rss = int(line.split()[1]) / 1024
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        return rss


def clients(mode: str, endpoints: str, n: int, count: int) -> float:
    env = dict(os.environ, HOME=os.path.join(OUT, "home"))
    os.makedirs(env["HOME"], exist_ok=True)
    procs = [subprocess.Popen([CLIENT_PY, os.path.abspath(__file__), "--client", mode, "--endpoints", endpoints,
                               "--n", str(n)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
             for _ in range(count)]
    done = []
    for p in procs:
        out, _ = p.communicate(timeout=900)
        lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
        if p.returncode != 0 or not lines:
            raise RuntimeError(f"client {mode} failed (exit {p.returncode}): {out[-300:]}")
        done.append(lines[-1])
    total = sum(d["n"] for d in done)
    if total < n * count:
        raise RuntimeError(f"{mode}: {total} of {n * count} done")
    return total / (max(d["end"] for d in done) - min(d["start"] for d in done))


def one(kind: str, mode: str, n: int, count: int) -> tuple[float, float]:
    store = os.path.join(OUT, f"{mode}-{kind}")
    shutil.rmtree(store, ignore_errors=True)
    srv = Server(kind, store, preload=n * count + 256 if mode == "receive" and kind == "serve" else
                 (256 if mode == "receive" else 0))
    try:
        rate = clients(mode, srv.address, n, count)
    finally:
        rss = srv.stop()
    return rate, rss


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server")
    ap.add_argument("--client")
    ap.add_argument("--store")
    ap.add_argument("--port", type=int)
    ap.add_argument("--preload", type=int, default=0)
    ap.add_argument("--endpoints")
    ap.add_argument("--n", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sends", type=int, default=2000, help="messages per configuration (split over the clients)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "grpc.md"))
    a = ap.parse_args()
    if a.server:
        return server_main(a.server, a.store, a.port, a.preload)
    if a.client:
        return client_main(a.client, a.endpoints, a.n)
    if not os.path.exists(CLIENT_PY):
        sys.exit(f"{CLIENT_PY} missing: run ./scripts/setup_clients")
    rows = []
    for mode in ("send", "receive"):
        for count in (1, 8):
            ratios, serve_rates, null_rates, rss = [], [], [], {"serve": 0.0, "null": 0.0}
            for r in range(a.rounds):
                order = ("serve", "null") if r % 2 == 0 else ("null", "serve")
                got = {}
                for kind in order:
                    got[kind], peak = one(kind, mode, a.sends // count, count)
                    rss[kind] = max(rss[kind], peak)
                ratios.append(got["serve"] / got["null"])
                serve_rates.append(got["serve"])
                null_rates.append(got["null"])
                print(f"{mode} x{count} round {r + 1}: serve {got['serve']:,.0f}/s, null {got['null']:,.0f}/s, "
                      f"ratio {ratios[-1]:.2f}", flush=True)
            rows.append((mode, count, statistics.median(serve_rates), statistics.median(null_rates),
                         statistics.median(ratios), min(ratios), max(ratios), rss["serve"], rss["null"]))
    lines = [f"# gRPC endpoint vs a null gRPC server ({dt.date.today()})", "",
             f"`{' '.join(['.venv/bin/python', 'bench/grpc_endpoint.py', *sys.argv[1:]])}` — rocketmq-python-client 5.1.2, "
             f"{a.rounds} paired rounds, {a.sends} messages per configuration, 100-byte bodies.", "",
             "| what | clients | serve /s | null /s | serve/null (median) | range | peak RSS serve / null MB |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for mode, count, s, n, ratio, lo, hi, rs, rn in rows:
        what = "sync sends" if mode == "send" else "receive + ack"
        lines.append(f"| {what} | {count} | {s:,.0f} | {n:,.0f} | {ratio:.2f}× | {lo:.2f}–{hi:.2f} | {rs:.0f} / {rn:.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as fh:
        fh.write(text)


if __name__ == "__main__":
    main()
