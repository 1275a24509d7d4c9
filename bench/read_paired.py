"""get_message or query_message, one tree against another, in paired alternating rounds.

Not collected by pytest. Usage::

    .venv/bin/python bench/read_paired.py pull|query OLD_TREE NEW_TREE [--rounds 5] [--work DIR]

Each measurement is a fresh process of the given tree (``PYTHONPATH=<tree>/src``) running this
tree's harness (``bench/harness.py``: ``rmq_pull`` pulls every queue in batches of 32; ``rmq_query``
looks up 20,000 random keys exactly) over one store of 1,000,000 keyed 128-byte messages, built once
by ``harness._prebuilt`` under ``--work``. Rounds alternate the order; ratios are new over old.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

_CHILD = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
import harness
harness.WORK = sys.argv[2]
os.makedirs(harness.WORK, exist_ok=True)
store = harness._prebuilt(1_000_000, 128, "read-paired")
r = harness.rmq_pull(store) if sys.argv[3] == "pull" else harness.rmq_query(store, 1_000_000, 20_000, True)
print(json.dumps({"rate": r["ops"] / r["seconds"]}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("pull", "query"))
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--work", default="/tmp/rmqstore-read-paired")
    args = ap.parse_args()
    rates: dict[str, list[float]] = {"old": [], "new": []}
    for r in range(args.rounds):
        order = [("old", args.old), ("new", args.new)]
        for name, tree in (order if r % 2 == 0 else order[::-1]):
            env = dict(os.environ, PYTHONPATH=os.path.join(tree, "src"))
            out = subprocess.run([sys.executable, "-c", _CHILD, HERE, args.work, args.what], env=env,
                                 capture_output=True, text=True, check=True)
            rates[name].append(json.loads(out.stdout.strip().splitlines()[-1])["rate"])
    ratios = [n / o for o, n in zip(rates["old"], rates["new"])]
    unit = "msgs/s" if args.what == "pull" else "queries/s"
    for name in ("old", "new"):
        print(f"{name}: {', '.join(f'{x:,.0f}' for x in rates[name])} {unit} (median {statistics.median(rates[name]):,.0f})")
    print(f"new/old per round: {', '.join(f'{x:.2f}' for x in ratios)}; median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
