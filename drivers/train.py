"""The training loop, importable from a notebook: `train(config, workdir)`.

build (training/setup.py) -> restore or initialise -> compile the step programs (named and timed before the progress
bar starts) -> one jitted, donated train step per batch -> metrics at log steps, checkpoints every
config.train.ckpt_every steps and at the end, periodic evaluation (evaluation/periodic.py, handed the run's Setup and
EMA parameters) -> EMA samples and timestep pictures. The loop's pieces are the methods of `Loop`: `_log` (the
window's summary and the divergence check), `_checkpoint`, `_periodic_eval` and the stop request, each with its own
clock.
"""

import json
import os
import sys
import time

import jax
import numpy as np
from absl import logging

from config.validate import check_workdir
from core import progress
from data import DATASETS, BatchIterator, check_splits, data_fingerprints, load_split
from diffusion.base import Sampling
from diffusion.generate import generate
from evaluation.periodic import PeriodicEval
from training import aot, report
from training import checkpoint as ckpt
from training.lock import hold
from training.mesh import wait_for_every_process
from training.preemption import StopRequest
from training.setup import Setup, build, initial_state


class TrainingDiverged(RuntimeError):
    pass


FLAGS = (
    ("loss", "finite_loss"),
    ("gradients", "finite_grads"),
    ("parameters (norm beyond float32)", "finite_params"),
    ("sampler outputs", "finite_sampler"),
)


def summarise(window, first_step):
    """Host-side summary of a window of per-step metrics: (first non-finite step, what was non-finite, None) or
    (None, None, (scalars, arrays))."""
    host = jax.device_get(window)
    for i, m in enumerate(host):
        bad = [what for what, flag in FLAGS if not bool(m[flag])]
        if bad:
            return first_step + i, bad, None
    scalars = {k: float(np.mean([m[k] for m in host])) for k in ("loss", "mse", "grad_norm", "param_norm")}
    scalars["lr"] = float(host[-1]["lr"])
    arrays = {k: np.sum([m[k] for m in host], axis=0) for k in ("t_hist", "t_loss_sum")}
    for k, v in host[-1].items():
        if k.startswith("sampler/"):
            if np.ndim(v) == 0:
                scalars[k] = float(v)
            else:
                arrays[k] = np.asarray(v)
    return None, None, (scalars, arrays)


def train(config, workdir: str):
    """Train (or resume) in `workdir`, holding its lock (training/lock.py: WorkdirLocked if another run holds it).
    Returns the final train state."""
    check_workdir(workdir)
    check_splits(config.data)  # the splits read later (text: validation, test), before anything is built
    if "://" not in workdir:
        workdir = os.path.abspath(workdir)  # orbax needs absolute paths
    with hold(workdir):  # one writer per workdir (training/lock.py): before anything is built, compiled or written
        setup = build(config)
        ckpt.check_run_identity(config, workdir)
        mngr = ckpt.make_manager(config, workdir)
        try:  # closed on every way out: orbax's threads must not outlive it
            return Loop(setup, mngr, workdir).run()
        finally:
            mngr.close()


