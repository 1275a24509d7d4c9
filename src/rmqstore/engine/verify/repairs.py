"""repair: apply the repairs verify's findings carry, to a writer.

In order: cut the tail (its bytes saved under ``recovery/`` first, as recovery does), lower the
checkpoint values that are ahead, rebuild the named consume queues and the index from the
commitlog and swap them in (:func:`~rmqstore.engine.verify.rebuild_derived`). What can change
between the verify and the repair is measured again: the tail under the put lock, the checkpoint
values against the running ones, the rebuilt files from the commitlog as it is then."""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Iterable

from ...errors import ReadOnlyStoreError
from .. import recovery as R
from ..checkpoint import StoreCheckpoint
from .derived import rebuild_derived
from .findings import CutTail, Finding, LowerCheckpoint, RebuildIndex, RebuildQueue
from .state_checks import tail_extents

log = logging.getLogger(__name__)


@dataclass
class RepairPlan:
    """The repairs of a list of findings, merged: the queues to rebuild, whether to rebuild the
    index, the checkpoint values to write, whether to cut the tail."""

    queues: set = field(default_factory=set)
    index: bool = False
    checkpoint: dict = field(default_factory=dict)
    cut_tail: bool = False

    @classmethod
    def of(cls, findings: Iterable[Finding]) -> "RepairPlan":
        plan = cls()
        for f in findings:
            for r in f.repairs:
                if isinstance(r, RebuildQueue):
                    plan.queues.add((r.topic, r.queue_id))
                elif isinstance(r, RebuildIndex):
                    plan.index = True
                elif isinstance(r, LowerCheckpoint):
                    plan.checkpoint[r.field] = r.value
                elif isinstance(r, CutTail):
                    plan.cut_tail = True
        return plan


def cut_tail(store) -> list:
    """Zero the non-zero bytes after a writer's end of data (saved under ``recovery/`` first);
    returns the extents cut (measured now, under the put lock)."""
    with store.commit_log.put_lock:
        ext = tail_extents(store, list(store.commit_log.queue.files), 0)
        if ext:
            cuts = R.describe_cuts(ext, "verify: bytes after the end of valid data")
            R.save_cut_bytes(store.path, ext, cuts)
            for mf, a, b in ext:
                mf.zero_from(a, b)
                mf.flush(0)
            log.warning("%s: verify cut %d tail extents: %s", store.path, len(cuts), [c.saved_to for c in cuts])
    return ext


def lower_checkpoint(store, values: dict[str, int]) -> None:
    """Write ``values`` into the checkpoint file; the running values become the lower of the two."""
    vals = dataclasses.replace(StoreCheckpoint.read_file(store.checkpoint.path), **values)
    for k, val in values.items():
        setattr(store.checkpoint.values, k, min(getattr(store.checkpoint.values, k), val))
    store.checkpoint.flush(vals)


def apply_plan(store, plan: RepairPlan) -> set:
    """Apply ``plan`` to a writer; returns the repairs applied."""
    done: set = set()
    if plan.cut_tail and cut_tail(store):
        done.add(CutTail)
    if plan.checkpoint:
        lower_checkpoint(store, plan.checkpoint)
        done.add(LowerCheckpoint)
    if plan.queues or plan.index:
        rebuild_derived(store, plan.queues, plan.index)
        done.update((RebuildQueue, RebuildIndex))
    return done


def repair(store, findings: list[Finding]) -> list[Finding]:
    """Apply the repairs ``findings`` carry (from :func:`verify`) to ``store``, a writer; returns
    the findings, those whose repairs were all applied marked ``fixed``. Findings without repairs
    (damaged records, queue offsets that jump in the commitlog) stay unfixed."""
    if store.read_only:
        raise ReadOnlyStoreError("repair needs the store opened for writing", path=store.path)
    plan = RepairPlan.of(findings)
    with store.maintenance_lock:
        done = apply_plan(store, plan)
    out = [dataclasses.replace(f, fixed=True) if f.repairs and all(type(r) in done for r in f.repairs) else f
           for f in findings]
    log.warning("%s: verify fixed %d of %d problems", store.path, sum(f.fixed for f in out), len(out))
    return out
