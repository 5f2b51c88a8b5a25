"""Alpha spending: how much of the false-verdict rate a sequential design may spend by each look, and the critical
value each look's test must reach so that, watched at every look, A/A comparisons call a difference no more often
than that (analyse.sequential decides with them)."""

from __future__ import annotations

import functools
import math

import numpy as np

from . import stats

_GRID_POINTS = 1001  # odd, for Simpson's rule; four times as many move no look's level by 1e-11


def spent(t: np.ndarray | float, alpha: float = stats.ALPHA, gamma: float | None = None) -> np.ndarray:
    """The level spent by information fraction t: Lan & DeMets' Pocock type, or with `gamma` Hwang, Shih & DeCani's
    family (Stat Med 1990, 9:1439), from Pocock-like (gamma 1) through linear (0) to O'Brien-Fleming-like (-4)."""
    t = np.clip(t, 0.0, 1.0)
    if gamma is None:
        return alpha * np.log1p((math.e - 1.0) * t)
    if gamma == 0.0:
        return alpha * t
    return alpha * np.expm1(-gamma * t) / math.expm1(-gamma)


@functools.lru_cache(maxsize=32)
def critical_values(looks: tuple[int, ...], alpha: float = stats.ALPHA, gamma: float | None = None) -> np.ndarray:
    """The two-sided critical z of each look (at looks[k] runs per runner; the last is the budget) such that a
    standard normal score, watched at those looks with no difference, first crosses by look k with probability
    spent(t_k). Stopping for equivalence or noise only lowers that probability (the boundaries are non-binding)."""
    from scipy import optimize, special

    t = np.asarray(looks, dtype=float) / looks[-1]
    shares = np.diff(spent(t, alpha, gamma), prepend=0.0)
    critical = [float(-special.ndtri(shares[0] / 2))]
    # The score S_k = Z_k sqrt(t_k) is Brownian; carry its density over the region that has not crossed yet, as
    # masses on a grid (density times Simpson weight).
    grid, weights = _simpson(critical[0] * math.sqrt(t[0]))
    mass = weights * np.exp(-(grid**2) / (2 * t[0])) / math.sqrt(2 * math.pi * t[0])
    for k in range(1, t.size):
        step = math.sqrt(t[k] - t[k - 1])
        critical.append(
            optimize.brentq(_excess, 0.0, 40.0, args=(math.sqrt(t[k]), grid, mass, step, shares[k]), xtol=1e-10)
        )
        new_grid, weights = _simpson(critical[-1] * math.sqrt(t[k]))
        kernel = np.exp(-(((new_grid[:, None] - grid[None, :]) / step) ** 2) / 2) / (step * math.sqrt(2 * math.pi))
        grid, mass = new_grid, weights * (kernel @ mass)
    values = np.asarray(critical)
    values.setflags(write=False)  # shared by every caller through the cache
    return values


def _excess(c: float, scale: float, grid: np.ndarray, mass: np.ndarray, step: float, share: float) -> float:
    """How much more than its share the score crosses +-c at this look, having not crossed before."""
    from scipy import special

    edge = c * scale
    return float(mass @ (special.ndtr((-edge - grid) / step) + special.ndtr((grid - edge) / step))) - share


def _simpson(edge: float) -> tuple[np.ndarray, np.ndarray]:
    grid = np.linspace(-edge, edge, _GRID_POINTS)
    weights = np.full(_GRID_POINTS, 2.0)
    weights[1::2], weights[[0, -1]] = 4.0, 1.0
    return grid, weights * (grid[1] - grid[0]) / 3
