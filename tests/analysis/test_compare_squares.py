"""compare's columnar noise squares its CVs as Python's float power does, to the last bit
(`_squares`: x*x where that is pow's answer, pow itself where it may not be), so the
noise bands of compare.csv are the per-row `noise_pct`'s (issue 36)."""

import math

import numpy as np

from bwprof.analysis.compare import _squares


def _python(cell: float) -> float:
    try:
        return cell**2
    except OverflowError:
        return math.inf


def _same(values: np.ndarray) -> None:
    got = _squares(values)
    want = np.array([_python(cell) for cell in values.tolist()], dtype="float64")
    assert np.array_equal(got.view(np.int64), want.view(np.int64)), values[
        got.view(np.int64) != want.view(np.int64)][:5]


def test_random_cvs_square_as_python_does():
    rng = np.random.default_rng(36)
    _same(np.concatenate([rng.random(200_000) * 0.1, rng.random(50_000),
                          np.exp(rng.uniform(-700, 700, 100_000)),
                          -np.exp(rng.uniform(-700, 700, 10_000))]))


def test_edge_cells_square_as_python_does():
    tiny, huge = 5e-324, 1.7976931348623157e308
    _same(np.array([0.0, -0.0, math.nan, math.inf, -math.inf, tiny, -tiny, 1e-300, 1e-160,
                    1.4916681462400413e-154, 1e155, 1.3407807929942596e154, huge, -huge,
                    2.0**-500, 2.0**500, 2.0**511, 1.0, 3.0, 0.1, 1 / 3]))


def test_cells_where_pow_is_not_x_times_x_square_as_python_does():
    # Squares within reach of pow's rounding: x*x's exact value near a tie.
    rng = np.random.default_rng(7)
    cells = rng.random(2_000_000)
    python = np.array([cell**2 for cell in cells.tolist()])
    _same(cells[python != cells * cells][:1000])
    _same(cells[:200_000])
