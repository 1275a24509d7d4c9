"""Spark rebuild: byte-identical to the in-process rebuild (engine/rebuild.py) and to the files
RocketMQ itself wrote, index file names aside (index files are compared in name order)."""
from __future__ import annotations

import os

import pytest

from rmqstore import Message, MessageStore
from rmqstore.rebuild import rebuild as rebuild_in_process
from rmqstore.errors import OutputExistsError
from rmqstore.spark.jobs import rebuild

from tests.kit import SPLITS, tree_hashes


def same_output(a: str, b: str) -> None:
    """consumequeue/ identical file by file; index/ identical file by file in name order."""
    assert tree_hashes(os.path.join(a, "consumequeue")) == tree_hashes(os.path.join(b, "consumequeue"))
    ia, ib = tree_hashes(os.path.join(a, "index")), tree_hashes(os.path.join(b, "index"))
    assert [ia[k] for k in sorted(ia)] == [ib[k] for k in sorted(ib)]


def test_vectors_rebuild_like_rocketmq(spark, vector, tmp_path):
    out = str(tmp_path / "spark")
    res = rebuild(spark, vector.path, out, vector.config, split_size=SPLITS[vector.name])
    same_output(vector.path, out)  # RocketMQ's own files
    local = rebuild_in_process(vector.path, str(tmp_path / "local"), vector.config)
    same_output(str(tmp_path / "local"), out)
    assert (res["records"], res["consume_queues"], res["index_files"], res["end_offset"]) == \
           (local.records, local.consume_queues, local.index_files, local.end_offset)
    assert res["records"] == len(vector.messages())


def test_generated_store_rebuild(spark, generated, tmp_path):
    """200,000 messages over 63 commitlog segments, 19 queues (hundreds of CQ files), 228 index
    files, each written by three shards in parallel tasks."""
    before = tree_hashes(os.path.join(generated.path, "commitlog"))
    local = rebuild_in_process(generated.path, str(tmp_path / "local"), generated.config)
    res = rebuild(spark, generated.path, str(tmp_path / "spark"), generated.config, split_size=8 << 20,
                  index_shards=3)
    assert res["records"] == local.records >= 200_000
    assert res["index_files"] == local.index_files > 100
    assert res["consume_queues"] == local.consume_queues
    same_output(str(tmp_path / "local"), str(tmp_path / "spark"))
    assert tree_hashes(os.path.join(generated.path, "commitlog")) == before
    with MessageStore.open(generated.path, generated.config, read_only=True) as st:
        assert res["end_offset"] == st.max_phy_offset


def _small_store(path: str, case: str):
    from storegen import small_config

    cfg = small_config(commitlog=8192).replace(max_hash_slot_num=8, max_index_num=4)  # 3 items per file
    with MessageStore.open(path, cfg) as st:
        if case == "full_then_keyless":  # the file fills exactly; the next record opens an empty file
            st.put_message(Message("T", b"a", properties={"UNIQ_KEY": "U1", "KEYS": "k1 k2"}))
            st.put_message(Message("T", b"b"))
            st.put_message(Message("T", b"c", queue_id=1, properties={"TAGS": "x"}))
        elif case == "no_keys":
            for i in range(5):
                st.put_message(Message("T", b"x" * i, queue_id=i % 2, properties={"TAGS": "t"}))
        elif case == "key_split_across_files":
            for i in range(7):
                st.put_message(Message("T", b"m", properties={"UNIQ_KEY": f"U{i}", "KEYS": f"a{i} b{i}"}))
            st.put_message(Message("T", b"m", sys_flag=0xC, properties={"KEYS": "rolled-back"}))
        elif case == "index_disabled":
            cfg = cfg.replace(message_index_enable=False)
            st.put_message(Message("T", b"m", properties={"KEYS": "k"}))
        st.wait_dispatched()
    return cfg


@pytest.mark.parametrize("shards", [None, 5], ids=["planned", "5-shards"])
@pytest.mark.parametrize("case", ["full_then_keyless", "no_keys", "key_split_across_files", "index_disabled"])
def test_index_file_rolling_edge_cases(spark, tmp_path, case, shards):
    store = str(tmp_path / "store")
    cfg = _small_store(store, case)
    local = rebuild_in_process(store, str(tmp_path / "local"), cfg)
    res = rebuild(spark, store, str(tmp_path / "spark"), cfg, index_shards=shards)
    same_output(str(tmp_path / "local"), str(tmp_path / "spark"))
    assert res["index_files"] == local.index_files
    if case == "full_then_keyless":
        assert local.index_files == 2
    if case == "index_disabled":
        assert not os.path.exists(tmp_path / "spark" / "index")


def test_rebuild_refuses_to_overwrite(spark, vectors, tmp_path):
    v = vectors["basic"]
    with pytest.raises(OutputExistsError, match="source store"):
        rebuild(spark, v.path, v.path, v.config)
    (tmp_path / "out" / "index").mkdir(parents=True)
    with pytest.raises(OutputExistsError, match="already holds index"):
        rebuild(spark, v.path, str(tmp_path / "out"), v.config)


def test_empty_store(spark, tmp_path):
    store = tmp_path / "empty"
    (store / "commitlog").mkdir(parents=True)
    res = rebuild(spark, str(store), str(tmp_path / "out"))
    assert (res["records"], res["consume_queues"], res["index_files"]) == (0, 0, 0)


def test_index_shards_are_planned_by_weight():
    from rmqstore.spark.jobs.rebuild_job import QUEUE_FIXED_WEIGHT, _makespan, index_shard_weight, plan_index_shards

    # the benchmark store: 19 queues of ~52k units, a full index file and a small one, 2 cores
    queues = [52_000 + QUEUE_FIXED_WEIGHT] * 19
    assert plan_index_shards([1_900_000, 130_000], cores=2, others=queues) == [2, 1]
    assert plan_index_shards([1_900_000, 130_000], cores=1, others=queues) == [1, 1]
    # heavy queues already balance one index file: splitting it would only add its reading cost
    assert plan_index_shards([1_000_000], cores=2, others=[2_400_000]) == [1]
    assert plan_index_shards([100] * 8, cores=4) == [1] * 8  # many small files: one task each
    assert plan_index_shards([10**7], cores=8) == [8]
    assert plan_index_shards([], cores=2, others=[5]) == []
    assert plan_index_shards([0, 500], cores=2) == [1, 1]
    # never a heavier write step than one shard per file
    for items, others in (([1_900_000, 130_000], queues), ([3_000_000, 3_000_000], []), ([50_000], [10**6] * 3)):
        m = plan_index_shards(items, 2, others)
        spans = [index_shard_weight(n, k) for n, k in zip(items, m) for _ in range(k)]
        assert _makespan(others + spans, 2) <= _makespan(others + [index_shard_weight(n, 1) for n in items], 2)