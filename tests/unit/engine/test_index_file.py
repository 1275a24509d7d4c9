"""engine/index_file.py: one index file (FORMAT.md §6; IndexFileTest): putKey's bytes, the slot
chains, selectPhyOffset, the batch and shard writers, and which records are indexed."""
from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqstore import CorruptRecordError
from rmqstore.engine.index_file import SMALL_PUT, IndexFile, indexed, link_chains
from rmqstore.format import index_file as IX
from rmqstore.format.hashes import abs_key_hash, java_hash
from tests import kit

T0 = 1_700_000_000_000
LONG_MAX = 2**63 - 1


def _upstream_put_keys(slots: int, items: int, keys, prev_end_phy: int = 0, prev_end_ts: int = 0) -> bytes:
    """The bytes of a fresh index file after upstream's ``putKey`` of each ``(hash, phy, ts)``,
    written from FORMAT.md §6.1 alone: a 40-byte header (beginTimestamp, endTimestamp, beginPhyOffset,
    endPhyOffset as i64; hashSlotCount, indexCount as i32), ``slots`` i32 slots, 20-byte items
    (hash i32, phy i64, timeDiff i32 seconds, prevIndex i32); item 0 unused."""
    header = [prev_end_ts, prev_end_ts, prev_end_phy, prev_end_phy, 0, 1]
    slot = [0] * slots
    item = bytearray(20 * items)
    for h, phy, ts in keys:
        count = header[5]
        if count >= items:
            break
        s = h % slots
        prev = slot[s] if 0 < slot[s] <= count else 0
        diff = 0 if header[0] <= 0 else max(0, min((ts - header[0]) // 1000, 2**31 - 1))
        struct.pack_into(">iqii", item, 20 * count, h, phy, diff, prev)
        slot[s] = count
        if count <= 1:
            header[0], header[2] = ts, phy
        header[4] += prev == 0
        header[5] += 1
        header[1], header[3] = ts, phy
    return (struct.pack(">qqqqii", header[0], header[1], header[2], header[3], header[4], header[5])
            + struct.pack(f">{slots}i", *slot) + bytes(item))


@pytest.mark.parametrize("n, chunks", [(SMALL_PUT, 1), (SMALL_PUT + 1, 1), (60, 1), (60, 3), (80, 2)])
def test_put_batch_writes_what_upstream_put_key_writes(tmp_path, n, chunks):
    """Item by item (up to SMALL_PUT items) or with numpy (more), in one call or a few: the bytes
    of upstream's putKey, one key at a time; a full file takes no more (capacity 63)."""
    rng = np.random.default_rng(n * 10 + chunks)
    hashes = rng.integers(0, 2**31 - 1, n)
    hashes[rng.random(n) < 0.4] = 77  # long chains in one slot
    phys = 4096 + np.cumsum(rng.integers(1, 400, n))
    ts = T0 + np.cumsum(rng.integers(0, 2500, n))
    f = IndexFile.create(str(tmp_path / "i"), 16, 64, prev_end_phy=4000, prev_end_ts=T0 - 7000)
    put = sum(f.put_batch(hashes[part], phys[part], ts[part]) for part in np.array_split(np.arange(n), chunks))
    assert put == min(n, 63) and f.capacity_left == 64 - 1 - put and f.is_write_full == (n >= 63)
    f.flush()
    f.close()
    keys = list(zip(hashes.tolist(), phys.tolist(), ts.tolist()))
    assert kit.read_bytes(tmp_path / "i") == _upstream_put_keys(16, 64, keys, 4000, T0 - 7000)


def test_link_chains_links_each_item_to_the_previous_of_its_slot():
    """Items 5..8 into slots 1, 0, 1, 1 (slot 1 held item 3, slot 0 nothing): prevIndex 3, 0, 5, 7;
    slots 0 and 1 now start at items 6 and 8; one slot was empty."""
    prev, slots, heads, new = link_chains(np.array([1, 0, 1, 1]), np.array([5, 6, 7, 8]), np.array([3, 0, 3, 3]))
    assert (prev.tolist(), slots.tolist(), heads.tolist(), new) == ([3, 0, 5, 7], [0, 1], [6, 8], 1)


def test_indexed_skips_rolled_back_records_and_those_before_the_index_end():
    """Upstream buildIndex: a record at or after the index's end offset (after it only, when the
    end record itself is indexed already) and not a ROLLBACK (sysflag 0xC) is indexed; NOT_TYPE,
    PREPARED (0x4) and COMMIT (0x8) records are."""
    phys = [90, 100, 110, 120, 130, 140]
    flags = [0, 0, 0x4, 0x8, 0xC, 0x3 | 0x8]
    assert indexed(phys, flags, 100, False) == [False, True, True, True, False, True]
    assert indexed(phys, flags, 100, True) == [False, False, True, True, False, True]


def test_select_phy_offsets_skips_items_a_put_in_progress_wrote_beyond_the_count(tmp_path):
    """Another writer's items (and slot) are on disk before its header: a reader whose count does
    not cover them yet walks back to the items it does cover."""
    f = IndexFile.create(str(tmp_path / "i"), 4, 16)
    f.put_batch(np.array([1, 1]), np.array([100, 200]), np.array([T0, T0]))
    reader = IndexFile(str(tmp_path / "i"), 4, 16, read_only=True)
    f.put_batch(np.array([1]), np.array([300]), np.array([T0]))
    reader.index_count = 3  # as it read the header before the last put
    out: list[int] = []
    reader.select_phy_offsets(out, 1, 10, 0, LONG_MAX)
    assert out == [200, 100]
    out = []
    f.select_phy_offsets(out, 1, 10, 0, LONG_MAX)
    assert out == [300, 200, 100]
    reader.close()
    f.close()


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
