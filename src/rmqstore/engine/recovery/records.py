"""Record validity for recovery: whether a record (or a batch of them) is complete and intact, and
where valid data continues after bad bytes, across segments. The rules themselves (framing, the
resync rule MAGIC + PHYSICALOFFSET, completeness, CRCs) are the commitlog cursor's
(:mod:`rmqstore.format.cursor`)."""
from __future__ import annotations

import numpy as np

from ...format import cursor as C
from ...format import message as M

#: Candidate positions examined per resynchronisation attempt (pathological data guard).
MAX_RESYNC_CANDIDATES = 100_000
_MAGIC_BYTES = C.RECORD_MAGIC_BYTES + (C.BLANK_MAGIC_BYTES,)


def record_ok_at(mf, pos: int, cfg, *, check_crc: bool = True) -> bool:
    """Whether a complete, valid record starts at ``pos`` of segment ``mf``: the cursor's resync rule
    (magic, length formula, PHYSICALOFFSET), no zero-filled end, and its CRC (with ``check_crc``)."""
    if not C.is_record_at(mf.mm, mf.u8, mf.file_size, mf.file_from_offset, pos):
        return False
    batch = M.decode_batch(mf.u8, np.array([pos], dtype=np.int64))
    return bool(C.intact(mf.mm, mf.u8, batch, cfg.force_verify_prop_crc)[0] if check_crc
                else C.complete(mf.u8, batch)[0])


def max_record_size(cfg) -> int:
    return min(cfg.max_message_size + 65536, cfg.mapped_file_size_commit_log)


def find_resync(files, i: int, bad_pos: int, cfg, *, check_crc: bool = True) -> tuple[int, int] | None:
    """After bad bytes at ``files[i]`` position ``bad_pos``: where the next intact record (or the
    end-of-segment blank) starts, as ``(segment index, position)``, or None when nothing valid
    follows (a torn or corrupt tail). Records are written back to back, so an intact successor
    starts within one maximal record length (anywhere in the rest of a segment before the last);
    past the segment end, the next segment must start with an intact record."""
    mf = files[i]
    # a segment before the last is full (records up to its blank end): all of it is searched; in
    # the last one an intact successor starts within one maximal record length
    window_end = mf.file_size if i + 1 < len(files) else min(mf.file_size, bad_pos + max_record_size(cfg) + 8)
    cands = C.magic_candidates(mf.mm, bad_pos + 5, window_end, _MAGIC_BYTES, most=MAX_RESYNC_CANDIDATES)
    for q in cands:
        if q <= bad_pos:
            continue
        if C.is_blank_at(mf.mm, mf.file_size, q) or record_ok_at(mf, q, cfg, check_crc=check_crc):
            return i, q
    if window_end >= mf.file_size and i + 1 < len(files) and record_ok_at(files[i + 1], 0, cfg, check_crc=check_crc):
        return i + 1, 0
    if getattr(mf, "stand_in", "") and i + 1 < len(files):
        return i + 1, 0  # the rest of a segment that is missing or short is a known gap, not a tail
    return None

