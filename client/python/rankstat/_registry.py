"""Where rankstat's metric classes register, and what a registry sees of them: prometheus_client's
CollectorRegistry rule (a collector claims its names plus its type's sample suffixes; a second claim is
refused), the `registry=` default, the one-declaration rule of a segment, and the metric families
describe()/collect() return (prometheus_client's Metric when it is installed).

Cold paths only: a family's constructor and a registry's describe()/collect() come here, no update does.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Dict, List, Tuple

from . import _names

# The sample names a family of each type claims beside its own, as prometheus_client's registry counts them.
TYPE_SUFFIXES = {
    "counter": ("_total", "_created"),
    "summary": ("_sum", "_count", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
}


class CollectorRegistry:
    """Where rankstat's metrics register when prometheus_client is not installed (with it, the default
    is prometheus_client.REGISTRY, so an engine's unregister() and duplicate checks see them). Same rule:
    a collector claims every name it describes plus its type's sample suffixes, and a second collector
    claiming any of them is refused with "Duplicated timeseries in CollectorRegistry"."""

    def __init__(self) -> None:
        self._collector_to_names: Dict[Any, List[str]] = {}
        self._names_to_collectors: Dict[str, Any] = {}
        self._lock = threading.Lock()

    def register(self, collector) -> None:
        """Claims every name `collector` describes; ValueError when another collector holds one of them."""
        with self._lock:
            names = self._get_names(collector)
            duplicates = set(self._names_to_collectors).intersection(names)
            if duplicates:
                raise ValueError(f"Duplicated timeseries in CollectorRegistry: {duplicates}")
            for name in names:
                self._names_to_collectors[name] = collector
            self._collector_to_names[collector] = names

    def unregister(self, collector) -> None:
        """Releases the names `collector` claimed (KeyError when it is not registered)."""
        with self._lock:
            for name in self._collector_to_names[collector]:
                del self._names_to_collectors[name]
            del self._collector_to_names[collector]

    @staticmethod
    def _get_names(collector) -> List[str]:
        describe = getattr(collector, "describe", None)
        if describe is None:
            return []
        result = []
        for metric in describe():
            result.append(metric.name)
            result.extend(metric.name + suffix for suffix in TYPE_SUFFIXES.get(metric.type, ()))
        return result

    def collect(self):
        """Every registered collector's metric families, in registration order."""
        with self._lock:
            collectors = list(self._collector_to_names)
        for collector in collectors:
            yield from collector.collect()


def default_registry():
    """prometheus_client's REGISTRY when it is installed (the engines' own default), else a registry of ours."""
    try:
        from prometheus_client import REGISTRY as found
        return found
    except ImportError:
        return CollectorRegistry()


REGISTRY = default_registry()


class DefaultRegistry:
    """The `registry=` default: REGISTRY above for code that builds metrics itself, as prometheus_client's
    default; none while rankstat's engine adapters have swapped prometheus_client's classes for rankstat's
    (an SGLang collector's or a vLLM logger's constructor). Engines build those through their metric-class
    hooks, made for classes that register nowhere (vLLM's Ray wrappers), and may build a logger twice
    without unregistering. A conflicting declaration is refused there too (claim_declaration)."""

    def __repr__(self) -> str:
        return "REGISTRY"

    @staticmethod
    def resolve():
        found = sys.modules.get("prometheus_client")
        if found is not None:
            from .metrics import Counter  # imported by now: only a metric's constructor calls this
            if getattr(found, "Counter", None) is Counter:
                return None
        return REGISTRY


DEFAULT_REGISTRY = DefaultRegistry()


# Every name a family declared in a segment claims (as a registry counts them: a counter claims foo,
# foo_total and foo_created, ...) -> its declaration (type, gauge mode, bucket bounds), in that segment's
# `declarations` (backend.Segment: the process's segment, or one Reporter's). The segment holds every
# declaration for its life, so a second one that disagrees is refused whatever the registry: one family,
# one declaration (docs/semantics.md). The callers hold rankstat.metrics' registration lock.

def claimed_names(metric) -> List[str]:
    """The names `metric`'s family claims: its own and its type's sample names."""
    return [metric._name] + [metric._name + suffix for suffix in TYPE_SUFFIXES.get(metric._type, ())]


def _declaration(metric) -> Tuple[Any, ...]:
    return (metric._type, metric._mode(), tuple(metric._bounds()))


def conflicts(metric) -> set:
    """The claimed names `metric`'s segment holds under another declaration (empty: it may be declared)."""
    declaration = _declaration(metric)
    declared = metric._segment.declarations
    return {name for name in claimed_names(metric) if declared.get(name, declaration) != declaration}


def claim_declaration(metric) -> None:
    """Records `metric`'s declaration under every name it claims (a name already declared keeps its own)."""
    declaration = _declaration(metric)
    for name in claimed_names(metric):
        metric._segment.declarations.setdefault(name, declaration)


class Described:
    """What describe()/collect() return without prometheus_client: name, documentation, type, unit,
    samples (name, labels, value, timestamp, exemplar)."""

    def __init__(self, name: str, documentation: str, typ: str, unit: str = ""):
        self.name, self.documentation, self.type, self.unit = name, documentation, typ, unit
        self.samples: List[tuple] = []

    def add_sample(self, name, labels, value, timestamp=None, exemplar=None):
        self.samples.append((name, labels, value, timestamp, exemplar))


def metric_family(name: str, documentation: str, typ: str, unit: str):
    """An empty metric family for describe()/collect(): prometheus_client's Metric, else a Described."""
    try:
        from prometheus_client.metrics_core import Metric
    except ImportError:
        return Described(name, documentation, typ, unit)
    try:
        return Metric(name, documentation, typ, unit)
    except ValueError:
        if _names.legacy_validation():
            raise
        # A prometheus_client before 0.22 (Debian's 0.16) refuses a name outside the classic set, which
        # rankstat accepted as the current release does (rankstat._names): its registry then holds the
        # family under a stand-in built with a classic name and given the real one.
        family = Metric("rankstat_stand_in", documentation, typ)
        family.name, family.unit = name, unit
        return family
