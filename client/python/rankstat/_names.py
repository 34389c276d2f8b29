"""Which metric and label names rankstat's metric classes accept: prometheus_client's rule (its current
release, docs/semantics.md "Names").

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


def check_metric_name(name: str) -> None:
    """Raises ValueError("Invalid metric name: ...") unless `name` (the full name: namespace, subsystem,
    name and unit composed) is a metric name."""
    if not isinstance(name, str) or not name:
        raise ValueError("Invalid metric name: " + str(name))
    if legacy_validation():
        valid = CLASSIC_METRIC_NAME.match(name) is not None
    else:
        valid = _is_text(name)
    if not valid:
        raise ValueError("Invalid metric name: " + name)


def check_label_name(name: str) -> None:
    """Raises ValueError("Invalid label metric name: ...") unless `name` is a label name, and ValueError
    ("Reserved label metric name: ...") for a `__` prefix: prometheus_client's messages."""
    if not isinstance(name, str) or not name:
        raise ValueError("Invalid label metric name: " + str(name))
    if legacy_validation():
        valid = CLASSIC_LABEL_NAME.match(name) is not None
    else:
        valid = _is_text(name)
    if not valid:
        raise ValueError("Invalid label metric name: " + name)
    if name.startswith("__"):
        raise ValueError("Reserved label metric name: " + name)
