"""The Spark ``rocketmq`` source at scale (issue 18): one store on local disk vs the same store in S3
(moto's server on loopback), one store vs four stores read at once, ``local[2]`` vs a standalone
cluster of two one-core workers. Every row is a full scan of every column into Spark's ``noop``
sink, with the source's default split size.

Not collected by pytest. Usage::

    .venv/bin/python bench/spark_scale.py [--messages N] [--repeat R] [--rounds K] [--out bench/results/spark_scale.md]

A store is generated (tests/spark/storegen.py, bench/spark_bench.py's config: 32 MiB commitlog
segments). The script starts, and stops on exit, what the rows need: moto's S3 server on loopback
(the store's commitlog uploaded once), four hard-linked copies of the store under distinct directory
names (the broker name is the directory's name), and a Spark standalone master with two workers
(``--cores 1 --memory 1g`` each) from the installed PySpark. Moto and the cluster stay up, idle,
while the other rows run.

Every measurement is a fresh subprocess with a fresh SparkSession: one warm-up scan, then the
median of ``--repeat`` scans. The parent samples, every 0.1 s, the RSS of the child's whole process
tree (driver, its JVM, Python workers; for the cluster row also the executors the workers started,
with their Python workers) and of every single PySpark Python process (cmdline with
``pyspark.daemon``, ``pyspark.worker`` or ``pyspark.sql.worker``). ``--rounds`` rounds each measure
every row once, the order of the rows alternating (ABCD, DCBA, ...); the report gives the median of
the rounds per row, and each row's MB/s relative to row 1 per round (paired) and their median. Before
each measurement the parent times a pure-Python loop (how much CPU the shared machine gives now).
Records are counted (one more scan, untimed) in the first round only.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from spark_bench import _data_bytes, _spark_version, bench_config  # noqa: E402  (puts tests/spark on the path)

BUCKET = "rmq-scale"
N_STORES = 4
WORKER_MARKERS = ("pyspark.daemon", "pyspark.worker", "pyspark.sql.worker")
ROWS = [  # key, label, master
    ("local", "1 store, local disk", "local[2]"),
    ("s3", "1 store in S3 (moto on loopback)", "local[2]"),
    ("four", f"{N_STORES} stores at once, local disk", "local[2]"),
    ("cluster", "1 store, local disk", "standalone: 2 workers x 1 core"),
]


# ------------------------------------------------------------------------------------------------
# Child side: one measurement, result as JSON on the last line of stdout
# ------------------------------------------------------------------------------------------------

def child(spec: dict) -> dict:
    from rmqstore.layout import infer_config
    from rmqstore.spark.jobs import get_spark, read_store

    cfg = infer_config(spec["cfg_store"], bench_config())
    where, opts, repeat = spec["where"], spec.get("options", {}), spec["repeat"]
    spark = get_spark(spec["master"], app_name="rmqstore-spark-scale")
    try:
        def once() -> float:
            t = time.perf_counter()
            read_store(spark, where, cfg, **opts).write.format("noop").mode("overwrite").save()  # every column
            return time.perf_counter() - t

        warm = once()
        runs = [once() for _ in range(repeat)]
        records = read_store(spark, where, cfg, schema="commitLogOffset BIGINT", **opts).count() \
            if spec["count"] else None  # one more scan: the first round's measurements only
        partitions = read_store(spark, where, cfg, **opts).rdd.getNumPartitions()
        return {"seconds": sorted(runs)[(repeat - 1) // 2], "runs": runs, "warmup": warm, "records": records,
                "partitions": partitions, "parallelism": spark.sparkContext.defaultParallelism}
    finally:
        spark.stop()


# ------------------------------------------------------------------------------------------------
# Parent side: process-tree sampling
# ------------------------------------------------------------------------------------------------

class Sampler:
    """Peak RSS of process trees, sampled every ``interval`` s in a thread: ``tree`` (the sum over the
    trees of ``roots``, without the processes listed in ``skip``: their sum is ``skipped``), the largest single
    PySpark Python process (its RSS and, of that, the anonymous part: RSS minus file-backed and
    shared pages), and the peak of each kind of Python process (the module in its cmdline)."""

    def __init__(self, roots: list[int], skip: tuple[int, ...] = (), interval: float = 0.1):
        self.roots, self.skip, self.interval = roots, set(skip), interval
        self.tree = self.worker = self.worker_anon = self.skipped = 0
        self.kinds: dict[str, int] = {}
        self.worker_pids: set[int] = set()
        self._cmd: dict[int, str | None] = {}
        self._done = threading.Event()
        self._th = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._th.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._th.join()

    def _run(self) -> None:
        while not self._done.is_set():
            try:
                self.sample()
            except Exception:  # a process gone between listing and reading: next sample
                pass
            self._done.wait(self.interval)

    def _kind(self, p) -> str | None:
        import psutil

        if p.pid not in self._cmd:
            try:
                cmd = p.cmdline()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                return None
            kind = None
            for i, a in enumerate(cmd):
                if any(m in a for m in WORKER_MARKERS):
                    kind = a if a.startswith("pyspark") else (cmd[i + 1] if a == "-m" and i + 1 < len(cmd) else a)
                    break
            self._cmd[p.pid] = kind
        return self._cmd[p.pid]

    def sample(self) -> None:
        import psutil

        kids: dict[int, list] = {}
        for p in psutil.process_iter(["ppid"]):
            kids.setdefault(p.info["ppid"], []).append(p)
        total = skipped = 0
        seen: set[int] = set()
        stack = []
        for r in self.roots:
            try:
                stack.append(psutil.Process(r))
            except psutil.NoSuchProcess:
                pass
        while stack:
            p = stack.pop()
            if p.pid in seen:
                continue
            seen.add(p.pid)
            stack += kids.get(p.pid, [])
            try:
                m = p.memory_info()
            except psutil.NoSuchProcess:
                continue
            if p.pid in self.skip:
                skipped += m.rss
                continue
            total += m.rss
            kind = self._kind(p)
            if kind is not None:
                self.worker_pids.add(p.pid)
                self.kinds[kind] = max(self.kinds.get(kind, 0), m.rss)
                if m.rss > self.worker:
                    self.worker = m.rss
                self.worker_anon = max(self.worker_anon, m.rss - m.shared)
        self.tree = max(self.tree, total)
        self.skipped = max(self.skipped, skipped)


def _kill_tree(pid: int, timeout: float = 15) -> None:
    import psutil

    try:
        root = psutil.Process(pid)
        procs = root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def cpu_probe(n: int = 2_000_000) -> float:
    """Millions of iterations per second of a pure-Python loop in this process: how much CPU the
    shared machine gives one process right now (run before each measurement)."""
    t = time.perf_counter()
    x = 0
    for i in range(n):
        x += i
    return n / (time.perf_counter() - t) / 1e6


def measure(spec: dict, env: dict, extra_roots: list[int] = (), daemons: list[int] = ()) -> dict:
    """One child run of ``spec``; ``extra_roots`` are process trees sampled with the child's (the
    cluster's master and workers: the executors), ``daemons`` among them are not counted themselves
    (their peak RSS is ``daemons_mb``)."""
    probe = cpu_probe()
    load_before = os.getloadavg()[0]
    cmd = [sys.executable, __file__, "--child", json.dumps(spec)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        with Sampler([proc.pid, *extra_roots], skip=tuple(daemons)) as s:
            out, err = proc.communicate()
    finally:
        if proc.poll() is None:
            _kill_tree(proc.pid)
    if proc.returncode != 0 or not out.strip():
        raise RuntimeError(f"measurement {spec['row']} failed (exit {proc.returncode}):\n{err[-4000:]}")
    res = json.loads(out.strip().splitlines()[-1])
    res.update(tree_mb=s.tree / 2**20, worker_mb=s.worker / 2**20, worker_anon_mb=s.worker_anon / 2**20,
               kinds={k: v / 2**20 for k, v in s.kinds.items()}, python_procs=len(s.worker_pids),
               daemons_mb=s.skipped / 2**20, cpu_probe=probe,
               load=(load_before, os.getloadavg()[0]))
    return res


# ------------------------------------------------------------------------------------------------
# Parent side: the things the rows need
# ------------------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{what} did not start")
            time.sleep(0.2)


def _wait_log(log: Path, text: str, count: int = 1, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if log.exists() and log.read_text(errors="replace").count(text) >= count:
            return
        time.sleep(0.3)
    raise RuntimeError(f"{text!r} not seen {count}x in {log}:\n{log.read_text(errors='replace')[-3000:]}")


def start_moto(tmp: Path, store: str, procs: list) -> dict:
    """moto's S3 server on loopback with the store's commitlog uploaded; the source's options."""
    import pyarrow.fs as pafs

    server = os.path.join(os.path.dirname(sys.executable), "moto_server")
    if not os.path.exists(server):
        server = shutil.which("moto_server")
    port = _free_port()
    log = open(tmp / "moto.log", "w")
    p = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    procs.append(p)
    _wait_port(port, p, "moto_server")
    fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", access_key="test",
                           secret_key="test", region="us-east-1", allow_bucket_creation=True)
    fs.create_dir(BUCKET)
    t = time.perf_counter()
    pafs.copy_files(os.path.join(store, "commitlog"), f"{BUCKET}/one/store/commitlog", destination_filesystem=fs)
    print(f"uploaded the commitlog to moto in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    return {"where": f"s3://{BUCKET}/one/store", "pid": p.pid,
            "options": {"s3.endpoint": f"http://127.0.0.1:{port}", "s3.accessKey": "test", "s3.secretKey": "test",
                        "s3.region": "us-east-1"}}


