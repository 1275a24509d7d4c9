"""What a recovery reports: the bytes it cut (:class:`TailCut`), the corrupt records it kept in
place (:class:`CorruptSpan`), and the whole outcome (:class:`RecoveryReport`, the store's
``recovery_report``)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

@dataclass
class TailCut:
    segment: str
    offset: int          # phy offset of the first byte cut
    length: int          # bytes saved (up to the last non-zero byte)
    reason: str
    saved_to: str | None = None


@dataclass
class CorruptSpan:
    """Bytes inside the valid data that do not form a valid record (kept in place, never served)."""

    segment: str         # path of the commitlog segment
    offset: int          # phy offset of the first bad byte
    length: int          # bytes up to the next valid record (or the segment end)
    kind: str            # "record_crc" (framing intact, CRC or completeness check failed) / "record_invalid"
    reason: str


@dataclass
class RecoveryReport:
    #: "normal" (clean shutdown) / "abnormal" (abort file: a crash) / "empty" / "live" (a read-only
    #: open of a store a live writer has open: its abort file means "running", not a crash; the
    #: plan is the abnormal one, applied to the reader's view only)
    mode: str
    applied: bool                  # False for a read-only open (nothing was changed)
    start_offset: int = 0          # first byte scanned
    end_offset: int = 0            # end of valid data (E)
    last_valid_offset: int = -1    # start of the last valid record
    records_scanned: int = 0
    cuts: list[TailCut] = field(default_factory=list)
    corrupt_records: list[CorruptSpan] = field(default_factory=list)
    consume_queues_truncated: list[str] = field(default_factory=list)
    index_files_rebuilt: list[str] = field(default_factory=list)
    redispatch_from: int = 0
    records_redispatched: int = 0
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return not self.cuts and not self.consume_queues_truncated and not self.corrupt_records

    def summary(self) -> str:
        what = "live store (a writer has it open; read-only view)" if self.mode == "live" else \
            f"{self.mode} recovery{'' if self.applied else ' (dry run, read-only)'}"
        s = f"{what}: valid data [{self.start_offset}, {self.end_offset}), {self.records_scanned} records scanned"
        for c in self.cuts:
            s += f"; cut {c.length} bytes at {c.offset} in {c.segment} ({c.reason})"
        for c in self.corrupt_records:
            s += f"; kept {c.length} corrupt bytes at {c.offset} in {os.path.basename(c.segment)} ({c.reason})"
        if self.consume_queues_truncated:
            s += f"; {len(self.consume_queues_truncated)} consume queues truncated"
        if self.index_files_rebuilt:
            s += f"; tail of {len(self.index_files_rebuilt)} index files rebuilt"
        if self.records_redispatched:
            s += f"; {self.records_redispatched} records re-dispatched from {self.redispatch_from}"
        return s

