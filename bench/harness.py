"""Side-by-side benchmarks of rmqstore, its peers and the machine's floors; writes BENCHMARKS.md.

Run:  .venv/bin/python bench/harness.py            (full: 3 rounds, about 18 minutes on 2 cores)
      .venv/bin/python bench/harness.py --quick    (1 round, smaller counts; for a smoke run)

Every measurement runs in a fresh child process (fork), so its peak RSS is its own; the
implementations of a workload are interleaved inside each round, and the tables report the median
over rounds. Ratios compare implementations measured in the same run, never numbers from elsewhere.
"""
from __future__ import annotations

import argparse
import datetime as dt
import gc
import multiprocessing as mp
import os
import platform
import random
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
import zlib
from functools import partial

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # children.py, durability.py, spark_bench.py

from rmqstore import Message, MessageStore, MessageStoreConfig  # noqa: E402

import durability  # noqa: E402
from children import run_child  # noqa: E402  (re-exported: H.run_child)
from children import settle as _settle  # noqa: E402

CPU_GROUP = "machine: a pure-Python loop in 1 and 2 processes at once (parallel scaling)"
WORK = os.environ.get("RMQ_BENCH_DIR") or os.path.join(ROOT, "bench", "out")


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------

def _tmp() -> str:
    os.makedirs(WORK, exist_ok=True)
    return tempfile.mkdtemp(prefix="b-", dir=WORK)


