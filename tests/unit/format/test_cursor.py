"""The commitlog cursor (rmqstore.format.cursor): the walk, its typed halts, the resync rule and the
per-record checks, on segments written by the store and then damaged byte by byte."""
from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

from rmqstore import Message, MessageStore, MessageStoreConfig
from rmqstore.format import cursor as C
from rmqstore.format import message as M

SEG = 64 << 10


def _segment(tmp_path, n: int = 40, body: bytes = b"x" * 100) -> tuple[bytearray, list[int]]:
    """A commitlog segment holding ``n`` records (its bytes, copied) and the records' offsets."""
    cfg = MessageStoreConfig(mapped_file_size_commit_log=SEG, mapped_file_size_consume_queue=20 * 64)
    with MessageStore.open(tmp_path / "s", cfg) as st:
        offs = [st.put_message(Message.create("T", body + bytes([i]), keys=[f"k{i}"])).phy_offset
                for i in range(n)]
    with open(os.path.join(tmp_path, "s", "commitlog", "0" * 20), "rb") as fh:
        return bytearray(fh.read()), offs


def _u8(buf: bytearray) -> np.ndarray:
    return np.frombuffer(buf, dtype=np.uint8)


def test_a_walk_over_intact_records_yields_every_record_then_the_end(tmp_path):
    buf, offs = _segment(tmp_path)
    steps = list(C.walk(buf, _u8(buf), 0, len(buf), 16, base=0))
    starts = np.concatenate([s.batch.starts for s in steps]).tolist()
    assert starts == offs
    assert [s.halt.stop for s in steps[:-1]] == [C.Stop.FULL] * (len(steps) - 1)
    last = steps[-1]
    assert last.halt.stop is C.Stop.END
    assert last.halt.pos == offs[-1] + int(struct.unpack_from(">i", buf, offs[-1])[0])
    # the decoded columns are the records' own fields
    assert np.concatenate([s.batch.queue_offset for s in steps]).tolist() == list(range(len(offs)))
    assert np.concatenate([s.batch.phy_offset for s in steps]).tolist() == offs


def test_a_bound_halts_the_walk_with_limit_before_a_record_that_would_cross_it(tmp_path):
    buf, offs = _segment(tmp_path, 5)
    step = C.read_batch(buf, _u8(buf), 0, offs[3] + 10, base=0)
    assert step.batch.starts.tolist() == offs[:3]
    assert step.halt == C.Halt(C.Stop.LIMIT, offs[3])
    assert step.end == offs[3]


def test_a_wrong_physicaloffset_halts_with_invalid_when_the_base_is_known(tmp_path):
    buf, offs = _segment(tmp_path, 6)
    struct.pack_into(">q", buf, offs[4] + M.PHY_OFFSET_POS, 12345)
    step = C.read_batch(buf, _u8(buf), 0, len(buf), base=0)
    assert step.batch.starts.tolist() == offs[:4]
    assert step.halt.stop is C.Stop.INVALID and step.halt.pos == offs[4]
    assert f"record at {offs[4]} says PHYSICALOFFSET 12345" == step.halt.reason
    # without a base the framing alone decides (what the reput does)
    assert C.read_batch(buf, _u8(buf), 0, len(buf)).batch.starts.tolist() == offs


def test_a_broken_length_formula_halts_with_the_reason(tmp_path):
    buf, offs = _segment(tmp_path, 6)
    struct.pack_into(">i", buf, offs[2] + 84, 5000)  # BODYLENGTH no longer matches TOTALSIZE
    step = C.read_batch(buf, _u8(buf), 0, len(buf), base=0)
    assert step.batch.starts.tolist() == offs[:2]
    assert step.halt.stop is C.Stop.INVALID and step.halt.pos == offs[2]
    assert step.halt.reason.startswith("invalid record: ")


