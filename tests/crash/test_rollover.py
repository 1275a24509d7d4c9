"""Index-file and consume-queue-segment rollover under load: several writer threads and reader
threads on tiny files (15 index items per file, 10 units per consume-queue file, 8 KiB commitlog
segments), then the same store after a crash copy and after a clean restart."""
from __future__ import annotations

import os
import random
import shutil
import threading

import crashkit as K

from rmqstore import MessageStore

WRITERS = 4
PER_WRITER = 400


def _check(st, written: dict, rng: random.Random) -> None:
    found = K.all_records(st)
    assert {(w, s) for (w, s, _b, _n) in found} == set(written)
    for (w, s), phy in rng.sample(sorted(written.items()), 200):
        e = K.expected(w, s, s)
        for key in e["keys"]:
            assert [m.phy_offset for m in st.query_message(e["topic"], key).messages] == [phy], key
    assert st.verify() == []


def test_rollover_under_load(tmp_path, crash_rng):
    cfg = K.crash_config(mapped_file_size_commit_log=8192, mapped_file_size_consume_queue=200, max_hash_slot_num=8,
                         max_index_num=16, flush_disk_type="ASYNC_FLUSH")
    path = str(tmp_path / "s")
    written: dict[tuple[int, int], int] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()
    done = threading.Event()
    with MessageStore.open(path, cfg) as st:
        def write(wid: int) -> None:
            try:
                for seq in range(PER_WRITER):
                    r = st.put_message(K.message_for(wid, seq, seq))
                    assert r.ok, r
                    with lock:
                        written[(wid, seq)] = r.phy_offset
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        def read(seed: int) -> None:
            rng = random.Random(seed)
            try:
                while not done.is_set():
                    with lock:
                        if not written:
                            continue
                        (w, s), phy = rng.choice(list(written.items()))
                    e = K.expected(w, s, s)
                    for m in st.query_message(e["topic"], e["keys"][0]).messages:
                        assert K.parse_id(m)[:2] == (w, s)
                    qid = rng.randrange(K.QUEUES)
                    topic = rng.choice(K.TOPICS)
                    lo = st.get_min_offset_in_queue(topic, qid)
                    hi = st.get_max_offset_in_queue(topic, qid)
                    if hi > lo:
                        off = rng.randrange(lo, hi)
                        g = st.get_message("t", topic, qid, off, 8)
                        for i, m in enumerate(g.messages):
                            K.check_record(m)
                            assert m.queue_offset == off + i
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        ws = [threading.Thread(target=write, args=(w,)) for w in range(1, WRITERS + 1)]
        rs = [threading.Thread(target=read, args=(crash_rng.randrange(1 << 30),)) for _ in range(2)]
        for t in ws + rs:
            t.start()
        for t in ws:
            t.join()
        st.wait_dispatched(timeout=60)
        done.set()
        for t in rs:
            t.join()
        assert not errors, errors[0]
        assert len(os.listdir(os.path.join(path, "index"))) > 100
        cq_files = sum(len(fs) for _, _, fs in os.walk(os.path.join(path, "consumequeue")))
        assert cq_files > 100
        _check(st, written, crash_rng)
        # a crash copy taken now (abort file and all) recovers to the same store
        shutil.copytree(path, str(tmp_path / "crash"), ignore=shutil.ignore_patterns("lock", "*.creating"))
    with MessageStore.open(str(tmp_path / "crash"), cfg) as st:
        assert st.recovery_report.mode == "abnormal"
        _check(st, written, crash_rng)
    with MessageStore.open(path, cfg) as st:
        assert st.recovery_report.mode == "normal" and st.recovery_report.clean
        _check(st, written, crash_rng)
