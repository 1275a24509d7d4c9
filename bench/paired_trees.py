"""The store's put rows of two source trees in alternating, paired rounds (before/after a change).

Run:  .venv/bin/python bench/paired_trees.py OLD_TREE NEW_TREE [--rounds 4]
      (e.g. `git worktree add /tmp/old <rev>` for OLD_TREE, `.` for NEW_TREE)

Each round runs the harness's `rmq_put` workloads (a fresh child per measurement) from one tree, then
the other, the order alternating by round; prints the medians and new/old.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CODE = r'''
import sys, json
sys.path.insert(0, {src!r}); sys.path.insert(0, {bench!r})
import harness as H
res = {{}}
for name, args in (("put_message, 1 thread, dispatcher running", (200000, 128, True)),
                   ("put_message until dispatched", (200000, 128, True, 1, 0, True)),
                   ("put_messages(256)", (500000, 128, True, 1, 256))):
    r = H.run_child(H.rmq_put, *args)
    res[name] = r["ops"] / r["seconds"]
print(json.dumps(res))
'''


def run(tree: str) -> dict[str, float]:
    tree = os.path.abspath(tree)
    code = CODE.format(src=os.path.join(tree, "src"), bench=os.path.join(tree, "bench"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    got: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    for r in range(a.rounds):
        for which in (("old", "new") if r % 2 == 0 else ("new", "old")):
            for name, rate in run(getattr(a, which)).items():
                got[which].setdefault(name, []).append(rate)
            print(f"round {r} {which}: done", flush=True)
    print("| workload | old msgs/s | new msgs/s | new/old |\n|---|---:|---:|---:|")
    for name in got["new"]:
        o, n = statistics.median(got["old"][name]), statistics.median(got["new"][name])
        print(f"| {name} | {o:,.0f} | {n:,.0f} | {n / o:.2f} |")


if __name__ == "__main__":
    main()