def test_blank_and_junk_headers_are_typed(tmp_path):
    buf, offs = _segment(tmp_path, 3)
    end = offs[-1] + struct.unpack_from(">i", buf, offs[-1])[0]
    buf[end:end + 8] = M.encode_blank(len(buf) - end)[:8]
    step = C.read_batch(buf, _u8(buf), 0, len(buf), base=0)
    assert step.batch.starts.tolist() == offs and step.halt == C.Halt(C.Stop.BLANK, end)
    assert C.is_blank_at(buf, len(buf), end) and not C.is_blank_at(buf, len(buf), offs[1])
    buf[end:end + 8] = b"\x01\x02\x03\x04\x05\x06\x07\x08"
    assert C.read_batch(buf, _u8(buf), 0, len(buf), base=0).halt == C.Halt(C.Stop.INVALID, end)
    assert C.kind_at(buf, len(buf), end) is C.Stop.INVALID
    assert C.kind_at(buf, len(buf), offs[0]) is C.Stop.RECORD
    assert C.kind_at(buf, len(buf), len(buf)) is C.Stop.SEGMENT_END
    assert C.kind_at(buf, len(buf), len(buf) - 4) is C.Stop.TORN
    assert C.kind_at(buf, offs[1] + 100, offs[1]) is C.Stop.TORN  # record runs past the segment end
    assert C.kind_at(buf, len(buf), len(buf) - 64) is C.Stop.END


def test_stops_compare_and_serialise_as_the_words_reports_always_used():
    assert C.Stop.END == "end" and C.Stop.CORRUPT == "crc" and C.Stop.BLANK == "blank"
    assert json.loads(json.dumps({"k": C.Stop.TORN})) == {"k": "torn"}
    assert C.Stop("invalid") is C.Stop.INVALID


