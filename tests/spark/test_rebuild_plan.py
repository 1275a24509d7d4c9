"""How the Spark rebuild cuts its work: dispatch tasks of equal bytes of data (the last segment
weighed by its written part), a multiple of the cores, each task's spans inside one segment and no
longer than the split size; the stages run as RDD jobs whose results come back in task order.
Whatever the plan, the output is the in-process rebuild's (checked against engine/rebuild.py)."""
from __future__ import annotations

import os

import pytest

from rmqstore import Message, MessageStore
from rmqstore.rebuild import rebuild as rebuild_in_process
from rmqstore.spark.jobs import rebuild_job as J
from rmqstore.spark.jobs import runtime as JR
from rmqstore.spark import scan as S

from test_rebuild import same_output

SEG = 1 << 20


def _covered(groups) -> list[tuple[int, int]]:
    return [(sp.start, sp.end) for g in groups for sp in g]


@pytest.mark.parametrize("tasks", [1, 2, 3, 7])
@pytest.mark.parametrize("split", [SEG, 300_000, 64 << 20])
def test_plan_balanced_covers_everything_in_equal_parts(tasks, split):
    segments = [5 * SEG + i * SEG for i in range(4)]
    data_end = segments[-1] + 400_000
    groups = S.plan_balanced(segments, SEG, split, tasks, data_end)
    assert len(groups) == tasks
    spans = _covered(groups)
    # consecutive, from the first segment's start to the last one's end, nothing twice
    assert spans[0][0] == segments[0] and spans[-1][1] == segments[-1] + SEG
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    for g in groups:
        for sp in g:
            assert sp.seg <= sp.start < sp.end <= sp.seg + SEG and sp.end - sp.start <= split
            assert (sp.start - sp.seg) // split == (sp.end - 1 - sp.seg) // split  # no split boundary crossed
    # equal bytes of data per group (up to rounding); the tail after the data goes with the last
    data = [sum(min(sp.end, data_end) - sp.start for sp in g if sp.start < data_end) for g in groups]
    assert max(data) - min(data) <= 1
    assert sum(data) == data_end - segments[0]