def start_cluster(tmp: Path, procs: list) -> dict:
    """A standalone master and two workers (1 core, 1 GiB each) on loopback, as tests/spark/test_cluster.py."""
    import pyspark

    home = os.path.dirname(pyspark.__file__)
    env = dict(os.environ, SPARK_HOME=home, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")

    def spark_class(cls: str, *args: str, log: Path) -> subprocess.Popen:
        p = subprocess.Popen([os.path.join(home, "bin", "spark-class"), cls, *args], stdout=open(log, "w"),
                             stderr=subprocess.STDOUT, env=env)
        procs.append(p)
        return p

    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    mine = [spark_class("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                        "--webui-port", "0", log=tmp / "master.log")]
    _wait_log(tmp / "master.log", "I have been elected leader")
    for i in range(2):
        mine.append(spark_class("org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "1",
                                "--memory", "1g", "--webui-port", "0", "--work-dir", str(tmp / f"work{i}"),
                                log=tmp / f"worker{i}.log"))
    _wait_log(tmp / "master.log", "Registering worker", count=2)
    return {"url": url, "pids": [p.pid for p in mine], "workers": [p.pid for p in mine[1:]]}


def link_copies(store: str, root: Path) -> list[str]:
    """``N_STORES`` hard-linked copies of ``store`` named broker-0.. (distinct broker names)."""
    out = []
    for i in range(N_STORES):
        dst = root / f"broker-{i}"
        for dp, _, files in os.walk(store):
            d = dst / os.path.relpath(dp, store)
            d.mkdir(parents=True, exist_ok=True)
            for f in files:
                os.link(os.path.join(dp, f), d / f)
        out.append(str(dst))
    return out


def _stop(procs: list) -> None:
    for p in reversed(procs):
        if p.poll() is None:
            _kill_tree(p.pid, timeout=20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=400_000, help="messages of the generated store")
    ap.add_argument("--repeat", type=int, default=3, help="timed scans per measurement (the median is kept)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every row, order alternating")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "spark_scale.md"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)  # through the finally blocks: temp dirs, moto, the cluster

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    command = "python " + " ".join([os.path.relpath(__file__, ROOT)] + sys.argv[1:])
    t_all = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="spark-scale-"))
    procs: list[subprocess.Popen] = []
    try:
        from storegen import generate

        store = str(tmp / "store")
        t = time.perf_counter()
        info = generate(store, args.messages, bench_config(), batch=256)
        print(f"generated {info['messages']:,} messages in {time.perf_counter() - t:.1f}s", file=sys.stderr)
        from rmqstore.layout import infer_config

        cfg = infer_config(store, bench_config())
        one_bytes = _data_bytes(store, cfg)
        segments = sorted(os.listdir(os.path.join(store, "commitlog")))
        copies = link_copies(store, tmp / "stores")
        s3 = start_moto(tmp, store, procs)
        cluster = start_cluster(tmp, procs)
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
        specs = {
            "local": {"where": store, "master": "local[2]"},
            "s3": {"where": s3["where"], "master": "local[2]", "options": s3["options"]},
            "four": {"where": copies, "master": "local[2]"},
            "cluster": {"where": store, "master": cluster["url"]},
        }
        nbytes = {"local": one_bytes, "s3": one_bytes, "four": N_STORES * one_bytes, "cluster": one_bytes}
        keys = [k for k, _, _ in ROWS]
        results: dict[str, list[dict]] = {k: [] for k in keys}
        ref = 0
        counted: dict[str, int] = {}
        for r in range(args.rounds):
            order = keys if r % 2 == 0 else keys[::-1]
            for k in order:
                print(f"round {r + 1}/{args.rounds}: {k} ...", file=sys.stderr)
                spec = dict(specs[k], row=k, repeat=args.repeat, cfg_store=store, count=r == 0)
                extra = cluster["pids"] if k == "cluster" else []
                res = measure(spec, env, extra_roots=extra, daemons=extra)
                if res["records"] is not None:
                    per_store = res["records"] / (N_STORES if k == "four" else 1)
                    ref = ref or per_store
                    if per_store != ref or ref < info["messages"]:  # every row reads the same records
                        raise RuntimeError(f"{k}: {res['records']} records read, {ref:,.0f} per store elsewhere")
                    counted[k] = res["records"]
                res["records"] = counted[k]
                res.update(round=r + 1, position=order.index(k) + 1, bytes=nbytes[k])
                results[k].append(res)
                print(f"  {res['seconds']:.2f}s {nbytes[k] / 1e6 / res['seconds']:.1f} MB/s, tree "
                      f"{res['tree_mb']:.0f} MB, one Python worker {res['worker_mb']:.0f} MB "
                      f"(anon {res['worker_anon_mb']:.0f}), {res['partitions']} partitions, load "
                      f"{res['load'][0]:.1f}/{res['load'][1]:.1f}, Python loop {res['cpu_probe']:.1f} M/s, "
                      f"kinds {res['kinds']}", file=sys.stderr)
        text = report(results, command=command, records=int(ref), one_bytes=one_bytes,
                      segments=len(segments), seg_size=cfg.mapped_file_size_commit_log, 
                      total_s=time.perf_counter() - t_all, args=args)
        print(text)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    except BaseException:
        for name in ("moto.log", "master.log", "worker0.log", "worker1.log"):
            f = tmp / name
            if f.exists():
                print(f"--- {name} (tail)\n{f.read_text(errors='replace')[-1500:]}", file=sys.stderr)
        raise
    finally:
        _stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------

