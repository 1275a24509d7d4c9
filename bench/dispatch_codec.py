"""Per-record cost of the dispatcher's record decoding and field extraction, each in its two forms,
paired batch by batch on one store (the forms alternate, so both see the same machine):

* decoding: ``decode_batch`` (IPv4-only batches read as one 88-byte row per record) against
  ``_decode_any`` (each field gathered on its own: the path of batches with IPv6 hosts);
* extraction: ``extract_dispatch_columns`` with the properties gathered as padded rows (the usual
  batch) against the gather by position (what batches of very uneven properties take).

Both forms of each are the code in the tree, tested to give the same columns. Reads the harness's
prebuilt 1,000,000-message store (``make bench`` builds it). Run:
``.venv/bin/python bench/dispatch_codec.py [rounds]``; prints a Markdown table.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import WORK, _cfg  # noqa: E402

from rmqstore import MessageStore  # noqa: E402
from rmqstore.engine import dispatch as D  # noqa: E402
from rmqstore.engine.dispatch import iter_record_batches  # noqa: E402
from rmqstore.format import message as M  # noqa: E402


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    path = os.path.join(WORK, "prebuilt-q-1000000-128")
    if not os.path.isdir(path):
        raise SystemExit(f"{path} is missing: `make bench` builds it")
    padded = D._gather_ranges
    per = {k: [] for k in ("decode rows", "decode fields", "extract padded", "extract by position")}
    with MessageStore.open(path, _cfg(mapped_file_size_commit_log=256 << 20), read_only=True) as src:
        cl = src.commit_log
        batches = list(iter_record_batches(cl.queue, cl.min_offset, cl.confirm_offset))
        n = sum(len(b) for _, b in batches)
        decoders = [("decode rows", M.decode_batch), ("decode fields", M._decode_any)]
        # (the prebuilt store's properties are all one length, so _gather_ranges takes padded rows)
        gathers = [("extract padded", padded), ("extract by position", D._gather_by_position)]
        for r in range(rounds):
            t = dict.fromkeys(per, 0.0)
            for k, (mf, b) in enumerate(batches):
                first = (k + r) % 2  # which form goes first alternates batch by batch
                for name, decode in decoders[first:] + decoders[:first]:
                    a = time.perf_counter()
                    decode(mf.u8, b.starts)
                    t[name] += time.perf_counter() - a
                for name, gather in gathers[first:] + gathers[:first]:
                    D._gather_ranges = gather
                    a = time.perf_counter()
                    D.extract_dispatch_columns(mf.u8, b, src.delay_levels_ms, {})
                    t[name] += time.perf_counter() - a
                D._gather_ranges = padded
            for name in per:
                per[name].append(t[name] / n * 1e6)
    print(f"# Dispatcher codec, paired by batch ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {n:,} records "
          f"of the harness's prebuilt store, {rounds} rounds, medians)\n")
    print("| step | µs per record |")
    print("|---|---:|")
    for name, v in per.items():
        print(f"| {name} | {statistics.median(v):.3f} |")


if __name__ == "__main__":
    main()
