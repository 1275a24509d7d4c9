"""kill -9 of a writer with several threads, at random moments, many times over: two stores
under SYNC_FLUSH and one under ASYNC_FLUSH (a process crash keeps the page cache, so ASYNC_FLUSH
acknowledgements survive it too; a power loss is another matter, see tests/unit/message_store/test_flush.py).

After each kill the parent opens the store: every put the writer reported as PUT_OK (through a
pipe, after the put returned) must be readable and identical by its commitlog offset, through its
consume queue and by key; every other record must be complete (no half-visible put, batches all
or nothing); verify() must be clean. Some rounds the parent first opens read-only (it must not
change a byte and must still read every acknowledged message), and the next writer recovers.
"""
from __future__ import annotations

import os

import crashkit as K

from rmqstore import MessageStore

ROUNDS_PER_STORE = 10
STORES = 3


def test_kill9_rounds(tmp_path, crash_rng):
    rng = crash_rng
    total_acks = rounds_with_acks = recovered_abnormally = 0
    for s in range(STORES):
        path = str(tmp_path / f"store{s}")
        cfg = K.crash_config() if s < 2 else K.crash_config(flush_disk_type="ASYNC_FLUSH")
        acked: list[K.Ack] = []
        for rnd in range(ROUNDS_PER_STORE):
            # ASYNC_FLUSH puts are many times faster: shorter runs keep the store (and the checks) small
            res = K.kill_round(path, cfg, rng, wid_base=(rnd + 1) * 16, threads=3, max_run_s=0.5 if s < 2 else 0.12)
            acked += res.acks
            total_acks += len(res.acks)
            rounds_with_acks += bool(res.acks)
            if not os.path.exists(os.path.join(path, "commitlog")):
                assert not res.acks
                continue
            if rng.random() < 0.3:
                before = K.tree_digest(path)
                with MessageStore.open(path, cfg, read_only=True) as ro:
                    rep = ro.recovery_report
                    assert rep.applied is False
                    for a in acked:
                        rec = ro.look_message_by_offset(a.phy)
                        assert rec is not None and K.parse_id(rec)[:2] == (a.wid, a.seq), a
                        K.check_record(rec)
                assert K.tree_digest(path) == before, "a read-only open changed the store"
                continue
            with MessageStore.open(path, cfg) as st:
                rep = st.recovery_report
                recovered_abnormally += rep.mode == "abnormal"
                assert rep.applied
                for cut in rep.cuts:
                    assert cut.saved_to and os.path.getsize(cut.saved_to) == cut.length
                K.check_store(st, acked, query_sample=res.acks)
        # the last state of each store is checked by a writer, whatever the last round chose
        with MessageStore.open(path, cfg) as st:
            K.check_store(st, acked, query_sample=acked[-50:])
    # the test means something only if writers were killed while acknowledging puts
    assert rounds_with_acks >= STORES * ROUNDS_PER_STORE // 3, rounds_with_acks
    assert recovered_abnormally >= 1
    assert total_acks > 0
