"""The training loop, importable from a notebook: `train(config, workdir)`.

Shapes -> shardings -> sharded init (or restore) -> one jitted, donated train step -> metrics at log steps,
checkpoints every config.train.ckpt_every steps and at the end -> EMA samples and timestep pictures.
"""
import dataclasses
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from data import BatchIterator, load_split
from diffusion import make_schedule, sampling
from samplers import make_sampler
from training import checkpoint as ckpt
from training import report
from training.mesh import batch_sharding, make_mesh, replicated, state_shardings
from training.preemption import StopRequest
from training.state import image_shape, init_state, make_model, make_optimizer
from training.step import make_apply, make_train_step
from training.validate import check_workdir, validate
from weightings import make_weighting


class TrainingDiverged(RuntimeError):
    pass


@dataclasses.dataclass
class Setup:
    config: object
    mesh: object
    schedule: object
    model: object
    sampler: object
    weighting: object
    tx: object
    train_step: object  # the raw pure function
    step_fn: object  # jitted with shardings, state donated
    abstract_state: object
    state_shardings: object
    batch_sharding: object

    def jit_step(self, fn):
        """jit a (state, batch) -> (state, metrics) function with the train step's shardings, state donated."""
        return jax.jit(fn, in_shardings=(self.state_shardings, self.batch_sharding),
                       out_shardings=(self.state_shardings, replicated(self.mesh)), donate_argnums=(0,))


def build(config) -> Setup:
    """Validate the config and build everything that does not depend on the workdir. Compiles nothing yet."""
    validate(config)
    mesh = make_mesh(config)
    schedule = make_schedule(config.diffusion.schedule, config.diffusion.num_timesteps)
    model = make_model(config)
    sampler = make_sampler(config, schedule)
    weighting = make_weighting(config, schedule)
    tx = make_optimizer(config)
    raw = make_train_step(config, model, schedule, sampler, weighting, tx)
    abstract = jax.eval_shape(lambda k: init_state(config, model, tx, sampler, k), jax.random.PRNGKey(0))
    state_sh = state_shardings(abstract, mesh, config.mesh.shard_params)
    b_sh = batch_sharding(mesh)
    setup = Setup(config, mesh, schedule, model, sampler, weighting, tx, raw, None, abstract, state_sh, b_sh)
    setup.step_fn = setup.jit_step(raw)
    return setup


def initial_state(setup: Setup):
    c = setup.config
    init = jax.jit(lambda k: init_state(c, setup.model, setup.tx, setup.sampler, k), out_shardings=setup.state_shardings)
    return init(jax.random.PRNGKey(c.seed))


def generate(setup: Setup, params, key, num: int, method: str = None, steps: int = None) -> np.ndarray:
    """num samples from `params` as uint8 [num, H, W, C], on every process (a collective: all processes call it).
    The batch is sharded over the data axis (num padded up to a multiple of its size). method/steps default to
    config.sample.method / config.sample.ddim_steps."""
    from jax.experimental import multihost_utils

    c = setup.config
    method = method or c.sample.method
    steps = steps or c.sample.ddim_steps
    apply = make_apply(setup.model)
    n_dev = setup.mesh.shape["data"]
    shape = image_shape(c, -(-num // n_dev) * n_dev)
    constrain = lambda x: jax.lax.with_sharding_constraint(x, setup.batch_sharding)
    if method == "ddim":
        fn = lambda p, k: sampling.ddim(lambda x, t: apply(p, x, t), setup.schedule, c.diffusion.target, k, shape,
                                        steps, constrain=constrain)
    else:
        fn = lambda p, k: sampling.ancestral(lambda x, t: apply(p, x, t), setup.schedule, c.diffusion.target,
                                             c.diffusion.variance, k, shape, constrain=constrain)
    to_u8 = lambda x: jnp.round((x + 1.0) * 127.5).clip(0, 255).astype(jnp.uint8)
    x = jax.jit(lambda p, k: to_u8(fn(p, k)), out_shardings=setup.batch_sharding)(params, key)
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))[:num]


def _summarise(window, first_step):
    """Host-side summary of a window of per-step metrics; raises TrainingDiverged at the first non-finite step."""
    host = jax.device_get(window)
    for i, m in enumerate(host):
        bad = [q for q, k in (("loss", "finite_loss"), ("gradients", "finite_grads"),
                              ("parameters (norm beyond float32)", "finite_params"),
                              ("sampler outputs", "finite_sampler")) if not bool(m[k])]
        if bad:
            return first_step + i, bad, None
    scalars = {k: float(np.mean([m[k] for m in host])) for k in ("loss", "mse", "grad_norm", "param_norm")}
    scalars["lr"] = float(host[-1]["lr"])
    arrays = {k: np.sum([m[k] for m in host], axis=0) for k in ("t_hist", "t_loss_sum")}
    for k, v in host[-1].items():
        if k.startswith("sampler/"):
            (scalars if np.ndim(v) == 0 else arrays)[k] = float(v) if np.ndim(v) == 0 else np.asarray(v)
    return None, None, (scalars, arrays)


def _start_periodic(setup, workdir, is_main):
    from training.evaluate import PeriodicEval

    periodic = PeriodicEval(setup)
    if is_main:
        import json

        os.makedirs(os.path.join(workdir, "eval"), exist_ok=True)
        with open(os.path.join(workdir, "eval", "periodic_protocol.json"), "w") as f:
            json.dump(periodic.protocol(), f, indent=2)
    return periodic


