"""What a Prometheus scrape costs a running broker: ``rmqstore serve --http-listen`` taking sync sends
from 2 C++-client producers (PyPI rocketmq 0.4.4, one process each) with ``/metrics`` scraped every
second vs not, in paired phases on one broker under a steady load (the order alternates each round;
the rate of a phase is the broker's own count of messages in, read at its ends), and the time of one
scrape, on that broker and on one with 200 topics of 4 queues and 50 groups with offsets in 4 each.

Run:  .venv/bin/python bench/http_scrape.py [--rounds 10] [--phase 5]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPP_PY = os.path.join(ROOT, ".clients", "remoting-py", "bin", "python")
DRIVER = os.path.join(ROOT, "tests", "broker", "clients", "cpp_client.py")
RMQSTORE = os.path.join(ROOT, ".venv", "bin", "rmqstore")
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(store: str) -> tuple[subprocess.Popen, str, str]:
    port, http = free_port(), free_port()
    p = subprocess.Popen([RMQSTORE, "serve", "--store", store, "--listen", f"127.0.0.1:{port}", "--http-listen",
                          f"127.0.0.1:{http}", "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    json.loads(p.stdout.readline())  # the listening line: both listeners are up
    return p, f"127.0.0.1:{port}", f"http://127.0.0.1:{http}"


def scrape(base: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    with OPENER.open(base + "/metrics", timeout=30) as r:
        n = len(r.read())
    return time.perf_counter() - t0, n


def in_total(base: str) -> int:
    with OPENER.open(base + "/api/broker", timeout=30) as r:
        return json.loads(r.read())["inTotal"]


def cpu_s(proc) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def paired_phases(rounds: int, phase_s: float, producers: int = 2) -> tuple[list[float], dict, list[float]]:
    """One broker under a steady load of sync sends; phases of ``phase_s`` seconds with a scrape
    every second and without, alternating which comes first in each round. Returns the per-round
    ratios (scraped / not) of the rate and of the broker process's CPU time per message in, the rates,
    and the scrape times (s)."""
    import psutil
    with tempfile.TemporaryDirectory() as d:
        p, addr, base = start_server(os.path.join(d, "store"))
        env = dict(os.environ, HOME=d)
        procs = [subprocess.Popen([CPP_PY, DRIVER, "produce", "--namesrv", addr, "--group", f"PG{i}", "--topic", "T",
                                   "--count", "100000000", "--quiet"], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL) for i in range(producers)]
        ratios, rates, times = {"rate": [], "cpu_per_msg": []}, {True: [], False: []}, []
        server = psutil.Process(p.pid)
        try:
            time.sleep(3)  # the clients connect and warm up
            for r in range(rounds):
                got, cpu = {}, {}
                for scraping in ((False, True) if r % 2 == 0 else (True, False)):
                    n0, t0, c0 = in_total(base), time.perf_counter(), cpu_s(server)
                    while time.perf_counter() - t0 < phase_s:
                        time.sleep(1.0)
                        if scraping:
                            times.append(scrape(base)[0])
                    n1 = in_total(base)
                    cpu[scraping] = (cpu_s(server) - c0) / max(1, n1 - n0)
                    got[scraping] = (n1 - n0) / (time.perf_counter() - t0)
                    rates[scraping].append(got[scraping])
                ratios["rate"].append(got[True] / got[False])
                ratios["cpu_per_msg"].append(cpu[True] / cpu[False])
                print(f"round {r + 1}: none {got[False]:,.0f}/s {cpu[False] * 1e6:.0f} us CPU/msg, scraped "
                      f"{got[True]:,.0f}/s {cpu[True] * 1e6:.0f} us CPU/msg: rate ratio {ratios['rate'][-1]:.3f}, "
                      f"CPU/msg ratio {ratios['cpu_per_msg'][-1]:.3f}", flush=True)
        finally:
            for q in procs:
                q.kill()
                q.wait()
            p.terminate()
            p.wait(30)
        return ratios, rates, times


def big_scrape(topics: int = 200, groups: int = 50) -> tuple[list[float], int]:
    """Scrape times on a broker with ``topics`` topics of 4 queues and ``groups`` groups with offsets
    in 4 topics each (lag computed per scrape over every queue)."""
    with tempfile.TemporaryDirectory() as d:
        from rmqstore import MessageStore, MessageStoreConfig
        from rmqstore.types import Message
        st = MessageStore.open(os.path.join(d, "store"), MessageStoreConfig.embedded())
        for i in range(topics):
            for q in range(4):
                st.put_message(Message(topic=f"T{i}", body=b"x" * 100, queue_id=q))
        st.wait_dispatched(30)
        for g in range(groups):
            for i in range(4):
                for q in range(4):
                    st.consumer_offsets.commit_offset(f"G{g}", f"T{(g * 4 + i) % topics}", q, 0)
        st.consumer_offsets.persist()
        st.close()
        p, _, base = start_server(os.path.join(d, "store"))
        try:
            runs = [scrape(base) for _ in range(10)]
        finally:
            p.terminate()
            p.wait(30)
        return [t for t, _ in runs], runs[-1][1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--phase", type=float, default=5.0, help="seconds of each phase")
    a = ap.parse_args()
    ratios, rates, times = paired_phases(a.rounds, a.phase)
    big, size = big_scrape()
    times_ms = sorted(x * 1000 for x in times)
    print(json.dumps({
        "rate_ratio_median": round(statistics.median(ratios["rate"]), 3),
        "rate_ratios": [round(x, 3) for x in ratios["rate"]],
        "cpu_per_msg_ratio_median": round(statistics.median(ratios["cpu_per_msg"]), 3),
        "cpu_per_msg_ratios": [round(x, 3) for x in ratios["cpu_per_msg"]],
        "none_median_per_s": round(statistics.median(rates[False])),
        "scraped_median_per_s": round(statistics.median(rates[True])),
        "scrapes": len(times_ms), "scrape_ms_median": round(statistics.median(times_ms), 2),
        "scrape_ms_max": round(times_ms[-1], 2),
        "big_scrape_ms_median": round(statistics.median(big) * 1000, 2), "big_scrape_bytes": size}))


if __name__ == "__main__":
    sys.exit(main())
