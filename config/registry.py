"""Registries of parts (samplers, weightings, models, datasets, diffusion processes), each part owning its config.

A part is a class with
    name = "speed"                             # its registered name, the value of config.<section>.name
    FIELDS = dict(k=Num(5.0, lo=0, ...), ...)  # its own fields: defaults, types, ranges, which may change on resume
    @classmethod
    def check(cls, cfg, ctx): ...              # optional: ranges that depend on other sections (ctx["T"], ctx["B"]);
                                               # raise config.fields.FieldError(field, value, what is allowed)
and registers itself with `@SAMPLERS.register` (or `REGISTRY.register(Part)`). Its constructor receives its own
sub-config plus explicit values (the process, the batch size), never the whole config.

Two layouts of a section:
- "nested" (sampler, weighting): config.<section>.name picks the part, and every registered part with fields has its
  sub-config at config.<section>.<part name>, so any of them can be picked and tuned from the command line
  (--config.sampler.name=speed --config.sampler.speed.k=2). Only the named part's fields are checked and define
  a run.
- "flat" (model, data, diffusion): config.<section> holds name, the section's common fields and the named part's
  own fields directly (config.model.ch). A config of another part is built with
  `config.model = MODELS.default_config("other")` in a config file.
"""

import dataclasses
import importlib
import os
import pkgutil
import re
from typing import Callable, Dict

import ml_collections

from config.fields import Choice, ConfigError, Context, FieldError, to_config

NESTED, FLAT = "nested", "flat"

# What a part (a sampler, a weighting) may need of the diffusion process, and a process offers (Process.offers):
DISCRETE = "discrete"  # timesteps 0..T-1 of a chain, with its tables of steps
CONTINUOUS = "continuous"  # t float32 in [0, 1]
GAUSSIAN = "gaussian"  # a Gaussian path: log SNR, the target's coefficients (diffusion.base.Gaussian)
INVERTIBLE = "invertible"  # a noise level with inverses (diffusion.base.NoiseLevel: t_of_logsnr, t_of_sigma)
FIXED_SCHEDULE = "fixed_schedule"  # no parameters of its own in the model's variables
SAMPLING = "sampling"  # a sampler of images (diffusion.base.Sampling): sample grids, FID
LIKELIHOOD = "likelihood"  # a test likelihood and the bound's rows (diffusion.base.Likelihood): eval, bound rewards
CAPABILITIES = (DISCRETE, CONTINUOUS, GAUSSIAN, INVERTIBLE, FIXED_SCHEDULE, SAMPLING, LIKELIHOOD)


@dataclasses.dataclass(frozen=True)
class Need:
    """What a part (a sampler, a weighting) needs of the diffusion process, checked by one generic loop before
    anything compiles (config/validate.py check_needs): `capability` is one of CAPABILITIES, which a process
    offers or not (Process.offers). A need of the part itself has no
    field; one that only a setting of the part has names the field, its value and what to use instead; `why`
    replaces the process's own reason where the part knows better."""

    capability: str
    field: str | None = None
    value: object = None
    allowed: str | None = None
    why: str | None = None

    def __post_init__(self):
        if self.capability not in CAPABILITIES:
            raise ValueError(f"Need({self.capability!r}): a capability is one of {CAPABILITIES} (config/registry.py)")


REGISTERS = re.compile(r"\b[A-Z][A-Z_]*\.register\b")  # SAMPLERS.register, @DATASETS.register, ...


def import_parts(package: str, path) -> list:
    """Import every module of a package that registers a part (its source names a REGISTRY.register), so that a new
    part is one file and nothing else: as big_vision finds a model by its module's name, but all at once, since the
    command line's config, validation and its suggestions list every part. Other modules (helpers, scripts, builders
    kept lazy) are left to whoever imports them. `path`: the package's __path__. Returns the names imported."""
    names = []
    for info in pkgutil.iter_modules(path):
        file = os.path.join(info.module_finder.path, f"{info.name}.py")
        if info.ispkg or not os.path.isfile(file):
            continue
        with open(file, encoding="utf-8") as f:
            if not REGISTERS.search(f.read()):
                continue
        importlib.import_module(f"{package}.{info.name}")
        names.append(info.name)
    return names


