"""Text for masked diffusion language models (data/text.py): the normalisation, the bundled King James Bible and its
split by book, a user's folder of .txt files and what it refuses in one line, the tiny embedded corpus; the token
transformer (models/tokens.py); and a masked diffusion LM trained, resumed exactly, sampled and evaluated through
main.py's path (tests marked slow)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from config.fields import override
from config.schema import default_config
from data import DATASETS, DatasetNotFound, load_split
from data.text import ALPHABET, decode, encode, kjv_books, kjv_split, normalise


def text_config(**kw):
    c = default_config(data="tiny_text", model="tokens", diffusion="masked", sampler="antithetic", weighting="none")
    for section in (c.sample, c.eval.fid, c.eval.periodic):
        section.method = "ancestral"
    return override(
        c,
        {
            "data.seq_len": 16,
            "model.hidden_size": 16,
            "model.depth": 1,
            "model.num_heads": 2,
            "train.batch_size": 8,
            "train.num_steps": 4,
            "train.log_every": 2,
            "train.ckpt_every": 2,
            "train.warmup_steps": 2,
            "sample.num": 4,
            "sample.steps": 4,
            "eval.fid.features": "none",
            "eval.periodic.every": 0,
            "eval.periodic.nll_images": 8,
            "eval.periodic.nll_timesteps": 4,
            "eval.nll_images": 8,
            "diffusion.likelihood_steps": 4,
            **kw,
        },
    )


def test_normalisation_is_text8_style():
    assert (
        normalise("  In the Beginning, GOD [was]—café 3 times!\n\tAmen. ") == "in the beginning god was cafe times amen"
    )
    assert ALPHABET == "abcdefghijklmnopqrstuvwxyz " and len(ALPHABET) == 27
    tokens = encode("az ")
    assert tokens.dtype == np.uint8 and list(tokens) == [0, 25, 26]
    assert decode([0, 25, 26, 27]) == "az _"  # [MASK] shows as _


def test_kjv_books_and_split_by_book():
    books = kjv_books()
    assert sorted(books) == list(range(1, 67))
    assert normalise(books[1]).startswith("in the beginning god created the heaven and the earth")
    assert normalise(books[66]).endswith("the grace of our lord jesus christ be with you all amen")
    assert [b for b in books if kjv_split(b) == "validation"] == [5, 16, 27, 38, 49, 60]
    assert [b for b in books if kjv_split(b) == "test"] == [10, 21, 32, 43, 54, 65]
    c = default_config(data="kjv", model="tokens", diffusion="masked", sampler="antithetic", weighting="none")
    c.data.seq_len = 256
    sizes = {s: len(load_split(c.data, s)) for s in ("train", "validation", "test")}
    # millions of characters, split by book: 3,448,384 / 318,605 / 247,562 characters in windows of 256
    assert sizes == {"train": 3448384 // 256, "validation": 318605 // 256, "test": 247562 // 256}
    w = load_split(c.data, "validation").get([0])
    assert w.shape == (1, 256) and w.dtype == np.uint8 and decode(w[0]).startswith("these be the words which moses")


def test_tiny_corpus_windows():
    c = text_config()
    train = load_split(c.data, "train")
    assert train.get([0, 1]).shape == (2, 16) and int(train.get([0]).max()) < 27
    assert decode(train.get([0])[0]) == "the river ran lo"
    assert DATASETS["tiny_text"].example_shape(c.data) == (16,)


def test_a_text_runs_records_hash_the_windows_it_read():
    """A text split's fingerprint (fingerprints.json's data) is the content hash of its windows: the same for the
    same corpus, another for another window length or split; never 'unknown' (issue 59: every record says what data
    it read)."""
    from core import fingerprint
    from data.base import data_fingerprints

    c = text_config()
    train = load_split(c.data, "train")
    assert train.fingerprint() == fingerprint.of_arrays(train.get(np.arange(len(train))))
    got = data_fingerprints(c.data)
    assert got == data_fingerprints(text_config().data) and got["train"] != got["test"]
    assert data_fingerprints(text_config(**{"data.seq_len": 8}).data)["train"] != got["train"]


def test_text_files_split_by_document_and_bad_input_in_one_line(tmp_path):
    c = text_config()
    from config.schema import switch_part

    switch_part(c, "data", "text_files")
    c.data.seq_len = 8
    c.data.text_dir = str(tmp_path)

    def one_line(split="train"):
        with pytest.raises(DatasetNotFound) as e:
            load_split(c.data, split)
        assert "\n" not in str(e.value)
        return str(e.value)

    assert "holds 0 .txt files: at least 3 are needed" in one_line()
    for i, text in enumerate(["Alpha beta gamma delta. " * 20, "Epsilon zeta eta! " * 3, "Theta iota kappa? " * 3]):
        (tmp_path / f"doc{i}.txt").write_text(text)
    assert decode(load_split(c.data, "train").get([0])[0]) == "alpha be"
    assert decode(load_split(c.data, "validation").get([0])[0]) == "epsilon "
    assert decode(load_split(c.data, "test").get([0])[0]) == "theta io"
    c.data.seq_len = 100
    assert one_line("test") == (
        "config.data.seq_len=100 is longer than the test split of config.data.name='text_files' (50 characters)"
    )
    c.data.seq_len = 8
    (tmp_path / "doc3.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    assert "doc3.txt' is not a UTF-8 text file" in one_line()


def test_token_transformer_shapes_and_uniform_start():
    from models import make_model

    c = text_config()
    model = make_model(c.model, out_channels=27)
    x = jnp.full((2, 16), 27, jnp.int32)
    params = model.init(jax.random.PRNGKey(0), x, jnp.zeros((2,)))
    out = model.apply(params, x, jnp.array([0.5, 900.0]))
    assert out.shape == (2, 16, 27) and out.dtype == jnp.float32
    np.testing.assert_array_equal(out, 0.0)  # the adaLN-Zero final layer: every token starts uniform


def test_causal_transformer_sees_only_earlier_tokens():
    from models import make_model

    c = text_config(**{"model.causal": True})
    model = make_model(c.model, out_channels=27)
    x = jax.random.randint(jax.random.PRNGKey(1), (1, 16), 0, 27)
    params = model.init(jax.random.PRNGKey(0), x, jnp.zeros((1,)))
    params = jax.tree.map(lambda p: p + 0.1 * jax.random.normal(jax.random.PRNGKey(2), p.shape), params)
    a = model.apply(params, x, jnp.zeros((1,)))
    b = model.apply(params, x.at[0, 10].set((x[0, 10] + 1) % 27), jnp.zeros((1,)))
    np.testing.assert_array_equal(a[0, :11], b[0, :11])  # position l predicts token l from tokens < l
    assert not np.allclose(a[0, 11:], b[0, 11:])


def test_a_text_folder_moved_to_another_path_resumes_and_its_run_config_names_no_path(tmp_path):
    """data.text_dir is where the corpus is on this machine, not what the run is (its splits' hashes say that):
    run_config.json does not hold it and a resume from the folder's new place is not refused."""
    from config.schema import switch_part
    from training.checkpoint import check_run_identity

    c = text_config()
    switch_part(c, "data", "text_files")
    c.data.text_dir = str(tmp_path / "here")
    check_run_identity(c, str(tmp_path))
    assert str(tmp_path / "here") not in (tmp_path / "run_config.json").read_text()
    c.data.text_dir = str(tmp_path / "elsewhere")
    check_run_identity(c, str(tmp_path))  # no error


def test_a_text_workdir_from_before_rope_resumes_only_as_it_ran(tmp_path):
    """A text workdir written before model.positions existed ran with learned positions (the field's `absent`):
    today's default (rope) is refused with the field and both values, --config.model.positions=learned resumes."""
    import json

    from training.checkpoint import WorkdirMismatch, check_run_identity

    check_run_identity(text_config(**{"model.positions": "learned"}), str(tmp_path))
    path = tmp_path / "run_config.json"
    old = json.loads(path.read_text())
    assert old["model"].pop("positions") == "learned"
    path.write_text(json.dumps(old))  # as that version wrote it
    with pytest.raises(WorkdirMismatch, match=r"model.positions: 'learned' -> 'rope'"):
        check_run_identity(text_config(), str(tmp_path))
    check_run_identity(text_config(**{"model.positions": "learned"}), str(tmp_path))  # no error


def test_rope_rotates_each_adjacent_pair_by_its_position():
    """head_dim 4, theta 10000: the pairs' frequencies are 1 and 10000^(-1/2) = 0.01, so at position l the pair
    (1, 0) becomes (cos l, sin l) and the pair (0, 1) becomes (-sin 0.01 l, cos 0.01 l)."""
    from models.dit import apply_rope, rope_tables

    L = 5
    cos, sin = rope_tables(L, 4)
    x = jnp.broadcast_to(jnp.array([1.0, 0.0, 0.0, 1.0]), (1, L, 1, 4))
    out = np.asarray(apply_rope(x, cos, sin))[0, :, 0]
    pos = np.arange(L)
    want = np.stack([np.cos(pos), np.sin(pos), -np.sin(0.01 * pos), np.cos(0.01 * pos)], axis=1)
    np.testing.assert_allclose(out, want, atol=1e-6)


def test_rope_attention_depends_on_offsets_only():
    """The same query and key at every position: after the rotation q_l . k_m is a function of l - m."""
    from models.dit import apply_rope, rope_tables

    L, d = 12, 8
    q = jnp.broadcast_to(jax.random.normal(jax.random.PRNGKey(0), (d,)), (1, L, 1, d))
    k = jnp.broadcast_to(jax.random.normal(jax.random.PRNGKey(1), (d,)), (1, L, 1, d))
    tables = rope_tables(L, d)
    rq, rk = (np.asarray(apply_rope(a, *tables))[0, :, 0] for a in (q, k))
    logits = rq @ rk.T
    for offset in range(-3, 4):
        diagonal = np.diagonal(logits, offset)
        np.testing.assert_allclose(diagonal, diagonal[0], rtol=1e-4, atol=1e-5)
    assert not np.allclose(np.diagonal(logits, 1)[0], np.diagonal(logits, 2)[0])


def test_masked_transformer_learns_from_its_neighbours():
    """Sequences a, a + 1, a + 2, ... (mod 27) with a random start: alone, a token is uniform (log 27 = 3.30 nats);
    any unmasked neighbour gives it away. Trained on the masked process's loss (its bound's integrand, antithetic t)
    with configs/text.py's optimiser (Adam 1e-3, gradient clipping at 1), 100 steps take a 2-block network with the
    default rotary positions under half of log 27 nats per masked token of half-masked sequences (0.64 when
    written); with positions="learned" it was still at 3.24
    (docs/benchmarks/text.md#positions-why-the-token-transformer-rotates)."""
    import optax

    from diffusion.masked import Masked, masked_cross_entropy
    from models import make_model

    V, L, B = 27, 64, 32
    c = text_config(**{"data.seq_len": L, "model.hidden_size": 64, "model.num_heads": 4, "model.depth": 2})
    model = make_model(c.model, out_channels=V)
    process = Masked(vocab_size=V)
    data = lambda k: (jax.random.randint(k, (B, 1), 0, V) + jnp.arange(L)[None]) % V
    params = model.init(jax.random.PRNGKey(0), data(jax.random.PRNGKey(1)), jnp.zeros((B,)))
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))
    state = opt.init(params)

    def loss(p, key, t):
        k_x, k_n = jax.random.split(key)
        x0 = data(k_x)
        apply = lambda x, net_t: model.apply(p, x, net_t)
        return jnp.mean(process.example_losses(apply, x0, t, process.draw_noise(k_n, x0))[0])

    @jax.jit
    def step(p, s, key):
        k_t, k = jax.random.split(key)
        g = jax.grad(loss)(p, k, (jax.random.uniform(k_t) + jnp.arange(B) / B) % 1.0)
        u, s = opt.update(g, s)
        return optax.apply_updates(p, u), s

    key = jax.random.PRNGKey(2)
    for _ in range(100):
        key, k = jax.random.split(key)
        params, state = step(params, state, k)
    k_x, k_n = jax.random.split(jax.random.PRNGKey(3))
    x0 = data(k_x)
    t = jnp.full((B,), 0.5)
    xt = process.q_sample(x0, t, process.draw_noise(k_n, x0))
    ce = masked_cross_entropy(model.apply(params, xt, process.net_time(t)), x0, xt, V)
    half = float(jnp.sum(ce) / jnp.sum(xt == V))
    assert half < 0.5 * np.log(V), half


