"""The ``rocketmq`` data source against MessageStore and RocketMQ's own answers (expected.json)."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from rmqstore import MessageStore

from tests.kit import SPLITS, record_offsets, row_of, spark_row, store_records


def read(spark, path, **options):
    r = spark.read.format("rocketmq")
    for k, v in options.items():
        r = r.option(k, v)
    return r.load(path)


def by_offset(rows) -> dict[int, dict]:
    out = {}
    for r in rows:
        d = spark_row(r)
        assert d["commitLogOffset"] not in out, f"record at {d['commitLogOffset']} returned twice"
        out[d["commitLogOffset"]] = d
    return out


@pytest.fixture(scope="module")
def vector_rows(spark, vector):
    """Every row of a vector store read in many partitions (resynchronising inside segments),
    and the MessageStore decode of every record."""
    rows = by_offset(read(spark, vector.path, splitSize=str(SPLITS[vector.name])).collect())
    return rows, {r.phy_offset: r for r in store_records(vector.path, vector.config)}


def test_every_record_once_with_every_field(vector, vector_rows):
    rows, recs = vector_rows
    assert sorted(rows) == sorted(recs)
    for off, rec in recs.items():
        assert rows[off] == row_of(rec, vector.path), off


def test_rows_match_rocketmq_decode(vector, vector_rows):
    """RocketMQ's MessageDecoder.decode of each record (expected.json raw.messages)."""
    rows, _ = vector_rows
    msgs = vector.messages()
    assert len(rows) == len(msgs)
    for m in msgs:
        r = rows[m["phyOffset"]]
        assert (r["topic"], r["queueId"], r["queueOffset"], r["storeSize"]) == \
               (m["topic"], m["queueId"], m["queueOffset"], m["storeSize"])
        assert (r["flag"], r["sysFlag"], r["bodyCRC"], r["reconsumeTimes"], r["preparedTransactionOffset"]) == \
               (m["flag"], m["sysFlag"], m["bodyCRC"], m["reconsumeTimes"], m["preparedTransactionOffset"])
        assert (r["bornHost"], r["storeHost"], r["msgId"]) == (m["bornHost"], m["storeHost"], m["offsetMsgId"])
        assert r["properties"] == (m["properties"] or {})
        assert r["tags"] == (m["tags"] or None)
        assert r["uniqKey"] == m["uniqKey"]
        assert r["keys"] == [k for k in (m["keys"] or "").split(" ") if k]
        assert len(r["body"]) == m["bodyLength"]
        stamp = r["storeTimestamp"].astimezone(timezone.utc) if r["storeTimestamp"].tzinfo else r["storeTimestamp"]
        assert int(stamp.timestamp() * 1000) == m["storeTimestamp"]


def test_split_size_does_not_change_the_result(spark, vectors):
    v = vectors["rollover"]
    cols = ["commitLogOffset", "topic", "queueOffset", "msgId"]
    base = sorted(map(tuple, read(spark, v.path).select(*cols).collect()))
    for split in ("10000", "100k"):
        got = read(spark, v.path, splitSize=split, endingOffsets="300000").select(*cols).collect()
        assert sorted(map(tuple, got)) == [r for r in base if r[0] < 300000], split
    with MessageStore.open(v.path, v.config, read_only=True) as st:
        assert [r[0] for r in base] == record_offsets(st)


def test_partitions_group_small_segments(spark, vectors):
    v = vectors["rollover"]  # 69 segments of 16 KiB
    assert read(spark, v.path).rdd.getNumPartitions() == 1
    assert read(spark, v.path, splitSize="64k").rdd.getNumPartitions() == 18
    assert read(spark, v.path, splitSize="10000").rdd.getNumPartitions() == 69 * 2


def _plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


@pytest.mark.parametrize("where, pushed", [
    ("topic = 'RollB'", True),
    ("topic IN ('RollA', 'RollC') AND queueId = 3", True),
    ("queueId >= 2 AND queueId < 5", True),
    ("commitLogOffset >= 500000 AND commitLogOffset < 700001", True),
    ("storeTimestamp >= timestamp'2023-11-14 22:30:00Z' AND storeTimestamp < timestamp'2023-11-14 23:20:00Z'", True),
    ("storeTimestamp = timestamp'2023-11-14 22:13:20.25Z'", True),
    ("topic = 'RollA' AND bodyCRC % 2 = 0", False),
])
def test_filters_pushed_down_and_exact(spark, vectors, where, pushed):
    v = vectors["rollover"]
    df = read(spark, v.path, splitSize="400k")
    cols = ["commitLogOffset", "topic", "queueId", "storeTimestamp", "bodyCRC"]
    got = sorted(r.commitLogOffset for r in df.where(where).select(*cols).collect())
    # the same predicate evaluated by Spark over the unfiltered rows (cached, so nothing is pushed)
    allrows = spark.createDataFrame(df.select(*cols).collect(), df.select(*cols).schema)
    want = sorted(r.commitLogOffset for r in allrows.where(where).collect())
    assert got == want and got
    plan = _plan(df.where(where).select(*cols))
    assert ("Filter " not in plan) == pushed, plan


