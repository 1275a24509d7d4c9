"""The Spark workers' malloc tuning: freed numpy temporaries stay mapped for the next batch."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import resource, sys, numpy as np
from rmqstore.spark.tasks import tune_worker_malloc
if sys.argv[1] == "tune":
    tune_worker_malloc()
a = np.ones(3 << 18); del a  # 6 MiB, once to warm up
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    a = np.ones(3 << 18)
    del a
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str, **env) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], env={**os.environ, **env}, capture_output=True,
                         text=True, check=True)
    return int(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
def test_tuned_worker_reuses_freed_memory():
    assert _faults("tune") < 50  # the 6 MiB blocks come back from the heap, already mapped
    assert _faults("plain") > 200  # glibc maps and unmaps each one (its pages fault in every time)
    assert _faults("tune", RMQSTORE_MALLOC_TUNING="0") > 200  # the switch turns it off