@pytest.mark.slow
def test_masked_lm_trains_resumes_samples_and_evaluates(tmp_path, capsys):
    """Four steps through main.py's path: the loss starts at log2(27) (a uniform network), text samples are written,
    --mode=eval gives the test split's bound in bits per character; the state after 2 + 2 steps with a checkpoint
    in between equals 4 steps in one go."""
    import main
    from conftest import full_and_resumed

    c = text_config()
    assert main.run(c, str(tmp_path / "run")) == 0
    out = capsys.readouterr().out
    samples = out.split("Samples: ")[1].split("\n")[0]
    assert samples.endswith("step_0000004.txt")
    lines = open(samples).read().splitlines()
    assert len(lines) == 4 and all(len(s) == 16 and set(s) <= set(ALPHABET) for s in lines)
    import json

    first = json.loads(open(tmp_path / "run" / "metrics.jsonl").readline())
    assert first["loss"] == pytest.approx(np.log2(27), rel=0.15)
    assert main.run(c, str(tmp_path / "run"), "eval") == 0
    record = json.load(open(sorted((tmp_path / "run" / "eval").glob("step_*.json"))[-1]))
    assert 3.0 < record["nll_bpd"]["value"] < 5.5, record
    samples_file = tmp_path / "run" / record["samples"]["path"]  # relative to the workdir
    assert open(samples_file).read().count("\n") == c.eval.num_samples
    _, full, resumed = full_and_resumed(c, str(tmp_path / "resume"), steps=4)
    jax.tree.map(np.testing.assert_array_equal, full, resumed)