def test_resync_finds_the_next_record_past_junk_and_only_a_record_with_its_own_offset(tmp_path):
    buf, offs = _segment(tmp_path, 8)
    u8 = _u8(buf)
    junk_at = offs[3] + 7
    buf[offs[3]:offs[4]] = bytes(range(7)) * ((offs[4] - offs[3]) // 7) + bytes((offs[4] - offs[3]) % 7)
    assert C.find_record_start(buf, u8, len(buf), 0, offs[3], len(buf)) == offs[4]
    assert C.find_record_start(buf, u8, len(buf), 0, offs[4], len(buf)) == offs[4]
    assert not C.is_record_at(buf, u8, len(buf), 0, junk_at)
    # a copy of a record at another offset is not accepted: PHYSICALOFFSET says where it belongs
    rec5 = bytes(buf[offs[5]:offs[6]])
    buf[offs[3]:offs[3] + len(rec5)] = rec5
    assert not C.is_record_at(buf, u8, len(buf), 0, offs[3])
    assert C.find_record_start(buf, u8, len(buf), 0, offs[3], len(buf)) == offs[4]
    # nothing before the limit: None (not a sentinel)
    assert C.find_record_start(buf, u8, len(buf), 0, offs[-1] + 1, len(buf)) is None


def test_skip_zeros_and_magic_candidates():
    buf = bytearray(1 << 20)
    buf[700_001] = 9
    assert C.skip_zeros(_u8(buf), 0, len(buf)) == 700_001
    assert C.skip_zeros(_u8(buf), 700_002, len(buf)) == len(buf)
    buf[100:104] = C.RECORD_MAGIC_BYTES[1]
    buf[50:54] = C.RECORD_MAGIC_BYTES[0]
    assert C.magic_candidates(buf, 0, len(buf)) == [46, 96]
    assert C.magic_candidates(buf, 51, len(buf)) == [96]
    assert C.magic_candidates(buf, 0, 103) == [46]  # a magic must lie wholly inside the range


@pytest.mark.parametrize("where", ["body", "props_end"])
def test_record_checks_find_a_flipped_body_byte_and_a_torn_end(tmp_path, where):
    buf, offs = _segment(tmp_path, 5)
    u8 = _u8(buf)
    batch = C.read_batch(buf, u8, 0, len(buf), base=0).batch
    assert C.complete(u8, batch).all() and C.crc_ok(buf, batch).all()
    if where == "body":
        buf[int(batch.body_pos[2])] ^= 0x40
        assert C.crc_ok(buf, batch).tolist() == [True, True, False, True, True]
        assert C.complete(u8, batch).all()
    else:
        buf[int(batch.props_pos[2] + batch.props_len[2] - 1)] = 0
        assert C.complete(u8, batch).tolist() == [True, True, False, True, True]
        assert C.crc_ok(buf, batch).all()  # the body CRC does not see a tear after the body
    assert C.intact(buf, u8, batch).tolist() == [True, True, False, True, True]
    assert batch.select(np.array([0, 4])).starts.tolist() == [offs[0], offs[4]]


def test_the_properties_crc_check(tmp_path):
    cfg = MessageStoreConfig(mapped_file_size_commit_log=SEG, mapped_file_size_consume_queue=20 * 64,
                             enabled_append_prop_crc=True)
    with MessageStore.open(tmp_path / "p", cfg) as st:
        for i in range(4):
            assert st.put_message(Message.create("T", b"b%d" % i)).ok
    with open(os.path.join(tmp_path, "p", "commitlog", "0" * 20), "rb") as fh:
        buf = bytearray(fh.read())
    batch = C.read_batch(buf, _u8(buf), 0, len(buf), base=0).batch
    assert len(batch) == 4 and C.crc_ok(buf, batch, prop_crc=True).all()
    buf[int(batch.starts[1]) + 30] ^= 1  # a header byte: only the properties CRC covers it
    assert C.crc_ok(buf, batch, prop_crc=True).tolist() == [True, False, True, True]
    assert C.crc_ok(buf, batch).all()


# ------------------------------------------------------------------------------------------------
# Hints: the same walk, vectorised where they chain
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def hinted_segment(tmp_path_factory):
    """A segment of 300 records of varying size, its bytes and record offsets."""
    tmp = tmp_path_factory.mktemp("hints")
    cfg = MessageStoreConfig(mapped_file_size_commit_log=SEG, mapped_file_size_consume_queue=20 * 64)
    with MessageStore.open(tmp / "s", cfg) as st:
        offs = [st.put_message(Message.create("T", b"y" * (i % 37), keys=[f"k{i}"])).phy_offset for i in range(300)]
    with open(os.path.join(tmp, "s", "commitlog", "0" * 20), "rb") as fh:
        return bytes(fh.read()), offs


def _whole_walk(buf, pos, end, most, hints=None):
    starts, halts = [], []
    while True:
        s, h = C.walk_starts(buf, pos, end, most, hints=hints)
        starts += s.tolist()
        halts.append(h)
        if h.stop is not C.Stop.FULL:
            return starts, halts
        pos = h.pos


@pytest.mark.parametrize("seed", range(12))
def test_hinted_walks_answer_as_the_plain_walk_whatever_the_hints(hinted_segment, seed):
    """Exact, a subset, extra junk positions, positions past the bound, none that chain; over damaged
    bytes (a broken magic, a size past the bound, a zeroed stretch) and any batch size and bound: the
    same starts and the same halts as the walk without hints."""
    data, offs = hinted_segment
    rng = np.random.default_rng(seed)
    buf = bytearray(data)
    damage = seed % 4
    j = int(rng.integers(50, 280))
    if damage == 1:
        buf[offs[j] + 4] ^= 0xFF                                     # magic
    elif damage == 2:
        struct.pack_into(">i", buf, offs[j], len(buf))               # TOTALSIZE past the end
    elif damage == 3:
        buf[offs[j]:offs[j] + 300] = bytes(300)                      # zeros where records were
    real = np.array(offs, dtype=np.int64)
    junk = np.append(rng.integers(0, offs[-1] + 200, 40), len(buf) - 3)  # (and one whose header would not fit)
    kinds = [real, real[rng.random(real.size) < 0.8], np.union1d(real, junk), np.sort(junk), real[::7]]
    end = len(buf) if seed % 3 else offs[int(rng.integers(100, 299))] + int(rng.integers(0, 200))
    most = int(rng.choice([1, 7, 64, 1 << 20]))
    start = offs[int(rng.integers(0, 40))] if seed % 2 else 0
    want = _whole_walk(buf, start, end, most)
    for hints in kinds:
        assert _whole_walk(buf, start, end, most, np.asarray(hints, dtype=np.int64)) == want
