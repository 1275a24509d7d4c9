"""IndexFile and IndexService (FORMAT.md §6; IndexFileTest, IndexServiceTest)."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqstore import CorruptRecordError
from rmqstore.engine.checkpoint import StoreCheckpoint
from rmqstore.engine.index import IndexFile, IndexService
from rmqstore.format import index_file as IX
from rmqstore.format.hashes import abs_key_hash, index_key_hash, java_hash
from tests import kit

T0 = 1_700_000_000_000
LONG_MAX = 2**63 - 1


def _h(key: str) -> int:
    return abs_key_hash(java_hash(key))


@pytest.fixture
def index_file(tmp_path):
    f = IndexFile.create(str(tmp_path / "idx"), 100, 400)
    yield f
    f.close()


def test_index_file_capacity_is_index_num_minus_one(index_file, tmp_path):
    """IndexFileTest: 399 putKey succeed, the 400th fails; select "60" returns one offset."""
    assert os.path.getsize(tmp_path / "idx") == 8440
    for i in range(399):
        assert index_file.put_key(_h(str(i)), i, T0) is True
    assert index_file.is_write_full
    assert index_file.put_key(_h("400"), 400, T0) is False
    out: list[int] = []
    index_file.select_phy_offsets(out, _h("60"), 10, 0, LONG_MAX)
    assert out == [60]
    index_file.flush()
    buf = kit.read_bytes(tmp_path / "idx")
    slots_used = {_h(str(i)) % 100 for i in range(399)}
    assert IX.HEADER.unpack_from(buf, 0) == (T0, T0, 0, 398, len(slots_used), 400)
    # every item: (hash, phy, diff 0, previous item of the same slot)
    last_in_slot: dict[int, int] = {}
    for n in range(1, 400):
        h = _h(str(n - 1))
        assert IX.ITEM.unpack_from(buf, IX.item_pos(100, n)) == (h, n - 1, 0, last_in_slot.get(h % 100, 0))
        last_in_slot[h % 100] = n
    for slot in range(100):
        assert IX.SLOT.unpack_from(buf, IX.slot_pos(slot))[0] == last_in_slot.get(slot, 0)
    assert not any(buf[IX.item_pos(100, 0):IX.item_pos(100, 1)])  # item 0 never written


def test_fresh_index_file_header_on_disk(tmp_path):
    f = IndexFile.create(str(tmp_path / "idx"), 4, 8, prev_end_phy=500, prev_end_ts=T0)
    assert IX.HEADER.unpack_from(kit.read_bytes(tmp_path / "idx"), 0) == (T0, T0, 500, 500, 0, 0)
    assert f.index_count == 1
    f.put_key(7, 600, T0 + 5_500)
    # the first item's timeDiff is against the previous file's end time; begin is reset after it
    assert IX.ITEM.unpack_from(kit.read_bytes(tmp_path / "idx"), IX.item_pos(4, 1)) == (7, 600, 5, 0)
    assert IX.HEADER.unpack_from(kit.read_bytes(tmp_path / "idx"), 0) == (T0 + 5_500, T0 + 5_500, 600, 600, 1, 2)
    f.close()


def test_select_follows_the_chain_newest_first_and_filters(index_file):
    h_a, h_b = _h("T#Aa"), _h("T#BB")
    assert h_a == h_b  # Java hash collision: the index cannot tell them apart
    index_file.put_key(h_a, 10, T0)
    index_file.put_key(_h("T#other"), 20, T0 + 1000)
    index_file.put_key(h_b, 30, T0 + 2000)
    index_file.put_key(h_a, 40, T0 + 3000)
    out: list[int] = []
    index_file.select_phy_offsets(out, h_a, 10, 0, LONG_MAX)
    assert out == [40, 30, 10]
    out = []
    index_file.select_phy_offsets(out, h_a, 2, 0, LONG_MAX)
    assert out == [40, 30]
    out = []
    index_file.select_phy_offsets(out, h_a, 10, T0 + 1000, T0 + 2500)  # t = begin + diff*1000
    assert out == [30]
    out = []
    index_file.select_phy_offsets(out, _h("T#missing"), 10, 0, LONG_MAX)
    assert out == []


def test_is_time_matched(index_file):
    index_file.put_key(1, 0, T0)
    index_file.put_key(2, 1, T0 + 10_000)
    assert index_file.is_time_matched(0, LONG_MAX)
    assert index_file.is_time_matched(T0 + 5_000, T0 + 20_000)
    assert index_file.is_time_matched(T0 - 5_000, T0)
    assert not index_file.is_time_matched(T0 + 10_001, T0 + 20_000)
    assert not index_file.is_time_matched(0, T0 - 1)


def test_put_batch_equals_put_key_one_by_one(tmp_path):
    hashes = np.array([5, 9, 5, 13, 0, 2**31 - 1, 9], dtype=np.int64)
    phys = np.arange(7, dtype=np.int64) * 100
    ts = T0 + np.array([0, 999, 1000, 65_000, 64_000, 70_000, 2**31 * 1000], dtype=np.int64)
    a = IndexFile.create(str(tmp_path / "a"), 4, 6)
    b = IndexFile.create(str(tmp_path / "b"), 4, 6)
    assert a.put_batch(hashes, phys, ts) == 5  # capacity 6 - 1
    assert [b.put_key(int(h), int(p), int(t)) for h, p, t in zip(hashes, phys, ts)] == [True] * 5 + [False] * 2
    a.flush()
    b.flush()
    assert kit.read_bytes(tmp_path / "a") == kit.read_bytes(tmp_path / "b")
    a.close()
    b.close()


def test_load_rejects_a_header_beyond_capacity(tmp_path):
    p = tmp_path / "idx"
    f = IndexFile.create(str(p), 4, 8)
    f.close()
    with open(p, "r+b") as fh:
        fh.seek(36)
        fh.write((9).to_bytes(4, "big"))
    with pytest.raises(CorruptRecordError) as ei:
        IndexFile(str(p), 4, 8, read_only=True)
    assert ei.value.path == str(p) and ei.value.offset == 36


# ------------------------------------------------------------------------------------------------
# IndexService
# ------------------------------------------------------------------------------------------------

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


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(0, 120), slots=st.integers(1, 40), shards=st.integers(1, 5), chunks=st.integers(1, 4),
       prev_ts=st.sampled_from([0, 1_700_000_000_000]), seed=st.integers(0, 2**32 - 1))
def test_put_shard_writes_what_put_batch_writes(tmp_path_factory, n, slots, shards, chunks, prev_ts, seed):
    """Shards (runs of ranks and of slots), written in any order into one file, then the header:
    the same bytes as put_batch over the same items in a few calls (the in-process dispatcher's way)."""
    d = tmp_path_factory.mktemp("shard")
    rng = np.random.default_rng(seed)
    hashes = rng.integers(0, 2**31 - 1, n)
    hashes[rng.random(n) < 0.3] = 7  # long chains in one slot
    phys = np.cumsum(rng.integers(1, 500, n)) + 4096
    ts = 1_700_000_000_000 + np.cumsum(rng.integers(0, 3000, n))
    whole = IndexFile.create(str(d / "a"), slots, 130, prev_end_phy=4000, prev_end_ts=prev_ts)
    for part in np.array_split(np.arange(n), chunks):
        assert whole.put_batch(hashes[part], phys[part], ts[part]) == part.size
    whole.flush()
    IndexFile.create(str(d / "b"), slots, 130, prev_end_phy=4000, prev_end_ts=prev_ts).close()
    written = used = 0
    for j in rng.permutation(shards).tolist():
        f = IndexFile(str(d / "b"), slots, 130, read_only=False)
        c, u = f.put_shard(hashes, phys, ts, j, shards)
        written, used = written + c, used + u
        f.flush_data()
        f.close()
    assert written == n and used == len(set((hashes % slots).tolist()))
    f = IndexFile(str(d / "b"), slots, 130, read_only=False)
    if n:
        f.finish_shards(n, (int(phys[0]), int(ts[0])), (int(phys[-1]), int(ts[-1])), used)
    f.flush()
    f.close()
    whole.close()
    assert (d / "a").read_bytes() == (d / "b").read_bytes()


def test_put_shard_refuses_a_used_file(tmp_path):
    f = IndexFile.create(str(tmp_path / "f"), 8, 16)
    f.put_batch(np.array([1]), np.array([100]), np.array([1_700_000_000_000]))
    with pytest.raises(ValueError, match="fresh file"):
        f.put_shard(np.array([2]), np.array([200]), np.array([1_700_000_000_000]), 0, 1)
    f.close()


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
