"""stable_argsort: the same permutation as numpy's stable argsort, on the fast path and the fallback;
range_positions: the positions of byte ranges, as their definition with np.repeat gives them;
rows_at / padded_rows: byte rows at arbitrary offsets, as slicing gives them."""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pytest

from rmqstore.format.arrays import padded_rows, range_positions, rows_at, stable_argsort


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


@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(-2, 40)), max_size=60))
def test_range_positions_match_the_definition(ranges):
    starts = np.array([s for s, _ in ranges], dtype=np.int64)
    lens = np.array([n for _, n in ranges], dtype=np.int64)
    want = [s + j for s, n in ranges for j in range(max(n, 0))]
    got = range_positions(starts, lens)
    assert got.dtype == np.int64 and got.tolist() == want


@given(st.binary(min_size=0, max_size=300), st.lists(st.integers(0, 400), max_size=30), st.integers(1, 70))
def test_rows_at_is_slicing(data, offs, width):
    u8 = np.frombuffer(data, dtype=np.uint8)
    offs = np.array(offs, dtype=np.int64)
    if all(o + width <= len(data) for o in offs.tolist()):
        got = rows_at(u8, offs, width)
        assert got.shape == (offs.size, width)
        assert [bytes(r) for r in got] == [data[o:o + width] for o in offs.tolist()]
        got.fill(0)  # a copy: the source is untouched
        assert u8.tobytes() == data
    else:  # a row that does not fit is an error, never bytes from elsewhere
        with pytest.raises(IndexError):
            rows_at(u8, offs, width)


@given(st.binary(min_size=80, max_size=300), st.lists(st.tuples(st.integers(0, 200), st.integers(0, 10)), max_size=20),
       st.integers(10, 70))
def test_padded_rows_fill_past_each_length(data, rows, width):
    u8 = np.frombuffer(data, dtype=np.uint8)
    rows = [(o, n) for o, n in rows if o + width <= len(data)]
    offs = np.array([o for o, _ in rows], dtype=np.int64)
    lens = np.array([n for _, n in rows], dtype=np.int64)
    got = padded_rows(u8, offs, lens, width, 0xEE) if rows else None
    for i, (o, n) in enumerate(rows):
        assert bytes(got[i]) == data[o:o + n] + b"\xee" * (width - n)
