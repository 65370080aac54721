"""The loss-weighting contract and registry (see weightings/__init__.py)."""

from typing import Any, Dict

import numpy as np

from core.registry import NESTED, Registry

WEIGHTINGS = Registry("weighting", NESTED)


class Weighting:
    """A weighting declares `name`, its own `FIELDS` (config.weighting.<name>) and `table(cfg, process)` -> w [T]
    float64, computed once on the host from its own sub-config and the diffusion process."""

    name = "base"
    FIELDS: Dict[str, Any] = {}

    @classmethod
    def table(cls, cfg, process) -> np.ndarray:
        raise NotImplementedError


def snr(process) -> np.ndarray:
    """alpha_bar / (1 - alpha_bar), float64 (inf where alpha_bar = 1)."""
    ab = process.schedule.np64["alphas_cumprod"]
    with np.errstate(divide="ignore"):
        return ab / (1.0 - ab)
