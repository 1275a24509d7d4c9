"""Replication benchmarks: rmqstore master and slave (``rmqstore serve`` processes on 127.0.0.1),
RocketMQ's C++ client (PyPI rocketmq 0.4.4) as the producers. Paired, alternating rounds; ratios are
medians of the rounds' pairs, never numbers from elsewhere.

1. catch-up: an empty slave replicating a master's 1 GiB commitlog (1 KiB bodies, one key each,
   8 queues) until its consume queues reach the master's (commitlog + dispatch), against
   ``rmqstore rebuild`` of the same bytes (consume queues + index); both timed from process start.
2. lag: ASYNC_MASTER + slave (``slaveReadEnable=true``), 8 C++ producer processes sending as fast
   as they can; a puller long-polls every queue on the slave and takes, for each message, the time
   it became readable there minus its store time on the master (ms). p50/p99/max.
3. SYNC_MASTER against ASYNC_MASTER: sends/s of 8 C++ producer processes, each with its slave.
4. the slave's peak RSS beyond its mapped files (RssAnon, sampled every 50 ms) in 1 and 2.

Run:  .venv/bin/python bench/replication.py [--rounds 3] [--catchup-mib 1024] [--seconds 8]
                                             [--only catchup,lag,sync] [--out bench/results/replication.md]
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "replication"))

import clusterkit as K  # noqa: E402

GIB = 1 << 30
TOPIC = "RepBench"
QUEUES = 8
LAG_SEGMENT = 256 << 20


# --- measurement helpers -----------------------------------------------------------------------

class RssSampler:
    """Max RssAnon (MB: resident memory not backed by files, so mapped store files do not count) of
    a process, sampled every 50 ms until stopped."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with open(f"/proc/{self.pid}/status") as fh:
                    for line in fh:
                        if line.startswith("RssAnon:"):
                            self.peak = max(self.peak, int(line.split()[1]) / 1024)
            except OSError:
                return
            self._stop.wait(0.05)

    def stop(self) -> float:
        self._stop.set()
        self._t.join()
        return self.peak


def queue_max(addr: str, topic: str, queues: int) -> list[int]:
    """GET_MAX_OFFSET of every queue (-1 where the broker does not answer)."""
    out = []
    with K.Remoting(addr) as r:
        for q in range(queues):
            a = r.call(30, {"topic": topic, "queueId": q})
            out.append(int(a.ext.get("offset", -1)) if a.code == 0 else -1)
    return out


