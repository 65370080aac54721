"""What a person watching a run sees: metrics files, TensorBoard, sample grids and the timestep pictures."""

import json
import os

import numpy as np

POLICY_DENSITY = "sampler/policy_density"
# arrays of metrics.jsonl shown as TensorBoard histograms over normalised t
HISTOGRAMS = {"t_hist": "timesteps/drawn", POLICY_DENSITY: "timesteps/policy_density"}


def save_samples(data_cfg, samples, stem: str) -> str:
    """Samples at path stem + an extension: text where the dataset writes its own (data/text.py write_samples), else
    a PNG grid of images; returns the path."""
    from data import DATASETS

    write = getattr(DATASETS[data_cfg.name], "write_samples", None)
    if write is not None:
        return write(samples, stem)
    save_grid(samples, stem + ".png")
    return stem + ".png"


def save_grid(images_u8: np.ndarray, path: str):
    """Tile uint8 images [N, H, W, C] into a square-ish PNG grid (upscaled for tiny images)."""
    from PIL import Image

    n, h, w, c = images_u8.shape
    cols = int(np.ceil(np.sqrt(n)))
    rows = int(np.ceil(n / cols))
    grid = np.zeros((rows * (h + 1) + 1, cols * (w + 1) + 1, c), np.uint8)
    for i, im in enumerate(images_u8):
        r, q = divmod(i, cols)
        grid[1 + r * (h + 1) : 1 + r * (h + 1) + h, 1 + q * (w + 1) : 1 + q * (w + 1) + w] = im
    img = Image.fromarray(grid[..., 0] if c == 1 else grid)
    scale = max(1, 256 // grid.shape[1])
    if scale > 1:
        img = img.resize((grid.shape[1] * scale, grid.shape[0] * scale), Image.NEAREST)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    img.save(path)


def read_metrics(path: str):
    if not os.path.exists(path):
        return []
    rows = []
    with open(path) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut short by a killed process
                continue
    return rows


def complete_records(data: bytes) -> list:
    """The records of metrics.jsonl's bytes that were written whole: each line that parses as a JSON object. A last
    line without its newline counts when it parses (the write was cut just before the newline); any other cut
    line is left out (a record is one object, so a prefix of one never parses)."""
    rows = []
    for line in data.split(b"\n"):
        try:
            row = json.loads(line)
        except ValueError:  # empty, cut short, or not UTF-8
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def truncate_metrics(path: str, last_step: int):
    """Make metrics.jsonl what an uninterrupted run to `last_step` would have written: the whole records of steps up
    to it, one per line. Records past it belong to an attempt that died before its checkpoint; a line cut short (a
    process killed mid-write, a full disk) is dropped, so that the next record starts on a line of its own (else it
    is appended onto the cut one and both are lost to every reader). Rewritten atomically, only when it changes."""
    if not os.path.exists(path):
        return
    with open(path, "rb") as f:
        data = f.read()
    keep = [r for r in complete_records(data) if r.get("step", 0) <= last_step]
    text = "".join(json.dumps(r) + "\n" for r in keep).encode()
    if text != data:
        tmp = f"{path}.tmp"
        with open(tmp, "wb") as f:
            f.write(text)
        os.replace(tmp, path)  # a kill during the repair leaves the log as it was, not half of it


FINGERPRINTS = "fingerprints.json"


def record_fingerprints(workdir: str, start_step: int = None, **fields):
    """Update workdir/fingerprints.json: with start_step append this attempt's environment (core.fingerprint.
    environment: code, versions, processor, ...), so that a run resumed on another machine says where each part of
    it ran; `fields` (data: {split: hash}, periodic_features: {...}) are stored in the current attempt and at the top
    level. A resumed attempt that reads other data or scores with another network than the attempts before it adds
    the field's name to the top level's "changed": the run was not measured alike from start to end
    (benchmarks/samplers.py does not pair it on what changed). Written atomically."""
    from core import fingerprint

    path = os.path.join(workdir, FINGERPRINTS)
    rec = {}
    if os.path.exists(path):
        with open(path) as f:
            rec = json.load(f)
    attempts = rec.setdefault("attempts", [])
    if start_step is not None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        attempts.append(dict(from_step=int(start_step), **fingerprint.environment(root)))
    for name, value in fields.items():
        if name in rec and rec[name] != value:
            rec["changed"] = sorted(set(rec.get("changed", [])) | {name})
        for earlier in attempts[:-1] if name in rec else []:  # a file written before attempts held their own
            earlier.setdefault(name, rec[name])
        rec[name] = value
        if attempts:
            attempts[-1][name] = value
    with open(f"{path}.tmp", "w") as f:
        json.dump(rec, f, indent=2)
    os.replace(f"{path}.tmp", path)


def timestep_pictures(metrics_path: str, out_dir: str, num_timesteps: int):
    """timesteps.png: heatmap of the drawn-t distribution (rows: training step, columns: t), from metrics.jsonl's
    per-window histograms; per_timestep_loss.png: the mean training MSE per t-bin over the last window and overall.
    Returns the paths written."""
    # Figures without pyplot: no global backend switch (a notebook's inline plots keep working), no GUI needed.
    from matplotlib.figure import Figure

    rows = [r for r in read_metrics(metrics_path) if "t_hist" in r]
    if not rows:
        return []
    steps = np.array([r["step"] for r in rows])
    hist = np.array([r["t_hist"] for r in rows], np.float64)
    nb = hist.shape[1]
    panels = [("drawn timesteps", hist / np.maximum(hist.sum(1, keepdims=True), 1) * nb)]  # 1.0 = uniform
    if all(POLICY_DENSITY in r for r in rows):  # the learned sampler's mean policy over the batch
        mass = np.array([r[POLICY_DENSITY] for r in rows], np.float64)
        panels.append(
            ("the policy's mean density", mass / np.maximum(mass.sum(1, keepdims=True), 1e-30) * len(mass[0]))
        )
    fig = Figure(figsize=(7 * len(panels), 4))
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    for ax, (title, dens) in zip(axes, panels):
        im = ax.imshow(
            dens,
            aspect="auto",
            origin="lower",
            cmap="magma",
            extent=(0, num_timesteps, steps[0], steps[-1] if len(steps) > 1 else steps[0] + 1),
        )
        ax.set_xlabel("timestep t")
        ax.set_ylabel("training step")
        ax.set_title(f"{title} over training (density / uniform)")
        fig.colorbar(im, ax=ax)
    paths = [os.path.join(out_dir, "timesteps.png")]
    fig.tight_layout()
    fig.savefig(paths[0], dpi=100)

    loss_sum = np.array([r["t_loss_sum"] for r in rows], np.float64)
    centers = (np.arange(nb) + 0.5) * num_timesteps / nb
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    last = loss_sum[-1] / np.maximum(hist[-1], 1)
    allw = loss_sum.sum(0) / np.maximum(hist.sum(0), 1)
    ax.semilogy(centers, np.where(hist.sum(0) > 0, allw, np.nan), label="whole run")
    ax.semilogy(centers, np.where(hist[-1] > 0, last, np.nan), label=f"last window (step {steps[-1]})")
    ax.set_xlabel("timestep t")
    ax.set_ylabel("training MSE")
    ax.set_title("per-timestep loss")
    ax.legend()
    paths.append(os.path.join(out_dir, "per_timestep_loss.png"))
    fig.tight_layout()
    fig.savefig(paths[1], dpi=100)
    return paths


class MetricWriter:
    """metrics.jsonl plus TensorBoard event files (process 0 only)."""

    def __init__(self, workdir: str, enabled: bool):
        self.enabled = enabled
        self.jsonl = os.path.join(workdir, "metrics.jsonl")
        self.tb = None
        if enabled:
            from tensorboardX import SummaryWriter

            self.tb = SummaryWriter(logdir=os.path.join(workdir, "tb"))

    def write(self, step: int, scalars: dict, arrays: dict = None):
        if not self.enabled:
            return
        arrays = arrays or {}
        rec = {"step": step, **scalars, **{k: np.asarray(v).tolist() for k, v in arrays.items()}}
        with open(self.jsonl, "a") as f:
            f.write(json.dumps(rec) + "\n")
        for k, v in scalars.items():
            self.tb.add_scalar(k, v, step)
        for k, v in arrays.items():
            if k in HISTOGRAMS:
                self._histogram(HISTOGRAMS[k], np.asarray(v, np.float64), step)
            elif k.startswith("sampler/"):  # small vectors such as the selected timesteps S
                for i, x in enumerate(np.ravel(v)):
                    self.tb.add_scalar(f"{k}_{i}", float(x), step)
        self.tb.flush()

    def _histogram(self, tag, h, step):
        """A histogram over normalised t in [0, 1] from per-bin counts or masses: one sample per bin centre,
        weighted by its count."""
        edges = np.linspace(0, 1, len(h) + 1)
        centres = (edges[:-1] + edges[1:]) / 2
        self.tb.add_histogram_raw(
            tag,
            min=0.0,
            max=1.0,
            num=float(h.sum()),
            sum=float((h * centres).sum()),
            sum_squares=float((h * centres**2).sum()),
            bucket_limits=edges[1:].tolist(),
            bucket_counts=h.tolist(),
            global_step=step,
        )

    def close(self):
        if self.tb is not None:
            self.tb.close()
