"""main.py end to end on the embedded digits, and bad input stopping before training with one clear line."""

import json
import os
import re

import numpy as np
import pytest

from config.validate import ConfigError, check_workdir, validate
from conftest import run_main, tiny_config


def test_end_to_end_run_leaves_what_a_user_expects(finished_run):
    wd, r = finished_run
    assert (wd / "samples" / "step_0000004.png").exists()
    assert (wd / "timesteps.png").exists() and (wd / "per_timestep_loss.png").exists()
    rows = [json.loads(line) for line in open(wd / "metrics.jsonl")]
    assert [row["step"] for row in rows] == [2, 4]
    assert all(row["loss"] > 0 and len(row["t_hist"]) == 10 and sum(row["t_hist"]) == 2 * 16 for row in rows)
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(wd / "tb"))
    assert sorted(os.listdir(wd / "checkpoints")) == ["4"]
    from PIL import Image

    assert Image.open(wd / "samples" / "step_0000004.png").size[0] >= 8 * 2
    # the learned sampler's diagnostics: the policy's mean density over 50 t-bins (a probability vector), and
    # timesteps.png with its second panel (two 7-inch panels at 100 dpi)
    assert all(len(row["sampler/policy_density"]) == 50 for row in rows)
    assert abs(sum(rows[-1]["sampler/policy_density"]) - 1.0) < 1e-4
    assert len(rows[-1]["sampler/reward_per_s"]) == len(rows[-1]["sampler/f_top"]) == 3
    assert Image.open(wd / "timesteps.png").size[0] == 1400


def test_rerun_of_a_finished_run_resumes_and_trains_no_more(finished_run, tmp_path):
    import shutil

    wd = tmp_path / "wd"
    shutil.copytree(finished_run[0], wd)  # the shared run stays as it is for the other tests
    r = run_main(wd)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Resuming from checkpoint step 4" in r.stdout
    assert len(open(wd / "metrics.jsonl").readlines()) == 2


def test_workdir_of_another_config_is_refused(finished_run):
    wd, _ = finished_run
    r = run_main(wd, "--config.diffusion.schedule=cosine")
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "different run" in err[0] and "config.diffusion.schedule: 'linear'" in err[0]


def test_a_workdir_refused_for_another_sampler_names_the_switch_first(tmp_path):
    """Switching the sampler changes its sub-config's fields too (another sampler, other fields): the refusal names
    the switch itself first, then how many fields follow from it, then the other changes."""
    from config.fields import flatten, override
    from configs.default import get_config
    from training.checkpoint import WorkdirMismatch, check_run_identity, run_identity

    check_run_identity(get_config(), str(tmp_path))
    switched = override(get_config(), {"sampler.name": "adaptive_noise"})
    with pytest.raises(WorkdirMismatch) as e:
        check_run_identity(switched, str(tmp_path))
    msg = str(e.value)
    # the workdir's sampler's defining fields (its learning rates are mutable: not among them); the new sampler's,
    # absent from the workdir, are taken to have had their defaults there, as fields newer than a workdir are
    follow = len(flatten(run_identity(get_config())["sampler"])) - 1
    assert follow > 5  # more than the five differences the message names
    assert (
        f"(workdir -> now: config.sampler.name: 'adaptive' -> 'adaptive_noise', and {follow} fields of "
        "config.sampler that follow from it). Use a new --workdir" in msg
    ), msg
    with pytest.raises(WorkdirMismatch) as e:
        check_run_identity(override(switched, {"seed": 3, "diffusion.schedule": "cosine"}), str(tmp_path))
    assert "follow from it; config.diffusion.schedule: 'linear' -> 'cosine'; config.seed: 0 -> 3)" in str(e.value)