class Loop:
    """One attempt at a run: restore or initialise, step to config.train.num_steps (or a stop signal), then samples
    and pictures."""

    def __init__(self, setup: Setup, mngr, workdir: str):
        self.setup, self.mngr, self.workdir = setup, mngr, workdir
        self.c = setup.config
        self.is_main = jax.process_index() == 0
        self.metrics_path = os.path.join(workdir, "metrics.jsonl")
        self.periodic = None
        self.last_saved = mngr.latest_step()

    # -- start ----------------------------------------------------------------------------------------------------
    def _restore_or_init(self):
        """(state, start step); drops metrics records past the restored step (an attempt that died after them)."""
        if self.last_saved is None:
            if self.is_main:  # records of an earlier attempt that never reached a checkpoint
                report.truncate_metrics(self.metrics_path, 0)
            return initial_state(self.setup), 0
        abstract = ckpt.abstract_with_shardings(self.setup.abstract_state, self.setup.state_shardings)
        say = lambda line: print(line, file=sys.stderr, flush=True) if self.is_main else None
        state, self.last_saved = ckpt.restore_newest_readable(self.mngr, abstract, self.workdir, say)
        if state is None:
            raise ckpt.WorkdirMismatch(
                f"--workdir={self.workdir}: no checkpoint in it could be read (they are in "
                f"{self.workdir}/{ckpt.DAMAGED}); run the same command again to start from step 0"
            )
        start = int(state.step)
        if self.is_main:
            report.truncate_metrics(self.metrics_path, start)
            logging.info("resumed from %s at step %d", self.workdir, start)
            print(f"Resuming from checkpoint step {start} in {self.workdir}", flush=True)
        return state, start

    def _start_clocks(self, start):
        """train_seconds: wall-clock of training alone (steps, logging, checkpoints; not periodic evaluation),
        summed over the run's resumed attempts."""
        prior = [r["train_seconds"] for r in report.read_metrics(self.metrics_path) if "train_seconds" in r]
        self.seconds_before = prior[-1] if prior and start else 0.0
        self.t_start = self.t_window = time.perf_counter()
        self.eval_seconds = 0.0

    def _train_seconds(self, now):
        return self.seconds_before + now - self.t_start - self.eval_seconds

    # -- pieces of a step -----------------------------------------------------------------------------------------
    def _log(self, done):
        """Summarise the window ending at step `done`: raise TrainingDiverged at its first non-finite step, else
        write the record."""
        bad_step, bad, summary = summarise(self.window, self.window_start)
        if bad_step is not None:
            where = (
                f"the last good checkpoint is step {self.last_saved} in {self.workdir}/checkpoints (resume with a "
                f"changed config, e.g. a lower --config.train.lr)"
                if self.last_saved is not None
                else "no checkpoint was written (start again with a changed config, e.g. a lower --config.train.lr)"
            )
            raise TrainingDiverged(f"step {bad_step}: non-finite {', '.join(bad)}; {where}")
        scalars, arrays = summary
        now = time.perf_counter()
        scalars["steps_per_sec"] = len(self.window) / (now - self.t_window)
        scalars["train_seconds"] = self._train_seconds(now)
        self.writer.write(done, scalars, arrays)
        self.bar.set_postfix(loss=f"{scalars['loss']:.4f}", refresh=False)
        self.window, self.window_start, self.t_window = [], done, now

    def _checkpoint(self, done, state):
        ckpt.save(self.mngr, done, state)
        self.last_saved = done

    def _periodic_eval(self, done, state):
        """The periodic evaluation of the EMA parameters at step `done`; its time is kept out of the training
        clocks."""
        t_eval = time.perf_counter()
        scalars = self._periodic()(state.ema_params)
        if isinstance(self.setup.process, Sampling) and hasattr(DATASETS[self.c.data.name], "write_samples"):
            # text: samples at every evaluation are cheap to look at (images get their grid at the end)
            key = jax.random.fold_in(jax.random.PRNGKey(self.c.seed), 0x5A5A)
            samples = generate(self.setup, state.ema_params, key, self.c.sample.num)
            if self.is_main:
                report.save_samples(self.c.data, samples, os.path.join(self.workdir, "samples", f"step_{done:07d}"))
        scalars["train_seconds"] = self._train_seconds(t_eval)
        self.writer.write(done, scalars)
        self.bar.set_postfix(
            {k.split("/")[1]: f"{v:.3f}" for k, v in scalars.items() if "seconds" not in k}, refresh=False
        )
        spent = time.perf_counter() - t_eval
        self.eval_seconds += spent
        self.t_window += spent  # steps_per_sec counts training only

    def _periodic(self) -> PeriodicEval:
        """The periodic evaluation, made at its first use (it reads the test split and the feature space), with its
        protocol written next to the metrics."""
        if self.periodic is None:
            self.periodic = PeriodicEval(self.setup)
            if self.is_main:
                os.makedirs(os.path.join(self.workdir, "eval"), exist_ok=True)
                with open(os.path.join(self.workdir, "eval", "periodic_protocol.json"), "w") as f:
                    json.dump(self.periodic.protocol(), f, indent=2)
                space = self.periodic.space
                if space is not None:
                    report.record_fingerprints(
                        self.workdir, periodic_features=dict(space=space.name, **self.periodic.fingerprint)
                    )
        return self.periodic

    def _catch_up_periodic(self, start, state):
        """The last attempt stopped (signal, kill, a record cut mid-write) after checkpoint `start` but before its
        periodic evaluation was logged: log it now (the final step's too: a finished run's record that was cut)."""
        every = self.c.eval.periodic.every
        if not (start and every and start % every == 0 and start <= self.c.train.num_steps):
            return
        from jax.experimental import multihost_utils

        have = any("periodic/seconds" in r and r["step"] == start for r in report.read_metrics(self.metrics_path))
        if not bool(multihost_utils.broadcast_one_to_all(np.asarray(have))):  # process 0 holds the metrics
            self.writer.write(start, {**self._periodic()(state.ema_params), "train_seconds": self.seconds_before})

    def _compile(self, start):
        """Compile the step programs the loop will run, before the progress bar starts, so that the bar's first
        step is a step and not the compile. Lowered from the abstract state and batch with the step's shardings:
        the jitted step then reuses the executable at its first call (traced once, the same program)."""
        steps = range(start, self.c.train.num_steps)
        programs = [(label, step) for label, step in aot.loop_programs(self.setup) if self._runs(step, steps)]
        if not programs:
            return
        if self.is_main:
            what = "the train step" if len(programs) == 1 else f"the {len(programs)} train-step programs"
            print(f"Compiling {what} (once per run; the progress bar starts after it)...", file=sys.stderr, flush=True)
        seconds = 0.0
        for _, step in programs:
            compiled, s = aot.compile_step(self.setup, step)
            seconds += s
            aot.check_memory(self.setup, compiled)  # refused before it runs out of memory
        if self.is_main:
            print(f"Compiled in {seconds:.1f} s", file=sys.stderr, flush=True)

    def _runs(self, program_step, steps) -> bool:
        """Whether the loop runs, at one of `steps`, the program that step `program_step` runs."""
        period = self.setup.sampler.period()
        if period is None:
            return len(steps) > 0
        periodic = program_step % period == 0
        return any((s % period == 0) == periodic for s in steps[: period + 1])

    # -- the loop -------------------------------------------------------------------------------------------------
    def run(self):
        c = self.c
        state, start = self._restore_or_init()
        if self.is_main:  # what this attempt reads and runs on, before its first record
            report.record_fingerprints(self.workdir, start, data=data_fingerprints(c.data))
        batches = BatchIterator(
            load_split(c.data, "train"),
            c.seed,
            c.train.batch_size,
            self.setup.batch_sharding,
            start_step=start,
            random_flip=c.data.get("random_flip", False),  # text has no flips
            labels=self.setup.conditional,
            workers=c.data.workers,
        )
        self.writer = report.MetricWriter(self.workdir, enabled=self.is_main)
        self.bar = None
        self.window, self.window_start = [], start
        self._start_clocks(start)  # train_seconds counts the compile, as when the first step compiled it
        stopped_by = None
        try:
            self._catch_up_periodic(start, state)
            with StopRequest(c.train.stop_check_every) as stop:
                # a signal during the compile stops the run after its first step, with a checkpoint
                self._compile(start)
                wait_for_every_process("compiled")  # the first step's collectives find every process there
                self.bar = progress.bar(
                    c.train.num_steps, "train", unit="step", initial=start, enabled=self.is_main, in_logs=True
                )
                for step in range(start, c.train.num_steps):
                    _, batch = next(batches)
                    state, metrics = self.setup.step_for(step)(state, batch)
                    self.window.append(metrics)
                    done = step + 1
                    stop_now = stop.requested(done)
                    save_now = done % c.train.ckpt_every == 0 or done == c.train.num_steps or stop_now
                    if done % c.train.log_every == 0 or save_now:
                        self._log(done)
                    if save_now:
                        self._checkpoint(done, state)
                    if c.eval.periodic.every and done % c.eval.periodic.every == 0 and not stop_now:
                        self._periodic_eval(done, state)
                    self.bar.update(1)
                    if stop_now:
                        stopped_by = stop.name
                        break
        finally:
            batches.close()
            if self.bar is not None:
                self.bar.close()
            self.writer.close()

        if stopped_by is not None:
            if self.is_main:
                print(
                    f"Stopped by {stopped_by} at step {self.last_saved}: checkpoint {self.last_saved} is in "
                    f"{self.workdir}/checkpoints. Run the same command to resume.",
                    flush=True,
                )
            return state
        if c.train.num_steps > 0:
            self._final_samples(state)
        return state

    def _final_samples(self, state):
        """The EMA parameters' sample grid (where the process samples: diffusion.base.Sampling) and the pictures of
        the timesteps drawn."""
        lines = []
        if isinstance(self.setup.process, Sampling):
            key = jax.random.fold_in(jax.random.PRNGKey(self.c.seed), 0x5A5A)
            images = generate(self.setup, state.ema_params, key, self.c.sample.num)
            stem = os.path.join(self.workdir, "samples", f"step_{int(state.step):07d}")
            path = stem + ".png"
            if self.is_main:
                path = report.save_samples(self.c.data, images, stem)
            lines.append(f"Samples: {path}")
        else:
            lines.append(f"Samples: none (config.diffusion.name={self.c.diffusion.name!r} does not sample)")
        if not self.is_main:
            return
        pics = report.timestep_pictures(self.metrics_path, self.workdir, self.setup.process.time.extent)
        print("\n".join(lines + [f"Picture: {p}" for p in pics]), flush=True)