def _body(size: int) -> bytes:
    return (b"0123456789abcdef" * (size // 16 + 1))[:size]


def _messages(n: int, size: int, keyed: bool, batch: int = 0, topic: str = "Bench", queues: int = 4) -> list[Message]:
    """n messages; a batch (put_messages) is for one queue, so queues rotate per batch then."""
    body = _body(size)
    qid = (lambda i: (i // batch) % queues) if batch else (lambda i: i % queues)
    if keyed:
        return [Message.create(topic, body, keys=[f"key-{i}"], queue_id=qid(i)) for i in range(n)]
    return [Message.create(topic, body, queue_id=qid(i)) for i in range(n)]


def _cfg(**kw) -> MessageStoreConfig:
    base = dict(max_hash_slot_num=2_000_000, max_index_num=8_000_000)
    base.update(kw)
    return MessageStoreConfig(**base)


_PROFILER = None  # set by profile_top: profiles the timed part of a workload only


def _timed(fn) -> float:
    # The workload's prepared data (e.g. 100,000 Message objects) is frozen out of the cyclic GC,
    # for every implementation alike: otherwise each gen-2 pass walks it and the pauses measure the
    # benchmark's own objects, not the code under test.
    gc.collect()
    gc.freeze()
    if _PROFILER is not None:
        _PROFILER.start()
    t = time.perf_counter()
    fn()
    secs = time.perf_counter() - t
    if _PROFILER is not None:
        _PROFILER.stop()
    return secs


# ------------------------------------------------------------------------------------------------
# workloads: each returns {"ops": n, "seconds": s, ...}; runs inside a child process
# ------------------------------------------------------------------------------------------------

def rmq_put(n, size, keyed, threads=1, batch=0, sustained=False, dispatch=True):
    """``dispatch=False`` stops the dispatcher before the clock starts: the append path alone
    (encoding, the append lock, the write), the work the Python floor does."""
    d = _tmp()
    msgs = _messages(n, size, keyed, batch)
    try:
        with MessageStore.open(d, _cfg()) as st:
            if not dispatch:
                st.reput.shutdown()

            def run():
                if batch:
                    for i in range(0, n, batch):
                        st.put_messages(msgs[i:i + batch])
                elif threads == 1:
                    put = st.put_message
                    for m in msgs:
                        put(m)
                else:
                    chunks = [msgs[i::threads] for i in range(threads)]
                    ths = [threading.Thread(target=lambda c=c: [st.put_message(m) for m in c]) for c in chunks]
                    [t.start() for t in ths]
                    [t.join() for t in ths]
                if sustained:
                    st.wait_dispatched()
            secs = _timed(run)
            want = sum(m.queue_id == 0 for m in msgs)
            assert st.get_max_offset_in_queue("Bench", 0, committed=False) == want
            if dispatch:
                st.wait_dispatched()
                assert st.get_max_offset_in_queue("Bench", 0) == want
        return {"ops": n, "seconds": secs}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def peer_put(kind, n, size, keyed):
    d = _tmp()
    body = _body(size)
    items = [(f"key-{i}", body) if keyed else body for i in range(n)]
    try:
        if kind == "diskcache.Deque":
            import diskcache
            q = diskcache.Deque(directory=d)
            fn = lambda: [q.append(x) for x in items]  # noqa: E731
        elif kind == "diskcache.Index":
            import diskcache
            q = diskcache.Index(d)
            keys = [f"key-{i}" for i in range(n)]
            fn = lambda: [q.__setitem__(k, body) for k in keys]  # noqa: E731
        elif kind == "persistqueue.Queue":
            import persistqueue
            q = persistqueue.Queue(os.path.join(d, "q"), autosave=True)
            fn = lambda: [q.put(x) for x in items]  # noqa: E731
        elif kind == "persistqueue.SQLiteQueue":
            import persistqueue
            q = persistqueue.SQLiteQueue(os.path.join(d, "q"), auto_commit=True)
            fn = lambda: [q.put(x) for x in items]  # noqa: E731
        elif kind == "litequeue":
            import litequeue
            q = litequeue.LiteQueue(os.path.join(d, "q.sqlite3"))
            text = [repr(x) for x in items]
            fn = lambda: [q.put(x) for x in text]  # noqa: E731
        else:
            raise ValueError(kind)
        return {"ops": n, "seconds": _timed(fn)}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _consuming_peer(kind, d):
    """``(put one, take one)`` of a peer queue in ``d`` whose reading call consumes, with the
    durability settings of :func:`peer_put`."""
    if kind == "persistqueue.Queue":
        import persistqueue
        q = persistqueue.Queue(os.path.join(d, "q"), autosave=True)
        return q.put, lambda: (q.get(block=False), q.task_done())
    if kind == "persistqueue.SQLiteQueue":
        import persistqueue
        q = persistqueue.SQLiteQueue(os.path.join(d, "q"), auto_commit=True)
        return q.put, lambda: q.get(block=False)
    if kind == "litequeue":
        import litequeue
        q = litequeue.LiteQueue(os.path.join(d, "q.sqlite3"))
        return lambda x: q.put(repr(x)), lambda: q.done(q.pop().message_id)
    raise ValueError(kind)


def peer_get(kind, n, size):
    """Read back ``n`` keyed messages a peer holds (filled before the clock starts), each with its
    own reading call: the peers' queues consume (``get`` + ``task_done``, ``pop`` + ``done``), a
    ``diskcache.Deque`` is iterated in order without removing anything, as ``get_message`` reads."""
    d = _tmp()
    body = _body(size)
    items = [(f"key-{i}", body) for i in range(n)]
    try:
        if kind == "diskcache.Deque":
            import diskcache
            q = diskcache.Deque(directory=d)
            q.extend(items)

            def fn():
                got = sum(1 for _ in q)
                assert got == n
        else:
            put, take = _consuming_peer(kind, d)
            for x in items:
                put(x)

            def fn():
                for _ in range(n):
                    take()
        return {"ops": n, "seconds": _timed(fn)}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _prebuilt_diskcache_index(n: int, size: int) -> str:
    """A ``diskcache.Index`` of n keys (``key-i`` -> a body of ``size`` bytes), built once."""
    d = os.path.join(WORK, f"prebuilt-diskcache-index-{n}-{size}")
    if not os.path.exists(os.path.join(d, ".complete")):
        shutil.rmtree(d, ignore_errors=True)
        run_child(_build_diskcache_index, d, n, size)
        open(os.path.join(d, ".complete"), "w").close()
    return d


def _build_diskcache_index(d, n, size):
    import diskcache
    index, body = diskcache.Index(d), _body(size)
    for lo in range(0, n, 10_000):
        with index.transact():
            for i in range(lo, min(n, lo + 10_000)):
                index[f"key-{i}"] = body
    return {"ops": n, "seconds": 0.0}


def peer_query(path, n_keys, samples):
    """``diskcache.Index`` lookups of random keys out of ``n_keys``, sampled like :func:`rmq_query`."""
    import diskcache
    rng = random.Random(1)
    index = diskcache.Index(path)
    keys = [f"key-{rng.randrange(n_keys)}" for _ in range(samples)]
    for k in keys[:200]:
        index[k]
    lat = []
    t0 = time.perf_counter()
    for k in keys:
        t = time.perf_counter_ns()
        v = index[k]
        lat.append(time.perf_counter_ns() - t)
        assert v
    secs = time.perf_counter() - t0
    lat.sort()
    return {"ops": samples, "seconds": secs, "p50_us": lat[len(lat) // 2] / 1000,
            "p99_us": lat[int(len(lat) * 0.99)] / 1000}


_FLOOR = struct.Struct(">iiiiiqqiq4siq4siiqi")


def python_floor(n, size, keyed):
    """Same record bytes as rmqstore, one precompiled struct, written to a buffered file."""
    d = _tmp()
    body = _body(size)
    topic = b"Bench"
    try:
        path = os.path.join(d, "floor")
        with open(path, "wb") as fh:
            def run():
                w = fh.write
                pos = 0
                for i in range(n):
                    props = f"KEYS\x01key-{i}\x02UNIQ_KEY\x01{i:032X}\x02".encode() if keyed else \
                        f"UNIQ_KEY\x01{i:032X}\x02".encode()
                    total = 91 + len(body) + len(topic) + len(props)
                    w(_FLOOR.pack(total, -626843481, zlib.crc32(body) & 0x7FFFFFFF, i % 4, 0, i, pos, 0, 0,
                                  b"\x7f\0\0\x01", 0, 0, b"\x7f\0\0\x01", 10911, 0, 0, len(body)))
                    w(body)
                    w(bytes((len(topic),)) + topic + len(props).to_bytes(2, "big") + props)
                    pos += total
            secs = _timed(run)
        return {"ops": n, "seconds": secs, "bytes": os.path.getsize(path)}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _burn(n: int) -> int:
    x = 0
    for i in range(n):
        x += i & 7
    return x


def cpu_scaling(procs: int, work: int = 40_000_000):
    """The machine's own parallel scaling: the same pure-Python loop in ``procs`` processes at once
    (no I/O, no shared state). On a shared VM, two processes are not always twice as fast as one;
    this is what any local[2] job could gain over local[1] at the time of the run."""
    ctx = mp.get_context("fork")
    ps = [ctx.Process(target=_burn, args=(work,)) for _ in range(procs)]
    t = time.perf_counter()
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    return {"ops": procs * work, "seconds": time.perf_counter() - t}


def disk_floor(nbytes, sync):
    d = _tmp()
    try:
        chunk = os.urandom(1 << 20)
        path = os.path.join(d, "disk")

        def run():
            with open(path, "wb") as fh:
                left = nbytes
                while left > 0:
                    fh.write(chunk[:min(left, len(chunk))])
                    left -= len(chunk)
                fh.flush()
                if sync:
                    os.fdatasync(fh.fileno())
        secs = _timed(run)
        return {"ops": nbytes, "seconds": secs}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _prebuilt(n: int, size: int, name: str) -> str:
    """A store of n keyed messages, built once per harness run (not timed), reused read-only."""
    d = os.path.join(WORK, f"prebuilt-{name}-{n}-{size}")
    marker = os.path.join(d, ".complete")
    if os.path.exists(marker):
        return d
    shutil.rmtree(d, ignore_errors=True)
    body = _body(size)
    with MessageStore.open(d, _cfg(mapped_file_size_commit_log=256 << 20)) as st:
        for i in range(0, n, 256):
            st.put_messages([Message.create("Bench", body, keys=[f"key-{j}"], queue_id=(i // 256) % 4)
                             for j in range(i, min(n, i + 256))])
        st.wait_dispatched()
    open(marker, "w").close()
    return d


def rmq_dispatch(store):
    """The dispatcher's work alone: every record of a prebuilt store into fresh CQ + index files."""
    from rmqstore.engine.checkpoint import StoreCheckpoint
    from rmqstore.engine.consume_queue import ConsumeQueue
    from rmqstore.engine.dispatch import DispatchTarget, dispatch_batch, iter_record_batches
    from rmqstore.engine.index import IndexService
    cfg = _cfg(mapped_file_size_commit_log=256 << 20)
    out = _tmp()
    try:
        with MessageStore.open(store, cfg, read_only=True) as src:
            queues = {}

            def cq_for(t, q):
                if (t, q) not in queues:
                    queues[(t, q)] = ConsumeQueue(out, t, q, cfg, read_only=False)
                return queues[(t, q)]
            index = IndexService(out, cfg, read_only=False,
                                 checkpoint=StoreCheckpoint(os.path.join(out, "checkpoint"), read_only=True))
            cl = src.commit_log
            batches = list(iter_record_batches(cl.queue, cl.min_offset, cl.confirm_offset))
            n = sum(len(b) for _, b in batches)
            target = DispatchTarget(cq_for, index, cfg.delay_levels_ms)

            def run():
                for mf, b in batches:
                    dispatch_batch(mf.u8, b, target)
            secs = _timed(run)
            walk = _timed(lambda: list(iter_record_batches(cl.queue, cl.min_offset, cl.confirm_offset)))
            batches.clear()
            index.close()
            for cq in queues.values():
                cq.close()
        return {"ops": n, "seconds": secs, "walk_seconds": walk}
    finally:
        shutil.rmtree(out, ignore_errors=True)


def rmq_pull(store):
    with MessageStore.open(store, _cfg(mapped_file_size_commit_log=256 << 20), read_only=True) as st:
        total = [0]

        def run():
            for q in range(4):
                off = 0
                while True:
                    g = st.get_message("bench", "Bench", q, off, 32)
                    if not g.messages:
                        break
                    total[0] += len(g.messages)
                    off = g.next_begin_offset
        secs = _timed(run)
    return {"ops": total[0], "seconds": secs}


def rmq_query(store, n_keys, samples, exact):
    rng = random.Random(1)
    with MessageStore.open(store, _cfg(mapped_file_size_commit_log=256 << 20), read_only=True) as st:
        keys = [f"key-{rng.randrange(n_keys)}" for _ in range(samples)]
        for k in keys[:200]:  # warm the page cache
            st.query_message("Bench", k, exact=exact)
        lat = []
        t0 = time.perf_counter()
        for k in keys:
            t = time.perf_counter_ns()
            r = st.query_message("Bench", k, max_num=32, exact=exact)
            lat.append(time.perf_counter_ns() - t)
            # exact: exactly the one message; exact=False is upstream's answer (hash collisions included)
            assert len(r.messages) == 1 if exact else any(k in m.keys for m in r.messages)
        secs = time.perf_counter() - t0
    lat.sort()
    return {"ops": samples, "seconds": secs, "p50_us": lat[len(lat) // 2] / 1000,
            "p99_us": lat[int(len(lat) * 0.99)] / 1000}


def rmq_look(store, samples):
    rng = random.Random(2)
    with MessageStore.open(store, _cfg(mapped_file_size_commit_log=256 << 20), read_only=True) as st:
        offs = [st.get_commit_log_offset_in_queue("Bench", q, rng.randrange(st.get_max_offset_in_queue("Bench", q)))
                for q in [rng.randrange(4) for _ in range(samples)]]
        secs = _timed(lambda: [st.look_message_by_offset(o) for o in offs])
    return {"ops": samples, "seconds": secs}


def _prebuilt_recovery(gib: float) -> tuple[str, int]:
    """A store with one commitlog segment of ``gib`` GiB of 1 KiB keyed messages, built once."""
    seg = int(gib * durability.GIB)
    seg -= seg % 4096
    d = os.path.join(WORK, f"prebuilt-recovery-{seg}")
    if not os.path.exists(os.path.join(d, ".complete")):
        shutil.rmtree(d, ignore_errors=True)
        run_child(durability.build_store, d, seg)
        open(os.path.join(d, ".complete"), "w").close()
    return d, seg


def rmq_recover(path, seg, crash):
    """Open the prebuilt store: after its clean close (normal recovery), or as after the worst crash
    (``abort`` file, zeroed checkpoint: every queue and the index are rebuilt from the start). The
    store is closed cleanly afterwards, so the next normal run finds it as before."""
    if crash:
        with open(os.path.join(path, "abort"), "w") as fh:
            fh.write("0")
        with open(os.path.join(path, "checkpoint"), "r+b") as fh:
            fh.write(bytes(4096))
    r = durability.bench_recover(path, seg)
    assert r["mode"] == ("abnormal" if crash else "normal"), r
    return {"ops": r["bytes"], "seconds": r["seconds"], "records": r["records"]}


def rmq_sync_put(threads, seconds):
    r = durability.bench_put(_tmp(), threads, seconds)
    return {"ops": r["msgs"], "seconds": r["seconds"]}


def _prebuilt_spark(n: int) -> str:
    d = os.path.join(WORK, f"prebuilt-spark-{n}")
    if not os.path.exists(os.path.join(d, ".complete")):
        shutil.rmtree(d, ignore_errors=True)
        run_child(_generate_spark_store, os.path.join(d, "store"), n)
        open(os.path.join(d, ".complete"), "w").close()
    return os.path.join(d, "store")


def _generate_spark_store(path, n):
    import spark_bench
    from storegen import generate
    generate(path, n, spark_bench.bench_config(), batch=256)
    return {}


SPARK_RUNS = 3


def spark_measure(kind, store, master):
    """One Spark (or in-process rebuild) measurement in its own interpreter and JVM: the median of
    SPARK_RUNS runs after a warm-up run in the same session (one timed run was at the mercy of a
    single noisy moment; local[2] runs kept getting faster for two or three runs after the warm-up).
    Peak RSS is the whole process tree."""
    import spark_bench
    _settle()
    r = spark_bench.measure(kind, store, master, SPARK_RUNS)
    return {"ops": r["records"], "seconds": r["seconds"], "bytes": r["bytes"], "rss_mb": r["peak_rss_mb"],
            "steps": r.get("steps", {})}


# ------------------------------------------------------------------------------------------------
# running in children
# ------------------------------------------------------------------------------------------------

def profile_top(fn, *args, lines: int = 22) -> str:
    """pyinstrument's top frames for the timed part of one run of a workload (used where a target
    is missed); runs in this process, after every measurement is done. Only the calling thread is
    sampled: time the dispatcher thread takes from it shows as the gap to the run's duration."""
    global _PROFILER
    try:
        from pyinstrument import Profiler
    except ImportError:
        return "(pyinstrument not installed)"
    _PROFILER = Profiler(interval=0.0005)
    try:
        fn(*args)
    finally:
        prof, _PROFILER = _PROFILER, None
    text = prof.output_text(unicode=False, color=False, show_all=False)
    out = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(("  _", " /", "/ ", "Recorded", "Program"))]
    return "\n".join(out[:lines])


# ------------------------------------------------------------------------------------------------
# the report
# ------------------------------------------------------------------------------------------------

def machine() -> str:
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}, work dir on `{WORK}`")


def med(results, key="rate"):
    return statistics.median(r[key] for r in results)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1 round and smaller counts")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--out", default=os.path.join(ROOT, "BENCHMARKS.md"))
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 5)
    n_put = 20_000 if args.quick else 100_000
    n_keys = 100_000 if args.quick else 1_000_000
    n_peer = n_put // 4  # peers are far slower; their rate is per message, so fewer suffice
    started = time.time()

    def rate(res):
        res["rate"] = res["ops"] / res["seconds"]
        return res

    groups: dict[str, dict[str, list]] = {}

    pending: list = []

    def add(group, impl, measure):
        """Queue one measurement of ``group``; a group's measurements run together when the next
        group starts, their order rotated by the round so that no implementation always goes first
        (the first child after a heavy workload runs in its wake: writeback, a cold page cache)."""
        if pending and pending[0][0] != group:
            run_pending(current_round[0])
        groups.setdefault(group, {}).setdefault(impl, [])  # the table keeps the first round's order
        pending.append((group, impl, measure))

    current_round = [0]

    def run_pending(r):
        k = r % len(pending) if pending else 0
        for group, impl, measure in pending[k:] + pending[:k]:
            groups[group][impl].append(rate(measure()))
        pending.clear()

    print(f"building the prebuilt store ({n_keys:,} keyed messages)...", flush=True)
    prebuilt = _prebuilt(n_keys, 128, "q")
    dc_index = _prebuilt_diskcache_index(n_keys, 128)
    print("building the recovery and Spark stores...", flush=True)
    rec_store, rec_seg = _prebuilt_recovery(0.25 if args.quick else 1.0)
    n_spark = 200_000 if args.quick else 1_000_000
    spark_store = _prebuilt_spark(n_spark)
    for r in range(rounds):
        current_round[0] = r
        print(f"round {r + 1}/{rounds}", flush=True)
        for size in (128, 1024):
            for keyed in (True, False):
                g = f"put_message, 1 thread, {size} B body, {'one key' if keyed else 'no key'}"
                n = n_put if size == 128 else n_put // 2
                add(g, "rmqstore put_message", partial(run_child, rmq_put, n, size, keyed))
                add(g, "Python floor (struct.pack + write)", partial(run_child, python_floor, n, size, keyed))
                for peer in ("diskcache.Deque", "diskcache.Index", "persistqueue.Queue", "persistqueue.SQLiteQueue",
                             "litequeue"):
                    if peer == "diskcache.Index" and not keyed:
                        continue
                    add(g, f"{peer}", partial(run_child, peer_put, peer, n_peer if size == 128 else n_peer // 2, size, keyed))
        g = "put_message, 4 threads, 128 B, one key"
        add(g, "rmqstore put_message x4 threads", partial(run_child, rmq_put, n_put, 128, True, 4))
        add(g, "rmqstore put_message 1 thread", partial(run_child, rmq_put, n_put, 128, True, 1))
        for b in (32, 256):
            g = f"put_messages, batches of {b}, 128 B, one key"
            add(g, f"rmqstore put_messages({b})", partial(run_child, rmq_put, n_put, 128, True, 1, b))
            add(g, "Python floor (struct.pack + write)", partial(run_child, python_floor, n_put, 128, True))
            add(g, f"rmqstore put_messages({b}), dispatcher stopped (append path only)",
                partial(run_child, rmq_put, n_put, 128, True, 1, b, False, False))
        for size, keyed in ((1024, True), (128, False), (1024, False)):
            g = f"put_messages, batches of 256, {size} B, {'one key' if keyed else 'no key'}"
            n = n_put if size == 128 else n_put // 2
            add(g, "rmqstore put_messages(256)", partial(run_child, rmq_put, n, size, keyed, 1, 256))
            add(g, "Python floor (struct.pack + write)", partial(run_child, python_floor, n, size, keyed))
        g = "sustained put_message until dispatched, 128 B, one key"
        add(g, "rmqstore put_message + wait_dispatched", partial(run_child, rmq_put, n_put, 128, True, 1, 0, True))
        add(g, "rmqstore put_messages(256) + wait_dispatched", partial(run_child, rmq_put, n_put, 128, True, 1, 256, True))
        g = "dispatch alone (CQ + index, one key per message)"
        add(g, "rmqstore dispatch_batch", partial(run_child, rmq_dispatch, prebuilt))
        g = "read messages back in order (get_message pulls 32 at a time)"
        add(g, "rmqstore get_message", partial(run_child, rmq_pull, prebuilt))
        add(g, "diskcache.Deque (iterate)", partial(run_child, peer_get, "diskcache.Deque", n_peer, 128))
        add(g, "persistqueue.Queue (get + task_done)", partial(run_child, peer_get, "persistqueue.Queue", n_peer, 128))
        add(g, "persistqueue.SQLiteQueue (get)", partial(run_child, peer_get, "persistqueue.SQLiteQueue", n_peer, 128))
        add(g, "litequeue (pop + done)", partial(run_child, peer_get, "litequeue", n_peer, 128))
        g = f"query_message by key, {n_keys:,} keys indexed"
        add(g, "rmqstore query_message (exact)", partial(run_child, rmq_query, prebuilt, n_keys, 20_000, True))
        add(g, "rmqstore query_message (exact=False, upstream)", partial(run_child, rmq_query, prebuilt, n_keys, 20_000, False))
        add(g, "diskcache.Index lookup (index[key])", partial(run_child, peer_query, dc_index, n_keys, 20_000))
        g = "look_message_by_offset"
        add(g, "rmqstore look_message_by_offset", partial(run_child, rmq_look, prebuilt, 50_000))
        g = "put_message, SYNC_FLUSH (every PUT_OK on disk, group commit), 128 B, one key"
        for threads in (1, 8):
            add(g, f"rmqstore put_message x{threads} thread{'s' if threads > 1 else ''}",
                partial(run_child, rmq_sync_put, threads, 2.0 if args.quick else 5.0))
        g = f"recovery of {rec_seg / 2**30:.2f} GiB of commitlog (1 KiB bodies, one key each)"
        add(g, "rmqstore normal recovery (after a clean shutdown)", partial(run_child, rmq_recover, rec_store, rec_seg, False))
        add(g, "rmqstore abnormal recovery (crash, no checkpoint: everything re-dispatched)",
            partial(run_child, rmq_recover, rec_store, rec_seg, True))
        g = CPU_GROUP
        for procs in (1, 2):
            add(g, f"{procs} process{'es' if procs > 1 else ''}", partial(run_child, cpu_scaling, procs))
        g = f"Spark pipeline on a {n_spark:,}-message store"
        add(g, "in-process rebuild (engine/rebuild.py), for reference", partial(spark_measure, "inprocess_rebuild", spark_store, None))
        for kind, label in (("source", "source full scan (noop sink)"), ("spark_rebuild", "Spark rebuild")):
            for master in ("local[1]", "local[2]"):
                add(g, f"{label}, {master}", partial(spark_measure, kind, spark_store, master))
        run_pending(r)
        nbytes = next(iter(groups["put_message, 1 thread, 128 B body, one key"]["Python floor (struct.pack + write)"]))["bytes"]
        g = f"disk floor: sequential write of {nbytes / 1e6:.1f} MB (the 128 B keyed put workload's bytes)"
        add(g, "buffered write", partial(run_child, disk_floor, nbytes, False))
        add(g, "write + fdatasync", partial(run_child, disk_floor, nbytes, True))
        run_pending(r)

    lines = ["# Benchmarks", "",
             f"Command: `{' '.join(['.venv/bin/python', 'bench/harness.py'] + sys.argv[1:])}` "
             f"(or `make bench`), run {dt.datetime.now().strftime('%Y-%m-%d %H:%M')} UTC, "
             f"{rounds} round(s), {time.time() - started:.0f} s.", "",
             f"Machine: {machine()}.", "",
             "Every number is the median over rounds of one fresh child process per measurement; peak RSS is "
             "that child's (`ru_maxrss`, includes the interpreter, numpy and the messages the workload prepares "
             "in memory before timing). Messages are built before the clock starts, then frozen out of the cyclic GC (`gc.freeze()`), for every implementation. "
             "Durability settings: rmqstore ASYNC_FLUSH (page cache, flushed every 500 ms; default), diskcache "
             "defaults (SQLite WAL, synchronous=NORMAL), persist-queue `Queue(autosave=True)` and "
             "`SQLiteQueue(auto_commit=True)`, litequeue defaults (SQLite WAL). Peers get `(key, body)` when the "
             "workload is keyed; `diskcache.Index` is the keyed store (`index[key] = body`). Reading back: the "
             "peers hold the messages of their put workload, filled before the clock starts, and read them with "
             "their own call (the queues consume: `get`, `pop`; a `Deque` is iterated); the key lookup peer is "
             "a `diskcache.Index` of as many keys as the rmqstore index, built once. Spark rows: each "
             f"child starts a SparkSession, runs the job once to warm up, then takes the median of {SPARK_RUNS} runs.", ""]
    summary = {}
    for g, impls in groups.items():
        unit = ("B/s" if g.startswith("disk floor") else "MB/s" if g.startswith("recovery")
                else "records/s" if g.startswith("Spark") else "ops/s")
        lines += [f"## {g}", "", f"| implementation | median {unit} | ratio to first row | extra | peak RSS (MB) |",
                  "|---|---:|---:|---|---:|"]
        first = None
        for impl, res in impls.items():
            r = med(res)
            first = first or r
            extra = ""
            if "p50_us" in res[0]:
                extra = f"p50 {med(res, 'p50_us'):.1f} µs, p99 {med(res, 'p99_us'):.1f} µs"
            if "walk_seconds" in res[0]:
                extra = f"+ walking/decoding the records: {res[0]['ops'] / med(res, 'walk_seconds'):,.0f} rec/s"
            if "records" in res[0]:  # recovery: ops are bytes
                extra = f"{med(res, 'seconds') / (res[0]['ops'] / 2**30):.2f} s/GiB, {res[0]['records']:,} records"
            if "bytes" in res[0] and g.startswith("Spark"):
                extra = f"{med(res, 'seconds'):.2f} s, {res[0]['bytes'] / 1e6 / med(res, 'seconds'):,.1f} MB/s"
            shown = r / 1e6 if unit == "MB/s" else r
            lines.append(f"| {impl} | {shown:,.0f} | {r / first:.3f} | {extra} | {max(x['rss_mb'] for x in res):.0f} |")
            summary[(g, impl)] = res
        lines.append("")

    def r_of(g, impl):
        return med(summary[(g, impl)])
    g1 = "put_message, 1 thread, 128 B body, one key"
    put = r_of(g1, "rmqstore put_message")
    targets = [
        ("put_message ≥ 10× diskcache Deque.append", put / r_of(g1, "diskcache.Deque"), 10, "rmq_put", (n_put, 128, True)),
        ("put_message ≥ 30× persist-queue (file Queue)", put / r_of(g1, "persistqueue.Queue"), 30, "rmq_put", (n_put, 128, True)),
        ("put_message ≥ 25% of the Python floor", put / r_of(g1, "Python floor (struct.pack + write)"), 0.25, "rmq_put",
         (n_put, 128, True)),
        ("put_messages(256) ≥ the Python floor", r_of("put_messages, batches of 256, 128 B, one key", "rmqstore put_messages(256)")
         / r_of("put_messages, batches of 256, 128 B, one key", "Python floor (struct.pack + write)"), 1.0, "rmq_put",
         (n_put, 128, True, 1, 256)),
        ("dispatch ≥ 500,000 msgs/s with one key each", r_of("dispatch alone (CQ + index, one key per message)",
                                                              "rmqstore dispatch_batch") / 500_000, 1.0, "rmq_dispatch",
         (prebuilt,)),
        ("query_message p99 < 100 µs with 1,000,000 keys", 100 / med(summary[(f"query_message by key, {n_keys:,} keys indexed",
                                                                            "rmqstore query_message (exact)")], "p99_us"),
         1.0, "rmq_query", (prebuilt, n_keys, 5000, True)),
    ]
    lines += ["## Targets (issue 6)", "", "| target | measured | met |", "|---|---:|---|"]
    missed = []
    for name, val, need, fn, fargs in targets:
        ok = val >= need
        shown = f"{val:.2f}×" if need != 0.25 else f"{val * 100:.0f}% of floor"
        if "dispatch" in name:
            shown = f"{val * 500_000:,.0f} msgs/s"
        if "p99" in name:
            shown = f"p99 {100 / val:.1f} µs"
        lines.append(f"| {name} | {shown} | {'yes' if ok else '**no**'} |")
        if not ok:
            missed.append((name, fn, fargs))
    gs = f"Spark pipeline on a {n_spark:,}-message store"
    ratio = r_of(gs, "Spark rebuild, local[2]") / r_of(gs, "Spark rebuild, local[1]")
    lines.append(f"| Spark rebuild local[2] ≥ 1.6× local[1] | {ratio:.2f}× | {'yes' if ratio >= 1.6 else '**no**'} |")
    cpu2 = r_of(CPU_GROUP, "2 processes") / r_of(CPU_GROUP, "1 process")
    spark_steps = []
    for master in ("local[1]", "local[2]"):
        res = summary[(gs, f"Spark rebuild, {master}")]
        names = list(res[0]["steps"])
        spark_steps.append(f"{master}: total {med(res, 'seconds'):.2f} s = " + ", ".join(
            f"{k} {statistics.median(x['steps'][k] for x in res):.2f} s" for k in names))
    g256 = "put_messages, batches of 256, 128 B, one key"
    alone = r_of(g256, "rmqstore put_messages(256), dispatcher stopped (append path only)")
    lines += ["", "Context (not targets): the put_messages(256) target is measured on the default store, whose "
              "dispatcher thread builds the consume queues and the index while the producer runs and shares the "
              f"GIL with it. The append path alone (dispatcher stopped) runs at {alone / r_of(g256, 'Python floor (struct.pack + write)'):.2f}× "
              f"the floor; the dispatcher costs the producer {1 - r_of(g256, 'rmqstore put_messages(256)') / alone:.0%} of its rate. "
              f"For the Spark ratio: the machine's own parallel scaling in this run (a pure-Python loop, 2 processes "
              f"against 1) was {cpu2:.2f}×."]
    lines.append("")
    if ratio < 1.6:
        lines += ["### Missed: Spark rebuild local[2] ≥ 1.6× local[1] — where the time goes (median seconds per step)",
                  "", "```", *spark_steps, "```",
                  "dispatch: the tasks that read the byte ranges and write per-range consume-queue units and "
                  "index items; write: the tasks that assemble each consume queue and index file (a big index "
                  "file in shards, one per core). Both include Spark's task launches (some tens of ms each) and "
                  "share the two cores with the JVM.", "",
                  f"In this run the machine itself scaled {cpu2:.2f}×: a pure-Python loop in 2 processes at once "
                  "against 1 (no I/O, no Spark; the group above). That bounds what local[2] can gain over "
                  "local[1] at the time; on this shared VM it moves between about 1.0× and 2.2× from minute to "
                  "minute (bench/results/spark-rebuild-stages.md).", ""]
    for name, fn, fargs in missed:
        lines += [f"### Missed: {name} — profile (pyinstrument, top frames)", "", "```",
                  profile_top(globals()[fn], *fargs), "```", ""]
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
