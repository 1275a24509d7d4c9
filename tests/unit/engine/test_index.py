"""IndexService: a store's index files, rolled, queried, reloaded, expired (FORMAT.md §6;
IndexServiceTest). One file, IndexFile: test_index_file.py."""
from __future__ import annotations

import os

import numpy as np
import pytest

from rmqstore.engine.checkpoint import StoreCheckpoint
from rmqstore.engine.index import IndexService
from rmqstore.format import index_file as IX
from rmqstore.format.hashes import index_key_hash
from tests import kit

T0 = 1_700_000_000_000
LONG_MAX = 2**63 - 1


#: 4 slots, 3 entries per index file (the index service reads no other field of the configuration)
INDEX = dict(max_hash_slot_num=4, max_index_num=4)


def _build(svc, recs):
    """recs: (phy, ts, sys_flag, [topic#key ...])"""
    phys, ts, flags, keys = zip(*recs)
    svc.build_index(np.array(phys, dtype=np.int64), np.array(ts, dtype=np.int64), np.array(flags, dtype=np.int32),
                    [list(k) for k in keys])


def test_query_on_an_empty_service(tmp_path):
    """IndexServiceTest: a huge maxNum on a store without index files."""
    svc = IndexService(str(tmp_path), kit.cfg(INDEX), read_only=False)
    assert svc.query_offsets("test", "", 2**31 - 1, 10, 100) == ([], 0, 0)
    assert svc.query_offsets("test", "", 2**31 - 1, 10, 100, cap=False) == ([], 0, 0)


def test_service_rolls_files_and_queries_newest_first(tmp_path):
    cp = StoreCheckpoint(str(tmp_path / "checkpoint"), read_only=False)
    svc = IndexService(str(tmp_path), kit.cfg(INDEX), read_only=False, checkpoint=cp)
    _build(svc, [(0, T0, 0, ["T#k"]), (100, T0 + 1000, 0, ["T#k"]), (200, T0 + 2000, 0, ["T#x"]),
                 (300, T0 + 8500, 0, ["T#k"])])
    assert len(svc.files) == 2
    names = sorted(os.listdir(tmp_path / "index"))
    assert [f.name for f in svc.files] == names and len(names[0]) == 17 and names[0] < names[1]
    first, second = (kit.read_bytes(tmp_path / "index" / n) for n in names)
    assert IX.HEADER.unpack_from(first, 0) == (T0, T0 + 2000, 0, 200, 2, 4)  # flushed when it filled
    assert cp.values.index_msg_timestamp == T0 + 2000
    assert IX.ITEM.unpack_from(second, IX.item_pos(4, 1)) == (index_key_hash("T", "k"), 300, 6, 0)
    assert svc.files[1].begin_ts == T0 + 8500
    assert svc.query_offsets("T", "k", 10, 0, LONG_MAX) == ([300, 100, 0], T0 + 8500, 300)
    assert svc.query_offsets("T", "k", 2, 0, LONG_MAX)[0] == [300, 100]
    assert svc.query_offsets("T", "x", 10, 0, LONG_MAX)[0] == [200]
    assert svc.query_offsets("T", "k", 10, T0 + 3000, LONG_MAX)[0] == [300]
    svc.close()


def test_keys_of_one_message_spill_into_a_new_file(tmp_path):
    svc = IndexService(str(tmp_path), kit.cfg(INDEX), read_only=False)
    _build(svc, [(0, T0, 0, ["T#u", "T#a", "T#b", "T#c"])])
    assert [f.index_count for f in svc.files] == [4, 2]
    assert svc.query_offsets("T", "c", 10, 0, LONG_MAX)[0] == [0]
    assert svc.query_offsets("T", "u", 10, 0, LONG_MAX)[0] == [0]
    svc.close()


def test_a_full_file_is_replaced_when_the_next_record_arrives(tmp_path):
    svc = IndexService(str(tmp_path), kit.cfg(INDEX), read_only=False)
    _build(svc, [(0, T0, 0, ["T#a", "T#b", "T#c"]), (100, T0, 0, [])])
    assert len(svc.files) == 2 and svc.files[1].index_count == 1
    svc.close()
    svc2 = IndexService(str(tmp_path / "other"), kit.cfg(INDEX), read_only=False)
    _build(svc2, [(0, T0, 0, [])])
    assert len(svc2.files) == 1  # an index file exists even for records without keys
    svc2.close()


def test_transaction_types_and_redispatch(tmp_path):
    svc = IndexService(str(tmp_path), kit.cfg(INDEX, max_index_num=64), read_only=False)
    _build(svc, [(0, T0, 0x4, ["T#prep"]), (100, T0, 0xC, ["T#rollback"]), (200, T0, 0x8, ["T#commit"])])
    assert svc.query_offsets("T", "prep", 10, 0, LONG_MAX)[0] == [0]
    assert svc.query_offsets("T", "rollback", 10, 0, LONG_MAX)[0] == []
    assert svc.query_offsets("T", "commit", 10, 0, LONG_MAX)[0] == [200]
    count = svc.files[-1].index_count
    _build(svc, [(100, T0, 0, ["T#again"]), (200, T0, 0, ["T#commit"])])  # phy <= endPhyOffset: skipped
    assert svc.files[-1].index_count == count
    assert svc.query_offsets("T", "commit", 10, 0, LONG_MAX)[0] == [200]
    svc.close()