def test_unknown_sampler_stops_with_one_line(tmp_path):
    r = run_main(tmp_path / "w", "--config.sampler.name=bogus")
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "config.sampler.name='bogus'" in err[0] and "uniform" in err[0]
    assert not (tmp_path / "w" / "checkpoints").exists()


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("weighting.name", "bogus", "config.weighting.name='bogus' is not allowed: must be one of "),
        (
            "diffusion.schedule",
            "sigmoid",
            "config.diffusion.schedule='sigmoid' is not allowed: must be one of linear, cosine, quad",
        ),
        ("diffusion.target", "score", "config.diffusion.target='score' is not allowed: must be one of eps, x0, v"),
        ("data.name", "fashion_mnist", "config.data.name='fashion_mnist' is not allowed: must be one of "),
        ("train.batch_size", 20, "config.train.batch_size=20 is not allowed: must be divisible by the 8 devices"),
        (
            "model.ch_mult",
            (1, 2, 2, 2, 2),
            "config.model.ch_mult=(1, 2, 2, 2, 2) is not allowed: 4 downsamplings need an "
            "image size that is a positive multiple of 16; config.data.image_size is 8",
        ),
        (
            "eval.fid.inception_weights",
            "/no/pt_inception.pth",
            "config.eval.fid.inception_weights='/no/pt_inception.pth' is not allowed: no such file",
        ),
        (
            "eval.fid.features",
            "inception",
            "config.eval.fid.features='inception' is not allowed: needs config.eval.fid.inception_weights",
        ),
        ("eval.fid.method", "dpm", "config.eval.fid.method='dpm' is not allowed: must be one of ancestral, ddim"),
        (
            "eval.periodic.nll_timesteps",
            1,
            "config.eval.periodic.nll_timesteps=1 is not allowed: must be an integer in "
            "2..1000 (config.diffusion.num_timesteps)",
        ),
        ("data.image_size", 16, "config.data.image_size=16 is not allowed: the embedded digits are 8x8"),
        (
            "eval.bound_strata",
            1000,
            "config.eval.bound_strata=1000 is not allowed: must be an integer in 0..999: each stratum of 1..T-1 holds "
            "a timestep (config.diffusion.name='ddpm')",
        ),
        ("eval.bound_per_stratum", 1, "config.eval.bound_per_stratum=1 is not allowed: must be an integer >= 2"),
    ],
)
def test_bad_fields_name_field_value_and_allowed(field, value, needle):
    with pytest.raises(ConfigError) as e:
        validate(tiny_config(**{field: value, "sampler.name": "uniform"}))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_unwritable_workdir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match=r"--workdir=.* cannot be written"):
        check_workdir(str(blocker / "sub"))


