"""Dynamic balancing of the Spark rebuild's dispatch stage: each task's group ends in small spans
(``scan.cut_tails``), tasks claim spans (their own group front to back, then the others back to
front) through claim files, so every span is dispatched by exactly one task however fast each task
runs, and spans whose result is lost are dispatched again. Also the cheaper per-span scan (walks
stop near the span end) and the writer's batching of a queue's slices."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from rmqstore.rebuild import rebuild as rebuild_in_process
from rmqstore.format import message as M
from rmqstore.spark import tasks as I
from rmqstore.spark.jobs import rebuild_job as J
from rmqstore.spark.jobs import runtime as JR
from rmqstore.spark import scan as S

from test_rebuild import same_output
from test_rebuild_plan import _three_segment_store

SEG = 1 << 20


def _flat(groups):
    return [(sp.seg, sp.start, sp.end) for g in groups for sp in g]


@pytest.mark.parametrize("tasks", [2, 3])
@pytest.mark.parametrize("piece", [50_000, 300_000, 4 << 20])
def test_cut_tails_keeps_every_byte_and_cuts_only_the_tails(tasks, piece):
    segments = [3 * SEG + i * SEG for i in range(4)]
    data_end = segments[-1] + 400_000
    groups = S.plan_balanced(segments, SEG, SEG, tasks, data_end)
    cut = S.cut_tails(groups, piece, data_end)
    assert len(cut) == len(groups)
    # the same bytes, in the same order, each in one span, no span longer than before
    flat = _flat(cut)
    assert flat[0][1] == segments[0] and flat[-1][2] == segments[-1] + SEG
    assert all(a[2] == b[1] for a, b in zip(flat, flat[1:]))
    for g, c in zip(groups, cut):
        assert (c[0].start, c[-1].end) == (g[0].start, g[-1].end)
        for sp in c:
            outer = next(o for o in g if o.start <= sp.start and sp.end <= o.end)
            assert sp.seg == outer.seg
        # the back half of the group's data is in pieces of at most `piece` bytes; the front is untouched
        a, b = g[0].start, min(g[-1].end, data_end)
        mid = b - (b - a) // 2
        assert all(sp.end - sp.start <= piece for sp in c if sp.start >= mid and sp.end <= b)
        front = [sp for sp in g if sp.end <= mid]
        assert c[:len(front)] == front
    # the zero-filled rest of the last segment stays one span
    assert cut[-1][-1] == S.Span(segments[-1], data_end, segments[-1] + SEG)
    if piece < SEG // 4:
        assert len(flat) > len(_flat(groups))
    with pytest.raises(ValueError):
        S.cut_tails(groups, 0)


def test_claim_order_own_group_forward_then_the_others_backward():
    assert S.claim_order([3, 2, 4], 1) == [(1, 0), (1, 1), (2, 3), (2, 2), (2, 1), (2, 0), (0, 2), (0, 1), (0, 0)]
    assert S.claim_order([2], 0) == [(0, 0), (0, 1)]
    for home in range(3):
        order = S.claim_order([3, 0, 5], home)
        assert sorted(order) == sorted((g, i) for g, n in enumerate([3, 0, 5]) for i in range(n))


def test_claim_span_once(tmp_path):
    assert I.claim_span(str(tmp_path), 7)
    assert not I.claim_span(str(tmp_path), 7)
    assert I.claim_span(str(tmp_path), 8)


def test_walk_limit_stops_near_the_span_end():
    s = S.SpanSummary(S.Span(0, 0, 10_000))
    assert S._walk_limit(s, 0, 10_000, 4096) == 10_000 // 91 + 2  # nothing seen yet: records take >= 91 bytes
    assert S._walk_limit(s, 0, 10_000_000, 4096) == 4096
    s.records, s.bytes = 100, 10_000  # 100-byte records
    assert S._walk_limit(s, 9_000, 10_000, 4096) == int(10 * 1.25) + 16
    assert S._walk_limit(s, 9_999, 10_000, 4096) == 16
    assert S._walk_limit(s, 0, 10_000_000, 4096) == 4096


def test_scan_walks_little_past_each_span(tmp_path, monkeypatch):
    """Small spans (dynamic balancing) must not each walk a whole batch of records past their end;
    what a scan yields does not depend on it."""
    store = str(tmp_path / "store")
    cfg = _three_segment_store(store)
    seg_size = cfg.mapped_file_size_commit_log
    segments = S.list_segments(store, seg_size)
    walked = []
    real = M.walk_records

    def counting(buf, pos, end, max_records=None):
        out = real(buf, pos, end, max_records)
        walked.append(len(out[0]))
        return out

    monkeypatch.setattr(M, "walk_records", counting)
    spans = S.plan_spans(segments, seg_size, 20_000)

    def scan() -> tuple[list[int], int]:
        walked.clear()
        got = []
        for sp in spans:
            for seg, batch in S.iter_span_batches(store, seg_size, sp, batch_records=1024):
                got += (batch.starts + seg.start).tolist()
        return got, sum(walked) - len(got)

    got, wasted = scan()
    assert len(got) == 2000 and got == sorted(got)
    monkeypatch.setattr(S, "_walk_limit", lambda s, p, b, n: n)  # every walk a whole batch
    old, old_wasted = scan()
    assert old == got
    assert wasted < old_wasted * 0.6  # spans of ~100 records here; on big spans only the last walk overshoots


def test_runs_of_units():
    sl = [["a", 0, 5], ["b", 0, 3], ["c", 2, 9], ["d", 0, 1], ["e", 0, 20]]
    assert I._runs_of_units(sl, 10) == [[sl[0], sl[1]], [sl[2], sl[3]], [sl[4]]]
    assert I._runs_of_units(sl, 100) == [sl]
    assert I._runs_of_units([], 10) == []


def test_queue_weight_counts_a_fixed_cost():
    assert J.queue_write_weight(0) == J.QUEUE_FIXED_WEIGHT > 0
    assert J.queue_write_weight(10) == 10 + J.QUEUE_FIXED_WEIGHT


def _dispatch_spec(store, cfg, tmp, groups):
    return {"store": store, "cfg": I.cfg_to_json(cfg), "check_crc": False, "prop_crc": False, "tmp": tmp,
            "groups": groups}


def _groups(store, cfg, tasks, piece):
    seg_size = cfg.mapped_file_size_commit_log
    segments = S.list_segments(store, seg_size)
    end = S.estimate_data_end(store, segments[-1], seg_size)
    plan = S.cut_tails(S.plan_balanced(segments, seg_size, 20_000, tasks, end), piece, end)
    groups, k = [], 0
    for g in plan:
        groups.append([[k + i, sp.seg, sp.start, sp.end] for i, sp in enumerate(g)])
        k += len(g)
    return groups


def test_claimed_dispatch_covers_every_span_once(tmp_path):
    store = str(tmp_path / "store")
    cfg = _three_segment_store(store)
    groups = _groups(store, cfg, 2, 4000)
    ids = sorted(sp[0] for g in groups for sp in g)
    assert len(groups[0]) > 3 and len(groups[1]) > 3
    # a task alone takes every span: its own group first, then the other's from the back end
    spec = _dispatch_spec(store, cfg, str(tmp_path / "tmp1"), groups)
    alone = [sid for sid, _ in I.dispatch_claimed(spec, 0)]
    assert alone == [sp[0] for sp in groups[0]] + [sp[0] for sp in reversed(groups[1])]
    assert I.dispatch_claimed(spec, 1) == []  # a second attempt finds everything claimed
    # two tasks at once: every span exactly once between them
    spec = _dispatch_spec(store, cfg, str(tmp_path / "tmp2"), groups)
    out: dict[int, list] = {}
    threads = [threading.Thread(target=lambda h: out.__setitem__(h, I.dispatch_claimed(spec, h)), args=(h,))
               for h in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = [sid for h in (0, 1) for sid, _ in out[h]]
    assert sorted(got) == ids
    assert out[0] and out[0][0][0] == groups[0][0][0] and out[1] and out[1][0][0] == groups[1][0][0]
    # the summaries are those of a plain dispatch of the same spans
    plain = dict(I.dispatch_task(dict(spec, tmp=str(tmp_path / "tmp3")), [sp for g in groups for sp in g]))
    claimed = dict(x for h in (0, 1) for x in out[h])
    strip = lambda d: {k: v for k, v in d.items() if k != "dispatch"}  # noqa: E731
    assert {k: strip(v) for k, v in claimed.items()} == {k: strip(v) for k, v in plain.items()}
    assert all(claimed[k]["dispatch"]["records"] == plain[k]["dispatch"]["records"] for k in plain)


@pytest.mark.parametrize("lost,jobs", [
    ("dispatch_claimed", ["dispatch_claimed", "dispatch_task", "write_claimed"]),
    ("write_claimed", ["dispatch_claimed", "write_claimed", "write_task"]),
])
def test_lost_task_results_are_run_again(spark, tmp_path, monkeypatch, lost, jobs):
    """A task attempt that claimed items (dispatch spans; the writers' queues and index shards)
    and whose result Spark drops (a failure after the work, a speculative copy that lost) leaves
    them claimed: the driver runs exactly those again in a second job, and the output is the
    in-process rebuild's."""
    store = str(tmp_path / "store")
    cfg = _three_segment_store(store)
    monkeypatch.setattr(J, "MIN_STEAL_PIECE", 4000)
    real = JR.run_tasks
    calls, dropped = [], []

    def lossy(sp, fn, spec, tasks):
        out = real(sp, fn, spec, tasks)
        calls.append((fn.__name__, [len(r) for r in out]))
        if fn.__name__ == lost:
            assert len(out) == 2
            k = max(range(len(out)), key=lambda j: len(out[j]))  # (one task may have claimed all)
            dropped.append(len(out[k]))
            return out[:k] + [[]] + out[k + 1:]  # that task's items came back from nowhere
        return out

    monkeypatch.setattr(JR, "run_tasks", lossy)
    local = rebuild_in_process(store, str(tmp_path / "local"), cfg)
    res = J.rebuild(spark, store, str(tmp_path / "spark"), cfg, split_size=20_000)
    same_output(str(tmp_path / "local"), str(tmp_path / "spark"))
    assert res["records"] == local.records
    assert [c[0] for c in calls] == jobs
    assert sum(calls[jobs.index(lost) + 1][1]) == dropped[0] > 0  # the second job ran exactly the lost items


def test_claimed_writes_cover_every_item_once(tmp_path):
    """A writer task alone takes every item (its own group heaviest first, then the other's from
    the back end); a second attempt finds everything claimed."""
    groups = [[[0, "queue", None], [2, "queue", None]], [[1, "queue", None], [3, "queue", None], [4, "queue", None]]]
    spec = {"tmp": str(tmp_path), "groups": groups}
    assert [it[0] for it in I.claimed(spec, 0, I.WRITE_CLAIMS_DIR)] == [0, 2, 4, 3, 1]
    assert list(I.claimed(spec, 1, I.WRITE_CLAIMS_DIR)) == []
    assert [it[0] for it in I.claimed(spec, 1, I.CLAIMS_DIR)] == [1, 3, 4, 2, 0]  # dispatch claims are apart


def test_rebuild_with_small_pieces_is_byte_identical(spark, tmp_path, monkeypatch):
    store = str(tmp_path / "store")
    cfg = _three_segment_store(store)
    monkeypatch.setattr(J, "MIN_STEAL_PIECE", 3000)
    monkeypatch.setattr(J, "MAX_STEAL_PIECE", 3000)
    seen = []
    real = JR.run_tasks
    monkeypatch.setattr(JR, "run_tasks", lambda sp, fn, spec, tasks: seen.append(spec.get("groups")) or
                        real(sp, fn, spec, tasks))
    local = rebuild_in_process(store, str(tmp_path / "local"), cfg)
    J.rebuild(spark, store, str(tmp_path / "spark"), cfg, split_size=30_000)
    same_output(str(tmp_path / "local"), str(tmp_path / "spark"))
    groups = seen[0]
    assert groups and len(groups) == spark.sparkContext.defaultParallelism
    assert min(sp[3] - sp[2] for g in groups for sp in g) <= 3000