def _med(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def report(results: dict, *, command: str, records: int, one_bytes: int, segments: int, seg_size: int,
           total_s: float, args) -> str:
    import platform

    from rmqstore.spark.scan import DEFAULT_SPLIT_SIZE

    rounds = len(results["local"])
    daemon_mb = max(r["daemons_mb"] for r in results["cluster"])
    mbs = {k: [r["bytes"] / 1e6 / r["seconds"] for r in rs] for k, rs in results.items()}
    lines = [
        "# Spark `rocketmq` source at scale (issue 18)",
        "",
        f"Produced by `{command}` on {time.strftime('%Y-%m-%d %H:%M %Z')} ({total_s / 60:.1f} min in all): "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, {_spark_version()}. "
        f"Store: {records:,} records, {one_bytes / 1e6:,.1f} MB of commitlog data in {segments} "
        f"segment{'s' if segments != 1 else ''} of {seg_size >> 20} MiB "
        "(tests/spark/storegen.py, bench/spark_bench.py's config).",
        "",
        f"Each row is a full scan of every column into the `noop` sink (`read_store(...).write.format(\"noop\")`) "
        f"with the source's default split size, **{DEFAULT_SPLIT_SIZE >> 20} MiB** (a partition covers at most "
        f"{DEFAULT_SPLIT_SIZE >> 20} MiB of commitlog: {max(1, DEFAULT_SPLIT_SIZE // seg_size)} segments of this "
        f"store; the partitions column gives the count). A measurement is a fresh subprocess and SparkSession: one "
        f"warm-up scan, then the median of {args.repeat} scan{'s' if args.repeat != 1 else ''}. {rounds} round(s), "
        "each measuring every row once, the order alternating (1234, 4321, ...); a row's figures are the median over "
        "the rounds, its peaks the largest over the rounds. \"vs row 1\" is the row's MB/s over row 1's MB/s of the "
        "same round (paired), median of the rounds, then each round's.",
        "",
        "Peak RSS, tree: the driver Python process, its JVM and every Python worker (cluster row: plus the two "
        "executors the workers started and their Python workers; not the master and worker daemons themselves, "
        f"{daemon_mb:,.0f} MB together). Peak RSS, one Python worker: the largest single PySpark Python process "
        "(cmdline with `pyspark.daemon` / `pyspark.worker` / `pyspark.sql.worker`), and in brackets the anonymous "
        "part of that peak (RSS minus file-backed pages: the mapped commitlog's pages are file-backed). Sampled "
        "every 0.1 s. The machine is shared: the 1-minute load average before / after each measurement is given "
        "(2 CPUs; above 2 other processes competed), and, per measurement, the speed of a pure-Python loop run "
        "by the parent just before it (millions of iterations/s: how much CPU one process got at that moment). "
        "Records are counted (a separate scan, not timed) in the first round and must agree across rows.",
        "",
        "| # | what | master | seconds | MB/s | records/s | MB/s vs row 1 (median; per round) | peak RSS tree (MB) | "
        "peak RSS one Python worker (MB) | partitions | load before/after (range) | Python loop (M/s, median) |",
        "|---|---|---|---:|---:|---:|---|---:|---:|---:|---|---:|",
    ]
    for i, (k, label, master) in enumerate(ROWS, 1):
        rs = results[k]
        secs = _med([r["seconds"] for r in rs])
        mb = _med(mbs[k])
        recs = _med([r["records"] / r["seconds"] for r in rs])
        if k == "local":
            ratio = "1.00"
        else:
            per = [a / b for a, b in zip(mbs[k], mbs["local"])]
            ratio = f"**{_med(per):.2f}**; " + ", ".join(f"{x:.2f}" for x in per)
        lb = [r["load"][0] for r in rs]
        la = [r["load"][1] for r in rs]
        lines.append(
            f"| {i} | {label} | {master} | {secs:.2f} | {mb:,.1f} | {recs:,.0f} | {ratio} | "
            f"{max(r['tree_mb'] for r in rs):,.0f} | {max(r['worker_mb'] for r in rs):,.0f} "
            f"[{max(r['worker_anon_mb'] for r in rs):,.0f}] | {rs[0]['partitions']} | "
            f"{min(lb):.1f}–{max(lb):.1f} / {min(la):.1f}–{max(la):.1f} | "
            f"{_med([r['cpu_probe'] for r in rs]):.1f} |")
    lines += ["", "Every measurement (seconds: the kept median of the timed scans, then all of them and the warm-up):",
              "", "| round | position | # | seconds (runs; warm-up) | MB/s | peak RSS tree (MB) | "
              "one Python worker (MB) [anon] | Python processes seen | load before/after | Python loop (M/s) |",
              "|---:|---:|---:|---|---:|---:|---:|---:|---|---:|"]
    allm = sorted(((r["round"], r["position"], i, r) for i, (k, _, _) in enumerate(ROWS, 1) for r in results[k]),
                  key=lambda x: (x[0], x[1]))
    for rnd, pos, i, r in allm:
        lines.append(f"| {rnd} | {pos} | {i} | {r['seconds']:.2f} ({', '.join(f'{x:.2f}' for x in r['runs'])}; "
                     f"{r['warmup']:.2f}) | {r['bytes'] / 1e6 / r['seconds']:,.1f} | {r['tree_mb']:,.0f} | "
                     f"{r['worker_mb']:,.0f} [{r['worker_anon_mb']:,.0f}] | {r['python_procs']} | "
                     f"{r['load'][0]:.1f} / {r['load'][1]:.1f} | {r['cpu_probe']:.1f} |")
    kinds: dict[str, dict[str, float]] = {}
    for k, rs in results.items():
        for r in rs:
            for kind, v in r["kinds"].items():
                kinds.setdefault(k, {})[kind] = max(kinds.get(k, {}).get(kind, 0), v)
    lines += ["", "Peak RSS per kind of PySpark Python process (MB, largest over the rounds): " + "; ".join(
        f"row {i}: " + ", ".join(f"`{kind}` {v:,.0f}" for kind, v in sorted(kinds.get(k, {}).items()))
        for i, (k, _, _) in enumerate(ROWS, 1)) + ".", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
