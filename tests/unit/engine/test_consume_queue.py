"""ConsumeQueue (FORMAT.md §5; ConsumeQueueTest correctMinOffset and pre-fill cases)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from rmqstore import MessageStoreConfig
from rmqstore.engine.consume_queue import ConsumeQueue
from rmqstore.format import consume_queue as CQ


def _cq(tmp_path, cq_size=1000, read_only=False) -> ConsumeQueue:
    cfg = MessageStoreConfig(mapped_file_size_consume_queue=cq_size)
    cq = ConsumeQueue(str(tmp_path), "T", 0, cfg, read_only=read_only)
    cq.load()
    return cq


def _put(cq, qs, phys, sizes=None, tags=None):
    qs = np.asarray(qs, dtype=np.int64)
    phys = np.asarray(phys, dtype=np.int64)
    sizes = np.full(qs.size, 100, dtype=np.int64) if sizes is None else np.asarray(sizes, dtype=np.int64)
    tags = np.zeros(qs.size, dtype=np.int64) if tags is None else np.asarray(tags, dtype=np.int64)
    cq.put_units(qs, phys, sizes, tags)


def _files(tmp_path):
    d = tmp_path / "consumequeue" / "T" / "0"
    return {n: (d / n).read_bytes() for n in sorted(os.listdir(d))}


def test_units_on_disk_and_file_roll(tmp_path):
    cq = _cq(tmp_path, cq_size=100)  # 5 units per file
    _put(cq, range(7), [i * 200 for i in range(7)], [200] * 7, [i - 3 for i in range(7)])
    cq.flush()
    files = _files(tmp_path)
    assert list(files) == ["00000000000000000000", "00000000000000000100"]
    data = b"".join(files.values())
    assert data[:140] == b"".join(CQ.UNIT.pack(i * 200, 200, i - 3) for i in range(7))
    assert not any(data[140:])
    assert (cq.min_offset, cq.max_offset, cq.max_physic_offset) == (0, 7, 1400)
    assert cq.get_unit(6) == (1200, 200, 3)
    assert cq.get_unit(7) is None and cq.get_unit(-1) is None
    units = cq.iterate_from(3)  # to the end of the file that holds unit 3 only
    assert units["phy_offset"].tolist() == [600, 800]
    assert cq.iterate_from(5)["phy_offset"].tolist() == [1000, 1200]
    assert cq.iterate_from(7) is None
    assert cq.roll_next_file(3) == 5 and cq.roll_next_file(5) == 10
    cq.close()


def test_cq_file_size_is_rounded_up_to_units(tmp_path):
    assert MessageStoreConfig(mapped_file_size_consume_queue=128).cq_file_size == 140
    cq = _cq(tmp_path, cq_size=128)
    _put(cq, [0], [0])
    assert [len(b) for b in _files(tmp_path).values()] == [140]
    cq.close()


def test_duplicates_are_ignored(tmp_path):
    cq = _cq(tmp_path)
    _put(cq, [0, 1, 2], [0, 100, 200])
    before = _files(tmp_path)
    _put(cq, [0], [0])          # o + s <= maxPhysicOffset
    _put(cq, [1, 2], [100, 200])
    assert _files(tmp_path) == before and cq.max_offset == 3
    cq.close()


def test_a_gap_is_filled_with_blank_units(tmp_path, caplog):
    """Quirk 15.6 fixed knowingly: upstream writes a queue offset past the end at the end (every
    later unit one offset early); here the missing units become blank units and the unit lands at
    its own offset, with a warning naming the gap."""
    cq = _cq(tmp_path)
    _put(cq, [0], [0])
    _put(cq, [5], [100])
    assert cq.max_offset == 6 and cq.get_unit(5) == (100, 100, 0)
    assert [cq.get_unit(q) for q in range(1, 5)] == [CQ.UNIT.unpack(CQ.BLANK_UNIT)] * 4
    _put(cq, [6], [200])
    assert cq.get_unit(6) == (200, 100, 0)
    assert any("queue offsets 1..4 have no record" in r.getMessage() for r in caplog.records)
    cq.close()


def test_prefill_of_a_queue_that_starts_late(tmp_path):
    cq = _cq(tmp_path)  # 50 units per file
    _put(cq, [60], [7000])
    files = _files(tmp_path)
    assert list(files) == ["00000000000000001000"]
    data = files["00000000000000001000"]
    assert data[:200] == CQ.BLANK_UNIT * 10
    assert data[200:220] == CQ.UNIT.pack(7000, 100, 0)
    assert (cq.min_offset, cq.max_offset) == (60, 61)
    assert cq.get_unit(59) is None and cq.get_unit(60) == (7000, 100, 0)
    cq.flush()
    cq.close()
    # reopen: recovery accepts the blank units; correctMinOffset(1) skips them again
    again = _cq(tmp_path)
    assert again.recover() == 1220
    assert (again.min_offset, again.max_offset, again.max_physic_offset) == (0, 61, 7100)
    again.correct_min_offset(1)
    assert again.min_offset == 60
    again.close()
    blanks = _cq(tmp_path)
    blanks.recover()
    blanks.correct_min_offset(0)  # quirk: with minPhy 0 the blank pre-fill units count as valid
    assert blanks.min_offset == 50
    blanks.close()


@pytest.fixture
def big_cq(tmp_path):
    """10000 units (phy 100*i, size 100) in one default-size file."""
    cq = ConsumeQueue(str(tmp_path), "T", 0, MessageStoreConfig(), read_only=False)
    n = 10000
    _put(cq, range(n), np.arange(n) * 100)
    assert len(cq.queue.files) == 1 and cq.max_offset == n
    yield cq
    cq.close()


@pytest.mark.parametrize("min_logic,min_phy,want_logic", [
    (0, 0, 0),
    (100, 2000, 400),             # min 100 bytes, correct(2000) -> unit 20
    (9999 * 20, 1_000_000, 200_000),  # every unit is below minPhy: the queue is empty (min = max)
    (200_000, 1_000_000, 200_000),    # min >= max logic offset: nothing to do
    (0, 550, 120),                # phy 550 falls between units: the first unit at or after it
    (0, 999_900, 199_980),        # the last unit
])
def test_correct_min_offset(big_cq, min_logic, min_phy, want_logic):
    big_cq.min_logic_offset = min_logic
    big_cq.correct_min_offset(min_phy)
    assert big_cq.min_logic_offset == want_logic
    assert big_cq.min_offset == want_logic // 20


def test_recover_stops_at_the_first_invalid_unit(tmp_path):
    cq = _cq(tmp_path, cq_size=100)
    _put(cq, range(12), [i * 100 for i in range(12)])
    cq.flush()
    cq.close()
    path = tmp_path / "consumequeue" / "T" / "0" / "00000000000000000100"
    data = bytearray(path.read_bytes())
    data[40:60] = CQ.UNIT.pack(1000, 0, 0)  # unit 7 has size 0
    path.write_bytes(bytes(data))
    ro = _cq(tmp_path, cq_size=100, read_only=True)
    assert ro.recover() == 140
    assert (ro.max_offset, ro.max_physic_offset) == (7, 700)
    assert len(ro.queue.files) == 2
    ro.close()
    assert path.read_bytes() == bytes(data)  # read-only recovery changes nothing
    rw = _cq(tmp_path, cq_size=100)
    rw.recover()
    assert rw.max_offset == 7 and not (tmp_path / "consumequeue" / "T" / "0" / "00000000000000000200").exists()
    rw.close()


def test_truncate_dirty(tmp_path):
    cq = _cq(tmp_path, cq_size=100)
    _put(cq, range(12), [i * 100 for i in range(12)])
    cq.truncate_dirty(650)   # units with phy >= 650 go
    assert (cq.max_offset, cq.max_physic_offset) == (7, 700)
    assert len(cq.queue.files) == 2
    assert not any(_files(tmp_path)["00000000000000000100"][40:])
    cq.truncate_dirty(450)   # the whole second file goes
    assert (cq.max_offset, cq.max_physic_offset) == (5, 500)
    assert list(_files(tmp_path)) == ["00000000000000000000"]
    cq.close()


def test_new_queue_is_empty(tmp_path):
    cq = _cq(tmp_path)
    assert (cq.min_offset, cq.max_offset, cq.max_physic_offset) == (0, 0, -1)
    assert cq.recover() == 0 and cq.get_unit(0) is None and cq.iterate_from(0) is None
    assert not (tmp_path / "consumequeue").exists()
    cq.close()


@pytest.mark.parametrize("n", [150, 400])  # through the mapping, and through pwrite (4096 bytes or more)
def test_units_appear_in_order(tmp_path, monkeypatch, n):
    """A run of units is written in order, in one copy (not with its first 8 bytes last, as
    commitlog records are): a reader in another process checking units against their records must
    never find a later unit written while an earlier one is not (it would take the gap for
    damage). Every write is checked: the units it leaves on disk are a prefix of the run."""
    from rmqstore.io import mapped_file as MF

    cq = _cq(tmp_path, cq_size=20 * 1000)
    seen, flags = [], []
    real_pwrite, real_write_at = MF.MappedFile._pwrite_all, MF.MappedFile.write_at

    def on_disk(path):
        with open(path, "rb") as fh:
            units = np.frombuffer(fh.read(), dtype=CQ.UNIT_DTYPE)
        return (units["phy_offset"] != 0) | (units["size"] != 0)

    def pwrite_all(self, mv, pos):
        real_pwrite(self, mv, pos)
        seen.append(on_disk(self.path))

    def write_at(self, pos, data, publish_last=True):
        flags.append(publish_last)
        real_write_at(self, pos, data, publish_last)
        seen.append(on_disk(self.path))

    monkeypatch.setattr(MF.MappedFile, "_pwrite_all", pwrite_all)
    monkeypatch.setattr(MF.MappedFile, "write_at", write_at)
    _put(cq, list(range(n)), [100 + 1000 * i for i in range(n)])
    assert flags == [False]  # one write, in order
    assert len(seen) == (2 if n * 20 >= MF.PWRITE_MIN else 1)
    for written in seen:
        k = int(written.sum())
        assert k == n and written[:k].all(), "a unit is missing before written ones"


@pytest.mark.parametrize("before, start, n", [(0, 0, 9), (3, 3, 9), (4, 2, 9), (3, 5, 9), (2, 2, 1)],
                         ids=["fresh", "rolls", "some-present", "after-a-gap", "one"])
def test_put_run_writes_what_put_units_writes(tmp_path, before, start, n):
    """Units 0..before-1 put first, then a run of n from queue offset ``start`` (consecutive, no
    offsets array): the same files as put_units (5 units a file)."""
    for sub in ("units", "run"):
        cq = _cq(tmp_path / sub, cq_size=100)
        _put(cq, range(before), [i * 200 for i in range(before)], [200] * before)
        qs = np.arange(start, start + n, dtype=np.int64)
        phys, sizes, tags = qs * 200, np.full(n, 200, dtype=np.int64), qs - 4
        if sub == "units":
            cq.put_units(qs, phys, sizes, tags)
        else:
            cq.put_run(start, phys, sizes, tags)
        cq.flush()
    assert _files(tmp_path / "run") == _files(tmp_path / "units")
    assert len(_files(tmp_path / "run")) == (max(before, start + n) + 4) // 5


def test_put_run_skips_records_the_queue_already_passed(tmp_path):
    """Records at or before the queue's max physical offset are skipped, as put_units skips them
    (a re-dispatch), even where their queue offsets would follow."""
    for sub in ("units", "run"):
        cq = _cq(tmp_path / sub, cq_size=100)
        _put(cq, range(3), [10_000 + i * 200 for i in range(3)], [200] * 3)
        qs = np.arange(3, 6, dtype=np.int64)
        if sub == "units":
            cq.put_units(qs, qs * 200, np.full(3, 200, dtype=np.int64), qs)
        else:
            cq.put_run(3, qs * 200, np.full(3, 200, dtype=np.int64), qs)
        cq.flush()
        assert cq.max_offset == 3
    assert _files(tmp_path / "run") == _files(tmp_path / "units")
