"""Which metric and label names rankstat's metric classes accept: prometheus_client's rule (its current
release, docs/semantics.md "Names"), how a family's full name and label names are composed from its
constructor's arguments, and which label values a new child may carry.

By default any non-empty name that is UTF-8 text is a metric name or a label name (`my.metric`,
`http.method`, `größe`); label names starting with `__` stay reserved. A string holding a lone surrogate is
not UTF-8 text and is refused as prometheus_client refuses it: with the codec's UnicodeEncodeError, a
ValueError. With PROMETHEUS_LEGACY_NAME_VALIDATION set to true, 1 or t (any case) in the environment
when the module is imported, the classic rules apply instead: [a-zA-Z_:][a-zA-Z0-9_:]* for metric names and
[a-zA-Z_][a-zA-Z0-9_]* for label names. When prometheus_client's own switch exists (its `validation`
module, 0.22 and later), that switch decides, so prometheus_client.validation.enable_legacy_validation()
applies to rankstat's classes too.

Two refusals of rankstat's own, both of names prometheus_client accepts but cannot expose
(docs/semantics.md): an empty label name (its exposition would write `{="v"}`) and a NUL character in a
name (the text format has no escape for it).

rankstatd writes a name that is not classic escaped as the scraper negotiated (docs/http-api.md,
"Escaping"): `my_metric` by default, `{"my.metric"}` to a scraper that asks for allow-utf-8.
"""

from __future__ import annotations

import importlib
import os
import re
from typing import Iterable, Tuple

CLASSIC_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
CLASSIC_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _legacy_from_environment() -> bool:
    return os.environ.get("PROMETHEUS_LEGACY_NAME_VALIDATION", "False").lower() in ("true", "1", "t")


_legacy = _legacy_from_environment()
_client_switch = None  # prometheus_client.validation.get_legacy_validation, once looked up
_client_looked_up = False


def legacy_validation() -> bool:
    """True when only classic names are accepted."""
    global _client_switch, _client_looked_up
    if not _client_looked_up:
        _client_looked_up = True
        try:
            validation = importlib.import_module("prometheus_client.validation")  # 0.22 and later, not 0.16
            _client_switch = getattr(validation, "get_legacy_validation", None)
        except ImportError:
            _client_switch = None
    if _client_switch is not None:
        return bool(_client_switch())
    return _legacy


def enable_legacy_validation() -> None:
    """Classic names only from now on (when prometheus_client has its own switch, call its function)."""
    global _legacy
    _legacy = True


def disable_legacy_validation() -> None:
    """Any UTF-8 name from now on (when prometheus_client has its own switch, call its function)."""
    global _legacy
    _legacy = False


def _is_text(name: str) -> bool:
    # A lone surrogate raises UnicodeEncodeError here, a ValueError, as in prometheus_client (which lets
    # the codec's error through, message and all).
    name.encode("utf-8")
    return "\0" not in name


def _check_name(name: str, what: str, classic: "re.Pattern[str]") -> None:
    # prometheus_client's messages: "Invalid metric name: ..." and "Invalid label metric name: ...".
    if not isinstance(name, str) or not name:
        raise ValueError(f"Invalid {what} name: {name}")
    valid = classic.match(name) is not None if legacy_validation() else _is_text(name)
    if not valid:
        raise ValueError(f"Invalid {what} name: {name}")


def check_metric_name(name: str) -> None:
    """Raises ValueError("Invalid metric name: ...") unless `name` (the full name: namespace, subsystem,
    name and unit composed) is a metric name."""
    _check_name(name, "metric", CLASSIC_METRIC_NAME)


def check_label_name(name: str) -> None:
    """Raises ValueError("Invalid label metric name: ...") unless `name` is a label name, and ValueError
    ("Reserved label metric name: ...") for a `__` prefix: prometheus_client's messages."""
    _check_name(name, "label metric", CLASSIC_LABEL_NAME)
    if name.startswith("__"):
        raise ValueError("Reserved label metric name: " + name)


def full_name(kind: str, name: str, namespace: str, subsystem: str, unit: str) -> str:
    """The family's name as prometheus_client composes it (namespace_subsystem_name_unit; a counter's
    trailing _total is the sample suffix, not part of the family), checked by check_metric_name()."""
    if not name:
        raise ValueError("Metric name should not be empty")
    full = "".join(part + "_" for part in (namespace, subsystem) if part) + name
    if kind == "counter" and full.endswith("_total"):
        full = full[:-6]  # the family; samples are exposed as <family>_total
    if unit and not full.endswith("_" + unit):
        full += "_" + unit
    check_metric_name(full)
    return full


def label_names(kind: str, name: str, labelnames: Iterable[str], reserved: Tuple[str, ...]) -> Tuple[str, ...]:
    """The family's label names as a tuple: prometheus_client's checks and messages, plus three refusals of
    rankstat's own (docs/semantics.md): a string instead of a sequence, a name given twice (two labels of
    one name are not valid exposition), and `pid` on a gauge (prometheus_client's multiprocess collector
    replaces or strips it, so the value the caller gave is never served)."""
    if isinstance(labelnames, str):
        raise ValueError(f"{name}: labelnames must be a sequence of label names, not the string {labelnames!r}")
    names = tuple(labelnames)
    seen = set()
    for label in names:
        check_label_name(label)
        if label in reserved:
            raise ValueError(f"Reserved label metric name: {label}")
        if kind == "gauge" and label == "pid":
            raise ValueError(f"{name}: label name 'pid' is refused on a gauge: prometheus_client's multiprocess "
                             f"mode replaces it with the process id or strips it, so its value would never be served")
        if label in seen:
            raise ValueError(f"{name}: duplicate label name {label!r}")
        seen.add(label)
    return names


def check_label_values(family: str, labelnames: Tuple[str, ...], values: Tuple[str, ...]) -> None:
    """A new child's label values must be text the segment (and the exposition) can carry: UTF-8. A lone
    surrogate ('\\ud800') is not: the call that labels it raises UnicodeEncodeError (a ValueError), naming
    the label, instead of the registration being refused later with only a log line. Only a new child is
    checked (labels() of a known child never comes here)."""
    for name, value in zip(labelnames, values):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise UnicodeEncodeError(e.encoding, e.object, e.start, e.end,
                                     f"{e.reason}: label {name!r} of {family} must be UTF-8 text") from None
