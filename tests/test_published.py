"""The configs of the published runs: each builds, has the published model's exact parameter
count (from shapes alone), its train step traces and lowers for 8 devices with their shardings, and (marked slow: CI's
second job, `pytest -m slow`) compiles with XLA's memory and FLOP report; nothing is trained and no data is read (a
latents folder with only its meta.json stands in for the encoded dataset). What lowering and compiling them costs:
docs/benchmarks/tests.md."""

import json
import os

import jax
import pytest

from configs import celebahq_ldm, cifar10_edm, cifar10_flow, ffhq_dit, imagenet256_sit, imagenet256_uvit
from training import aot
from training import checkpoint as ckpt
from training.setup import build

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")

# (config module, variant, latent shape, classes, exact trainable parameters and where they come from)
PUBLISHED = [
    # CompVis/latent-diffusion's CelebA-HQ UNet (openaimodel, model_channels 224), counted from its own code
    (celebahq_ldm, "adaptive", (64, 64, 3), 0, 274_056_163),
    # baofff/U-ViT's U-ViT-L/2 on ImageNet-256 latents with 1001 label rows (libs/uvit.py, paper: 287M)
    (imagenet256_uvit, "adaptive+min_snr", (32, 32, 4), 1000, 286_763_172),
    # DiT-XL/2 (674,834,720 trainable with 1000 classes) without its 1001 x 1152 label table: unconditional FFHQ
    (ffhq_dit, "speed", (32, 32, 4), 0, 674_834_720 - 1001 * 1152),
    # SiT-B/2 (DiT-B/2's 130,315,808 with learn_sigma) without the final linear's 768 x 16 + 16 outputs of the unused
    # variance channels: flow matching has none; the learned sampler in continuous time
    (imagenet256_sit, "adaptive", (32, 32, 4), 1000, 130_315_808 - 768 * 16 - 16),
]


def fake_latents(path, shape, classes, kind):
    path.mkdir(parents=True, exist_ok=True)
    splits = {s: dict(rows=1, done=1, complete=True) for s in ("train", "test")}
    meta = dict(source=dict(name="folder"), autoencoder="", latent_shape=list(shape), num_classes=classes)
    (path / "meta.json").write_text(
        json.dumps(dict(meta, kind=kind, scaling_factor=0.18215, flipped=True, splits=splits))
    )
    return str(path)


def published_setup(tmp_path, module, variant, shape, classes):
    c = module.get_config(variant)
    kind = "vq" if module is celebahq_ldm else "kl"  # the LDM's VQ-f4; SD's KL-f8
    c.data.path = fake_latents(tmp_path / "latents", shape, classes, kind)
    # a stand-in first stage of the same kind: checked to exist, loaded only to decode samples
    c.data.autoencoder = os.path.join(FIXTURES, f"autoencoder_{kind}_tiny")
    return build(c)


def lowered_step(setup):
    """The step without the sampler's update, traced and lowered for the config's 8-device shardings."""
    state = ckpt.abstract_with_shardings(setup.abstract_state, setup.state_shardings)
    return setup.step_for(1).lower(state, setup.abstract_batch(setup.config.train.batch_size))


PUBLISHED_IDS = dict(ids=lambda v: getattr(v, "__name__", None))


@pytest.mark.parametrize("module, variant, shape, classes, params", PUBLISHED, **PUBLISHED_IDS)
def test_published_config_has_the_published_model_and_its_step_lowers(
    tmp_path, module, variant, shape, classes, params
):
    setup = published_setup(tmp_path, module, variant, shape, classes)
    assert sum(x.size for x in jax.tree.leaves(setup.abstract_state.params)) == params
    assert setup.conditional == bool(classes)
    lowered = lowered_step(setup)
    # the whole program's FLOPs before partitioning (XLA's HLO cost analysis): a step of a model this size
    assert lowered.cost_analysis()["flops"] > 1e13


@pytest.mark.slow
@pytest.mark.parametrize("module, variant, shape, classes, params", PUBLISHED, **PUBLISHED_IDS)
def test_published_config_step_compiles_with_its_memory_and_flop_report(
    tmp_path, module, variant, shape, classes, params
):
    setup = published_setup(tmp_path, module, variant, shape, classes)
    compiled, seconds = aot.compile_step(setup, 1)  # the program of the steps without the sampler's update
    report = aot.step_report(setup, compiled, seconds)
    assert report["devices"] == 8 and report["params"] == params
    assert report["flops"] > 1e12 and report["argument_bytes"] > 4 * params // 8  # the state, sharded or not


@pytest.mark.parametrize("variant, classes", [("adaptive", 0), ("lognormal,cond", 10)])
def test_cifar10_edm_has_its_unet_and_its_step_lowers(variant, classes):
    """configs/cifar10_edm.py (pixels: no data is read to build): the DDPM++-sized UNet's exact parameter count from
    shapes (its docstring: 53,634,563, + 11 x 512 label rows), EDM's batch, and the train step lowered for 8 devices
    (the adaptive variant's program without the policy update; compiled in the slow test below)."""
    c = cifar10_edm.get_config(variant)
    setup = build(c)
    params = 53_634_563 + (11 * 512 if classes else 0)
    assert sum(x.size for x in jax.tree.leaves(setup.abstract_state.params)) == params
    assert setup.conditional == bool(classes) and c.train.batch_size == 512 and c.diffusion.name == "edm"
    if not classes:  # the conditional program differs only by the label rows: lowered once, unconditionally
        assert lowered_step(setup).cost_analysis()["flops"] > 1e13


@pytest.mark.slow
def test_cifar10_edm_step_compiles_with_its_memory_and_flop_report():
    setup = build(cifar10_edm.get_config("adaptive"))
    compiled, seconds = aot.compile_step(setup, 1)
    report = aot.step_report(setup, compiled, seconds)
    assert report["devices"] == 8 and report["params"] == 53_634_563 and report["flops"] > 1e12


@pytest.mark.parametrize("sampler", ["uniform", "adaptive"])
def test_the_gpu_presets_mnist_config_builds(sampler):
    """benchmarks/device.sh runs configs/mnist_unet.py on a GPU only: it must at least build here (the learned
    sampler's probe and the 28 -> 14 -> 7 UNet on 8 devices)."""
    from configs import mnist_unet

    setup = build(mnist_unet.get_config(sampler))
    assert setup.config.data.image_size == 28 and setup.config.sampler.name == sampler


@pytest.mark.parametrize(
    "module", [celebahq_ldm, imagenet256_uvit, ffhq_dit, imagenet256_sit, cifar10_flow, cifar10_edm]
)
def test_a_published_config_refuses_an_unknown_variant_in_one_line(module):
    with pytest.raises(ValueError) as e:
        module.get_config("nonsense")
    assert "is not a variant: use one of" in str(e.value) and "\n" not in str(e.value)
