"""Adding a part is one file: a sampler defined here, registered here, trained through main.py's code path, resumed
exactly, and refused in one line for a bad value of its own field, without editing any other file of the project.
Also: what the registries derive from the parts' field specs (defaults, checks, the run identity)."""

import io
import json
import os
import shutil
from contextlib import redirect_stderr

import chex
import jax
import jax.numpy as jnp
import pytest

from config.fields import FieldError, Int, Num
from conftest import restore_checkpoint, tiny_config
from models import MODELS
from samplers import SAMPLERS, Sampler, StepContext


class CountingSampler(Sampler):
    """A toy sampler with state: p(bin) proportional to smoothing + the number of draws in the bin so far (a
    rich-get-richer urn); t uniform within the bin. Its own fields: bins and smoothing."""

    name = "toy_urn"
    FIELDS = dict(bins=Int(4, 1, "T"), smoothing=Num(1.0, 0.0, lo_open=True))

    @classmethod
    def check(cls, cfg, ctx):
        if ctx["T"] % cfg.bins:
            raise FieldError("bins", cfg.bins, f"must divide T = {ctx['T']}")

    def init(self, key, x0):
        return dict(counts=jnp.zeros((self.cfg.bins,), jnp.float32))

    def sample(self, state, key, x0):
        k_bin, k_t = jax.random.split(key)
        logits = jnp.log(self.cfg.smoothing + state["counts"])
        b = jax.random.categorical(k_bin, logits, shape=(x0.shape[0],))
        width = self.T // self.cfg.bins
        t = b * width + jax.random.randint(k_t, b.shape, 0, width)
        return t.astype(jnp.int32), jnp.ones(b.shape, jnp.float32), dict(bin=b)

    def update(self, state, ctx: StepContext):
        counts = state["counts"] + jnp.zeros_like(state["counts"]).at[ctx.aux["bin"]].add(1.0)
        return dict(counts=counts), dict(draws=jnp.sum(counts))


@pytest.fixture
def toy():
    SAMPLERS.register(CountingSampler)
    try:
        yield CountingSampler
    finally:
        SAMPLERS.unregister(CountingSampler.name)


def run(config, workdir, mode="train"):
    """main.py's code path in-process: (exit status, stderr lines)."""
    import main

    err = io.StringIO()
    with redirect_stderr(err):
        status = main.run(config, str(workdir), mode)
    return status, err.getvalue().strip().splitlines()


def toy_config(**overrides):
    return tiny_config(
        **{
            "sampler.name": "toy_urn",
            "sampler.toy_urn.bins": 5,
            "eval.periodic.every": 0,
            "train.log_every": 1,
            **overrides,
        }
    )


@pytest.mark.slow  # over 20 s: CI's second job
def test_a_sampler_defined_in_a_test_trains_resumes_and_is_checked(toy, tmp_path):
    from configs.default import get_config

    assert get_config().sampler.toy_urn.to_dict() == {"bins": 4, "smoothing": 1.0}  # composed from the registry
    whole = tiny_config()  # every other part's defaults are unchanged
    assert "toy_urn" in whole.sampler and whole.sampler.name == "adaptive"

    # 3 steps in one go, and 2 steps, a real checkpoint, then the same command to 3
    assert run(toy_config(**{"train.num_steps": 3, "train.ckpt_every": 3}), tmp_path / "one")[0] == 0
    assert run(toy_config(**{"train.num_steps": 2, "train.ckpt_every": 2}), tmp_path / "two")[0] == 0
    assert run(toy_config(**{"train.num_steps": 3, "train.ckpt_every": 3}), tmp_path / "two")[0] == 0
    step, one = restore_checkpoint(tmp_path / "one")
    _, two = restore_checkpoint(tmp_path / "two", step=3)
    assert step == 3
    assert float(one["sampler_state"]["counts"].sum()) == 3 * 16  # the sampler's own state moved and was saved
    chex.assert_trees_all_equal(one, two)  # bit for bit: model, optimizer, EMA, the sampler's counts
    ident = json.load(open(tmp_path / "one" / "run_config.json"))
    assert ident["sampler"] == {"name": "toy_urn", "toy_urn": {"bins": 5, "smoothing": 1.0}}

    # a bad value of its own field, and a value its own check refuses: one line each, nothing written
    for field, value, needle in [
        ("smoothing", -1.0, "config.sampler.toy_urn.smoothing=-1.0 is not allowed: must be a number > 0.0"),
        (
            "bins",
            2000,
            "config.sampler.toy_urn.bins=2000 is not allowed: must be an integer "
            "in 1..1000 (config.diffusion.num_timesteps)",
        ),
        ("bins", 3, "config.sampler.toy_urn.bins=3 is not allowed: must divide T = 1000"),
    ]:
        status, err = run(toy_config(**{f"sampler.toy_urn.{field}": value}), tmp_path / "bad")
        assert status == 2 and len(err) == 1 and err[0] == f"error: {needle}", err
    assert not (tmp_path / "bad" / "checkpoints").exists()
    # its fields define the run: a workdir of another smoothing is refused
    status, err = run(toy_config(**{"train.num_steps": 3, "sampler.toy_urn.smoothing": 2.0}), tmp_path / "one")
    assert status == 2 and "(workdir -> now: config.sampler.toy_urn.smoothing: 1.0 -> 2.0)" in err[0]


