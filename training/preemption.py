"""Stopping cleanly on SIGTERM or SIGINT (a preemption notice, `kill`, Ctrl-C).

The handler only records the signal; the training loop sees it after the step in flight, writes a checkpoint of that
step and returns, so the process exits 0 and the same command resumes. The handler then steps aside: a second
signal gets the previous behaviour (a second Ctrl-C interrupts at once; orbax's atomic commit keeps the last complete
checkpoint readable either way).
With several processes, all must stop at the same step: every `check_every` steps (config.train.stop_check_every)
the processes all-gather their flags and stop together when any has one. Between those steps nothing is
synchronised, so the host keeps dispatching steps ahead of the devices (a per-step all-gather and host read would
serialise them). A single process checks its own flag after every step.
"""

import signal
import threading

import jax
import numpy as np

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest:
    def __init__(self, check_every: int = 1):
        self.check_every = check_every
        self.signum = None
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():  # signal handlers can only be set there
            self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
            for s in SIGNALS:
                # SA_RESTART: the kernel may deliver the signal to any thread, e.g. one of gloo's or XLA's in a
                # blocking socket call, which would otherwise fail with EINTR inside a C library (Python retries
                # its own calls, PEP 475); the handler only sets a flag, so nothing needs interrupting
                signal.siginterrupt(s, False)
        return self

    def _handle(self, signum, frame):
        self.signum = signum
        self._restore()

    def _restore(self):
        for s, h in self._previous.items():
            signal.signal(s, h)
        self._previous = {}

    def __exit__(self, *exc):
        self._restore()

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else "another process's signal"

    def requested(self, step: int) -> bool:
        """Whether to stop after step `step` (the number of steps done): the same answer on every process."""
        local = self.signum is not None
        if jax.process_count() == 1:
            return local
        if step % self.check_every:
            return False
        from jax.experimental import multihost_utils

        return bool(np.any(multihost_utils.process_allgather(np.asarray(local))))
