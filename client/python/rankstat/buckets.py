"""Histogram bucket rules, with SGLang's semantics (observability/utils.py).

A rule is a list of strings (as SGLang's server arguments carry it) or one space-separated string:

  []  or ["default"]                 the default buckets, sorted, duplicates removed
  ["tse", middle, base, count]       two-sided exponential buckets around `middle` (base > 1)
  ["custom", v1, v2, ...]            exactly these bounds, sorted, duplicates removed

Bucket boundaries are decided by the engine (here) and travel in the segment, as in SGLang, where the
process that creates the Histogram decides them.
"""

from __future__ import annotations

import math
import os
from typing import Iterable, List, Optional, Sequence, Union

Rule = Union[None, str, Sequence[Union[str, float, int]]]


def exponential_buckets(start: float, width: float, length: int) -> List[float]:
    """[start * width**i for i < length]."""
    return [start * width ** i for i in range(length)]


def two_sides_exponential_buckets(middle: float, base: float, count: int) -> List[float]:
    """`middle`, then ceil(count / 2) times: the distance d (starting at 1) is multiplied by `base`, and
    middle + d and max(0, middle - d) are added. Sorted, duplicates removed."""
    bounds = {float(middle)}
    distance = 1.0
    for _ in range(math.ceil(count / 2)):
        distance *= base
        bounds.add(middle + distance)
        bounds.add(max(0.0, middle - distance))
    return sorted(bounds)


def _as_rule(rule: Rule) -> List[str]:
    if rule is None:
        return []
    if isinstance(rule, str):
        return rule.split()
    return [str(x) for x in rule]


def generate_buckets(rule: Rule, default: Iterable[float]) -> List[float]:
    """Applies a bucket rule; raises ValueError for an unknown rule or a bad argument."""
    words = _as_rule(rule)
    if not words:
        words = ["default"]
    name = words[0]
    if name == "default":
        if len(words) != 1:
            raise ValueError(f"bucket rule 'default' takes no arguments: {words}")
        return sorted(set(float(x) for x in default))
    if name == "tse":
        if len(words) != 4:
            raise ValueError(f"bucket rule 'tse' needs <middle> <base> <count>: {words}")
        middle, base, count = float(words[1]), float(words[2]), int(words[3])
        if not base > 1.0:
            raise ValueError(f"bucket rule 'tse': the base must be greater than 1, not {base}")
        return two_sides_exponential_buckets(middle, base, count)
    if name == "custom":
        if len(words) < 2:
            raise ValueError(f"bucket rule 'custom' needs at least one bound: {words}")
        return sorted(set(float(x) for x in words[1:]))
    raise ValueError(f"unknown bucket rule {name!r}: use default, tse <middle> <base> <count>, or custom <v1> ...")


def histogram_conf_from_env(name: str) -> Optional[List[float]]:
    """Comma-separated bounds from the environment variable `name`; None when unset or empty (SGLang's
    get_histogram_conf_from_env: the default applies)."""
    value = os.environ.get(name)
    if not value:
        return None
    return [float(x) for x in value.split(",")]


def buckets_or_rule(value: Union[None, Sequence[float], Sequence[str], str], default: Iterable[float]) -> List[float]:
    """A bucket override as SGLang's tokenizer takes it: None (the default), a list of numbers (used as
    given), or a rule (a list starting with a rule name, or a string)."""
    if value is None:
        return sorted(set(float(x) for x in default))
    if isinstance(value, str) or (len(value) > 0 and isinstance(value[0], str)
                                   and value[0] in ("default", "tse", "custom")):
        return generate_buckets(value, default)  # type: ignore[arg-type]
    return sorted(set(float(x) for x in value))
