"""Where the train step's time goes on the CPU: the whole step and its parts, each timed as its own jitted program
on the same model and batch (medians of interleaved repetitions), for the reference code's 1,062,497-parameter 8x8
UNet (configs/digits_reference.py) at batch 128 by default.

    python benchmarks/step_profile.py --devices=1            # every part on one XLA CPU device
    python benchmarks/step_profile.py --devices=2            # the step as the loop runs it on 2 cores

Parts:
- step: the train step of the loop (uniform sampler: no policy), data sharded over the devices;
- forward: the UNet and the loss (train mode); forward+backward: their value and gradient;
- optimizer: global-norm clipping, Adam's update and applying it, on a gradient tree of the parameters' shapes;
- ema: the EMA update of every parameter;
- convolutions, GroupNorms, upsampling: every call of that kind the UNet makes, with the shapes it makes it with
  (recorded by intercepting the modules' calls, run alone, forward and forward+backward); upsampling is measured as
  the model writes it (jnp.repeat twice) and as jax.image.resize nearest, the alternative.
The remainder of the step (step - forward+backward - optimizer - ema) is its own bookkeeping: timesteps, noise,
metrics, histograms. The parts are separate programs, so their sum need not equal the step (XLA fuses across parts).
"""

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="digits_reference", help="a module under configs/")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--devices", type=int, default=1, help="XLA CPU devices (the step's data axis)")
    p.add_argument("--reps", type=int, default=15)
    return p.parse_args()


def timed(fns, reps):
    """{name: median seconds} of argument-less functions returning arrays, interleaved, after one warm-up each."""
    import jax

    for f in fns.values():
        jax.block_until_ready(f())
    times = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(f())
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def main():
    args = parse()
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={args.devices}"
    import importlib

    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax

    from training.setup import build, initial_state
    from training.step import make_apply

    c = importlib.import_module(f"configs.{args.config}").get_config()
    c.train.batch_size = args.batch
    c.sampler.name = "uniform"
    c.mesh.data = args.devices
    setup = build(c)
    state = initial_state(setup)
    batch = setup.example_batch(args.batch)
    step = setup.step_for(1)
    n_params = sum(x.size for x in jax.tree.leaves(state.params))

    one = jax.devices()[0]
    params = jax.device_put(jax.device_get(state.params), one)
    x = jax.device_put(jax.random.normal(jax.random.PRNGKey(0), batch.shape, jnp.float32), one)
    t = jax.device_put(jnp.arange(args.batch, dtype=jnp.int32) % 1000, one)
    apply = make_apply(setup.model)

    def loss(p):
        return jnp.mean((apply(p, x, t, jax.random.PRNGKey(1)) - x) ** 2)

    fwd = jax.jit(loss)
    fwd_bwd = jax.jit(jax.value_and_grad(loss))
    grads = jax.tree.map(jnp.ones_like, params)
    opt_state = setup.tx.init(params)
    opt = jax.jit(lambda g, s, p: optax.apply_updates(p, setup.tx.update(g, s, p)[0]))
    ema = jax.jit(lambda e, p: jax.tree.map(lambda a, b: 0.999 * a + 0.001 * b, e, p))

    # every convolution / GroupNorm / upsampling input the UNet sees
    calls = {"conv": [], "norm": []}

    def record(next_fun, a, kw, context):
        m = context.module
        if context.method_name == "__call__" and isinstance(m, nn.Conv):
            calls["conv"].append(
                (
                    a[0].shape,
                    m.features,
                    tuple(m.kernel_size),
                    (m.strides,) * 2 if isinstance(m.strides, int) else tuple(m.strides or (1, 1)),
                )
            )
        if context.method_name == "__call__" and isinstance(m, nn.GroupNorm):
            calls["norm"].append((a[0].shape, m.num_groups))
        return next_fun(*a, **kw)

    with nn.intercept_methods(record):
        jax.eval_shape(lambda p: apply(p, x, t, jax.random.PRNGKey(1)), params)
    ups = [s for s, *_ in calls["conv"]]  # upsampling: the inputs of the convs that follow a 2x repeat
    ups = [(B, H // 2, W // 2, C) for (B, H, W, C), (b2, h2, w2, c2) in zip(ups[1:], ups[:-1]) if 2 * h2 == H]
    key = jax.random.PRNGKey(2)
    conv_in = [jax.random.normal(key, s) for s, *_ in calls["conv"]]
    conv_k = [jax.random.normal(key, k + (s[-1], f)) * 0.05 for s, f, k, _ in calls["conv"]]
    strides = [st for *_, st in calls["conv"]]

    def convs(ks, xs):
        dn = ("NHWC", "HWIO", "NHWC")
        return sum(
            jnp.sum(jax.lax.conv_general_dilated(a, k, st, "SAME", dimension_numbers=dn) ** 2)
            for a, k, st in zip(xs, ks, strides)
        )

    norm_in = [jax.random.normal(key, s) for s, _ in calls["norm"]]
    norm_mods = [nn.GroupNorm(g) for _, g in calls["norm"]]
    norm_params = [m.init(key, a) for m, a in zip(norm_mods, norm_in)]

    def norms(ps, xs):
        return sum(jnp.sum(m.apply(p, a) ** 2) for m, p, a in zip(norm_mods, ps, xs))

    up_in = [jax.random.normal(key, s) for s in ups]
    rep = lambda a: jnp.repeat(jnp.repeat(a, 2, axis=1), 2, axis=2)
    res = lambda a: jax.image.resize(a, (a.shape[0], 2 * a.shape[1], 2 * a.shape[2], a.shape[3]), "nearest")

    def upsample(fn):
        return lambda xs: sum(jnp.sum(fn(a) ** 2) for a in xs)

    grad2 = lambda f: jax.jit(jax.grad(f, argnums=(0, 1)))
    fns = {
        "step": lambda: step(state, batch)[1]["loss"],
        "forward": lambda: fwd(params),
        "forward+backward": lambda: fwd_bwd(params),
        "optimizer": lambda: opt(grads, opt_state, params),
        "ema": lambda: ema(params, params),
        "convolutions forward": (lambda f: lambda: f(conv_k, conv_in))(jax.jit(convs)),
        "convolutions forward+backward": (lambda f: lambda: f(conv_k, conv_in))(grad2(convs)),
        "GroupNorms forward": (lambda f: lambda: f(norm_params, norm_in))(jax.jit(norms)),
        "GroupNorms forward+backward": (lambda f: lambda: f(norm_params, norm_in))(grad2(norms)),
        "upsampling (repeat) forward+backward": (lambda f: lambda: f(up_in))(jax.jit(jax.grad(upsample(rep)))),
        "upsampling (resize) forward+backward": (lambda f: lambda: f(up_in))(jax.jit(jax.grad(upsample(res)))),
    }
    # the step donates its state: give it a fresh copy each time
    holder = {"state": state}

    def run_step():
        holder["state"], m = step(holder["state"], batch)
        return m["loss"]

    fns["step"] = run_step
    out = timed(fns, args.reps)
    step_ms = 1e3 * out["step"]
    print(
        f"# {args.config}: {n_params:,} parameters, batch {args.batch}, {args.devices} XLA CPU device(s), "
        f"{len(calls['conv'])} convolutions, {len(calls['norm'])} GroupNorms, {len(ups)} upsamplings, "
        f"jax {jax.__version__}, median of {args.reps}"
    )
    print("\n| part | ms | share of the step |\n|---|---|---|")
    for k, v in out.items():
        print(f"| {k} | {1e3 * v:.1f} | {100 * v / out['step']:.0f}% |")
    rest = out["step"] - out["forward+backward"] - out["optimizer"] - out["ema"]
    print(
        f"| rest of the step (step - forward+backward - optimizer - ema) | {1e3 * rest:.1f} | "
        f"{100 * rest / out['step']:.0f}% |"
    )
    print(f"\nstep {step_ms:.1f} ms")


if __name__ == "__main__":
    main()
