"""The user's words for a search space: the ``seq_len`` and ``knobs`` options (``NAME=V1,V2``),
and the narrowing of a space's values they ask for.

``parse_seq_len`` and ``parse_knob_args`` read the text; ``narrow`` keeps the values a
``knobs`` item names, checking each name and value against the registry's entries (and the
model's knobs) and saying why a value that exists is not searched on this device or model.
Messages name the option's field (``seq_len``, ``knobs``), never a command-line flag: the
CLI shows its flags in their place.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from autotune.config.knobs import KnobDef, Where, describe_value, searched_knobs
from autotune.config.train_config import TrainConfig, did_you_mean
from autotune.core.errors import UsageError
from autotune.core.validator import SIZE, show

__all__ = ["parse_knob_args", "narrow", "parse_seq_len"]

_DERIVED = {
    "grad_accum": "grad_accum is derived (global batch / micro_batch); restrict micro_batch "
    "or change global_batch instead",
    "global_batch": "the global batch is fixed during a search; set global_batch",
}
_TRUE = {"true", "on", "yes", "1"}
_FALSE = {"false", "off", "no", "0"}


def _powers_of_two(lo: int, hi: int) -> list[int]:
    out, p = [], 1
    while p <= hi:
        if p >= lo:
            out.append(p)
        p *= 2
    return out


def parse_seq_len(text: str | int | Sequence[int], *, max_seq_len: int | None = None) -> list[int]:
    """``"128"`` -> [128]; ``"64-256"`` -> the powers of two in [64, 256]: [64, 128, 256].

    A list of ints is taken as given. A range is cut at ``max_seq_len`` (``"64-1024"`` for
    a model of 256: up to 256), as long as some of it is left; a length given outright
    above it is a usage error, as is a length beyond ``autotune.core.validator.SIZE``.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        values = [text]
    elif isinstance(text, str):
        raw = text.strip()
        try:
            if "-" in raw:
                lo_s, _, hi_s = raw.partition("-")
                lo, hi = int(lo_s), int(hi_s)
                if lo < 1 or hi < lo:
                    raise ValueError
                values = _powers_of_two(lo, hi)
                if not values:
                    raise UsageError(
                        f"seq_len {text!r}: the range holds no power of two; give one "
                        "length (e.g. 100) or a range that contains a power of two"
                    )
            else:
                values = [int(raw)]
        except ValueError:
            raise UsageError(
                f"cannot read seq_len {text!r}: expected one length such as 128 or a "
                "range such as 64-256 (the powers of two within it are searched)"
            ) from None
    elif isinstance(text, bool) or not isinstance(text, Iterable):
        raise UsageError(f"seq_len must be a length, got {show(text)}")
    else:  # a list: numpy's integers too; anything else is refused below
        values = [
            operator.index(v) if hasattr(v, "__index__") and not isinstance(v, bool) else v
            for v in text
        ]
    is_range = isinstance(text, str) and "-" in text
    if not values or any(SIZE.wanted(v) for v in values):
        wanted = next((SIZE.wanted(v) for v in values if SIZE.wanted(v)), "a positive integer")
        raise UsageError(f"seq_len {show(text)}: each length must be {wanted}")
    if max_seq_len is not None:
        fits = [v for v in values if v <= max_seq_len]
        if not fits or (len(fits) < len(values) and not is_range):
            raise UsageError(
                f"seq_len {show(text)}: the model accepts at most {max_seq_len} tokens; give "
                "lengths within it (a range that starts within it is cut at the limit)"
            )
        values = fits
    return sorted(set(values))


