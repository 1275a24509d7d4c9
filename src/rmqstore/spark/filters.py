"""Row filters the ``rocketmq`` source applies itself: the ``topics``, offset and timestamp options
and the predicates Spark pushes down on ``topic``, ``queueId``, ``storeTimestamp`` and
``commitLogOffset``.

A pushed predicate is removed from Spark's own plan, so every one accepted here is applied exactly:
offsets narrow the byte ranges that are planned (``commitLogOffset`` *is* a record's position, and
a record belongs to the range holding its first byte) and then every predicate is checked per row
on the decoded numpy columns, before any Arrow column is built.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

from ..format import message as M
from .options import ReadOptions

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_INT_COLUMNS = ("queueId", "commitLogOffset")
NULLABLE_COLUMNS = frozenset(("body", "tags", "uniqKey"))


def _micros(dt: datetime) -> int:
    if dt.tzinfo is None:  # Spark hands TIMESTAMP values over as UTC instants
        dt = dt.replace(tzinfo=timezone.utc)
    d = dt - _EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class RowFilter:
    """Conjunction of simple predicates; bounds are inclusive, timestamps in microseconds."""

    topics: frozenset[str] | None = None
    queue_ids: frozenset[int] | None = None
    queue_lo: int | None = None
    queue_hi: int | None = None
    ts_lo: int | None = None
    ts_hi: int | None = None
    phy_lo: int | None = None
    phy_hi: int | None = None

    # --- building ---------------------------------------------------------------------------
    def with_topics(self, names) -> "RowFilter":
        names = frozenset(names)
        return dataclasses.replace(self, topics=names if self.topics is None else self.topics & names)

    def with_queue_ids(self, ids) -> "RowFilter":
        ids = frozenset(ids)
        return dataclasses.replace(self, queue_ids=ids if self.queue_ids is None else self.queue_ids & ids)

    def _bound(self, attr: str, lo: int | None, hi: int | None) -> "RowFilter":
        cur_lo, cur_hi = getattr(self, attr + "_lo"), getattr(self, attr + "_hi")
        if lo is not None:
            cur_lo = lo if cur_lo is None else max(cur_lo, lo)
        if hi is not None:
            cur_hi = hi if cur_hi is None else min(cur_hi, hi)
        return dataclasses.replace(self, **{attr + "_lo": cur_lo, attr + "_hi": cur_hi})

    def with_queue(self, lo=None, hi=None) -> "RowFilter":
        return self._bound("queue", lo, hi)

    def with_ts(self, lo=None, hi=None) -> "RowFilter":
        return self._bound("ts", lo, hi)

    def with_phy(self, lo=None, hi=None) -> "RowFilter":
        return self._bound("phy", lo, hi)

    @classmethod
    def from_options(cls, opts: ReadOptions, streaming: bool = False) -> "RowFilter":
        f = cls()
        if opts.topics is not None:
            f = f.with_topics(opts.topics)
        named = set(opts.starting_queue_offsets or {}) | set(opts.ending_queue_offsets or {})
        if named:  # Kafka-style queue offsets: the topics they name
            f = f.with_topics(named)
        if opts.starting_timestamp is not None:
            f = f.with_ts(lo=opts.starting_timestamp * 1000)
        if opts.ending_timestamp is not None:
            f = f.with_ts(hi=opts.ending_timestamp * 1000 - 1)
        if not streaming:
            if isinstance(opts.starting_offsets, int):
                f = f.with_phy(lo=opts.starting_offsets)
            if isinstance(opts.ending_offsets, int):
                f = f.with_phy(hi=opts.ending_offsets - 1)
        return f

    # --- pushdown ----------------------------------------------------------------------------
    def push(self, flt) -> "RowFilter | None":
        """This filter AND ``flt`` (a ``pyspark.sql.datasource.Filter``), or None when ``flt`` is
        not one this source can apply exactly."""
        from pyspark.sql.datasource import (EqualNullSafe, EqualTo, GreaterThan, GreaterThanOrEqual, In,
                                            IsNotNull, LessThan, LessThanOrEqual)

        attr = getattr(flt, "attribute", None)
        if not attr or len(attr) != 1:
            return None
        col = attr[0]
        if isinstance(flt, IsNotNull):  # always true on the columns the source never leaves null
            return self if col not in NULLABLE_COLUMNS else None
        if not hasattr(flt, "value"):
            return None
        if isinstance(flt, In):
            vals = list(flt.value)
            if col == "topic" and all(isinstance(v, str) for v in vals):
                return self.with_topics(vals)
            if col == "queueId" and all(_is_int(v) for v in vals):
                return self.with_queue_ids(vals)
            return None
        v = flt.value
        if col == "topic":
            return self.with_topics([v]) if isinstance(flt, (EqualTo, EqualNullSafe)) and isinstance(v, str) else None
        if col in _INT_COLUMNS:
            if not _is_int(v):
                return None
            attr = "queue" if col == "queueId" else "phy"
        elif col == "storeTimestamp":
            if not isinstance(v, datetime):
                return None
            v, attr = _micros(v), "ts"
        else:
            return None
        if isinstance(flt, (EqualTo, EqualNullSafe)):
            return self._bound(attr, v, v)
        if isinstance(flt, GreaterThan):
            return self._bound(attr, v + 1, None)
        if isinstance(flt, GreaterThanOrEqual):
            return self._bound(attr, v, None)
        if isinstance(flt, LessThan):
            return self._bound(attr, None, v - 1)
        if isinstance(flt, LessThanOrEqual):
            return self._bound(attr, None, v)
        return None

    # --- applying ----------------------------------------------------------------------------
    @property
    def is_empty(self) -> bool:
        """True when no row can match."""
        if self.topics is not None and not self.topics:
            return True
        if self.queue_ids is not None and not self.queue_ids:
            return True
        return any(lo is not None and hi is not None and lo > hi
                   for lo, hi in ((self.queue_lo, self.queue_hi), (self.ts_lo, self.ts_hi), (self.phy_lo, self.phy_hi)))

    def phy_range(self) -> tuple[int | None, int | None]:
        """``[lo, hi)`` of commitlog offsets that can hold matching records."""
        return self.phy_lo, (None if self.phy_hi is None else self.phy_hi + 1)

    def mask(self, batch: M.RecordBatch, seg_start: int, topic_ok: np.ndarray | None) -> np.ndarray | None:
        """Rows of ``batch`` that match (None when all do). ``topic_ok`` is the per-row topic test."""
        m = None

        def conj(x):
            nonlocal m
            m = x if m is None else (m & x)

        if topic_ok is not None:
            conj(topic_ok)
        q = batch.queue_id
        if self.queue_ids is not None:
            conj(np.isin(q, np.fromiter(self.queue_ids, dtype=np.int64)))
        if self.queue_lo is not None:
            conj(q >= self.queue_lo)
        if self.queue_hi is not None:
            conj(q <= self.queue_hi)
        if self.ts_lo is not None or self.ts_hi is not None:
            us = batch.store_timestamp.astype(np.int64) * 1000
            if self.ts_lo is not None:
                conj(us >= self.ts_lo)
            if self.ts_hi is not None:
                conj(us <= self.ts_hi)
        if self.phy_lo is not None or self.phy_hi is not None:
            phy = batch.starts + seg_start
            if self.phy_lo is not None:
                conj(phy >= self.phy_lo)
            if self.phy_hi is not None:
                conj(phy <= self.phy_hi)
        return m
