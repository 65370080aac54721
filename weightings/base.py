"""The weighting contract (see weightings/__init__.py)."""
import numpy as np


class Weighting:
    name = "base"

    @classmethod
    def validate(cls, config) -> None:
        """Raise ValueError naming the field when the weighting's config fields are out of range."""

    @classmethod
    def table(cls, config, schedule) -> np.ndarray:
        raise NotImplementedError


def snr(schedule) -> np.ndarray:
    """alpha_bar / (1 - alpha_bar), float64 (inf where alpha_bar = 1)."""
    ab = schedule.np64["alphas_cumprod"]
    with np.errstate(divide="ignore"):
        return ab / (1.0 - ab)
