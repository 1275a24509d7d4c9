"""Record validity: whether a record (or a batch of them) is complete and intact, and where valid
data continues after bad bytes (the resync rule: MAGIC + PHYSICALOFFSET)."""
from __future__ import annotations

import numpy as np

from ...format import message as M

#: Candidate positions examined per resynchronisation attempt (pathological data guard).
MAX_RESYNC_CANDIDATES = 100_000
_MAGIC_BYTES = (M.I32.pack(M.MAGIC_V1), M.I32.pack(M.MAGIC_V2), M.I32.pack(M.BLANK_MAGIC))


def batch_checks(mf, batch: M.RecordBatch, cfg, *, check_crc: bool) -> tuple[np.ndarray, np.ndarray]:
    """For records whose framing ``decode_batch`` accepted: ``(structure_ok, crc_ok)``.

    ``structure_ok``: PHYSICALOFFSET equals the position, the last TOPIC byte and the last
    PROPERTIES byte (when there are properties) are not zero. ``crc_ok``: body CRC, or the
    properties CRC under ``forceVerifyPropCRC`` (all True when ``check_crc`` is off)."""
    u8 = mf.u8
    n = len(batch)
    ok = batch.valid.copy()
    if n == 0:
        return ok, ok.copy()
    idx = np.flatnonzero(ok)
    if idx.size:
        phy_ok = batch.phy_offset[idx] == mf.file_from_offset + batch.starts[idx]
        tl = batch.topic_len[idx]
        tp = batch.topic_pos[idx]
        has_t = tl > 0
        last_t = u8[np.where(has_t, tp + tl - 1, 0)]
        pl = batch.props_len[idx]
        pp = batch.props_pos[idx]
        has_p = pl > 0
        last_p = u8[np.where(has_p, pp + pl - 1, 0)]
        ok[idx] = phy_ok & (~has_t | (last_t != 0)) & (~has_p | (last_p != 0))
    crc = np.ones(n, dtype=bool)
    if check_crc and idx.size:
        if cfg.force_verify_prop_crc:
            for i in idx.tolist():
                crc[i] = M.check_record(mf.mm, int(batch.starts[i]), mf.file_size, check_crc=True,
                                        force_verify_prop_crc=True)[1]
        else:
            crc[idx] = M.body_crc_ok(mf.mm, take_idx(batch, idx))
    return ok, crc


def take_idx(batch: M.RecordBatch, idx: np.ndarray) -> M.RecordBatch:
    return M.RecordBatch(**{k: v[idx] for k, v in batch.__dict__.items()})


def record_ok_at(mf, pos: int, cfg, *, check_crc: bool = True) -> bool:
    """Whether a complete, valid record starts at ``pos`` of segment ``mf``."""
    if pos < 0 or pos + 91 > mf.file_size:
        return False
    batch = M.decode_batch(mf.u8, np.array([pos], dtype=np.int64))
    if not batch.valid[0]:
        return False
    ok, crc = batch_checks(mf, batch, cfg, check_crc=check_crc)
    return bool(ok[0] and crc[0])


def _blank_ok_at(mf, pos: int) -> bool:
    if pos + 8 > mf.file_size:
        return False
    total, magic = M.BLANK.unpack_from(mf.mm, pos)
    return magic == M.BLANK_MAGIC and total == mf.file_size - pos


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
    mm = mf.mm
    cands: list[int] = []
    for pat in _MAGIC_BYTES:
        j = mm.find(pat, bad_pos + 5, window_end)
        tried = 0
        while j >= 0 and tried < MAX_RESYNC_CANDIDATES:
            cands.append(j - 4)
            tried += 1
            j = mm.find(pat, j + 1, window_end)
    for q in sorted(set(cands)):
        if q <= bad_pos:
            continue
        if _blank_ok_at(mf, q) or record_ok_at(mf, q, cfg, check_crc=check_crc):
            return i, q
    if window_end >= mf.file_size and i + 1 < len(files) and record_ok_at(files[i + 1], 0, cfg, check_crc=check_crc):
        return i + 1, 0
    if getattr(mf, "stand_in", "") and i + 1 < len(files):
        return i + 1, 0  # the rest of a segment that is missing or short is a known gap, not a tail
    return None