def test_autoregressive_baseline_nll_and_sampling():
    """The exact NLL of a uniform network is log2 V; a network sure of token (l mod V) given tokens < l samples that
    sequence left to right, seeing only earlier tokens (it is sure of the wrong token wherever a later one is set)."""
    from diffusion.autoregressive import Autoregressive

    V, L = 7, 10
    p = Autoregressive(vocab_size=V)
    x0 = jax.random.randint(jax.random.PRNGKey(0), (3, L), 0, V)
    nll = p.nll_bpd(lambda x, t: jnp.zeros(x.shape + (V,)), x0, None)[0]
    np.testing.assert_allclose(nll, np.log2(V), rtol=1e-6)
    target = jnp.arange(L) % V
    net = lambda x, t: jnp.broadcast_to(jax.nn.one_hot(target, V) * 50.0, x.shape + (V,))
    np.testing.assert_array_equal(p.sample(net, jax.random.PRNGKey(1), (2, L)), np.broadcast_to(target, (2, L)))
    assert p.example_losses(net, jnp.broadcast_to(target, (2, L)), None, None)[0].max() < 1e-6


def test_bound_rows_of_the_masked_process_are_its_nelbo_terms():
    """The rows the learned sampler's bound reward reads (training/step.py make_rows_fn, kind="bound") are the
    masked process's NELBO integrand at each row's time, and kind="loss" is the train step's objective (weighting
    none: the same)."""
    from diffusion import make_process
    from models import make_model
    from training.step import make_apply, make_rows_fn
    from weightings import make_weighting

    c = text_config()
    process = make_process(c.diffusion)
    model = make_model(c.model, out_channels=process.out_channels(1))
    x0 = jax.random.randint(jax.random.PRNGKey(0), (8, 16), 0, 27)
    params = model.init(jax.random.PRNGKey(1), x0, jnp.zeros((8,)))
    params = jax.tree.map(lambda p: p + 0.05 * jax.random.normal(jax.random.PRNGKey(2), p.shape), params)
    t = jnp.linspace(0.05, 0.95, 8)
    u = process.draw_noise(jax.random.PRNGKey(3), x0)
    rows_fn = make_rows_fn(model, process, weighting=make_weighting(c.weighting, process))
    want = process.row_terms(lambda x, s: make_apply(model)(params, x, s), x0, t, u)
    np.testing.assert_allclose(rows_fn(params, x0, t, u), want, rtol=1e-5)
    np.testing.assert_allclose(rows_fn(params, x0, t, u, kind="loss"), want, rtol=1e-5)


