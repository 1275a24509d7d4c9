"""Spark verify against MessageStore.verify: the same findings on intact stores and on a copy of a
RocketMQ-written store damaged in every way the verifier knows (kind, path, offset and text)."""
from __future__ import annotations

import json
import os
import shutil
import struct

import pytest

from rmqstore import MessageStore
from rmqstore.engine import recovery as R
from rmqstore.layout import infer_config
from rmqstore.spark import scan as S
from rmqstore.spark import verify as SV
from rmqstore.spark.jobs import verify

KINDS = ("record_crc", "record_invalid", "cq_unit", "cq_gap", "index_item", "checkpoint_ahead", "tail_garbage")


def damaged_copy(v, dst: str) -> dict:
    """A writable copy of the rollover vector store with one of each kind of damage."""
    shutil.copytree(v.path, dst)
    for root, dirs, files in os.walk(dst):
        for n in dirs + files:
            os.chmod(os.path.join(root, n), 0o755 if n in dirs else 0o644)
    msgs = v.messages()
    seg = v.config.mapped_file_size_commit_log

    def patch(phy: int, data: bytes) -> None:
        with open(S.segment_path(dst, phy - phy % seg), "r+b") as fh:
            fh.seek(phy % seg)
            fh.write(data)

    m = next(m for m in msgs[300:] if m["bodyLength"] > 10 and not m["sysFlag"] & 0x30)
    # a flipped body byte (IPv4 hosts: the body starts at 88): CRC mismatch, kept but never served
    with open(S.segment_path(dst, m["phyOffset"] - m["phyOffset"] % seg), "r+b") as fh:
        fh.seek(m["phyOffset"] % seg + 88 + 5)
        b = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([b[0] ^ 0xFF]))
    m = msgs[800]  # a broken magic: bytes that are no record, valid records follow
    patch(m["phyOffset"] + 4, b"\0\0\0\1")
    # a broken magic followed by a record with a bad CRC: the scan skips both as one region, so a
    # span starting inside that region must not start at the second record
    a, b = next((x, y) for x, y in zip(msgs[1500:], msgs[1501:]) if x["phyOffset"] % seg >= 200
                and y["bodyLength"] > 10 and not y["sysFlag"] & 0x30 and y["phyOffset"] // seg == x["phyOffset"] // seg)
    patch(a["phyOffset"] + 4, b"\0\0\0\2")
    patch(b["phyOffset"] + 88 + 3, b"\x00\x01\x02")
    m = msgs[1200]  # a queue offset rewritten: the queue jumps, its unit no longer matches
    patch(m["phyOffset"] + 20, struct.pack(">q", m["queueOffset"] + 5))
    cq_dir = os.path.join(dst, "consumequeue", msgs[10]["topic"], str(msgs[10]["queueId"]))
    with open(os.path.join(cq_dir, sorted(os.listdir(cq_dir))[0]), "r+b") as fh:  # a unit with a wrong size
        fh.seek(20 * 3 + 8)
        fh.write(struct.pack(">i", 12345))
    idx = os.path.join(dst, "index", sorted(os.listdir(os.path.join(dst, "index")))[4])
    with open(idx, "r+b") as fh:  # an index item pointing elsewhere
        fh.seek(40 + 64 * 4 + 7 * 20 + 4)
        fh.write(struct.pack(">q", 17))
    with open(os.path.join(dst, "checkpoint"), "r+b") as fh:  # confirmPhyOffset far ahead
        fh.seek(32)
        fh.write(struct.pack(">q", 1 << 40))
    end = v.expected["raw"]["messages"][-1]
    patch(end["phyOffset"] + end["storeSize"] + 100, b"garbage")  # non-zero bytes after the data
    return {"seg": seg, "split_inside": a["phyOffset"] % seg + 10}


def store_findings(path, cfg):
    with MessageStore.open(path, cfg, read_only=True) as st:
        return sorted((f.kind, f.path, f.offset, f.detail) for f in st.verify())


@pytest.fixture(scope="module")
def damaged(vectors, tmp_path_factory):
    v = vectors["rollover"]
    path = str(tmp_path_factory.mktemp("damaged") / "store")
    info = damaged_copy(v, path)
    return path, v.config, store_findings(path, v.config), info["split_inside"]


def test_damaged_store_same_findings(spark, damaged):
    path, cfg, want, _ = damaged
    assert {k for k, *_ in want} == set(KINDS)  # the copy really has every kind of damage
    df, summary = verify(spark, path, cfg, split_size=100_000)
    got = sorted(tuple(r) for r in df.select("kind", "path", "offset", "detail").collect())
    assert got == want
    for kind in KINDS:
        assert summary[kind] == sum(1 for f in want if f[0] == kind)
    assert summary["problems"] == len(want)
    with MessageStore.open(path, cfg, read_only=True) as st:
        assert summary["end_offset"] == st.max_phy_offset


def test_intact_stores_have_no_findings(spark, vector):
    df, summary = verify(spark, vector.path, vector.config, split_size=40_000)
    assert df.count() == 0 and summary["problems"] == 0
    assert summary["records"] == len(vector.messages())
    assert store_findings(vector.path, vector.config) == []


def _chain_in_process(path, cfg, split):
    """What the Spark job does, without Spark: every span scanned, the chain followed, spans that
    do not line up scanned again from where the chain enters them."""
    cfg = infer_config(path, cfg)
    seg_size = cfg.mapped_file_size_commit_log
    segs = S.list_segments(path, seg_size)
    spans = S.plan_spans(segs, seg_size, split)
    rows, infos = {}, {}

    def scan(i, start):
        out = list(SV._scan_span(path, cfg, segs, i, spans[i], start))
        infos[i] = json.loads(out[-1]["info"])
        rows[i] = out

    for i in range(len(spans)):
        scan(i, None)
    rescans = 0
    while True:
        chain = SV.follow(segs, seg_size, infos)
        if not chain.rescan:
            break
        for i, pos in chain.rescan.items():
            scan(i, pos)
            rescans += 1
    found = sorted((r["kind"], r["path"], r["offset"], r["detail"]) for i in chain.spans for r in rows[i]
                   if r["row"] == SV.FINDING)
    return chain, found, rescans


@pytest.mark.parametrize("split", [3000, 16384, "inside"])
def test_span_chain_matches_the_sequential_scan(damaged, split):
    path, cfg, want, inside = damaged
    chain, found, rescans = _chain_in_process(path, cfg, inside if split == "inside" else split)
    with MessageStore.open(path, cfg, read_only=True) as st:
        files = st.commit_log.queue.files
        seq = R.scan_log(files, st.commit_log.min_offset, cfg, check_crc=True, dispatchable=True)
    assert chain.end == seq.end
    want_log = sorted(f for f in want if f[0] in ("record_crc", "record_invalid") or
                      (f[0] == "cq_gap" and "jumps" in f[3]))
    assert found == [f for f in want_log if f[0] != "cq_gap" or f in found]
    assert {f for f in want_log if f[0] != "cq_gap"} <= set(found)
    if split == "inside":
        assert rescans > 0  # a span boundary falls inside damage: that span was scanned again
