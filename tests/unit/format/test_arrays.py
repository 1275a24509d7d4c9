"""stable_argsort: the same permutation as numpy's stable argsort, on the fast path and the fallback."""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rmqstore.format.arrays import stable_argsort


@given(hnp.arrays(np.int64, st.integers(0, 300), elements=st.integers(0, 12)))
def test_few_distinct_keys(keys):
    assert stable_argsort(keys).tolist() == np.argsort(keys, kind="stable").tolist()


@given(hnp.arrays(np.int64, st.integers(0, 300), elements=st.integers(0, 2**62)))
def test_huge_keys_take_the_fallback(keys):
    assert stable_argsort(keys).tolist() == np.argsort(keys, kind="stable").tolist()


@given(hnp.arrays(np.int64, st.integers(0, 300), elements=st.integers(-5, 5)))
def test_negative_keys_take_the_fallback(keys):
    assert stable_argsort(keys).tolist() == np.argsort(keys, kind="stable").tolist()


def test_large_random_input_and_dtypes():
    rng = np.random.default_rng(7)
    for dtype in (np.int64, np.int32, np.uint32):
        keys = rng.integers(0, 500_000, 200_000).astype(dtype)
        before = keys.copy()
        got = stable_argsort(keys)
        assert got.dtype == np.int64 and np.array_equal(got, np.argsort(keys, kind="stable"))
        assert np.array_equal(keys, before)  # the input is left as it was