def test_token_configs_refused_in_one_line():
    """Image data under a token process, a vocabulary that is not the data's, and a loss weighting of a Gaussian
    path on tokens: each refused before anything is built."""
    from config.schema import switch_part
    from config.validate import ConfigError, validate

    def refusal(c):
        with pytest.raises(ConfigError) as e:
            validate(c)
        assert "\n" not in str(e.value)
        return str(e.value)

    c = text_config(**{"diffusion.vocab_size": 30})
    assert refusal(c) == ("config.diffusion.vocab_size=30 is not allowed: must be 27, config.data.name's vocabulary")
    c = text_config()
    switch_part(c, "data", "digits")
    assert "config.data.name='digits' holds no tokens" in refusal(c)
    c = text_config(**{"weighting.name": "min_snr"})
    assert "the weighting is a function of the Gaussian path's log SNR" in refusal(c)
    # the network's attention must be the process's: a bidirectional AR model copies its input to a loss near 0
    c = text_config(**{"model.causal": True})
    assert refusal(c).startswith("config.model.causal=True is not allowed with config.diffusion.name='masked'")
    c = text_config()
    switch_part(c, "diffusion", "autoregressive")
    assert refusal(c).startswith("config.model.causal=False is not allowed with config.diffusion.name='autoregressive'")
    c.model.causal = True
    validate(c)
    c = text_config(**{"model.positions": "learned", "model.max_len": 15})  # sequences of 16
    assert refusal(c) == (
        "config.model.max_len=15 is not allowed: positions='learned' needs a row per position: at least "
        "config.data.seq_len = 16"
    )