@pytest.mark.slow  # a main.py child compiling two programs, over 20 s: CI's second job
def test_compile_mode_reports_memory_and_flops_without_training(tmp_path):
    import subprocess

    from conftest import main_cmd, tiny_flags

    r = subprocess.run(
        main_cmd("--mode=compile", *tiny_flags()), capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "adaptive sampler, batch 16" in r.stdout and "8 cpu device(s)" in r.stdout
    # the two programs the loop runs: the policy-update steps (1 in f_S = 2) and the others, which do less
    assert "(steps with the sampler's periodic update (1 in 2))" in r.stdout and "(the other steps)" in r.stdout
    both = [float(x) for x in re.findall(r"FLOPs per step per device .*: ([\d.]+) GFLOP", r.stdout)]
    assert len(both) == 2 and both[0] > both[1] > 0
    mem = re.search(r"arguments ([\d.]+) MiB, outputs ([\d.]+) MiB .* temporaries ([\d.]+) MiB", r.stdout)
    flops = re.search(r"FLOPs per step per device .*: ([\d.]+) GFLOP", r.stdout)
    assert mem and flops, r.stdout
    assert float(mem.group(1)) > 0 and float(flops.group(1)) > 0
    assert os.listdir(tmp_path) == []  # nothing written: no workdir, no checkpoints


def test_a_config_built_in_code_is_checked_for_types_unknown_and_missing_fields():
    import ml_collections

    def with_change(change):
        d = tiny_config().to_dict()
        change(d)
        return ml_collections.ConfigDict(d)

    cases = [
        (lambda d: d["train"].update(lr="fast"), "config.train.lr='fast' is not allowed: must be a number >= 0.0"),
        (
            lambda d: d["model"].update(ch_mult=[1, 0]),
            "config.model.ch_mult=[1, 0] is not allowed: must be a non-empty tuple of integers >= 1",
        ),
        (
            lambda d: d["sampler"]["adaptive"].update(common_noise="yes"),
            "config.sampler.adaptive.common_noise='yes' is not allowed: must be True or False",
        ),
        (
            lambda d: d["train"].update(learning_rate=0.1),
            "config.train.learning_rate is not a config field; did you mean config.train.lr?",
        ),
        (lambda d: d["train"].pop("ema_decay"), "config.train.ema_decay is missing"),
    ]
    for change, needle in cases:
        with pytest.raises(ConfigError) as e:
            validate(with_change(change))
        assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_compile_phase_is_named_before_the_progress_bar(finished_run):
    _, r = finished_run
    err = r.stderr
    # the learned sampler's two step programs (policy-update steps and the others) compile before the bar starts
    start, done = err.find("Compiling the 2 train-step programs"), err.find("Compiled in ")
    bar = err.find("train:")
    assert 0 <= start < done < bar, err[-3000:]
    assert re.search(r"Compiled in \d+\.\d s\n", err), err[-3000:]


def test_old_name_ddim_steps_is_accepted_with_a_note(capsys):
    """sample.ddim_steps (and eval.fid / eval.periodic's) is now `steps`: an old config, override dict or command
    line still works, with one note per use."""
    from config.overrides import check_overrides, rename_overrides

    c = tiny_config(**{"sample.ddim_steps": 7, "eval.periodic.ddim_steps": 3})
    validate(c)
    assert c.sample.steps == 7 and c.eval.periodic.steps == 3 and c.eval.fid.steps == 100
    assert "ddim_steps" not in c.sample and "ddim_steps" not in c.eval.periodic
    notes = sorted(capsys.readouterr().err.strip().splitlines())
    assert notes == [
        "note: config.eval.periodic.ddim_steps is now config.eval.periodic.steps (the old name still works)",
        "note: config.sample.ddim_steps is now config.sample.steps (the old name still works)",
    ]
    argv = rename_overrides(["--workdir=w", "--config.eval.fid.ddim_steps=9", "--config.sample.steps=4"])
    assert argv == ["--workdir=w", "--config.eval.fid.steps=9", "--config.sample.steps=4"]
    assert capsys.readouterr().err.count("note: config.eval.fid.ddim_steps is now config.eval.fid.steps") == 1
    check_overrides(argv, tiny_config())
    # a config file that still sets the old name: a flag of either name overrides it (rename_fields then moves it)
    old_file = tiny_config()
    old_file.sample.ddim_steps = 8
    argv = rename_overrides(["--config.sample.steps=4"], old_file)
    assert argv == ["--config.sample.ddim_steps=4"]
    assert rename_overrides(["--config.sample.ddim_steps=4"], old_file) == ["--config.sample.ddim_steps=4"]
    from training.checkpoint import run_identity

    # sample.* and eval.* are mutable: no run_config.json ever held ddim_steps, so old workdirs resume unchanged
    assert "sample" not in run_identity(c) and "eval" not in run_identity(c)


def test_old_name_on_main_command_line_reaches_the_new_field(tmp_path):
    """The whole command-line path (flag parsing included), stopped by a bad value before JAX starts."""
    r = run_main(tmp_path / "w", "--config.sample.ddim_steps=0")
    assert r.returncode == 2
    assert "note: config.sample.ddim_steps is now config.sample.steps" in r.stderr
    assert "error: config.sample.steps=0 is not allowed: must be an integer in 1..1000" in r.stderr
    assert not (tmp_path / "w" / "checkpoints").exists()


def test_switching_a_flat_section_from_the_command_line_recomposes_it():
    """--config.model.name=dit and --config.diffusion.name=flow on configs/default.py: the sections are rebuilt from
    the new parts' defaults (the UNet's fields gone, the DiT's there), the common fields kept, a sampling method the
    flow lacks replaced by its default with a note, the new part's field overrides applied after the switch; the
    result validates and trains a step."""
    import jax

    from config.overrides import apply_switches, part_switches
    from config.validate import check_fields, check_values
    from configs.default import get_config
    from training.setup import build, initial_state

    argv = [
        "--config.model.name=dit",
        "--config.model.size=custom",
        "--config.model.depth=1",
        "--config.model.hidden_size=32",
        "--config.model.num_heads=2",
        "--config.diffusion.name=flow",
        "--config.train.batch_size=16",
        "--config.sampler.name=uniform",
    ]
    base = get_config()
    switches = part_switches(argv, base)
    assert [p for p, _ in switches] == [
        "model.name",
        "model.size",
        "model.depth",
        "model.hidden_size",
        "model.num_heads",
        "diffusion.name",
    ]
    base.model.class_cond = True  # a common field: kept
    c = apply_switches(base, switches)
    with c.unlocked():
        c.train.batch_size, c.sampler.name, c.model.class_cond = 16, "uniform", False
    check_fields(c)
    check_values(c)
    assert c.model.name == "dit" and c.model.depth == 1 and "ch_mult" not in c.model
    assert c.diffusion.name == "flow" and "num_timesteps" not in c.diffusion
    assert c.eval.fid.method == "heun" and c.eval.periodic.method == "heun"
    setup = build(c)
    state, metrics = setup.step_for(1)(initial_state(setup), setup.example_batch(16))
    assert np.isfinite(float(jax.device_get(metrics["loss"])))
    # the data section: a dataset's own image size replaces the old one
    d = apply_switches(get_config(), [("data.name", "mnist")])
    assert (d.data.image_size, d.data.channels) == (28, 1)
    assert get_config().model.class_cond == apply_switches(get_config(), [("model.name", "uvit")]).model.class_cond


def test_a_field_the_new_part_lacks_is_one_line():
    from config.overrides import apply_switches, part_switches
    from configs.default import get_config

    switches = part_switches(["--config.model.name=dit", "--config.model.ch_mult=(1,2)"], get_config())
    with pytest.raises(ConfigError) as e:
        apply_switches(get_config(), switches)
    assert "config.model.ch_mult is not a config field" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError) as e:
        apply_switches(get_config(), part_switches(["--config.model.name=dit", "--config.model.depth=x"], get_config()))
    assert "--config.model.depth='x' is not allowed: must be an integer" in str(e.value)


