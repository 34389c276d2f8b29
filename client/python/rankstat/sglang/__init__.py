"""SGLang parity: collectors that stand in for SGLang's, stats objects shaped like SGLang's, the metric
catalog, and derived values with SGLang's edge cases. See docs/sglang.md for the wiring."""

from .catalog import FAMILIES, Family
from .collectors import (ExpertDispatchCollector, RadixCacheMetricsCollector, SchedulerMetricsCollector,
                         SchedulerMetricsCollectorContext, StorageMetricsCollector, TokenizerMetricsCollector,
                         stat_loggers)
from .derive import (GEN_THROUGHPUT_STALENESS_SECONDS, GenThroughput, cache_hit_rate, inter_token_bulk,
                     max_pool_usage, should_observe_ttft, spec_accept, time_per_output_token, time_to_first_token,
                     utilization)
from .frontend import (FuncLatency, HttpMetrics, HttpMetricsMiddleware, enable_func_timer, observe_func_latency,
                       time_func_latency)
from .segments import configure, scheduler_segment, tokenizer_segment
from .stats import DPBalanceStats, DPCooperationInfo, GrammarStats, QueueCount, SchedulerStats, StorageMetrics

__all__ = [
    "FAMILIES", "Family", "ExpertDispatchCollector", "RadixCacheMetricsCollector", "SchedulerMetricsCollector",
    "SchedulerMetricsCollectorContext", "StorageMetricsCollector", "TokenizerMetricsCollector", "stat_loggers",
    "GEN_THROUGHPUT_STALENESS_SECONDS", "GenThroughput", "cache_hit_rate", "inter_token_bulk", "max_pool_usage",
    "should_observe_ttft", "spec_accept", "time_per_output_token", "time_to_first_token", "utilization",
    "FuncLatency", "HttpMetrics", "HttpMetricsMiddleware", "enable_func_timer", "observe_func_latency",
    "time_func_latency", "configure", "scheduler_segment", "tokenizer_segment",
    "DPBalanceStats", "DPCooperationInfo", "GrammarStats", "QueueCount", "SchedulerStats", "StorageMetrics",
]