def test_registering_a_clashing_or_nameless_part_is_refused(toy):
    class Again(Sampler):
        name = "toy_urn"

    class Nameless(Sampler):
        name = "not a name"

    class Name(Sampler):
        name = "name"  # its sub-config would be config.sampler.name

    class Shadow:  # a model's own field named like the models' common field config.model.dtype
        name = "shadow"
        FIELDS = dict(dtype=Int(1))

    for registry, part, needle in [
        (SAMPLERS, Again, "already registered"),
        (SAMPLERS, Nameless, "identifier"),
        (SAMPLERS, Name, "clash"),
        (MODELS, Shadow, "clash"),
    ]:
        with pytest.raises(ValueError, match=needle):
            registry.register(part)
    assert "name" not in SAMPLERS and "shadow" not in MODELS


def test_fields_come_from_the_specs_and_mutable_fields_do_not_define_a_run():
    from config import schema
    from config.validate import check_fields
    from training.checkpoint import run_identity

    c = tiny_config()
    fields = schema.active_fields(c)
    assert fields["sampler.adaptive.policy_lr"].mutable and fields["data.data_dir"].mutable
    assert not fields["sampler.adaptive.sweep_stride"].mutable and not fields["model.ch"].mutable
    # every train field may change on resume but weight_decay (it changes the optimizer state's structure)
    train_like = [
        p for p in fields if p.split(".")[0] in ("train", "eval", "mesh", "sample") and p != "train.weight_decay"
    ]
    assert all(fields[p].mutable for p in train_like) and not fields["train.weight_decay"].mutable
    assert "sampler.speed.k" not in fields  # another sampler's sub-config does not count
    ident = run_identity(c)
    assert "policy_lr" not in ident["sampler"]["adaptive"] and "data_dir" not in ident["data"]
    assert set(ident) == {"seed", "data", "model", "diffusion", "sampler", "weighting", "train"}
    assert ident["train"] == {"weight_decay": 0.0}  # the one train field that defines a run
    c.unlock()
    c.model.width = 3  # a field without a spec cannot exist
    with pytest.raises(Exception, match=r"config.model.width is not a config field"):
        check_fields(c)


def test_a_workdir_written_before_a_field_existed_still_resumes(finished_run, tmp_path):
    """run_config.json of an older version lacks config.model.name and config.diffusion.name: at their defaults
    they match."""
    from training.checkpoint import check_run_identity

    wd = tmp_path / "wd"
    shutil.copytree(finished_run[0], wd)
    path = wd / "run_config.json"
    old = json.loads(path.read_text())
    del old["model"]["name"], old["diffusion"]["name"]
    path.write_text(json.dumps(old))
    c = tiny_config(**{"train.num_steps": 4, "train.ckpt_every": 4})
    check_run_identity(c, str(wd))  # no error
    assert os.path.exists(path)


def test_importing_the_checkpoint_module_changes_no_global_setting():
    import subprocess
    import sys

    from conftest import ROOT

    code = (
        "import absl.logging as l, orbax.checkpoint as ocp, jax; v = l.get_verbosity(); "
        "h = ocp.type_handlers.get_type_handler(jax.Array); import training.checkpoint; "
        "assert l.get_verbosity() == v, 'verbosity'; "
        "assert ocp.type_handlers.get_type_handler(jax.Array) is h, 'handler'; print('ok')"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "ok", r.stderr[-2000:]


def test_a_model_whose_module_lacks_num_classes_is_refused_in_one_line():
    """The train step, the sampler and evaluation read module.num_classes (models/base.py): a model part whose
    module lacks it, or reports another count than it was built with, is refused when built."""
    import flax.linen as nn
    import ml_collections

    from models import make_model

    class NoClasses(nn.Module):
        dtype: str = "float32"

        def __call__(self, x, t, y=None, train=False):
            return x

    class Fixed(NoClasses):
        num_classes: int = 3  # whatever it was built with

    class Toy:
        name = "toy_net"
        FIELDS = {}
        module = NoClasses

        @classmethod
        def build(cls, cfg, *, num_classes=0, out_channels=None):
            return cls.module()

    MODELS.register(Toy)
    try:
        cfg = ml_collections.ConfigDict(dict(name="toy_net", class_cond=True))
        with pytest.raises(TypeError, match=r"^model 'toy_net': its module must have `num_classes` \(models"):
            make_model(cfg, num_classes=10)
        Toy.module = Fixed
        with pytest.raises(TypeError, match="its module has num_classes=3, must be 10, the count it was built with"):
            make_model(cfg, num_classes=10)
        assert make_model(cfg, num_classes=3).num_classes == 3
    finally:
        MODELS.unregister(Toy.name)