def fuzzed_command_lines(n: int, seed: int = 0):
    """n command lines of one to three --config arguments: fields, sections and switches of the default config, their
    names broken (a character dropped, a dot doubled, an index, a letter outside ASCII), fields of other parts, and
    values that are every type's edge (huge, NaN, empty, unbalanced brackets, quotes, another flag)."""
    import random

    from config.fields import flatten
    from configs.default import get_config

    rng = random.Random(seed)
    fields = sorted(flatten(get_config()))
    sections = sorted({f.rsplit(".", 1)[0] for f in fields if "." in f})
    switches = ["model.name=dit", "model.name=uvit", "diffusion.name=flow", "diffusion.name=edm", "data.name=mnist"]
    others = ["model.depth", "model.size", "model.hidden_size", "diffusion.sigma_max", "diffusion.s_churn"]
    values = [
        *(
            "",
            "0",
            "-1",
            "1",
            "3",
            "1e3",
            "1e400",
            "-1e-400",
            "nan",
            "-inf",
            "0x10",
            "1_000",
            " 3 ",
            "99999999999999999999",
        ),
        *("True", "false", "yes", "T", "None", "none", "()", "(1,)", "(1, 2)", "[1,[2]]", "(", "((1,)", "(1,", ")"),
        *("'", '"', "'a'", "a,b", "=", "==", "--mode=eval", "dit", "uniform", "ü", "\t", "a b", "{}", "{'a': 1}"),
    ]

    def path():
        kind = rng.random()
        p = rng.choice(fields if kind < 0.6 else sections if kind < 0.7 else others)
        if rng.random() < 0.3:
            i = rng.randrange(len(p) + 1)
            p = rng.choice([p[:i] + p[i + 1 :], p[:i] + "." + p[i:], p + "[0]", p[:i] + "ü" + p[i:], "." + p, p + "."])
        return p

    def arg():
        r = rng.random()
        if r < 0.15:
            return "--config." + rng.choice(switches)
        if r < 0.2:
            return rng.choice(["--config=configs/default.py:x", "--config=", "--config=/no/such.py", "--config.x"])
        return f"--config.{path()}={rng.choice(values)}"

    return [[arg() for _ in range(rng.randint(1, 3))] for _ in range(n)]


