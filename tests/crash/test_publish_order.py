"""Appends publish their first 8 bytes (TOTALSIZE, MAGIC) last: a writer that dies in the middle
of a put leaves nothing visible, not a prefix of a batch."""
from __future__ import annotations

import shutil

import crashkit as K

from rmqstore import MessageStore


class _Recorder:
    """Stands in for a segment's mmap: records the slices written, optionally dies before the
    n-th write (as a SIGKILL would), delegates everything else."""

    def __init__(self, mm, die_at: int | None = None):
        self._mm = mm
        self.writes: list[tuple[int, int]] = []
        self.die_at = die_at

    def __setitem__(self, key, value):
        if self.die_at is not None and len(self.writes) == self.die_at:
            raise OSError("killed")
        self.writes.append((key.start, key.stop))
        self._mm[key] = value

    def __getitem__(self, key):
        return self._mm[key]

    def __getattr__(self, name):
        return getattr(self._mm, name)

    def __len__(self):
        return len(self._mm)


def test_single_and_batch_puts_write_their_header_last(tmp_path):
    cfg = K.crash_config(flush_disk_type="ASYNC_FLUSH")
    with MessageStore.open(tmp_path / "s", cfg) as st:
        assert st.put_message(K.message_for(1, 0, 0)).ok  # the segment exists
        mf = st.commit_log.queue.last
        real = mf.mm
        try:
            for put in (lambda: st.put_messages([K.message_for(2, j, 0, 3) for j in range(3)]),
                        lambda: st.put_message(K.message_for(3, 0, 0, 1, ))):
                rec = _Recorder(real)
                mf.mm = rec
                pos = mf.wrote_position
                r = put()
                assert r.ok
                assert rec.writes[-1] == (pos, pos + 8), rec.writes
                assert all(a >= pos + 8 for a, _ in rec.writes[:-1]), rec.writes
        finally:
            mf.mm = real


def test_a_writer_dying_mid_batch_leaves_nothing_visible(tmp_path):
    cfg = K.crash_config(flush_disk_type="ASYNC_FLUSH")
    path = tmp_path / "s"
    with MessageStore.open(path, cfg) as st:
        before = [st.put_message(K.message_for(1, i, i)) for i in range(5)]
        mf = st.commit_log.queue.last
        real = mf.mm
        mf.mm = _Recorder(real, die_at=1)  # the body of the batch is written, the header is not
        try:
            r = st.put_messages([K.message_for(2, j, 0, 3) for j in range(3)])
            assert not r.ok
        finally:
            mf.mm = real
        shutil.copytree(path, tmp_path / "crash", ignore=shutil.ignore_patterns("lock", "*.creating"))
    with MessageStore.open(tmp_path / "crash", cfg) as st:
        rep = st.recovery_report
        end = before[-1].phy_offset + before[-1].wrote_bytes
        assert rep.end_offset == end and len(rep.cuts) == 1 and rep.cuts[0].offset == end
        found = K.all_records(st)
        assert sorted(k[:2] for k in found) == [(1, i) for i in range(5)]
        assert st.verify() == []