def test_max_num_is_capped_by_max_msgs_num_batch(tmp_path):
    svc = IndexService(str(tmp_path), kit.cfg(INDEX, max_hash_slot_num=16, max_index_num=256), read_only=False)
    _build(svc, [(i * 100, T0 + i, 0, ["T#same"]) for i in range(100)])
    offs = svc.query_offsets("T", "same", 1000, 0, LONG_MAX)[0]
    assert offs == [i * 100 for i in range(99, 35, -1)]  # 64, newest first
    assert len(svc.query_offsets("T", "same", 1000, 0, LONG_MAX, cap=False)[0]) == 100
    svc.close()


def test_reload_and_abnormal_load(tmp_path):
    cp = StoreCheckpoint(str(tmp_path / "checkpoint"), read_only=False)
    svc = IndexService(str(tmp_path), kit.cfg(INDEX), read_only=False, checkpoint=cp)
    _build(svc, [(0, T0, 0, ["T#a", "T#b", "T#c"]), (100, T0 + 5000, 0, ["T#d"])])
    svc.close()
    assert cp.values.index_msg_timestamp == T0
    ok = IndexService(str(tmp_path), kit.cfg(INDEX), read_only=True, checkpoint=cp)
    assert ok.load(last_exit_ok=True) == [] and len(ok.files) == 2
    assert ok.query_offsets("T", "d", 10, 0, LONG_MAX)[0] == [100]
    ok.close()
    crashed = IndexService(str(tmp_path), kit.cfg(INDEX), read_only=True, checkpoint=cp)
    dropped = crashed.load(last_exit_ok=False)
    assert [f.end_ts for f in dropped] == [T0 + 5000] and len(crashed.files) == 1
    for f in dropped:
        f.close()
    crashed.close()
    # a file of another size is damage (the store's geometry is the files' common size, checked by
    # layout before): not used; a reader leaves it, a writer moves it aside as <name>.damaged
    names = sorted(os.listdir(tmp_path / "index"))
    wrong = IndexService(str(tmp_path), kit.cfg(INDEX, max_index_num=8), read_only=True)
    assert wrong.load(last_exit_ok=True) == [] and wrong.files == []
    assert sorted(os.listdir(tmp_path / "index")) == names
    wrong_w = IndexService(str(tmp_path), kit.cfg(INDEX, max_index_num=8), read_only=False)
    assert wrong_w.load(last_exit_ok=True) == [] and wrong_w.files == []
    assert sorted(os.listdir(tmp_path / "index")) == [n + ".damaged" for n in names]


def test_delete_expired(tmp_path):
    svc = IndexService(str(tmp_path), kit.cfg(INDEX), read_only=False)
    _build(svc, [(i * 100, T0 + i, 0, ["T#k"]) for i in range(7)])
    assert [f.end_phy for f in svc.files] == [200, 500, 600]
    assert svc.delete_expired(100) == []                # the first file ends at 200
    removed = svc.delete_expired(550)
    assert len(removed) == 2 and not any(os.path.exists(p) for p in removed)
    assert [f.end_phy for f in svc.files] == [600]
    assert svc.delete_expired(10**9) == []              # never the last file
    svc.close()


@pytest.mark.parametrize("loop", ["self", "forward", "two-cycle"])
def test_a_damaged_chain_link_never_loops(tmp_path, loop):
    """A prevIndex that points at its own item or forward (bytes damaged on disk) ends the walk:
    items only ever link back to older ones. It used to loop forever (growing the result when the
    hash matched), read-only opens included."""
    svc = IndexService(str(tmp_path), kit.cfg(INDEX, max_hash_slot_num=1, max_index_num=16), read_only=False)
    _build(svc, [(100 + i, 1000 + i, 0, [f"T#k{i}"]) for i in range(6)])  # one slot: one chain of 6 items
    f = svc.files[0]
    items = np.frombuffer(f.mf.mm, dtype=IX.ITEM_DTYPE, count=f.index_num, offset=IX.item_pos(f.slot_num, 0))
    assert list(items["prev_index"][1:7]) == [0, 1, 2, 3, 4, 5]
    head = 6
    damaged = {"self": {head: head}, "forward": {head: 5, 5: 6}, "two-cycle": {4: 5, 5: 4}}[loop]
    for n, prev in damaged.items():
        IX.ITEM.pack_into(f.mf.mm, IX.item_pos(f.slot_num, n), *(list(IX.ITEM.unpack_from(f.mf.mm, IX.item_pos(f.slot_num, n)))[:3] + [prev]))
    for key in ("k5", "k0", "nothing"):
        got, _, _ = svc.query_offsets("T", key, 1000, 0, 2**62, cap=False)
        assert len(got) <= 6 and len(set(got)) == len(got)
    svc.close()
