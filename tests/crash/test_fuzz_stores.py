"""Whole-store damage fuzzing (see :mod:`storefuzz`): seeded cases in the default suite; the
``scripts/fuzz_stores`` runner takes any number of them and prints the seed of every failure."""
from __future__ import annotations

import os

import pytest

import storefuzz as F

CASES = int(os.environ.get("RMQ_FUZZ_CASES", "200"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("fuzz") / "reference")
    stored = F.build(path)
    return path, stored


@pytest.mark.parametrize("block", range(4))
def test_random_damage_never_breaks_a_promise(reference, tmp_path, block):
    path, stored = reference
    seeds = range(block * CASES // 4, (block + 1) * CASES // 4)
    done = [F.run_case(path, stored, str(tmp_path), seed) for seed in seeds]
    assert len(done) == len(seeds)
    kinds = {d.split(": ")[1].split()[0] for d in done}
    assert kinds & {"flip", "zero", "truncate", "delete"}


def test_the_reference_store_reads_back_whole(reference, tmp_path):
    path, stored = reference
    assert len(stored) >= 150 and len({s.phy for s in stored}) == len(stored)
    from rmqstore import MessageStore
    with MessageStore.open(path, F.CFG, read_only=True) as st:
        pulled, found = F.read_everything(st, {s.phy: s for s in stored}, stored)
    assert pulled == found == {s.phy for s in stored}
