"""One writer process and several read-only reader processes on a live store.

Readers call ``refresh()`` in a loop. Their view must only grow (end of data, every queue's max
offset), every message they can pull must be complete and identical to what was written, queue
offsets must be gapless, a key query must never return another message, and once the writer has
closed, a last refresh must show every message it wrote and find every key.
"""
from __future__ import annotations

import json
import os
import random
import select
import signal
import threading
import time
import traceback

import crashkit as K

from rmqstore import MessageStore, ReadOnlyStoreError, StoreLockedError

RUN_S = 2.5
READERS = 3


def _writer(path: str, cfg, fd: int, run_s: float, seed: int) -> None:
    st = MessageStore.open(path, cfg)
    counts = []

    def work(t: int) -> None:
        rng = random.Random(seed + t)
        wid, seq = 100 + t, 0
        deadline = time.monotonic() + run_s
        while time.monotonic() < deadline:
            if rng.random() < 0.1:
                assert st.put_messages([K.message_for(wid, seq + j, seq, K.BATCH) for j in range(K.BATCH)]).ok
                seq += K.BATCH
            else:
                assert st.put_message(K.message_for(wid, seq, seq)).ok
                seq += 1
        counts.append((wid, seq))

    ts = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    st.close()
    os.write(fd, (json.dumps({"written": counts}) + "\n").encode())


def _reader(path: str, cfg, fd: int, run_s: float, seed: int) -> None:
    rng = random.Random(seed)
    st = MessageStore.open(path, cfg, read_only=True)
    try:
        st.put_message(K.message_for(0, 0, 0))
        raise AssertionError("a read-only store took a put")
    except ReadOnlyStoreError:
        pass
    last_end = st.max_phy_offset
    seen: dict[tuple[str, int], int] = {}
    ids: dict[tuple[int, int], tuple[str, int, int]] = {}
    last_seq: dict[tuple[str, int, int], int] = {}
    refreshes = grew = 0
    deadline = time.monotonic() + run_s
    writer_done = False
    while True:
        end = st.refresh()
        refreshes += 1
        assert end >= last_end, (end, last_end)
        grew += end > last_end
        last_end = end
        new = []
        for topic, qids in st.topics().items():
            for qid in qids:
                hi = st.get_max_offset_in_queue(topic, qid)
                off = seen.get((topic, qid), st.get_min_offset_in_queue(topic, qid))
                assert hi >= off, (topic, qid, hi, off)
                while off < hi:
                    g = st.get_message("r", topic, qid, off, 32)
                    assert g.messages, (topic, qid, off, hi, g.status)
                    for m in g.messages:
                        assert m.queue_offset == off, (m.queue_offset, off)
                        wid, sq, base, n = K.check_record(m)
                        assert (wid, sq) not in ids, ("seen twice", wid, sq)
                        ids[(wid, sq)] = (topic, qid, off)
                        key = (topic, qid, wid)
                        assert sq > last_seq.get(key, -1), "a writer's messages are out of order in a queue"
                        last_seq[key] = sq
                        assert st.look_message_by_offset(m.phy_offset).properties["ID"] == m.properties["ID"]
                        new.append((topic, wid, sq, base))
                        off += 1
                seen[(topic, qid)] = off
        for topic, wid, sq, base in rng.sample(new, min(3, len(new))):
            key = K.expected(wid, sq, base)["keys"][0]
            for m in st.query_message(topic, key).messages:
                assert K.parse_id(m)[:2] == (wid, sq), (key, m.properties)
        if writer_done:
            break
        if time.monotonic() >= deadline:
            writer_done = not os.path.exists(os.path.join(path, "abort"))
            if time.monotonic() > deadline + 30:
                raise AssertionError("the writer did not finish")
    # the writer has closed: everything it wrote is visible (checked above, pulled in full), and
    # findable by key (a sample: every key query costs a pull's worth of reads)
    for (wid, sq), (topic, qid, off) in rng.sample(sorted(ids.items()), min(400, len(ids))):
        base = K.parse_id(st.get_message("r", topic, qid, off, 1).messages[0])[2]
        for key in K.expected(wid, sq, base)["keys"]:
            assert [K.parse_id(m)[:2] for m in st.query_message(topic, key).messages] == [(wid, sq)], key
    findings = st.verify()
    assert findings == [], findings
    st.close()
    os.write(fd, (json.dumps({"refreshes": refreshes, "grew": grew, "messages": len(ids),
                              "ids": sorted(ids)}) + "\n").encode())


def _fork(fn, *args) -> tuple[int, int]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r)
            fn(*args[:2], w, *args[2:])
        except BaseException:  # noqa: BLE001
            os.write(w, (json.dumps({"error": traceback.format_exc()}) + "\n").encode())
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def _collect(pid: int, r: int, timeout: float) -> dict:
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rl, _, _ = select.select([r], [], [], 0.5)
        if rl:
            chunk = os.read(r, 1 << 20)
            if not chunk:
                break
            buf += chunk
    else:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    os.close(r)
    assert buf, "the child reported nothing"
    return json.loads(buf.decode().splitlines()[-1])


def test_readers_follow_a_live_writer(tmp_path, crash_rng):
    cfg = K.crash_config()  # SYNC_FLUSH: readers may only ever see what is on disk
    path = str(tmp_path / "s")
    with MessageStore.open(path, cfg) as st:  # the store exists before the readers open it
        assert st.put_message(K.message_for(99, 0, 0)).ok
    writer = _fork(_writer, path, cfg, RUN_S, crash_rng.randrange(1 << 30))
    time.sleep(0.05)
    readers = [_fork(_reader, path, cfg, RUN_S, crash_rng.randrange(1 << 30)) for _ in range(READERS)]
    wres = _collect(*writer, timeout=60)
    rres = [_collect(*rd, timeout=90) for rd in readers]
    assert "error" not in wres, wres["error"]
    for res in rres:
        assert "error" not in res, res["error"]
    written = {(wid, sq) for wid, n in wres["written"] for sq in range(n)} | {(99, 0)}
    for res in rres:
        assert {tuple(x) for x in res["ids"]} == written
        assert res["grew"] >= 2, res  # the readers did see the store grow while it was written
    with MessageStore.open(path, cfg) as st:
        assert st.recovery_report.mode == "normal" and st.recovery_report.clean
        assert st.verify() == []


def test_second_writer_is_refused_readers_are_not(tmp_path):
    cfg = K.crash_config(flush_disk_type="ASYNC_FLUSH")
    path = str(tmp_path / "s")
    with MessageStore.open(path, cfg) as st:
        st.put_message(K.message_for(1, 0, 0))
        try:
            MessageStore.open(path, cfg).close()
            raise AssertionError("a second writer in the same process opened the store")
        except StoreLockedError as e:
            assert e.path.endswith("lock")
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            out = b"?"
            try:
                try:
                    MessageStore.open(path, cfg)
                    out = b"opened"
                except StoreLockedError:
                    out = b"locked"
                ros = [MessageStore.open(path, cfg, read_only=True) for _ in range(3)]
                ok = all(K.check_record(ro.look_message_by_offset(0))[:2] == (1, 0) for ro in ros)
                out += b" readers-ok" if ok else b" readers-bad"
            finally:
                os.write(w, out)
                os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        assert os.read(r, 100) == b"locked readers-ok"
        os.close(r)
        assert os.path.exists(os.path.join(path, "abort"))
    assert not os.path.exists(os.path.join(path, "abort"))
