"""The benchmarks' own arithmetic (no training): the convergence horizon and the paired intervals."""

import numpy as np
import pytest
from scipy import stats

from benchmarks.bound_reduction import interval
from benchmarks.samplers import horizon


def test_horizon_is_the_first_evaluation_no_later_one_undercuts_by_more_than_tol():
    steps = np.arange(1, 13) * 500
    bpd = np.array([5.0, 4.8, 4.7, 4.65, 4.63, 4.625, 4.62, 4.618, 4.62, 4.617, 4.619, 4.616])
    # 4.63 at 2500 is undercut by 4.616 (more than 0.01 below); 4.625 at 3000 is not
    assert horizon(steps, bpd, 0.01) == 3000
    assert horizon(steps, bpd, 0.02) == 2500
    assert horizon(steps[:8], bpd[:8], 0.01) is None  # 4,000 steps do not reach 1.5 x 3,000: too short to tell
    rising = np.array([5.0, 4.8, 4.7, 4.75, 4.8, 4.85, 4.9, 4.95, 5.0, 5.05, 5.1, 5.15])  # overfitting after 1500
    assert horizon(steps, rising, 0.0) == 1500


def test_interval_is_students_t_over_replicates():
    x = np.array([0.3, -0.1, 0.2, 0.4, 0.0])
    mean, half = interval(x)
    assert mean == pytest.approx(0.16)
    assert half == pytest.approx(stats.t.ppf(0.975, 4) * np.std(x, ddof=1) / np.sqrt(5))
