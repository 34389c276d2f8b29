"""rankstat: publish engine stats into shared-memory segments that rankstatd serves as Prometheus metrics.

Plain API (any engine):

    import rankstat
    r = rankstat.Reporter(role="scheduler", instance="prod-a", model_name="m", tp_rank=0)
    tokens = r.counter("myengine:tokens_total", labelnames=["mode"])
    tokens.labels(mode="decode").inc(128)
    packer = r.snapshot_packer()          # SGLang's SchedulerStats fields, one C call per report
    packer.send([... one value per packer.field_names ...], kind=rankstat.ReportKind.DECODE)

SGLang drop-in: rankstat.sglang (SchedulerMetricsCollector, TokenizerMetricsCollector, ...).
The library is librankstat.so, found through $RANKSTAT_LIBRARY, next to this package, a build tree,
or the system loader; no compile step.
"""

from ._native import (KNOWN_LAYOUT_HASHES, LAYOUT_MAJOR, RankstatError, RankstatLayoutError, RankstatLibraryError,
                      library_path, load_library)
from .buckets import exponential_buckets, generate_buckets, histogram_conf_from_env, two_sides_exponential_buckets
from .reporter import (Counter, Gauge, Histogram, ReportKind, Reporter, SnapshotPacker, Summary, UpdateBatch,
                       null_reporter)

__version__ = "0.1.0"

__all__ = [
    "KNOWN_LAYOUT_HASHES", "LAYOUT_MAJOR", "RankstatError", "RankstatLayoutError", "RankstatLibraryError",
    "library_path", "load_library", "exponential_buckets", "generate_buckets", "histogram_conf_from_env",
    "two_sides_exponential_buckets", "Counter", "Gauge", "Histogram", "ReportKind", "Reporter", "SnapshotPacker",
    "Summary", "UpdateBatch", "null_reporter", "__version__",
]
