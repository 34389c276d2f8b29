"""rankstat: publish engine stats into shared-memory segments that rankstatd serves as Prometheus metrics.

prometheus_client's interface, one segment per process (what engines' collector hooks take):

    from rankstat import Counter, Histogram
    requests = Counter("myengine:requests_total", "Requests served", ["model"])
    requests.labels(model="m").inc()
    latency = Histogram("myengine:latency_seconds", "Request latency", buckets=[0.1, 1, 10])
    latency.observe(0.42)

SGLang: rankstat.sglang.stat_loggers() (collector subclasses for ServerArgs.stat_loggers) or
rankstat.sglang.install() (any SGLang version); see docs/sglang.md.

A segment of one's own (any engine): a Reporter, whose families are the same classes bound to its
segment, and the typed fast path (one C call per scheduler report):

    r = rankstat.Reporter(role="scheduler", instance="prod-a", model_name="m", tp_rank=0)
    r.counter("myengine:steps_total", "Scheduler steps").inc()
    packer = r.snapshot_packer()          # SGLang's SchedulerStats fields
    packer.send([... one value per packer.field_names ...], kind=rankstat.ReportKind.DECODE)

The library is librankstat.so, found through $RANKSTAT_LIBRARY, next to this package, a build tree,
or the system loader; no compile step.
"""

from ._native import (KNOWN_LAYOUT_HASHES, LAYOUT_MAJOR, RankstatError, RankstatLayoutError, RankstatLibraryError,
                      library_path, load_library)
from .metrics import Counter, Gauge, Histogram, Summary
from ._native import ReportKind
from .reporter import Reporter, null_reporter
from .snapshot import SnapshotPacker, UpdateBatch

from ._version import __version__

__all__ = [
    "KNOWN_LAYOUT_HASHES", "LAYOUT_MAJOR", "RankstatError", "RankstatLayoutError", "RankstatLibraryError",
    "library_path", "load_library", "Counter", "Gauge", "Histogram", "Summary", "ReportKind", "Reporter",
    "SnapshotPacker", "UpdateBatch", "null_reporter", "__version__",
]
