"""The progress bar of every phase that takes longer than a few seconds (training's steps, evaluation's bound, its
samples and features, latent encoding, reference statistics): tqdm on stderr, named by its phase, with the rate and
the time left once a unit is done."""

import sys


def bar(total: int, desc: str, *, unit: str = "it", initial: int = 0, enabled: bool = True, in_logs: bool = False):
    """A tqdm bar of `total` units named `desc`. It draws on a terminal only (quiet in tests, pipes and logs), or
    with in_logs also there, a line every 30 s (training's, for a log that shows it is alive); `enabled`: False on
    every process but the first."""
    from tqdm import tqdm

    tty = sys.stderr.isatty()
    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        unit=unit,
        disable=not enabled or not (tty or in_logs),
        dynamic_ncols=True,
        mininterval=0.5 if tty else 30.0,
    )
