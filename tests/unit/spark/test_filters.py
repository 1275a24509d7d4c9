"""spark/filters.py: RowFilter built from bounds, options and Spark's pushed predicates, and the
rows it keeps of a decoded batch (inclusive bounds, timestamps in microseconds)."""
from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

import numpy as np
import pytest

from rmqstore.spark.filters import RowFilter

ds = pytest.importorskip("pyspark.sql.datasource")


def test_bounds_narrow_and_sets_intersect():
    f = RowFilter().with_queue(lo=2).with_queue(lo=1, hi=9).with_queue(hi=5)
    assert (f.queue_lo, f.queue_hi) == (2, 5)
    f = f.with_topics(["A", "B"]).with_topics(["B", "C"]).with_queue_ids([1, 2, 3]).with_queue_ids([3, 4])
    assert f.topics == {"B"} and f.queue_ids == {3}
    assert not f.is_empty
    assert RowFilter().with_topics(["A"]).with_topics(["B"]).is_empty
    assert RowFilter().with_phy(lo=10, hi=9).is_empty and not RowFilter().with_phy(lo=10, hi=10).is_empty


def test_phy_range_is_half_open():
    assert RowFilter().phy_range() == (None, None)
    assert RowFilter().with_phy(lo=100, hi=199).phy_range() == (100, 200)


def test_from_options_turns_exclusive_ends_into_inclusive_bounds():
    opts = SimpleNamespace(topics=["A"], starting_queue_offsets=None, ending_queue_offsets=None,
                           starting_timestamp=1_000, ending_timestamp=2_000, starting_offsets=64,
                           ending_offsets=4096)
    f = RowFilter.from_options(opts)
    assert (f.topics, f.ts_lo, f.ts_hi, f.phy_lo, f.phy_hi) == ({"A"}, 1_000_000, 1_999_999, 64, 4095)
    streaming = RowFilter.from_options(opts, streaming=True)  # offsets bound the stream, not the rows
    assert (streaming.phy_lo, streaming.phy_hi) == (None, None)


@pytest.mark.parametrize("flt, want", [
    (ds.EqualTo(("queueId",), 3), dict(queue_lo=3, queue_hi=3)),
    (ds.GreaterThan(("queueId",), 3), dict(queue_lo=4)),
    (ds.GreaterThanOrEqual(("commitLogOffset",), 100), dict(phy_lo=100)),
    (ds.LessThan(("commitLogOffset",), 100), dict(phy_hi=99)),
    (ds.LessThanOrEqual(("queueId",), 7), dict(queue_hi=7)),
    (ds.EqualTo(("topic",), "T"), dict(topics=frozenset({"T"}))),
    (ds.In(("topic",), ("A", "B")), dict(topics=frozenset({"A", "B"}))),
    (ds.In(("queueId",), (1, 2)), dict(queue_ids=frozenset({1, 2}))),
    (ds.GreaterThanOrEqual(("storeTimestamp",), datetime(1970, 1, 1, 0, 0, 1, 5, tzinfo=timezone.utc)),
     dict(ts_lo=1_000_005)),
    (ds.LessThan(("storeTimestamp",), datetime(1970, 1, 2)), dict(ts_hi=86_400_000_000 - 1)),  # naive: UTC
    (ds.IsNotNull(("topic",)), {}),
])
def test_pushed_predicates_that_are_applied_exactly(flt, want):
    got = RowFilter().push(flt)
    assert got == RowFilter(**want)


@pytest.mark.parametrize("flt", [
    ds.IsNotNull(("body",)), ds.IsNotNull(("tags",)),           # nullable columns
    ds.EqualTo(("queueId",), "3"), ds.EqualTo(("queueId",), True),  # not an int
    ds.GreaterThan(("topic",), "T"), ds.In(("queueId",), (1, "x")),
    ds.EqualTo(("body",), b"x"), ds.EqualTo(("properties", "k"), "v"),
    ds.StringStartsWith(("topic",), "T"),
])
def test_predicates_it_cannot_apply_are_refused(flt):
    assert RowFilter().push(flt) is None


def test_mask_keeps_the_matching_rows():
    batch = SimpleNamespace(queue_id=np.array([0, 1, 2, 3, 1]), store_timestamp=np.array([5, 6, 7, 8, 9]),
                            starts=np.array([0, 100, 200, 300, 400]))
    assert RowFilter().mask(batch, 4096, None) is None  # no predicate: every row
    f = RowFilter().with_queue_ids([1, 2, 3]).with_ts(lo=6_000, hi=8_000).with_phy(hi=4096 + 300)
    assert f.mask(batch, 4096, None).tolist() == [False, True, True, True, False]
    topic_ok = np.array([True, True, False, True, True])
    assert f.mask(batch, 4096, topic_ok).tolist() == [False, True, False, True, False]
    assert RowFilter().with_phy(lo=4096 + 250).mask(batch, 4096, None).tolist() == [False, False, False, True, True]
