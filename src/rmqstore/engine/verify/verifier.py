"""verify: every check over an open store, in order; writes nothing."""
from __future__ import annotations

import contextlib
import logging
import time
from typing import Callable

from .context import VerifyContext
from .findings import Finding
from .index_checks import check_index
from .log_checks import check_commitlog
from .queue_checks import check_consume_queues
from .state_checks import check_checkpoint, check_tail

log = logging.getLogger(__name__)


class Verifier:
    """The checks of one verify run over ``store`` (a :class:`~rmqstore.engine.contract.StoreParts`):
    the commitlog, the consume queues, the index, the checkpoint, the tail (:meth:`run`). The
    snapshot they judge against is taken when it is made (:class:`Snapshot`)."""

    def __init__(self, store, progress: Callable[[int], None] | None = None):
        self.store = store
        self.ctx = VerifyContext.of(store, progress)

    def run(self) -> list[Finding]:
        ctx = self.ctx
        facts = check_commitlog(ctx)
        check_consume_queues(ctx, facts)
        check_index(ctx, facts)
        check_checkpoint(ctx, facts.scan)
        with self.store.commit_log.put_lock if not self.store.read_only else contextlib.nullcontext():
            check_tail(ctx, facts.end)  # (a writer appends nothing meanwhile)
        return ctx.found.result()


def verify(store, progress: Callable[[int], None] | None = None) -> list[Finding]:
    """Run every check (see :mod:`rmqstore.engine.verify`) and return the findings, each with the
    repairs :func:`~rmqstore.engine.verify.repair` would apply; writes nothing. A writer first
    waits until everything written is dispatched, a reader catches up with its writer.
    ``progress(done)`` counts up to :func:`work_bytes`."""
    if not store.read_only:
        store.wait_dispatched(timeout=120)
    else:
        store.refresh()
    t0 = time.monotonic()
    with store.maintenance_lock:
        findings = Verifier(store, progress).run()
    log.info("%s: verify found %d problems in %.2fs", store.path, len(findings), time.monotonic() - t0)
    return findings