def test_filters_with_a_nullable_user_schema(spark, vectors):
    """With nullable columns Spark adds IsNotNull filters; they are taken where they always hold."""
    v = vectors["basic"]
    df = spark.read.format("rocketmq").schema("topic STRING, queueId INT, tags STRING").load(v.path)
    got = df.where("topic = 'TopicTest' AND queueId = 1 AND tags IS NOT NULL").collect()
    want = [r for r in store_records(v.path, v.config) if r.topic == "TopicTest" and r.queue_id == 1 and r.tags]
    assert len(got) == len(want) > 0
    assert df.where("tags IS NULL").count() == sum(1 for r in store_records(v.path, v.config) if r.tags is None)


def test_filter_values_outside_the_data(spark, vectors):
    v = vectors["basic"]
    df = read(spark, v.path)
    assert df.where("queueId > 100").count() == 0
    assert df.where("commitLogOffset > 10 AND commitLogOffset < 5").count() == 0
    assert df.where("topic = 'nope'").count() == 0


def test_offset_and_time_options(spark, vectors):
    v = vectors["rollover"]
    recs = store_records(v.path, v.config)
    offs = [r.phy_offset for r in recs]
    a, b = offs[100], offs[900]
    got = [r.commitLogOffset for r in read(spark, v.path, startingOffsets=str(a), endingOffsets=str(b))
           .select("commitLogOffset").collect()]
    assert sorted(got) == [o for o in offs if a <= o < b]
    mid = a + 7  # inside a record: it is not returned, reading starts at the next one
    got = [r.commitLogOffset for r in read(spark, v.path, startingOffsets=str(mid), endingOffsets=str(b))
           .select("commitLogOffset").collect()]
    assert sorted(got) == [o for o in offs if mid <= o < b]
    assert read(spark, v.path, startingOffsets="latest").count() == 0
    assert read(spark, v.path, startingOffsets="earliest", endingOffsets="latest").count() == len(recs)
    ts = sorted({r.store_timestamp for r in recs})
    t0, t1 = ts[len(ts) // 3], ts[2 * len(ts) // 3]
    iso = datetime.fromtimestamp(t1 / 1000, tz=timezone.utc).isoformat()
    got = read(spark, v.path, startingTimestamp=str(t0), endingTimestamp=iso).select("commitLogOffset").collect()
    assert sorted(r.commitLogOffset for r in got) == sorted(r.phy_offset for r in recs
                                                            if t0 <= r.store_timestamp < t1)
    got = read(spark, v.path, topics="RollA, RollC").select("topic").distinct().collect()
    assert sorted(r.topic for r in got) == ["RollA", "RollC"]


def test_include_body_and_projection(spark, vectors):
    v = vectors["basic"]
    rows = read(spark, v.path, includeBody="false").select("body", "storeSize").collect()
    assert rows and all(r.body is None for r in rows)
    schema = "commitLogOffset BIGINT, tags STRING, keys ARRAY<STRING>"
    df = spark.read.format("rocketmq").schema(schema).load(v.path)
    want = {r.phy_offset: (r.tags, r.keys) for r in store_records(v.path, v.config)}
    assert {r.commitLogOffset: (r.tags, r.keys) for r in df.collect()} == want


def test_verify_crc_option(spark, vectors):
    v = vectors["propcrc"]
    assert read(spark, v.path, verifyCRC="true").count() == len(v.messages())


@pytest.mark.parametrize("option, value", [
    ("startingOffsets", "-5"), ("startingOffsets", "soon"), ("endingOffsets", "earliest"),
    ("startingTimestamp", "yesterday"), ("includeBody", "maybe"), ("verifyCRC", "2"), ("splitSize", "tiny"),
    ("splitSize", "3"), ("topics", "a,,b"), ("startingOffset", "0"), ("mappedFileSizeCommitLog", "big"),
    ("maxBytesPerTrigger", "10"), ("config", "/nonexistent/broker.conf"),
])
def test_bad_option_names_the_option(spark, vectors, option, value):
    v = vectors["basic"]
    with pytest.raises(Exception, match=option):
        read(spark, v.path, **{option: value}).count()


def test_unknown_column_in_schema(spark, vectors):
    with pytest.raises(Exception, match="schema"):
        spark.read.format("rocketmq").schema("nope INT").load(vectors["basic"].path).count()


def test_missing_store(spark, tmp_path):
    with pytest.raises(Exception, match="does not exist"):
        read(spark, str(tmp_path / "missing")).count()


def test_generated_store(spark, generated):
    """200k messages over 63 segments: every record once, and what each consume queue holds."""
    df = read(spark, generated.path, splitSize="8m")
    rows = df.select("commitLogOffset", "topic", "queueId", "queueOffset", "storeSize", "sysFlag").collect()
    offs = [r.commitLogOffset for r in rows]
    assert len(offs) == len(set(offs))
    with MessageStore.open(generated.path, generated.config, read_only=True) as st:
        assert sorted(offs) == record_offsets(st)
        units = {}
        for (topic, qid), cq in st.consume_queues.items():
            for q in range(cq.min_offset, cq.max_offset):
                phy, size, _ = cq.get_unit(q)
                units[phy] = (topic, qid, q, size)
    in_cq = {r.commitLogOffset: (r.topic, r.queueId, r.queueOffset, r.storeSize) for r in rows
             if r.sysFlag & 0xC not in (0x4, 0xC)}
    assert in_cq == units
    # a sample compared field by field
    sample = sorted(offs)[::997]
    got = by_offset(df.where(df.commitLogOffset.isin(sample)).collect())
    with MessageStore.open(generated.path, generated.config, read_only=True) as st:
        for off in sample:
            assert got[off] == row_of(st.look_message_by_offset(off), generated.path)


def test_compressed_bodies_decoded_unless_raw(spark, tmp_path):
    from rmqstore import Message, MessageStoreConfig
    from rmqstore.format.compression import compress

    cfg = MessageStoreConfig(mapped_file_size_commit_log=1 << 16, mapped_file_size_consume_queue=400,
                             max_hash_slot_num=16, max_index_num=64)
    bodies = {}
    with MessageStore.open(tmp_path / "s", cfg) as st:
        for i, kind in enumerate(("zlib", "lz4", "zstd", None)):
            plain = f"message {i} ".encode() * 500
            data, flag = compress(plain, kind) if kind else (plain, 0)
            r = st.put_message(Message(topic="Z", body=data, sys_flag=flag))
            bodies[r.phy_offset] = (plain, data)
        bad = st.put_message(Message(topic="Z", body=b"not zlib", sys_flag=1)).phy_offset
    got = {r.commitLogOffset: bytes(r.body) for r in read(spark, str(tmp_path / "s")).collect()}
    assert {o: b for o, b in got.items() if o != bad} == {o: p for o, (p, _) in bodies.items()}
    assert got[bad] == b"not zlib"  # does not decompress: stored bytes, sysFlag says compressed
    raw = {r.commitLogOffset: bytes(r.body) for r in read(spark, str(tmp_path / "s"), rawBody="true").collect()}
    assert {o: b for o, b in raw.items() if o != bad} == {o: d for o, (_, d) in bodies.items()}


def test_damaged_records_skipped_or_failing_on_data_loss(spark, tmp_path):
    from rmqstore import Message, MessageStoreConfig

    cfg = MessageStoreConfig(mapped_file_size_commit_log=1 << 16, mapped_file_size_consume_queue=400,
                             max_hash_slot_num=16, max_index_num=64)
    with MessageStore.open(tmp_path / "s", cfg) as st:
        rs = [st.put_message(Message.create("D", b"message %d" % i)) for i in range(10)]
    seg = tmp_path / "s" / "commitlog" / "00000000000000000000"
    data = bytearray(seg.read_bytes())
    data[rs[4].phy_offset + 4] ^= 0xFF  # its MAGICCODE
    seg.write_bytes(bytes(data))
    got = sorted(r.commitLogOffset for r in read(spark, str(tmp_path / "s")).collect())
    assert got == [r.phy_offset for i, r in enumerate(rs) if i != 4]  # skipped, the scan resynchronises
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, str(tmp_path / "s"), failOnDataLoss="true").collect()


