"""The command line's overrides of a config (--config.FIELD=VALUE), read before ml_collections parses them, so that a
bad one is one line naming the field and what is allowed (command_line.py, for main.py):

    rename_overrides(argv)         overrides of a field's earlier name, rewritten to its name (a note)
    part_switches(argv, config)    overrides that switch a flat section to another part (and that section's fields),
                                   applied to the parsed config by apply_switches(config, ...)
    check_overrides(argv, config)  overrides that name no field of the config (with the nearest one)
"""

import ast
import contextlib
import sys

from config import schema
from config.fields import ConfigError, flatten, get, renamed, unknown_field
from config.registry import FLAT
from config.validate import _note_renamed, known_fields

__all__ = ["rename_overrides", "part_switches", "apply_switches", "parse_value", "a_type", "check_overrides"]


def rename_overrides(argv, config=None):
    """argv with every --config.OLD=V of a renamed field (config.fields.Field.aliases) written as --config.NEW=V, one
    note per renamed flag, so that old command lines keep working. `config` is the --config file's: where it still
    sets a field under its old name, a flag of either name is written under the old one instead, so that it
    overrides the file's value (rename_fields then moves it)."""
    old_to_new, have, out = renamed(known_fields()), flatten(config) if config is not None else {}, []
    new_to_old = {new: old for old, new in old_to_new.items()}
    for arg in argv:
        path, eq, value = arg[len("--config.") :].partition("=") if arg.startswith("--config.") else ("", "", "")
        if path in old_to_new:
            _note_renamed(path, old_to_new[path])
            if path not in have:
                arg = f"--config.{old_to_new[path]}{eq}{value}"
        elif path in new_to_old and new_to_old[path] in have:
            arg = f"--config.{new_to_old[path]}{eq}{value}"
        out.append(arg)
    return out


def part_switches(argv, config):
    """The overrides of a command line that switch a flat section (data, model, diffusion) to another part, and the
    overrides of those sections' fields: [(path, value string)] in command-line order. ml_collections applies
    overrides to the --config file's section as it is, where the new part's fields do not exist; these are applied
    after it (apply_switches) to the section recomposed from the new part's defaults."""
    switched, out = set(), []
    for arg in argv:
        if arg.startswith("--config.") and "=" in arg:
            path, value = arg[len("--config.") :].split("=", 1)
            section, _, field = path.partition(".")
            flat = section in schema.REGISTRIES and schema.REGISTRIES[section][0].layout == FLAT
            if flat and field == "name" and value != config[section].get("name"):
                switched.add(section)
    for arg in argv:
        if arg.startswith("--config.") and "=" in arg:
            path, value = arg[len("--config.") :].split("=", 1)
            if path.partition(".")[0] in switched:
                out.append((path, value))
    return out


def parse_value(path: str, raw: str, current):
    """A command-line value for a field whose current value is `current` (ml_collections' rules: by the type of the
    value it replaces)."""
    try:
        if isinstance(current, bool):
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return raw.lower() in ("true", "1")
        if isinstance(current, int):
            return int(raw)
        if isinstance(current, float):
            return float(raw)
        if isinstance(current, (tuple, list)):
            v = ast.literal_eval(raw)
            return tuple(v) if isinstance(v, (tuple, list)) else (v,)
    except (ValueError, SyntaxError):
        raise ConfigError(f"--config.{path}={raw!r} is not allowed: must be {a_type(current)}") from None
    return raw


def a_type(value) -> str:
    """What a command-line value must be to replace `value` ('an integer', 'a float', ...)."""
    kinds = {bool: "True or False", int: "an integer", float: "a float", tuple: "a tuple", list: "a tuple"}
    return kinds.get(type(value), f"a {type(value).__name__}")


def apply_switches(config, switches):
    """Apply part_switches' overrides to a config (in place): each switch recomposes its section from the new part's
    defaults (schema.switch_part, its notes printed), then the section's field overrides are set, each checked
    against the new part's fields (one line naming a field it lacks, with the nearest one)."""
    with config.unlocked() if hasattr(config, "unlocked") else contextlib.nullcontext():
        for path, raw in switches:
            section, _, field = path.partition(".")
            if field == "name":
                for note in schema.switch_part(config, section, raw):
                    print(note, file=sys.stderr)
        for path, raw in switches:
            if path.endswith(".name") and path.count(".") == 1:
                continue
            fields = flatten(config)
            if path not in fields:
                raise unknown_field(path, fields, f"--config.{path}: ")
            parent, _, last = path.rpartition(".")
            get(config, parent)[last] = parse_value(path, raw, fields[path])
    return config


def check_overrides(argv, config=None):
    """--config.A.B=V flags whose A.B is not a field of `config` (the --config file's; the default config's when
    None): ml_collections would raise deep in flag parsing."""
    fields = flatten(config) if config is not None else known_fields()
    prefixes = {f.rsplit(".", i)[0] for f in fields for i in range(1, f.count(".") + 1)}
    for arg in argv:
        if arg.startswith("--config."):
            path = arg[len("--config.") :].split("=", 1)[0]
            if path not in fields and path not in prefixes:
                raise unknown_field(path, fields, f"--config.{path}: ")