@pytest.mark.filterwarnings("ignore:the load_module:DeprecationWarning")  # ml_collections loads the config file so
def test_fuzzed_command_lines_give_a_config_or_one_line(capsys):
    """main.py's path from a command line to a checked config, before JAX starts (check_command_line, then what
    main() does: apply the part switches, check the fields and values), on 400 fuzzed command lines: each gives a
    config or a ConfigError in one line; nothing else escapes (on main, a traceback from ml_collections' flag
    definition, e.g. for --config.=3, or for a switch's field such as --config.model.depth without --config)."""
    from config.command_line import check_command_line
    from config.overrides import apply_switches
    from config.validate import check_fields, check_values

    bad, refused = [], 0
    for argv in fuzzed_command_lines(400):
        try:
            _, switches, config = check_command_line(argv)
            with config.unlocked():
                apply_switches(config, switches)
            check_fields(config)
            check_values(config)
        except ConfigError as e:
            refused += 1
            if "\n" in str(e):
                bad.append(f"{argv}: two lines: {e}")
        except Exception as e:
            bad.append(f"{argv}: {type(e).__name__}: {e}")
    capsys.readouterr()  # the renamed fields' and switches' notes
    assert not bad, "\n".join(bad[:20])
    assert 100 < refused < 400  # both outcomes reached
    with pytest.raises(ConfigError) as e:  # absl's "FATAL Flags parsing error" and a second line, on main
        check_command_line(["--config.train.lr=abc"])
    assert (
        str(e.value)
        == "--config.train.lr='abc' is not allowed: must be a float (could not convert string to float: 'abc')"
    )


@pytest.mark.parametrize(
    "args,line",
    [
        (["--config.=3"], "error: --config.: config. is not a config field; see configs/default.py for the fields"),
        (
            ["--config.model.name=dit", "--config.model.size=custom", "--config.model.depth=0"],
            "error: config.model.depth=0 is not allowed: must be an integer >= 1",
        ),
    ],
)
def test_a_bad_command_line_is_one_line_before_jax_starts(tmp_path, args, line):
    """Through main.py itself, without --config (ml_collections then parses the overrides when the flag is
    defined): one line and status 2, nothing written."""
    import subprocess
    import sys

    from conftest import ROOT

    cmd = [sys.executable, os.path.join(ROOT, "main.py"), f"--workdir={tmp_path}/w", *args]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stderr.strip().splitlines()) == (2, [line]), r.stderr[-3000:]
    assert not (tmp_path / "w").exists()