def pctl(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def bench_conf(name: str, role: str, ha_port: int, master_ha: str | None = None, **extra) -> dict:
    conf = K.broker_conf(name, role, ha_port=ha_port, master_ha=master_ha, **extra)
    # RocketMQ's default file sizes (1 GiB segments, 5M-slot index), as a deployment has them
    for k in ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum"):
        conf.pop(k)
    conf.setdefault("haHousekeepingInterval", 20000)
    conf.setdefault("haSendHeartbeatInterval", 5000)
    return conf


# --- 1. catch-up ---------------------------------------------------------------------------------

def build_master_store(path: str, conf: dict, size: int) -> dict:
    """Fill a store with ``size`` bytes of commitlog (1 KiB bodies, one key each) and close it. It
    must stay inside the first 1 GiB segment: an empty slave starts at the master's last segment
    (upstream's rule), so only a one-segment master is copied whole."""
    size = min(size, GIB - (1 << 20))
    from rmqstore import Message, MessageStore, MessageStoreConfig

    cfg = MessageStoreConfig.from_properties({k: v for k, v in conf.items() if k not in ("brokerRole",)})
    body = os.urandom(1024)
    n = 0
    with MessageStore.open(path, cfg) as st:
        while st.max_phy_offset < size:
            batch = [Message.create(TOPIC, body, keys=[f"k{n + j}"], queue_id=(n // 32) % QUEUES) for j in range(32)]
            assert st.put_messages(batch).ok
            n += 32
        st.wait_dispatched(timeout=900)
        end = st.max_phy_offset
        queues = [st.get_max_offset_in_queue(TOPIC, q) for q in range(QUEUES)]
    return {"messages": n, "bytes": end, "queues": queues}


def catchup_round(work: str, master: K.Node, expect: list[int]) -> dict:
    """An empty slave from its start until its consume queues hold the master's messages."""
    with K.Cluster(os.path.join(work, "c")) as c:
        slave = c.broker("slave", bench_conf("bench", "SLAVE", K.free_port(), master_ha=master.ha_addr),
                         start=False)
        t0 = time.monotonic()
        slave.start(timeout=120)
        rss = RssSampler(slave.proc.pid)
        K.wait_until(lambda: queue_max(slave.addr, TOPIC, QUEUES) == expect, 1800, "the slave to catch up",
                     every=0.1)
        secs = time.monotonic() - t0
        peak = rss.stop()
        slave.stop(timeout=120)
    shutil.rmtree(os.path.join(work, "c"), ignore_errors=True)
    return {"seconds": secs, "rss_anon_mb": peak}


def rebuild_round(work: str, master: K.Node) -> dict:
    out = os.path.join(work, "rebuilt")
    t0 = time.monotonic()
    p = subprocess.run([*K.RMQSTORE, "rebuild", out, "--store", str(master.store), "--config", str(master.conf_path)],
                       capture_output=True, text=True, timeout=1800)
    secs = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    shutil.rmtree(out, ignore_errors=True)
    return {"seconds": secs}


def bench_catchup(work: str, rounds: int, size: int) -> dict:
    conf = bench_conf("bench", "ASYNC_MASTER", K.free_port())
    mdir = os.path.join(work, "master")
    os.makedirs(mdir, exist_ok=True)
    built = build_master_store(os.path.join(mdir, "store"), conf, size)
    print(f"catch-up: master store {built['bytes'] / GIB:.3f} GiB, {built['messages']:,} messages", flush=True)
    with K.Cluster(os.path.join(work, "m")) as c:
        master = K.Node(Path(mdir), "master", K.free_port(), conf=conf)
        c.nodes.append(master)
        master.start(timeout=300)
        expect = built["queues"]
        assert queue_max(master.addr, TOPIC, QUEUES) == expect
        pairs, rows = [], []
        for rnd in range(rounds):
            order = ("rebuild", "catchup") if rnd % 2 == 0 else ("catchup", "rebuild")
            got = {}
            for what in order:
                got[what] = rebuild_round(work, master) if what == "rebuild" else catchup_round(work, master, expect)
                print(f"  round {rnd} {what}: {got[what]}", flush=True)
            pairs.append(got["rebuild"]["seconds"] / got["catchup"]["seconds"])
            rows.append(got)
        master.stop(timeout=120)
    return {"bytes": built["bytes"], "messages": built["messages"], "pairs": pairs, "rows": rows}


# --- 2. lag under load, 3. SYNC vs ASYNC ---------------------------------------------------------

def start_group(c: K.Cluster, role: str, **slave_extra) -> tuple[K.Node, K.Node]:
    m_ha, s_ha = K.free_port(), K.free_port()
    master = c.broker("m", bench_conf("bench", role, m_ha, mappedFileSizeCommitLog=LAG_SEGMENT))
    slave = c.broker("s", bench_conf("bench", "SLAVE", s_ha, master_ha=master.ha_addr,
                                     mappedFileSizeCommitLog=LAG_SEGMENT, **slave_extra))
    K.create_topic(master.addr, TOPIC, queues=QUEUES)
    return master, slave


def producers(c: K.Cluster, namesrv: str, n: int, seconds: float, run: str) -> list[K.Load]:
    loads = [K.produce(c, namesrv, TOPIC, threads=1, seconds=seconds, run=f"{run}p{i}",
                       extra=("--quiet", "--max-failures", "50")) for i in range(n)]
    for ld in loads:
        ld.started()
    return loads


def send_rate(loads: list[K.Load]) -> float:
    done = [ld.wait(120) for ld in loads]
    ok = sum(d["ok"] for d in done)
    return ok / (max(d["end"] for d in done) - min(d["start"] for d in done))


class SlavePuller:
    """Long-polls every queue of the slave; per message: readable-on-slave time minus store time (ms)."""

    def __init__(self, addr: str, start: int = 0):
        self.addr, self.start, self.lags, self._stop = addr, start, [], threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(q,), daemon=True) for q in range(QUEUES)]
        for t in self.threads:
            t.start()

    def _run(self, q: int) -> None:
        from rmqstore.format.message import decode_message
        offset = self.start
        with K.Remoting(self.addr, timeout=30) as r:
            while not self._stop.is_set():
                a = r.call(11, {"consumerGroup": "RepBenchCG", "topic": TOPIC, "queueId": q, "queueOffset": offset,
                                "maxMsgNums": 32, "sysFlag": 2 | 4, "commitOffset": 0, "suspendTimeoutMillis": 1000,
                                "subscription": "*", "subVersion": 0, "expressionType": "TAG"})
                now = time.time() * 1000
                if a.code == 0:
                    pos = 0
                    while pos < len(a.body):
                        rec = decode_message(a.body, pos, len(a.body))
                        self.lags.append(now - rec.store_timestamp)
                        pos += rec.store_size
                if "nextBeginOffset" in a.ext:
                    offset = int(a.ext["nextBeginOffset"])
                elif a.code != 0:
                    time.sleep(0.05)

    def stop(self) -> list[float]:
        self._stop.set()
        for t in self.threads:
            t.join(5)
        return self.lags


class SlaveTail:
    """Follows the slave's commitlog files from outside (reads of the page cache every ms): per
    record, the time its bytes were complete on the slave minus its store time on the master (ms).
    Replication alone: no dispatch, no pull. A record counts once its last byte (the end of its
    properties, never zero) is there."""

    def __init__(self, store: Path, segment: int, start: int):
        self.store, self.segment, self.pos = Path(store), segment, start
        self.lags: list[float] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        from rmqstore.format.message import decode_message
        fh, base = None, -1
        while not self._stop.is_set():
            seg = self.pos - self.pos % self.segment
            if seg != base:
                path = self.store / "commitlog" / f"{seg:020d}"
                if not path.exists():
                    time.sleep(0.001)
                    continue
                fh, base = open(path, "rb"), seg
            fh.seek(self.pos - base)
            data = fh.read(1 << 20)
            now, off = time.time() * 1000, 0
            while off + 8 <= len(data):
                size, magic = struct.unpack_from(">iI", data, off)
                if size <= 0 or off + size > len(data) or data[off + size - 1] == 0:
                    break
                if magic == 0xCBD43194:  # the segment's blank end: the next segment
                    self.pos = base + self.segment
                    off = -1
                    break
                self.lags.append(now - decode_message(data, off, off + size).store_timestamp)
                off += size
            if off > 0:
                self.pos += off
            elif off == 0:
                time.sleep(0.001)

    def stop(self) -> list[float]:
        self._stop.set()
        self._t.join(5)
        return self.lags


def bench_lag(work: str, rounds: int, seconds: float, nprod: int) -> list[dict]:
    out = []
    for rnd in range(rounds):
        with K.Cluster(os.path.join(work, f"lag{rnd}")) as c:
            master, slave = start_group(c, "ASYNC_MASTER", slaveReadEnable="true")
            for q in range(QUEUES):  # the slave has the topic's queues before the puller starts
                K.send(master.addr, TOPIC, b"probe", keys="probe", queue_id=q)
            end = K.valid_end(master.store)
            K.wait_until(lambda: K.valid_end(slave.store) == end, 60, "the slave to have the probes")
            time.sleep(0.5)
            rss = RssSampler(slave.proc.pid)
            tail = SlaveTail(slave.store, LAG_SEGMENT, end)
            puller = SlavePuller(slave.addr, start=1)
            rate = send_rate(producers(c, master.addr, nprod, seconds, f"lag{rnd}"))
            end = K.valid_end(master.store)
            K.wait_until(lambda: K.valid_end(slave.store) == end, 60, "the slave to catch up")
            time.sleep(1.5)
            lags, copied = puller.stop(), tail.stop()
            row = {"rate": rate, "n": len(lags), "p50": pctl(lags, 50), "p99": pctl(lags, 99), "max": max(lags),
                   "copy_n": len(copied), "copy_p50": pctl(copied, 50), "copy_p99": pctl(copied, 99),
                   "copy_max": max(copied), "rss_anon_mb": rss.stop(), "load": os.getloadavg()[0]}
            print(f"  lag round {rnd}: {row}", flush=True)
            out.append(row)
        shutil.rmtree(os.path.join(work, f"lag{rnd}"), ignore_errors=True)
    return out


def bench_sync(work: str, rounds: int, seconds: float, nprod: int) -> dict:
    pairs, rows = [], []
    for rnd in range(rounds):
        got = {}
        for role in (("ASYNC_MASTER", "SYNC_MASTER") if rnd % 2 == 0 else ("SYNC_MASTER", "ASYNC_MASTER")):
            d = os.path.join(work, f"{role}{rnd}")
            with K.Cluster(d) as c:
                master, slave = start_group(c, role)
                got[role] = send_rate(producers(c, master.addr, nprod, seconds, f"{role}{rnd}"))
            shutil.rmtree(d, ignore_errors=True)
            print(f"  round {rnd} {role}: {got[role]:,.0f} sends/s", flush=True)
        pairs.append(got["SYNC_MASTER"] / got["ASYNC_MASTER"])
        rows.append(got)
    return {"pairs": pairs, "rows": rows}


# --- report --------------------------------------------------------------------------------------

def report(args, res: dict, load_before: float) -> str:
    lines = [f"## Replication (bench/replication.py, {dt.date.today()})", "",
             f"Command: `.venv/bin/python bench/replication.py --rounds {args.rounds} --catchup-mib {args.catchup_mib} "
             f"--seconds {args.seconds:g} --only {args.only}`; 2 shared cores, load average {load_before:.1f} at the start.", ""]
    if "catchup" in res:
        r = res["catchup"]
        cu = [x["catchup"]["seconds"] for x in r["rows"]]
        rb = [x["rebuild"]["seconds"] for x in r["rows"]]
        rss = max(x["catchup"]["rss_anon_mb"] for x in r["rows"])
        ratio = statistics.median(r["pairs"])
        lines += [f"### An empty slave catching up {r['bytes'] / 2**20:,.0f} MiB ({r['messages']:,} messages of 1 KiB)", "",
                  "| | seconds (median) | MB/s | ratio rebuild/catch-up, paired | slave peak RssAnon | goal |",
                  "|---|---:|---:|---:|---:|---|",
                  f"| `rmqstore rebuild` | {statistics.median(rb):.1f} | {r['bytes'] / 2**20 / statistics.median(rb):.0f} "
                  "| | | |",
                  f"| slave catch-up (commitlog + dispatch) | {statistics.median(cu):.1f} | "
                  f"{r['bytes'] / 2**20 / statistics.median(cu):.0f} | {ratio:.2f} | {rss:.0f} MB | ≥ 0.8: "
                  f"{'met' if ratio >= 0.8 else 'NOT met'} |", "",
                  "Pairs: " + ", ".join(f"{p:.2f}" for p in r["pairs"]) + ".", ""]
    if "lag" in res:
        rows = res["lag"]
        lines += [f"### Replication lag at the C++ client's full rate, {args.producers} producer processes", "",
                  "Copied: a record's bytes complete in the slave's commitlog file, minus its store time on the "
                  "master. Readable: a long-polling pull from the slave returned it, minus the same.", "",
                  "| round | sends/s | records | copied p50 / p99 / max ms | readable p50 / p99 / max ms | "
                  "slave peak RssAnon | load avg | goal p99 < 20 ms (copied) |",
                  "|---:|---:|---:|---:|---:|---:|---:|---|"]
        for i, x in enumerate(rows):
            lines.append(f"| {i} | {x['rate']:,.0f} | {x['copy_n']:,} | {x['copy_p50']:.0f} / {x['copy_p99']:.0f} / "
                         f"{x['copy_max']:.0f} | {x['p50']:.0f} / {x['p99']:.0f} / {x['max']:.0f} | "
                         f"{x['rss_anon_mb']:.0f} MB | {x['load']:.0f} | {'met' if x['copy_p99'] < 20 else 'NOT met'} |")
        lines.append("")
    if "sync" in res:
        r = res["sync"]
        ratio = statistics.median(r["pairs"])
        lines += [f"### SYNC_MASTER against ASYNC_MASTER, {args.producers} producer processes, {args.seconds:.0f} s each", "",
                  "| ASYNC_MASTER sends/s (median) | SYNC_MASTER sends/s (median) | SYNC/ASYNC, paired | goal |",
                  "|---:|---:|---:|---|",
                  f"| {statistics.median(x['ASYNC_MASTER'] for x in r['rows']):,.0f} | "
                  f"{statistics.median(x['SYNC_MASTER'] for x in r['rows']):,.0f} | {ratio:.2f} | ≥ 0.7: "
                  f"{'met' if ratio >= 0.7 else 'NOT met'} |", "",
                  "Pairs: " + ", ".join(f"{p:.2f}" for p in r["pairs"]) + ".", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--catchup-mib", type=int, default=1024)
    ap.add_argument("--seconds", type=float, default=8.0, help="load duration of each lag/sync measurement")
    ap.add_argument("--producers", type=int, default=8)
    ap.add_argument("--only", default="catchup,lag,sync")
    ap.add_argument("--dir", default=os.path.join(ROOT, "bench", "out"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "replication.md"))
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="replication-", dir=args.dir)
    load_before = os.getloadavg()[0]
    only = set(args.only.split(","))
    res: dict = {}
    try:
        if "sync" in only:
            res["sync"] = bench_sync(work, args.rounds, args.seconds, args.producers)
        if "lag" in only:
            res["lag"] = bench_lag(work, args.rounds, args.seconds, args.producers)
        if "catchup" in only:
            res["catchup"] = bench_catchup(work, args.rounds, args.catchup_mib << 20)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = report(args, res, load_before)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        fh.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
