"""Largest-batch search: doubling then bisection, the same for every runner."""

import pytest

from fwbench_aggregator.plan.bracket_search import BatchSearch


@pytest.mark.parametrize("capacity", [1, 2, 3, 7, 64, 100, 1000, 4095])
def test_finds_exactly_the_largest_batch_that_fits(capacity):
    search = BatchSearch(lambda batch: batch <= capacity)
    assert search.largest() == capacity
    # Doubling then bisection: about 2 log2(capacity) tries, never a linear scan.
    assert len(search.tried) <= 2 * capacity.bit_length() + 2


def test_nothing_fits():
    assert BatchSearch(lambda batch: False).largest() is None


def test_the_limit_caps_the_search():
    search = BatchSearch(lambda batch: True, limit=48)
    assert search.largest() == 48
    assert max(search.tried) == 48
