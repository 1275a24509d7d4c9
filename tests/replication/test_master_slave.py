"""One broker group as processes: an rmqstore master and its rmqstore slave under load from
RocketMQ's C++ client.

* the slave's commitlog is a byte-identical copy of the master's, its consume queues and index what
  ``rmqstore rebuild`` makes from the same bytes, through a kill -9 of the slave and a restart of
  the master under load;
* SYNC_MASTER, kill -9 of the master under load, 10 rounds: every send the client saw acknowledged
  is on the slave (``scripts/soak_replication`` runs the same rounds for as long as asked);
* the slave serves pulls once its master is gone (beyond upstream: without ``slaveReadEnable``).
"""
from __future__ import annotations

import os
import random
import time

import clusterkit as K

TOPIC = "RepT"


def test_slave_is_a_byte_identical_copy_through_restarts_under_load(cluster, tmp_path):
    small = {"mappedFileSizeCommitLog": 1 << 20}  # the load crosses segment boundaries
    master, slave = cluster.group("a", master_extra=small, slave_extra=small)
    load = K.produce(cluster, master.addr, TOPIC, threads=4, seconds=6,
                     extra=("--max-failures", "200", "--retry-pause", "0.05"))
    load.started()
    K.wait_until(lambda: len(load.acks()) >= 200, 30, "200 acknowledged sends")
    slave.kill9()  # a crashed slave: it recovers its own tail and resumes from there
    time.sleep(0.5)
    slave.start()
    K.wait_until(lambda: K.valid_end(slave.store) > 0 and len(load.acks()) >= 1000, 30, "more sends")
    master.stop()  # a clean restart of the master while the producers keep trying
    master.start()
    done = load.wait(90)
    acks = {a["k"] for a in load.acks()}
    assert done["ok"] == len(acks) > 1000
    end = K.valid_end(master.store)
    K.wait_until(lambda: K.valid_end(slave.store) == end, 30, f"the slave to reach the master's end {end}")
    slave.stop()
    master.stop()
    K.assert_prefix(slave.store, master.store, equal=True)
    assert K.segments(slave.store)[0][0] == 0  # an empty slave started at the master's only file
    assert len(K.segments(master.store)) >= 2  # the load crossed a segment boundary
    assert acks <= K.keys_in_commitlog(slave.store)
    K.assert_queues_as_rebuilt(slave.store, tmp_path)
    K.assert_queues_as_rebuilt(master.store, tmp_path)


def test_sync_master_kill9_rounds_lose_no_acknowledged_send(cluster, tmp_path):
    seed = int(os.environ.get("RMQ_REPL_SEED", random.randrange(1 << 31)))
    print(f"RMQ_REPL_SEED={seed}")
    rng = random.Random(seed)
    master, slave = cluster.group("s", role="SYNC_MASTER")
    acked: set[str] = set()
    for rnd in range(10):
        t0 = time.monotonic()
        res = K.sync_kill_round(cluster, master, slave, rng, f"r{rnd}")
        print(f"round {rnd}: {len(res.acks)} acks, killed after {res.killed_after_s:.2f}s, "
              f"{time.monotonic() - t0:.1f}s")
        assert not res.missing, (f"round {rnd}: {len(res.missing)} acknowledged sends not on the slave, e.g. "
                                 f"{sorted(res.missing)[:5]}\n{slave.log()[-3000:]}")
        assert len(res.acks) >= 20
        acked |= res.acks
    end = K.valid_end(master.store)
    K.wait_until(lambda: K.valid_end(slave.store) == end, 30, "the slave to catch up with the restarted master")
    slave.stop()
    master.stop()
    K.assert_prefix(slave.store, master.store, equal=True)
    assert acked <= K.keys_in_commitlog(slave.store)
    K.assert_queues_as_rebuilt(slave.store, tmp_path)


def test_slave_serves_pulls_once_its_master_is_gone(cluster):
    master, slave = cluster.group("p")
    K.create_topic(master.addr, TOPIC, queues=2)
    load = K.produce(cluster, master.addr, TOPIC, threads=2, seconds=30, extra=("--count", "100"))
    assert load.wait(60)["ok"] >= 190  # (the C++ client may fail a send right after its start: its own race)
    end = K.valid_end(master.store)
    K.wait_until(lambda: K.valid_end(slave.store) == end, 30, "the slave to catch up")
    # without slaveReadEnable a slave whose master lives does not serve pulls (upstream 5.x: SYSTEM_BUSY)
    r = K.pull(slave.addr, "RepCG", TOPIC, 0, 0)
    assert r.code != 0 and not r.body, (r.code, r.remark)
    acked = {a["k"] for a in load.acks()}
    master.kill9()
    got: set[str] = set()

    def drained():
        for q in (0, 1):
            offset = 0
            while True:
                r = K.pull(slave.addr, "RepCG", TOPIC, q, offset)
                if r.code != 0:
                    break
                recs = K.records_of(r.body)
                got.update(rec.properties["KEYS"] for rec in recs)
                offset = int(r.ext["nextBeginOffset"])
        return got >= acked

    # the slave serves them once the master was unreachable for haHousekeepingInterval (3 s here)
    K.wait_until(drained, 20, "the slave to serve every acknowledged message", every=0.5)
    assert acked <= got and len(got) <= 200  # (a send the client saw fail may still be stored)