def test_plan_balanced_small_and_empty():
    assert S.plan_balanced([], SEG, SEG, 4) == []
    # more tasks than bytes: empty runs are dropped, everything is still covered once
    groups = S.plan_balanced([0], 8, 8, 5, data_end=3)
    assert _covered(groups) == [(0, 1), (1, 2), (2, 8)]
    # no data_end: the whole segments are weighed
    groups = S.plan_balanced([0, SEG], SEG, SEG, 4)
    assert [sum(sp.end - sp.start for sp in g) for g in groups] == [SEG // 2] * 4


def test_estimate_data_end(tmp_path):
    from storegen import small_config

    cfg = small_config(commitlog=256 << 10)
    store = str(tmp_path / "store")
    with MessageStore.open(store, cfg) as st:
        for i in range(1500):
            st.put_message(Message("T", os.urandom(1 + i % 200), properties={"KEYS": f"k{i}"}))
        end = st.max_phy_offset
    segments = S.list_segments(store, cfg.mapped_file_size_commit_log)
    assert len(segments) > 1
    est = S.estimate_data_end(store, segments[-1], cfg.mapped_file_size_commit_log)
    assert end <= est < end + 4096
    # a full segment (ends with a blank record, then maybe a few zero bytes) is weighed in full or nearly
    full = S.estimate_data_end(store, segments[0], cfg.mapped_file_size_commit_log)
    assert full > segments[0] + cfg.mapped_file_size_commit_log - 4096
    # a segment of zeros has no data; a missing one counts in full (weights only)
    zero = tmp_path / "zeros" / "commitlog"
    zero.mkdir(parents=True)
    (zero / f"{0:020d}").write_bytes(bytes(3 * 4096 + 100))
    assert S.estimate_data_end(str(tmp_path / "zeros"), 0, 3 * 4096 + 100) == 0
    assert S.estimate_data_end(str(tmp_path / "nowhere"), 7 * SEG, SEG) == 8 * SEG


class _FakeSpark:
    class sparkContext:  # noqa: N801 - stands in for the attribute
        defaultParallelism = 3


def test_dispatch_tasks_are_a_multiple_of_the_cores(monkeypatch):
    assert J.dispatch_tasks(_FakeSpark, 0, 10) == 3
    assert J.dispatch_tasks(_FakeSpark, 0, 3 * J.MAX_TASK_BYTES) == 3
    assert J.dispatch_tasks(_FakeSpark, 0, 3 * J.MAX_TASK_BYTES + 1) == 6
    monkeypatch.setattr(J, "MAX_TASK_BYTES", 100)
    assert J.dispatch_tasks(_FakeSpark, 1000, 2000) == 12


def test_run_tasks_one_spark_task_each_results_in_order(spark):
    from rmqstore.spark import tasks as I

    def echo_partition(spec, task):  # nested: pickled by value (workers cannot import this module)
        from pyspark import TaskContext

        return {"n": task["n"] + spec["add"], "partition": TaskContext.get().partitionId()}

    tasks = [{"n": n} for n in (5, 0, 3, 9, 1)]
    out = JR.run_tasks(spark, echo_partition, {"add": 100}, tasks)
    assert [r["n"] for r in out] == [105, 100, 103, 109, 101]
    assert sorted(r["partition"] for r in out) == list(range(len(tasks)))  # one partition per task
    assert JR.run_tasks(spark, I.write_task, {}, []) == []
    row = JR.Row({"kind": "queue", "count": 3})
    assert (row.kind, row["count"]) == ("queue", 3)


def _three_segment_store(path: str):
    from storegen import small_config

    cfg = small_config(commitlog=64 << 10).replace(max_hash_slot_num=64, max_index_num=600)
    with MessageStore.open(path, cfg) as st:
        for i in range(2000):
            st.put_message(Message(f"T{i % 3}", os.urandom(i % 90), queue_id=i % 4,
                                   properties={"TAGS": f"t{i % 5}", "KEYS": f"k{i} c{i % 17}", "UNIQ_KEY": f"U{i}"}))
    return cfg


@pytest.mark.parametrize("plan", ["wrong_end_early", "wrong_end_late", "many_tasks"])
def test_plan_never_changes_the_output(spark, tmp_path, monkeypatch, plan):
    """The data-end estimate and the task count only weigh the work: a wrong estimate (a page of
    zeros inside a body looks like the end) or many small tasks give the same bytes."""
    store = str(tmp_path / "store")
    cfg = _three_segment_store(store)
    segments = S.list_segments(store, cfg.mapped_file_size_commit_log)
    assert len(segments) >= 3
    if plan == "wrong_end_early":
        monkeypatch.setattr(S, "estimate_data_end", lambda d, seg, size: segments[0] + 100)
    elif plan == "wrong_end_late":
        monkeypatch.setattr(S, "estimate_data_end", lambda d, seg, size: seg + size)
    else:
        monkeypatch.setattr(J, "MAX_TASK_BYTES", 20_000)
    calls = []
    real = JR.run_tasks
    monkeypatch.setattr(JR, "run_tasks", lambda sp, fn, spec, tasks: calls.append(len(tasks)) or real(sp, fn, spec, tasks))
    local = rebuild_in_process(store, str(tmp_path / "local"), cfg)
    res = J.rebuild(spark, store, str(tmp_path / "spark"), cfg, split_size=30_000)
    same_output(str(tmp_path / "local"), str(tmp_path / "spark"))
    assert (res["records"], res["index_files"], res["consume_queues"]) == \
           (local.records, local.index_files, local.consume_queues)
    cores = spark.sparkContext.defaultParallelism
    assert calls[0] % cores == 0 and calls[1] <= cores  # dispatch tasks; writer tasks (one per core at most)
    if plan == "many_tasks":
        assert calls[0] > 2 * cores
    assert not os.path.exists(tmp_path / "spark" / ".rmqstore-spark-tmp")