def test_a_mistyped_flag_or_a_broken_config_file_is_one_line_naming_where(tmp_path):
    """A main.py flag that does not exist gets the nearest one (absl: "FATAL Flags parsing error", exit 1); a config
    file that does not parse, or whose get_config raises, ends in its file, line and error (not a traceback through
    absl and ml_collections): one line and status 2 each, nothing written."""
    import subprocess
    import sys

    from conftest import ROOT

    (tmp_path / "syntax.py").write_text("from configs.default import get_config as g\n\ndef get_config(:\n")
    (tmp_path / "raises.py").write_text(
        "from configs.default import get_config as g\n\n\ndef get_config():\n    c = g()\n"
        "    c.train.lr = 1 / 0\n    return c\n"
    )
    cases = [
        ([f"--work_dir={tmp_path}/W"], "error: --work_dir is not a flag of main.py; did you mean --workdir?"),
        (
            [f"--workdir={tmp_path}/W", "--mode=trian"],
            "error: flag --mode=trian: value should be one of <train|eval|compile|show>",
        ),
        (
            [f"--workdir={tmp_path}/W", f"--config={tmp_path}/syntax.py"],
            f"error: --config={tmp_path}/syntax.py: {tmp_path}/syntax.py:3: SyntaxError: invalid syntax",
        ),
        (
            [f"--workdir={tmp_path}/W", f"--config={tmp_path}/raises.py"],
            f"error: --config={tmp_path}/raises.py: {tmp_path}/raises.py:6: ZeroDivisionError: division by zero",
        ),
    ]
    for args, line in cases:
        r = subprocess.run([sys.executable, f"{ROOT}/main.py", *args], cwd=ROOT, capture_output=True, text=True)
        assert (r.returncode, r.stderr.strip().splitlines()) == (2, [line]), r.stderr[-3000:]
    assert not (tmp_path / "W").exists()


def test_show_mode_prints_every_field_with_what_it_allows(tmp_path):
    """--mode=show: the checked config (overrides and part switches applied), one line per field that counts, with
    its value, what it allows and whether it defines the run; no JAX devices, nothing written. --help names it."""
    import subprocess
    import sys

    from config.overrides import apply_switches
    from config.schema import active_fields
    from configs.default import get_config
    from conftest import ROOT, main_cmd

    cmd = main_cmd("--mode=show", "--config.model.name=dit", "--config.train.lr=0.01")
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [line for line in r.stdout.splitlines() if line.startswith("config.")]
    expected = active_fields(apply_switches(get_config(), [("model.name", "dit")]))
    assert [line.split(" = ")[0] for line in lines] == [f"config.{p}" for p in expected]
    assert any(re.fullmatch(r"config\.train\.lr = 0\.01 +# a number >= 0\.0; may change on resume", x) for x in lines)
    assert any(
        re.fullmatch(r"config\.model\.name = 'dit' +# one of [\w, ]*\bunet\b[\w, ]*; defines the run", x) for x in lines
    )
    assert os.listdir(tmp_path) == []
    r = subprocess.run([sys.executable, f"{ROOT}/main.py", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--mode=show" in r.stdout and "docs/config.md" in r.stdout


def test_a_step_too_large_for_the_memory_there_is_is_refused_before_it_runs(tmp_path):
    """The compiled step's memory analysis against the memory a device has: a batch that needs more is one line
    naming config.train.batch_size and both figures (on main, the kernel killed such a run: exit 137, no message);
    the tiny step fits this machine."""
    from training import aot
    from training.setup import build

    setup = build(tiny_config())
    compiled, _ = aot.compile_step(setup, 1)  # the program of finished_run's main.py: in the compilation cache
    assert aot.memory_problem(setup, compiled) is None
    need = aot.peak_bytes(aot.step_report(setup, compiled, 0.0)) - aot.state_bytes_per_device(setup)
    assert 0 < need < 2**30
    assert aot.memory_problem(setup, compiled, available=need, source="test") is None
    line = aot.memory_problem(setup, compiled, available=need - 1, source="what a test allows")
    assert line.startswith("config.train.batch_size=16 is too large for this machine with this model (")
    assert f"{(need - 1) / 2**30:.1f} GiB is available (what a test allows)" in line and "\n" not in line
