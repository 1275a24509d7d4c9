"""What verify reports: :class:`Finding` objects, each with the repairs that would set it right.

A repair is one typed action (:data:`Repair`): :class:`RebuildQueue`, :class:`RebuildIndex`,
:class:`LowerCheckpoint`, :class:`CutTail`. A finding the commitlog cannot repair (a damaged
record, a queue offset that jumps inside the commitlog) carries none. :class:`FindingLog` lists at
most :data:`MAX_PER_KIND` findings of a kind, then one summary finding that carries the repairs of
those it did not list (so a repair of the listing still repairs everything).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Union

KINDS = ("record_crc", "record_invalid", "cq_unit", "cq_gap", "index_item", "checkpoint_ahead", "tail_garbage")
MAX_PER_KIND = 1000


@dataclass(frozen=True)
class RebuildQueue:
    """Regenerate one consume queue from the commitlog and swap it in."""

    topic: str
    queue_id: int


@dataclass(frozen=True)
class RebuildIndex:
    """Regenerate the whole index from the commitlog and swap it in."""


@dataclass(frozen=True)
class LowerCheckpoint:
    """Write ``value`` into the checkpoint's ``field`` (a value ahead of the data); the running
    value becomes the lower of the two."""

    field: str
    value: int


@dataclass(frozen=True)
class CutTail:
    """Zero the non-zero bytes after the end of valid data (saved under ``recovery/`` first).
    ``[start, end)`` is the extent inside segment ``path`` when verify looked; the repair measures
    the tail again under the put lock (a writer may have appended since)."""

    path: str
    start: int
    end: int


Repair = Union[RebuildQueue, RebuildIndex, LowerCheckpoint, CutTail]


@dataclass(frozen=True)
class Finding:
    """One problem: ``path`` + ``offset`` locate its bytes (see :mod:`rmqstore.engine.verify`).
    ``repairs`` (not part of equality: two findings of the same damage are equal) are what
    :func:`~rmqstore.engine.verify.repair` applies; ``fixed`` is set on what it repaired."""

    kind: str
    path: str | None
    offset: int | None
    detail: str
    fixed: bool = False
    repairs: tuple[Repair, ...] = field(default=(), compare=False)


def not_listed(kind: str, n: int, repairs: Iterable = ()) -> Finding:
    """The summary finding for ``n`` findings of ``kind`` beyond the listing."""
    return Finding(kind, None, None, f"{n} more {kind} findings not listed", repairs=tuple(repairs))


class FindingLog:
    """Findings as the checks add them: at most :data:`MAX_PER_KIND` of a kind are kept in
    ``items``; :meth:`result` adds one summary finding per kind that overflowed."""

    def __init__(self):
        self.items: list[Finding] = []
        self.counts: dict[str, int] = {}
        self.unlisted_repairs: dict[str, dict] = {}  # kind -> repairs of findings not listed (ordered, once each)

    def add(self, finding: Finding) -> None:
        kind = finding.kind
        assert kind in KINDS, kind
        n = self.counts.get(kind, 0) + 1
        self.counts[kind] = n
        if n <= MAX_PER_KIND:
            self.items.append(finding)
        else:
            self.unlisted_repairs.setdefault(kind, {}).update(dict.fromkeys(finding.repairs))

    def result(self) -> list[Finding]:
        out = list(self.items)
        for kind, n in self.counts.items():
            if n > MAX_PER_KIND:
                out.append(not_listed(kind, n - MAX_PER_KIND, self.unlisted_repairs.get(kind, ())))
        return out