def parse_knob_args(items: Sequence[str]) -> dict[str, list[str]]:
    """``["precision=bf16,fp16", "compile=off"]`` -> ``{"precision": ["bf16", "fp16"], ...}``.

    Values stay strings here; ``SearchSpace.for_model`` checks names and values against the
    model and the device, where the allowed ones are known.
    """
    out: dict[str, list[str]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip()
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not name or not vals:
            raise UsageError(
                f"cannot read knobs {item!r}: expected NAME=VALUE[,VALUE...], e.g. "
                "precision=bf16,fp32 or compile=off"
            )
        if name in out:
            raise UsageError(f"knobs {name} is given twice ({out[name]} and {vals}); merge them")
        out[name] = vals
    return out


def _match_value(text: str, allowed: Sequence[Any]) -> tuple[bool, Any]:
    """Find the allowed value that ``text`` names (``"true"`` -> True, ``"8"`` -> 8)."""
    low = text.lower()
    for value in allowed:
        if isinstance(value, bool):
            if (value and low in _TRUE) or (not value and low in _FALSE):
                return True, value
        elif value is None:
            if low in ("none", "null", "default"):
                return True, value
        elif describe_value(value).lower() == low:
            return True, value
    return False, None


def narrow(
    full: Mapping[str, tuple[Any, ...]],
    model_knobs: Mapping[str, tuple[Any, ...]],
    restrict: Mapping[str, Sequence[Any]],
    where: Where,
    config_type: type[TrainConfig],
) -> tuple[dict[str, tuple[Any, ...]], dict[str, tuple[Any, ...]]]:
    """The built-in and model knob values left after the ``knobs`` restrictions."""
    spec, device = where.spec, where.device
    entries = {k.name: k for k in searched_knobs(config_type)}
    chosen = dict(full)
    knobs = dict(model_knobs)
    for raw_name, values in restrict.items():
        name = raw_name.removeprefix("knobs.").removeprefix("model.")
        if raw_name in _DERIVED:
            raise UsageError(f"knobs {raw_name}: {_DERIVED[raw_name]}")
        is_model_knob = name in model_knobs and (raw_name != name or name not in entries)
        unsearched = {k.name: k for k in spec.knobs if k.name not in model_knobs}
        if not is_model_knob and name in unsearched and name not in full:
            raise UsageError(
                f"knobs {raw_name}: model knob {name!r} is searched on a CUDA device only; "
                f"on {device.device} it stays at {describe_value(unsearched[name].default)}"
            )
        if not is_model_knob and name not in full:
            turned = [k.name for k in entries.values() if _turned(k, full)]
            several = ["parallel"] if "parallel" in full else []  # several processes' settings
            allowed_names = [*turned, *several, *model_knobs]
            raise UsageError(
                f"unknown knob {raw_name!r}{did_you_mean(raw_name, allowed_names)}; "
                f"knobs of {spec.name!r} on {device.device}: {', '.join(allowed_names)}"
            )
        if is_model_knob:
            knob = spec.knob(name)
            here, exists = model_knobs[name], knob.values
            reasons = {v: why for v in exists if (why := knob.value_problem(v, device))}
            knobs[name] = _pick_values(raw_name, values, here, exists, reasons)
        elif name in entries:
            entry = entries[name]
            here, exists = full[name], entry.domain() or full[name]
            reasons = {v: why for v in exists if (why := entry.unsearched_reason(v, where))}
            chosen[name] = _pick_values(raw_name, values, here, exists, reasons)
        else:  # "parallel": the labels this device runs
            chosen[name] = _pick_values(raw_name, values, full[name], full[name], {})
    return chosen, knobs


def _turned(k: KnobDef, full: Mapping[str, tuple[Any, ...]]) -> bool:
    """Whether the space turns ``k`` (a switch only where it holds more than its default)."""
    return k.search is not None and (not k.search.switch or full[k.name] != (k.default,))


def _same(a: Any, b: Any) -> bool:
    """Equal, and both booleans or neither."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _pick_values(
    raw_name: str,
    values: Sequence[Any],
    here: tuple[Any, ...],
    exists: tuple[Any, ...],
    why_not: Mapping[Any, str],
) -> tuple[Any, ...]:
    """The values of ``here`` that the ``knobs`` item ``raw_name=values`` names, in the
    space's order.

    A value that does not exist at all (not in ``exists``), or that exists but not here
    (``why_not`` may say why), is a ``UsageError`` listing what is allowed here.
    """
    shown = ", ".join(describe_value(v) for v in here)
    picked: list[Any] = []
    for text in values:
        if isinstance(text, str):
            ok, value = _match_value(text, exists)
        else:  # True == 1 in Python: [True] was taken as micro_batch 1
            ok, value = any(_same(text, e) for e in exists), text
        if not ok:
            raise UsageError(f"knobs {raw_name}: unknown value {show(text)}; allowed here: {shown}")
        if value not in here:
            reason = why_not.get(value, "not available here")
            raise UsageError(f"knobs {raw_name}={text}: {reason}; allowed here: {shown}")
        if value not in picked:
            picked.append(value)
    return tuple(v for v in here if v in picked)  # the space's own order
