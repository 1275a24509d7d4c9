"""Kafka-style options of the ``rocketmq`` source: ``startingOffsets``/``endingOffsets`` as JSON of
queue offsets per topic and queue (-2 earliest, -1 latest), ``maxOffsetsPerTrigger`` (messages per
micro-batch), and the lag a stream reports (its progress's ``latestOffset``)."""
from __future__ import annotations

import json

import pytest

from rmqstore import Message, MessageStore, MessageStoreConfig
from rmqstore.errors import ConfigError
from rmqstore.spark.options import parse_options


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("kafka") / "store"
    with MessageStore.open(path, MessageStoreConfig.embedded(mapped_file_size_commit_log=64 * 1024)) as st:
        for i in range(40):  # interleaved: each segment holds both topics and queues
            st.put_message(Message.create("Orders", f"o{i % 2}-{i // 2}".encode(), queue_id=i % 2))
            if i % 4 == 0:
                st.put_message(Message.create("Audit", f"a{i // 4}".encode(), queue_id=0))
    return str(path)


def _read(spark, path, **opts):
    r = spark.read.format("rocketmq")
    for k, v in opts.items():
        r = r.option(k, v)
    return sorted((x.topic, x.queueId, x.queueOffset) for x in r.load(path).select("topic", "queueId", "queueOffset")
                  .collect())


def test_starting_and_ending_queue_offsets(spark, store):
    rows = _read(spark, store, startingOffsets=json.dumps({"Orders": {"0": 5, "1": -2}}))
    assert rows == sorted([("Orders", 0, o) for o in range(5, 20)] + [("Orders", 1, o) for o in range(20)])
    rows = _read(spark, store, startingOffsets=json.dumps({"Orders": {"0": 5}}),
                 endingOffsets=json.dumps({"Orders": {"0": 10, "1": 3}}))
    assert rows == sorted([("Orders", 0, o) for o in range(5, 10)] + [("Orders", 1, o) for o in range(3)])
    # -1 as a start: latest, nothing of that queue yet; other topics are not read
    rows = _read(spark, store, startingOffsets=json.dumps({"Orders": {"0": -1, "1": 18}, "Audit": {"0": -2}}))
    assert rows == sorted([("Orders", 1, 18), ("Orders", 1, 19)] + [("Audit", 0, o) for o in range(10)])
    # the plain forms still work
    assert len(_read(spark, store, startingOffsets="earliest")) == 50


def test_queue_offsets_narrow_the_commitlog_read(store):
    from rmqstore.spark.filters import RowFilter
    from rmqstore.spark.source import plan_partitions

    opts = parse_options({"path": store, "startingOffsets": json.dumps({"Orders": {"0": 18, "1": 18}}),
                          "splitSize": "4k"}, streaming=False)
    parts = plan_partitions(opts, RowFilter.from_options(opts), None, None)
    full = parse_options({"path": store, "splitSize": "4k"}, streaming=False)
    all_parts = plan_partitions(full, RowFilter.from_options(full), None, None)
    first = min(a for p in parts for _, a, _ in p.spans)
    assert first > 0 and len(parts) < len(all_parts)  # the spans before the first message asked for are skipped


@pytest.mark.parametrize("value,says", [
    ("{not json", "not JSON"),
    ('{"Orders": {"x": 1}}', "queue id 'x'"),
    ('{"Orders": {"0": -3}}', "expected a queue offset >= 0 or -2 or -1"),
    ('{"Orders": {"0": "5"}}', "expected a queue offset"),
    ('{"Orders": {}}', "expected an object of queue id -> offset"),
    ("[]", "expected earliest or latest or a commitlog offset"),
])
def test_bad_queue_offsets_are_refused(store, value, says):
    with pytest.raises(ConfigError, match=says):
        parse_options({"path": store, "startingOffsets": value}, streaming=False)


def test_ending_offsets_json_takes_no_earliest(store):
    with pytest.raises(ConfigError, match="-1"):
        parse_options({"path": store, "endingOffsets": '{"Orders": {"0": -2}}'}, streaming=False)
    with pytest.raises(ConfigError, match="outside the topics option"):
        parse_options({"path": store, "topics": "Audit", "startingOffsets": '{"Orders": {"0": 1}}'}, streaming=False)
    with pytest.raises(ConfigError, match="maxOffsetsPerTrigger"):
        parse_options({"path": store, "maxOffsetsPerTrigger": "0"}, streaming=True)
    with pytest.raises(ConfigError, match="only for streaming"):
        parse_options({"path": store, "maxOffsetsPerTrigger": "5"}, streaming=False)


def test_stream_with_queue_offsets_in_batches_of_n_messages_and_its_lag(spark, store, tmp_path):
    batches: list[list] = []

    def sink(df, batch_id):
        batches.append([(r.topic, r.queueId, r.queueOffset) for r in df.collect()])

    q = (spark.readStream.format("rocketmq").option("startingOffsets", json.dumps({"Orders": {"0": 12, "1": -2}}))
         .option("maxOffsetsPerTrigger", "7").load(store)
         .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "cp"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    rows = sorted(r for b in batches for r in b)
    assert rows == sorted([("Orders", 0, o) for o in range(12, 20)] + [("Orders", 1, o) for o in range(20)])
    # at most 7 messages of the store per micro-batch (Audit's and queue 0's early ones count, then are dropped)
    assert max(len(b) for b in batches) <= 7 and len([b for b in batches if b]) >= 4
    progress = q.lastProgress["sources"][0]
    latest, end = json.loads(progress["latestOffset"]), json.loads(progress["endOffset"])
    assert latest["offset"] == end["offset"]  # read to the end: no lag left
    assert end["queues"] == {"Orders\u00000": 12, "Orders\u00001": 0}  # the queue starts, kept in the checkpoint