def test_a_split_too_short_for_a_sequence_ends_before_the_compile(tmp_path, capsys):
    """tiny_text's train split holds 696 characters, its validation and test splits 174 each: with sequences of 200
    the periodic evaluation's split (read after training's first 250 steps) and --mode=eval's are refused at the
    start, in one line, before anything is built or compiled."""
    import main

    c = text_config(**{"data.seq_len": 200, "model.max_len": 200, "eval.periodic.every": 2})
    assert main.run(c, str(tmp_path / "run")) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        "error: config.data.seq_len=200 is longer than the validation split of config.data.name='tiny_text' "
        "(174 characters)\n"
    )
    assert "Compiled" not in captured.out and not (tmp_path / "run" / "checkpoints").exists()


def test_text_configs_validate_and_build_their_shapes():
    """configs/text.py (masked diffusion) and its :ar variant (the causal network of the same size) validate; the
    masked one builds a state whose batch is [B, seq_len] tokens and whose logits are over the 27 characters."""
    from config.validate import validate
    from configs.text import get_config
    from training.setup import build

    c, ar = get_config(), get_config("ar")
    validate(ar)
    assert ar.diffusion.name == "autoregressive" and ar.model.causal and not c.model.causal
    setup = build(c)
    assert setup.abstract_batch(32).shape == (32, 128) and setup.abstract_batch(32).dtype == jnp.uint8
    assert setup.abstract_state.params["params"]["final_layer"]["linear"]["kernel"].shape == (128, 27)
    with pytest.raises(ValueError, match="is not a variant"):
        get_config("x")