def test_missing_and_short_segments_are_gaps(spark, tmp_path):
    """A segment missing or short in the middle: every other record is read, the gap is logged
    (or, with failOnDataLoss, the read fails before it starts); a larger file is another geometry."""
    from rmqstore import Message, MessageStoreConfig

    cfg = MessageStoreConfig(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=400,
                             max_hash_slot_num=16, max_index_num=64)
    with MessageStore.open(tmp_path / "s", cfg) as st:
        rs = [st.put_message(Message.create("G", b"message %d" % i + b"." * 200)) for i in range(80)]
    d = tmp_path / "s" / "commitlog"
    names = sorted(p.name for p in d.iterdir())
    assert len(names) >= 5
    (d / names[1]).unlink()
    short = d / names[3]
    short.write_bytes(short.read_bytes()[:1000])
    lo1, hi1 = int(names[1]), int(names[1]) + 4096
    lo3 = int(names[3])
    want = [r.phy_offset for r in rs if not lo1 <= r.phy_offset < hi1
            and not (lo3 <= r.phy_offset and r.phy_offset + r.wrote_bytes > lo3 + 1000 and r.phy_offset < lo3 + 4096)]
    got = sorted(r.commitLogOffset for r in read(spark, str(tmp_path / "s")).collect())
    assert got == want and len(want) < len(rs)
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, str(tmp_path / "s"), failOnDataLoss="true").collect()


def test_the_pushdown_worker_that_the_reader_looks_for_exists():
    """The reader finds out whether Spark pushes filters by looking for PySpark's pushdown worker on
    the call stack (PySpark offers no API for it): this fails when PySpark renames or drops it."""
    import importlib.util

    from rmqstore.spark.source import PUSHDOWN_WORKER

    assert importlib.util.find_spec(PUSHDOWN_WORKER) is not None