def train(config, workdir: str):
    """Train (or resume) in `workdir`. Returns the final train state."""
    check_workdir(workdir)
    if "://" not in workdir:
        workdir = os.path.abspath(workdir)  # orbax needs absolute paths
    setup = build(config)
    ckpt.check_run_identity(config, workdir)
    mngr = ckpt.make_manager(config, workdir)
    try:  # closed on every way out: orbax's threads must not outlive it
        return _run(setup, mngr, workdir)
    finally:
        mngr.close()


def _run(setup, mngr, workdir):
    """Restore or initialise, run the loop to config.train.num_steps (or a stop signal), then samples and pictures."""
    c = setup.config
    is_main = jax.process_index() == 0
    latest = mngr.latest_step()
    metrics_path = os.path.join(workdir, "metrics.jsonl")
    if latest is not None:
        abstract = ckpt.abstract_with_shardings(setup.abstract_state, setup.state_shardings)
        state = ckpt.restore(mngr, latest, abstract, workdir)
        start = int(state.step)
        if is_main:
            report.truncate_metrics(metrics_path, start)
            logging.info("resumed from %s at step %d", workdir, start)
            print(f"Resuming from checkpoint step {start} in {workdir}", flush=True)
    else:
        state = initial_state(setup)
        start = 0
        if is_main:  # records of an earlier attempt that never reached a checkpoint
            report.truncate_metrics(metrics_path, 0)

    train_source = load_split(c, "train")
    batches = BatchIterator(train_source, c.seed, c.train.batch_size, setup.batch_sharding, start_step=start)
    writer = report.MetricWriter(workdir, enabled=is_main)
    from tqdm import tqdm

    bar = tqdm(total=c.train.num_steps, initial=start, disable=not is_main, dynamic_ncols=True, desc="train",
               mininterval=0.5 if sys.stderr.isatty() else 30.0)
    window, window_start, t_window = [], start, time.perf_counter()
    # train_seconds: wall-clock of training alone (steps, logging, checkpoints; not periodic evaluation), summed
    # over the run's resumed attempts
    prior = [r["train_seconds"] for r in report.read_metrics(metrics_path) if "train_seconds" in r]
    seconds_before, t_start, eval_seconds = (prior[-1] if prior and start else 0.0), t_window, 0.0
    periodic = None
    if start and c.eval.periodic.every and start % c.eval.periodic.every == 0 and start < c.train.num_steps:
        # the last attempt stopped (signal, kill) after this checkpoint but before its periodic evaluation was logged
        have = any("periodic/seconds" in r and r["step"] == start for r in report.read_metrics(metrics_path))
        from jax.experimental import multihost_utils

        if not bool(multihost_utils.broadcast_one_to_all(np.asarray(have))):  # process 0 holds the metrics
            periodic = _start_periodic(setup, workdir, is_main)
            writer.write(start, {**periodic(state.ema_params), "train_seconds": seconds_before})
    last_saved = latest
    stopped_by = None
    stop = StopRequest()
    try:
        with stop:
            for step in range(start, c.train.num_steps):
                _, batch = next(batches)
                state, metrics = setup.step_fn(state, batch)
                window.append(metrics)
                done = step + 1
                stop_now = stop.requested()
                save_now = done % c.train.ckpt_every == 0 or done == c.train.num_steps or stop_now
                if done % c.train.log_every == 0 or save_now:
                    bad_step, bad, summary = _summarise(window, window_start)
                    if bad_step is not None:
                        raise TrainingDiverged(
                            f"step {bad_step}: non-finite {', '.join(bad)}; the last good checkpoint is step "
                            f"{last_saved} in {workdir}/checkpoints (resume with a changed config, e.g. a lower "
                            f"--config.train.lr)")
                    scalars, arrays = summary
                    now = time.perf_counter()
                    scalars["steps_per_sec"] = len(window) / (now - t_window)
                    scalars["train_seconds"] = seconds_before + now - t_start - eval_seconds
                    writer.write(done, scalars, arrays)
                    bar.set_postfix(loss=f"{scalars['loss']:.4f}", refresh=False)
                    window, window_start, t_window = [], done, now
                if save_now:
                    ckpt.save(mngr, done, state)
                    last_saved = done
                if c.eval.periodic.every and done % c.eval.periodic.every == 0 and not stop_now:
                    t_eval = time.perf_counter()
                    if periodic is None:
                        periodic = _start_periodic(setup, workdir, is_main)
                    scalars = periodic(state.ema_params)
                    scalars["train_seconds"] = seconds_before + t_eval - t_start - eval_seconds
                    writer.write(done, scalars)
                    bar.set_postfix({k.split("/")[1]: f"{v:.3f}" for k, v in scalars.items() if "seconds" not in k},
                                    refresh=False)
                    spent = time.perf_counter() - t_eval
                    eval_seconds += spent
                    t_window += spent  # steps_per_sec counts training only
                bar.update(1)
                if stop_now:
                    stopped_by = stop.name
                    break
    finally:
        batches.close()
        bar.close()
        writer.close()

    if stopped_by is not None:
        if is_main:
            print(f"Stopped by {stopped_by} at step {last_saved}: checkpoint {last_saved} is in {workdir}/checkpoints. "
                  f"Run the same command to resume.", flush=True)
        return state
    if c.train.num_steps > 0:
        key = jax.random.fold_in(jax.random.PRNGKey(c.seed), 0x5A5A)
        images = generate(setup, state.ema_params, key, c.sample.num)
        if not is_main:
            return state
        path = os.path.join(workdir, "samples", f"step_{int(state.step):07d}.png")
        report.save_grid(images, path)
        pics = report.timestep_pictures(metrics_path, workdir, setup.schedule.num_timesteps)
        print(f"Samples: {path}" + "".join(f"\nPicture: {p}" for p in pics), flush=True)
    return state
