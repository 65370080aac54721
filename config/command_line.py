"""A command line to a checked config, before ml_collections parses it and before JAX starts (main.py): a bad
config argument, an override naming no field or a value its field's parser refuses would fail deep inside flag
parsing with a traceback or two lines; each is a ConfigError in one line here.

    check_command_line(argv)   (argv, part switches, config): the --config file's config built once
                               (check_config_file), fields' earlier names rewritten and part switches taken out
                               (config/overrides.py), the overrides parsed as main's flags will be (parse_overrides)
    define_config_flag(...)    main.py's --config flag (ml_collections' config file flag)
"""

import os
import re

from absl import flags
from ml_collections import config_flags

from config.fields import ConfigError, flatten
from config.overrides import a_type, check_overrides, part_switches, rename_overrides

__all__ = ["check_command_line", "check_config_file", "define_config_flag", "parse_overrides", "where_in"]


def check_config_file(argv):
    """Build the --config file's config once (its argument included, e.g. configs/cifar10.py:linear,p2) and return
    it: a bad argument would otherwise surface as a traceback inside flag parsing."""
    import importlib.util

    value = "configs/default.py"
    for i, a in enumerate(argv):
        if a.startswith("--config="):
            value = a.split("=", 1)[1]
        elif a == "--config" and i + 1 < len(argv):
            value = argv[i + 1]
    path, _, arg = value.partition(":")
    spec = importlib.util.spec_from_file_location("_config_check", path)
    if spec is None or not os.path.exists(path):
        raise ConfigError(f"--config={value}: no config file {path!r}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        return module.get_config(arg) if arg else module.get_config()
    except Exception as e:  # the file's own error, at its own line: one line, not a traceback through absl
        raise ConfigError(f"--config={value}: {where_in(e, path)}") from None


def where_in(e: BaseException, path: str) -> str:
    """'FILE:LINE: Type: message' of an error raised by (or, a syntax error, in) the file `path`: its innermost
    frame in that file (the line a user edits), else the innermost frame."""
    if isinstance(e, SyntaxError) and e.filename:
        return f"{e.filename}:{e.lineno}: SyntaxError: {e.msg}"
    frames, tb = [], e.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    mine = [f for f in frames if os.path.abspath(f[0]) == os.path.abspath(path)]
    file, line = (mine or frames)[-1]
    what = " ".join(str(e).split()) or "(no message)"
    file = os.path.relpath(file) if file.startswith(os.getcwd() + os.sep) else file
    return f"{file}:{line}: {type(e).__name__}: {what}"


def define_config_flag(flag_values, argv):
    """Define --config (ml_collections' config file flag) in `flag_values`, its overrides those of `argv` (without
    the program's name)."""
    config_flags.DEFINE_config_file(
        "config",
        "configs/default.py",
        "Experiment config (a configs/*.py file[:argument]); any field is overridden with --config.FIELD=VALUE. "
        "--mode=show prints every field with its value and what it allows; docs/config.md explains them.",
        flag_values=flag_values,
        lock_config=True,
        sys_argv=["main.py", *argv],
    )


def parse_overrides(argv, config):
    """The --config file's config with argv's overrides, parsed by ml_collections as main's flags will be, but into
    flags of its own: a value it cannot parse for its field is a ConfigError in one line naming the flag, the value
    and the field's type (absl would print "FATAL Flags parsing error" and a second line, and exit 1). `config`: the
    --config file's, for the types."""
    fv = flags.FlagValues()
    try:
        define_config_flag(fv, argv)
        fv(["main.py", *argv], known_only=True)  # --workdir, --mode, --help: main's flags, parsed there
    except (flags.Error, ValueError) as e:
        why = " ".join(str(e).split())
        m = re.match(r"flag --config\.([\w.]+)=(.*?): ", why)
        if m is None:
            raise ConfigError(why) from None
        path = m.group(1)
        given = [a.split("=", 1)[1] for a in argv if a.startswith(f"--config.{path}=")]
        raw = given[-1] if given else m.group(2)  # the message's own copy ends at the first ": " in the value
        reason = why.split(f"={raw}: ", 1)[1] if f"={raw}: " in why else why[m.end() :]
        current = flatten(config).get(path)
        kind = "a section" if current is None else a_type(current)
        raise ConfigError(f"--config.{path}={raw!r} is not allowed: must be {kind} ({reason})") from None
    return fv.config


def check_command_line(argv):
    """(argv, part switches, config) of a command line: a bad config argument, an override naming no field or a
    value its field's parser refuses would fail deep inside flag parsing with a traceback or two lines; each is a
    ConfigError in one line here. argv comes back with fields' earlier names rewritten (a note each) and the part
    switches taken out (main applies them to the parsed config)."""
    config = check_config_file(argv)
    argv = rename_overrides(argv, config)  # fields' earlier names (sample.ddim_steps), a note
    switches = part_switches(argv, config)
    deferred = {f"--config.{path}={value}" for path, value in switches}
    argv = [a for a in argv if a not in deferred]
    check_overrides(argv, config)
    return argv, switches, parse_overrides(argv, config)