class Registry:
    def __init__(self, section: str, layout: str, common: Dict | None = None, check: Callable | None = None):
        """`common`: fields every part of a flat section has (besides name); `check(section_cfg, ctx)`: a
        section-wide check run before the part's own."""
        assert layout in (NESTED, FLAT)
        self.section, self.layout = section, layout
        self.common = dict(common or {})
        self.section_check = check
        self.parts: Dict[str, type] = {}

    # -- registration ---------------------------------------------------------------------------------------------
    def register(self, part):
        """Register a part (usable as a class decorator). Its name must be new, its fields must not shadow the
        section's."""
        name = getattr(part, "name", None)
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"a {self.section} part needs a `name` that is an identifier, got {name!r}")
        if name in self.parts and self.parts[name] is not part:
            raise ValueError(f"a {self.section} named {name!r} is already registered ({self.parts[name].__module__})")
        reserved = {"name"} | set(self.common)
        # nested: the part's sub-config sits beside config.<section>.name; flat: its fields sit beside name and the
        # common fields
        clash = sorted({name} & reserved if self.layout == NESTED else set(getattr(part, "FIELDS", {})) & reserved)
        if clash:
            raise ValueError(f"{self.section} {name!r}: {clash} clash with config.{self.section}'s own fields")
        self.parts[name] = part
        return part

    def unregister(self, name: str):
        self.parts.pop(name, None)

    # -- lookup ---------------------------------------------------------------------------------------------------
    def names(self):
        return sorted(self.parts)

    def __contains__(self, name):
        return name in self.parts

    def __iter__(self):
        return iter(self.names())

    def __getitem__(self, name):
        if name not in self.parts:
            raise ConfigError(
                f"config.{self.section}.name={name!r} is not allowed: must be one of {', '.join(self.names())}"
            )
        return self.parts[name]

    def fields_of(self, name: str) -> dict:
        return dict(getattr(self[name], "FIELDS", {}))

    def prefix(self, name: str) -> str:
        """Dotted path of a part's own fields: sampler.speed (nested) or model (flat)."""
        return f"{self.section}.{name}" if self.layout == NESTED else self.section

    # -- specs and configs ----------------------------------------------------------------------------------------
    def spec(self, name: str) -> dict:
        """The section's field spec with part `name` selected: {field: Field or nested dict}."""
        out = {"name": Choice(name, self.names)}
        if self.layout == NESTED:
            for part in self.names():
                fields = self.fields_of(part)
                if fields:
                    out[part] = fields
        else:
            # a part may give the section's common fields defaults of its own (a dataset its image size)
            own = getattr(self.parts.get(name), "COMMON_DEFAULTS", {})
            out.update({k: dataclasses.replace(f, default=own[k]) if k in own else f for k, f in self.common.items()})
            out.update(self.fields_of(name))
        return out

    def default_config(self, name: str) -> ml_collections.ConfigDict:
        return to_config(self.spec(name))

    def own_config(self, section_cfg, name: str | None = None) -> ml_collections.ConfigDict:
        """The named part's own sub-config (what its constructor receives)."""
        name = name or section_cfg.name
        if self.layout == FLAT:
            return section_cfg
        return section_cfg[name] if name in section_cfg else ml_collections.ConfigDict()

    def active_fields(self, section_cfg) -> dict:
        """{dotted path: Field} of the fields that count for this config: name, the common fields and the named
        part's (the other parts' sub-configs of a nested section are inert)."""
        name = section_cfg.name
        out = {f"{self.section}.name": self.spec(name)["name"]}
        out.update({f"{self.section}.{k}": f for k, f in self.common.items()})
        out.update({f"{self.prefix(name)}.{k}": f for k, f in self.fields_of(name).items()})
        return out

    def check(self, section_cfg, ctx: Context):
        """The section-wide check, then the named part's own (types and ranges are checked by the caller first)."""
        name = section_cfg.name
        try:
            if self.section_check is not None:
                self.section_check(section_cfg, ctx)
            part_check = getattr(self[name], "check", None)
            if part_check is not None:
                part_check(self.own_config(section_cfg), ctx)
        except FieldError as e:
            where = self.section if e.field in self.common else self.prefix(name)
            raise ConfigError(f"config.{where}.{e}") from None
