"""Declarative config fields: each part of the project declares its fields next to its code, as a dict
{name: Field}; defaults, type and range checks, "did you mean" suggestions and the run identity all come from it.

    FIELDS = dict(k=Num(5.0, lo=0, lo_open=True, note="SpeeD: 5"), tau=Int(700, lo=1, hi="T"))

A bound given as a string names a value of the check's context (e.g. "T", the number of timesteps), resolved when a
config is checked. Every failure is one line naming the field, the value and what is allowed:
    config.sampler.speed.tau=1001 is not allowed: must be an integer in 1..1000 (config.diffusion.num_timesteps)
"""

import dataclasses
import difflib
import math
from typing import Any, Callable, Mapping, Sequence

import ml_collections
import numpy as np

Bound = int | float | str | None


class ConfigError(ValueError):
    """A bad config: one line naming the field, the value and what is allowed."""


class FieldError(ValueError):
    """Raised by a part's own check: `field` is relative to the part's sub-config (the registry adds the prefix)."""

    def __init__(self, field: str, value: Any, allowed: str):
        super().__init__(f"{field}={value!r} is not allowed: {allowed}")
        self.field, self.value, self.allowed = field, value, allowed


def is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def is_num(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


@dataclasses.dataclass(frozen=True)
class Context:
    """Values other sections fix, which bounds may name: {name: (value, where it comes from)}."""

    values: Mapping[str, tuple] = dataclasses.field(default_factory=dict)

    def __getitem__(self, name: str):
        return self.values[name][0]

    def resolve(self, bound: Bound):
        """(value, source) of a bound: a literal has no source."""
        if isinstance(bound, str):
            return self.values[bound]
        return bound, None


@dataclasses.dataclass(frozen=True)
class Field:
    """One config field. `kind`: int | num | bool | choice | ints | path | str. `mutable`: may change between runs of
    one workdir (learning rates, logging); every other field defines the run."""

    kind: str
    default: Any
    lo: Bound = None
    hi: Bound = None
    lo_open: bool = False
    hi_open: bool = False
    extra: tuple = ()  # values allowed besides the range (e.g. -1 for "all")
    allowed: tuple = ()  # for int: the only values allowed
    choices: tuple | Callable[[], Sequence[str]] = ()  # for choice: a tuple, or a function (a registry's names)
    allow_empty: bool = False  # for ints
    mutable: bool = False
    note: str = ""  # appended to the allowed range in errors, e.g. "(paper: 5)"
    # earlier names of this field, still accepted in configs, overrides and command lines (with a note)
    aliases: tuple = ()
    # the value a workdir written before this field existed ran with, where that is not the default (a run-defining
    # field whose default is new behaviour: training/checkpoint.py check_run_identity); None: the default
    absent: Any = None

    def options(self) -> tuple:
        return tuple(self.choices() if callable(self.choices) else self.choices)

    def check(self, path: str, value, context: Context | None = None) -> None:
        """Raise ConfigError unless `value` is allowed for config.`path`."""
        problem = self.problem(value, context or Context())
        if problem is not None:
            raise ConfigError(f"config.{path}={value!r} is not allowed: {problem}")

    def allows(self, context: Context | None = None) -> str:
        """What the field allows, in its errors' words: 'an integer in 1..1000 (config.diffusion.num_timesteps)'."""
        return self.problem(_NOT_A_VALUE, context or Context()).removeprefix("must be ")

    def problem(self, v, context: Context) -> str | None:
        note = f" {self.note}" if self.note else ""
        if self.kind == "bool":
            return None if isinstance(v, (bool, np.bool_)) else "must be True or False"
        if self.kind in ("path", "str"):
            return (
                None
                if isinstance(v, str)
                else ("must be a path (a string)" if self.kind == "path" else "must be a string")
            )
        if self.kind == "choice":
            opts = self.options()
            return None if isinstance(v, str) and v in opts else f"must be one of {', '.join(map(str, opts))}"
        if self.kind == "ints":
            lo, _ = context.resolve(self.lo)
            ok = isinstance(v, (tuple, list)) and (self.allow_empty or len(v) > 0)
            ok = ok and all(is_int(x) and x >= lo for x in v)
            return None if ok else f"must be a {'' if self.allow_empty else 'non-empty '}tuple of integers >= {lo}"
        lo, lo_src = context.resolve(self.lo)
        hi, hi_src = context.resolve(self.hi)
        src = "".join(f" ({s})" for s in (lo_src, hi_src) if s)
        if self.kind == "int":
            if self.allowed:
                ok = is_int(v) and v in self.allowed
                return None if ok else f"must be {' or '.join(map(str, self.allowed))}{note}"
            ok = v in self.extra if is_int(v) else False
            ok = ok or (is_int(v) and (lo is None or v >= lo) and (hi is None or v <= hi))
            what = (
                f"an integer in {lo}..{hi}"
                if lo is not None and hi is not None
                else f"an integer >= {lo}"
                if lo is not None
                else f"an integer <= {hi}"
                if hi is not None
                else "an integer"
            )
            return None if ok else "must be " + " or ".join([str(e) for e in self.extra] + [what]) + src + note
        if self.kind == "num":
            ok = is_num(v) and math.isfinite(v)
            ok = ok and (lo is None or (v > lo if self.lo_open else v >= lo))
            ok = ok and (hi is None or (v < hi if self.hi_open else v <= hi))
            if lo is not None and hi is not None:
                what = f"in {'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"
            elif lo is not None:
                what = f"{'>' if self.lo_open else '>='} {lo}"
            elif hi is not None:
                what = f"{'<' if self.hi_open else '<='} {hi}"
            else:
                what = "finite"
            return None if ok else f"must be a number {what}{src}{note}"
        raise ValueError(f"unknown field kind {self.kind!r}")


_NOT_A_VALUE = object()  # no field allows it: Field.allows reads the field's "must be ..." from its check


def Int(
    default, lo: Bound = None, hi: Bound = None, *, extra=(), allowed=(), mutable=False, note="", aliases=()
) -> Field:
    return Field(
        "int",
        default,
        lo,
        hi,
        extra=tuple(extra),
        allowed=tuple(allowed),
        mutable=mutable,
        note=note,
        aliases=tuple(aliases),
    )


def Num(default, lo: Bound = None, hi: Bound = None, *, lo_open=False, hi_open=False, mutable=False, note="") -> Field:
    return Field("num", default, lo, hi, lo_open, hi_open, mutable=mutable, note=note)


def Bool(default, *, mutable=False) -> Field:
    return Field("bool", default, mutable=mutable)


def Choice(default, choices, *, mutable=False, absent=None) -> Field:
    return Field(
        "choice", default, choices=choices if callable(choices) else tuple(choices), mutable=mutable, absent=absent
    )


def Ints(default, lo: Bound = 1, *, allow_empty=False, mutable=False) -> Field:
    return Field("ints", tuple(default), lo, allow_empty=allow_empty, mutable=mutable)


def Path(default="", *, mutable=False) -> Field:
    return Field("path", default, mutable=mutable)


def all_mutable(fields: dict) -> dict:
    """The same fields (nested dicts included), every one of them mutable: for sections such as train or eval."""
    return {
        k: all_mutable(f) if isinstance(f, dict) else dataclasses.replace(f, mutable=True) for k, f in fields.items()
    }


def flatten(tree, prefix: str = "") -> dict:
    """{dotted path: leaf} of nested dicts, ConfigDicts or field specs."""
    out = {}
    for k, v in tree.items():
        if hasattr(v, "items"):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def renamed(fields: Mapping[str, Field]) -> dict:
    """{old dotted path: current dotted path} of the fields' aliases (`fields`: {dotted path: Field})."""
    out = {}
    for path, field in fields.items():
        parent = path.rpartition(".")[0]
        for alias in field.aliases:
            out[f"{parent}.{alias}" if parent else alias] = path
    return out


def to_config(spec: dict) -> ml_collections.ConfigDict:
    """A ConfigDict of the defaults of a (nested) field spec, in declaration order."""
    c = ml_collections.ConfigDict()
    for k, f in spec.items():
        c[k] = to_config(f) if isinstance(f, dict) else f.default
    return c


def get(config, path: str):
    """The value at a dotted path of a ConfigDict or dict."""
    node = config
    for part in path.split("."):
        node = node[part]
    return node


def override(config, overrides: Mapping[str, Any]):
    """Set dotted-path fields of a ConfigDict in place ({"model.ch": 8}); lists become tuples as the flags make them.
    Returns the config."""
    config.update_from_flattened_dict({k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()})
    return config


def _initials(name):
    return "".join(w[0] for w in name.split("_") if w)


def nearest(path: str, fields) -> str | None:
    """The valid field most like `path`, or None: in the same section a field with these initials or this word
    (train.learning_rate -> train.lr, sampler.adaptive.lr -> policy_lr), the same name in another section
    (train.dropout -> model.dropout), then the closest spelling."""
    fields = sorted(fields)
    parent, _, last = path.rpartition(".")
    siblings = [f for f in fields if f.rpartition(".")[0] == parent]
    for f in siblings:
        other = f.rpartition(".")[2]
        if "_" in last + other and (_initials(last) == other or _initials(other) == last):
            return f
        if other.endswith("_" + last) or other.startswith(last + "_"):
            return f
    same_name = [f for f in fields if f.rpartition(".")[2] == last]
    if same_name:
        return same_name[0]
    close = difflib.get_close_matches(path, fields, n=1, cutoff=0.6)
    if close:
        return close[0]
    by_last = {}
    for f in fields:
        by_last.setdefault(f.rpartition(".")[2], f)
    close = difflib.get_close_matches(last, list(by_last), n=1, cutoff=0.6)
    return by_last[close[0]] if close else None


def unknown_field(path: str, fields, how: str = "") -> ConfigError:
    near = nearest(path, fields)
    hint = f"; did you mean config.{near}?" if near else "; see configs/default.py for the fields"
    return ConfigError(f"{how}config.{path} is not a config field{hint}")
