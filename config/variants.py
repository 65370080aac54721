"""A config file's argument (python main.py --config=configs/FILE.py:ARGUMENT): parts separated by commas, each
filling one slot of the file's variant in order, or its default when absent. An optional slot takes a part only when
the part is one of its choices, so that later slots can be given without it (configs/edm.py: [SAMPLER][,WEIGHTING]).
Anything else is one line naming the file, the argument and what the file accepts."""

from typing import NamedTuple, Sequence


class Slot(NamedTuple):
    choices: Sequence[str] | None  # None: any part
    default: str
    optional: bool = False  # taken only when the part is one of `choices`, else the next slot reads it


def parse_variant(config_file: str, variant: str, slots: Sequence[Slot], usage: str) -> tuple:
    """The value of each slot in `variant` (the text after the config file's colon); ValueError in one line
    "configs/FILE:'ARGUMENT' is not a variant: use USAGE" for a part that is not one of its slot's choices or is left
    over."""
    parts = [p.strip() for p in (variant or "").split(",") if p.strip()]
    values, wrong = [], False
    for slot in slots:
        given = bool(parts) and (not slot.optional or parts[0] in slot.choices)
        value = parts.pop(0) if given else slot.default
        wrong |= given and slot.choices is not None and value not in slot.choices
        values.append(value)
    if parts or wrong:
        raise ValueError(f"configs/{config_file}:{variant!r} is not a variant: use {usage}")
    return tuple(values)


def one_of(choices: Sequence[str], default: str) -> str:
    """The usage of a one-part argument: 'one of A, B, C (default B)'."""
    return f"one of {', '.join(choices)} (default {default})"
