/*
 * rankstat C ABI (librankstat.so): what an engine rank calls to publish its stats into shared memory.
 *
 * Contract for every function: never throws, never aborts, never blocks, never takes a lock; the hot-path
 * calls (report, add, set, observe, heartbeat) never allocate. Errors come back as RANKSTAT_* codes;
 * rankstat_last_error() gives a message for the calling thread's last failed call. A NULL reporter is
 * accepted everywhere and turns the call into a no-op returning RANKSTAT_ERR_CLOSED, so an engine whose
 * segment could not be created keeps running without metrics.
 *
 * Threading: a reporter is single-writer. Call it from one thread at a time (open one reporter per
 * producing thread if several threads report).
 *
 * fork(): a reporter belongs to the process that opened it. A forked child must not update through a copy
 * it inherited (it would write into the parent's segment); it releases the copy with rankstat_abandon (or
 * rankstat_close, which abandons in any process but the opener) and opens its own reporter.
 */
#ifndef RANKSTAT_RANKSTAT_H
#define RANKSTAT_RANKSTAT_H

/* A C header (C engines and ctypes read it too): typedef struct and snake_case names. */
/* NOLINTBEGIN(modernize-use-using,readability-identifier-naming) */
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RANKSTAT_OK 0
#define RANKSTAT_ERR_INVALID_ARGUMENT 1 /* bad name, label, geometry or record size */
#define RANKSTAT_ERR_NO_SPACE 2         /* the shm directory is full (open, series pages): retry later */
#define RANKSTAT_ERR_PERMISSION 3
#define RANKSTAT_ERR_IO 4
#define RANKSTAT_ERR_RING_FULL 5     /* record dropped and counted; the daemon is slow or absent */
#define RANKSTAT_ERR_OVERSIZE 6      /* record larger than the segment allows; dropped and counted */
#define RANKSTAT_ERR_CLOSED 7        /* NULL or closed reporter */
#define RANKSTAT_ERR_REGISTRY_FULL 8 /* the cumulative block has no room for another series */

#define RANKSTAT_ROLE_SCHEDULER 1
#define RANKSTAT_ROLE_TOKENIZER 2
#define RANKSTAT_ROLE_DETOKENIZER 3
#define RANKSTAT_ROLE_OTHER 4

#define RANKSTAT_RANK_UNSET (-1)

#define RANKSTAT_FLAG_PRIORITY_SCHEDULING 1u
#define RANKSTAT_FLAG_ALL_SCHEDULERS_METRICS 2u
#define RANKSTAT_FLAG_DP_ATTENTION 4u

/* Gauge aggregation modes, as prometheus_client names them. */
#define RANKSTAT_MODE_ALL 0
#define RANKSTAT_MODE_LIVEALL 1
#define RANKSTAT_MODE_SUM 2
#define RANKSTAT_MODE_LIVESUM 3
#define RANKSTAT_MODE_MIN 4
#define RANKSTAT_MODE_LIVEMIN 5
#define RANKSTAT_MODE_MAX 6
#define RANKSTAT_MODE_LIVEMAX 7
#define RANKSTAT_MODE_MOSTRECENT 8
#define RANKSTAT_MODE_LIVEMOSTRECENT 9

typedef struct rankstat_reporter rankstat_reporter;

/* Who is reporting. Strings are NUL-terminated and copied; NULL means the default. Set struct_size to
 * sizeof(rankstat_identity) so later versions can append fields. */
typedef struct rankstat_identity {
  uint32_t struct_size;
  uint32_t role;           /* RANKSTAT_ROLE_* */
  const char* instance;    /* engine instance id, [A-Za-z0-9_-]{1,47}; NULL or "": $RANKSTAT_INSTANCE,
                              else "default" */
  const char* rank_key;    /* segment name suffix; default derived from the ranks (or pid) */
  const char* model_name;  /* served_model_name */
  const char* engine_type; /* "unified", "prefill", "decode"; default "unified" */
  int32_t tp_rank, pp_rank, dp_rank, moe_ep_rank;   /* dp_rank RANKSTAT_RANK_UNSET: no dp_rank label */
  int32_t attn_tp_rank, attn_dp_rank, attn_cp_rank; /* RANKSTAT_RANK_UNSET: derived from tp/dp */
  int32_t tp_size, pp_size, dp_size;
  uint32_t flags;             /* RANKSTAT_FLAG_* */
  uint32_t extra_label_count; /* SGLang's extra_metric_labels */
  const char* const* extra_label_names;
  const char* const* extra_label_values;
} rankstat_identity;

/* Segment geometry; zero fields take the defaults. */
typedef struct rankstat_geometry {
  uint32_t struct_size;
  uint32_t series_capacity;
  uint64_t ring_bytes; /* power of two */
  uint32_t bounds_capacity;
  uint32_t values_capacity;
  /* Appended with layout 3.0 (a smaller struct_size leaves it 0): bytes of the text area that holds the
   * series' family names, label lists and help texts; 0 gives 192 per series. */
  uint32_t text_capacity;
} rankstat_geometry;

/* Fills `identity` with the defaults (scheduler role, ranks 0, dp unset). */
void rankstat_identity_init(rankstat_identity* identity);

/* Creates this rank's segment in $RANKSTAT_SHM_DIR (default /dev/shm). `geometry` may be NULL. On
 * failure *out is NULL and the code says why (RANKSTAT_ERR_NO_SPACE: retry later). */
int rankstat_open(const rankstat_identity* identity, const rankstat_geometry* geometry,
                  rankstat_reporter** out);

/* Where and how rankstat_open_ex creates the segment file; zero or NULL fields take the defaults. Set
 * struct_size to sizeof(rankstat_permissions). Fields are only ever appended: a caller built against an
 * older header passes a smaller struct_size and the fields it does not have take their defaults. */
typedef struct rankstat_permissions {
  uint32_t struct_size;
  uint32_t mode;     /* 0660 (default: the daemon's group may write), 0640 or 0600; never world-writable */
  const char* group; /* group name or numeric gid; NULL: $RANKSTAT_SHM_GROUP, else the process's group */
  /* Appended after mode and group: the directory of this one segment; NULL or "": $RANKSTAT_SHM_DIR, else
   * /dev/shm. Lets a process put reporters in different directories without changing its environment. */
  const char* shm_dir;
} rankstat_permissions;

/* rankstat_open with explicit segment permissions and directory; `permissions` may be NULL (the
 * defaults). A mode that lets others write, or a group the process cannot use, is
 * RANKSTAT_ERR_INVALID_ARGUMENT or RANKSTAT_ERR_PERMISSION. */
int rankstat_open_ex(const rankstat_identity* identity, const rankstat_geometry* geometry,
                     const rankstat_permissions* permissions, rankstat_reporter** out);

/* Marks the segment closed (clean exit) and frees the reporter. NULL is fine. Called in a process other
 * than the one that opened the reporter (a forked child), it does what rankstat_abandon does. */
void rankstat_close(rankstat_reporter* reporter);

/* Frees the reporter and this process's mapping of its segment without writing to the segment or removing
 * it: the segment stays exactly as its owner left it (not marked closed, heartbeat untouched, name kept).
 * For a forked child, whose copy of the parent's reporter maps the parent's live segment: the child must
 * not update through it (the parent is the single writer) and releases it with this call, then opens its
 * own reporter if it reports. NULL is fine. */
void rankstat_abandon(rankstat_reporter* reporter);

/* Message for this thread's last failed call ("" if none). Valid until the thread's next call. */
const char* rankstat_last_error(void);

/* "" normally; one line when the segment had to be published under another name than its identity's
 * because a live writer (another engine with the same instance and ranks) or another user's file held
 * that name: which name, who holds it, and the name used (the labels are unchanged). Valid until the
 * reporter is closed. NULL gives "". */
const char* rankstat_segment_note(const rankstat_reporter* reporter);

/* The labels the daemon gives every identity-labelled series of this reporter's segment, as its header
 * carries them: model_name, engine_type, then for schedulers tp_rank, pp_rank, moe_ep_rank, priority ("")
 * with RANKSTAT_FLAG_PRIORITY_SCHEDULING, dp_rank for a scheduler whose dp_rank is set; then the extra
 * labels. A binding that leaves series labels equal to these to the daemon reads them here rather than
 * repeating the rule. `index` is 0-based; the strings are valid until the reporter is closed.
 * RANKSTAT_ERR_INVALID_ARGUMENT past the last label, RANKSTAT_ERR_CLOSED for a NULL reporter. */
int rankstat_identity_label(const rankstat_reporter* reporter, uint32_t index, const char** name,
                            const char** value);

/* Publishes one scheduler snapshot: `snapshot` points at a SchedulerSnapshot (layout in
 * shmproto/scheduler_snapshot.hpp, sizes and offsets from rankstat_scheduler_field), followed in the
 * record by `priority_count` 16-byte PriorityCount entries from `priorities`. */
int rankstat_report_scheduler(rankstat_reporter* reporter, const void* snapshot, uint32_t snapshot_bytes,
                              const void* priorities, uint32_t priority_count);

int rankstat_heartbeat(rankstat_reporter* reporter);

/* Series in the cumulative block. Labels are parallel arrays of names and values. */
int rankstat_register_counter(rankstat_reporter* reporter, const char* family, uint32_t label_count,
                              const char* const* label_names, const char* const* label_values,
                              uint32_t* out_id);
int rankstat_register_gauge(rankstat_reporter* reporter, const char* family, uint32_t mode,
                            uint32_t label_count, const char* const* label_names,
                            const char* const* label_values, uint32_t* out_id);
int rankstat_register_histogram(rankstat_reporter* reporter, const char* family, uint32_t label_count,
                                const char* const* label_names, const char* const* label_values,
                                const double* bounds, uint32_t bound_count, uint32_t* out_id);

/* delta >= 0 or NaN (prometheus_client takes NaN: the total is NaN from then on); negative: INVALID_ARGUMENT.
 */
int rankstat_counter_add(rankstat_reporter* reporter, uint32_t id, double delta);
/* prometheus_client's Counter.reset(): this writer's total of the series back to 0. */
int rankstat_counter_reset(rankstat_reporter* reporter, uint32_t id);
/* Sets the gauge's value in the cumulative block (what the daemon exports; a full ring loses nothing) and
 * appends a timestamped update record to the ring, so the daemon sees every value in order. */
int rankstat_gauge_set(rankstat_reporter* reporter, uint32_t id, double value);
int rankstat_histogram_observe(rankstat_reporter* reporter, uint32_t id, double value);
/* `count` samples in the bucket of `value`, `sum_delta` added to the sum (SGLang's bulk ITL observe). */
int rankstat_histogram_observe_many(rankstat_reporter* reporter, uint32_t id, double value, uint64_t count,
                                    double sum_delta);

/* ---- Declared series: what a prometheus_client-compatible binding registers ----------------------- */

#define RANKSTAT_KIND_COUNTER 1
#define RANKSTAT_KIND_GAUGE 2
#define RANKSTAT_KIND_HISTOGRAM 3
#define RANKSTAT_KIND_SUMMARY 4 /* count and sum only, as prometheus_client's multiprocess summaries */

/* The series is exported with its own labels only: the segment's identity labels (model_name, ranks, ...)
 * are not added. A binding that passes the engine's own label dicts sets it. */
#define RANKSTAT_SERIES_OWN_LABELS_ONLY 1u
/* The spec's texts are given by length (family_length, help_length, label_name_lengths,
 * label_value_lengths), not NUL-terminated: a label value may then hold NUL bytes. Needs a struct_size
 * that covers those fields. */
#define RANKSTAT_SERIES_TEXT_LENGTHS 2u

/* Everything the daemon needs to serve a series exactly as the engine declared it. Set struct_size to
 * sizeof(rankstat_series_spec). `family` is the name as exposed in the text format (a counter's name
 * with its _total suffix, a histogram's without _bucket), any length; `help` is the HELP text (any UTF-8
 * of any length, NULL = none; the daemon escapes it); label values are any UTF-8 of any length (with
 * RANKSTAT_SERIES_TEXT_LENGTHS, NUL included; without it each text ends at its first NUL). The segment's
 * text area is the only bound on lengths. The family name and label names are any non-empty UTF-8
 * without NUL (as prometheus_client 0.22+ accepts them; rankstatd escapes or quotes names outside the
 * classic set as the scraper asks); label names unique, not `__`-prefixed, and not `le` (histograms) or
 * `quantile` (summaries). Histogram bounds are the finite
 * upper bounds, strictly increasing (+Inf is implicit). The fields from family_length on were appended
 * with layout 3.0; a caller built against the older header passes the smaller struct_size and
 * NUL-terminated texts, and keeps working. */
typedef struct rankstat_series_spec {
  uint32_t struct_size;
  uint32_t kind;  /* RANKSTAT_KIND_* */
  uint32_t mode;  /* gauges: RANKSTAT_MODE_*; ignored for the other kinds */
  uint32_t flags; /* RANKSTAT_SERIES_* */
  const char* family;
  const char* help;
  uint32_t label_count;
  uint32_t bound_count;
  const char* const* label_names;
  const char* const* label_values;
  const double* bounds;
  /* Read only with RANKSTAT_SERIES_TEXT_LENGTHS in flags: */
  size_t family_length;
  size_t help_length;               /* help may be NULL when 0 */
  const size_t* label_name_lengths; /* label_count entries (may be NULL when label_count is 0) */
  const size_t* label_value_lengths;
} rankstat_series_spec;

/* Registers one series (one labelled child of a family). Registering the same family and label values
 * twice gives two series that the daemon sums; a binding keeps its own child table. The segment reserves
 * its pages as series are registered: RANKSTAT_ERR_NO_SPACE when the shm directory has no room for the
 * series' pages (nothing is written; a later registration may succeed), RANKSTAT_ERR_REGISTRY_FULL when a
 * capacity is used up. Both are counted in the segment (rankstat_series_registrations_refused_total). */
int rankstat_register_series(rankstat_reporter* reporter, const rankstat_series_spec* spec, uint32_t* out_id);

/* A gauge's value plus `delta` (prometheus_client's Gauge.inc / dec); like rankstat_gauge_set, it also
 * appends a timestamped update record to the ring. */
int rankstat_gauge_add(rankstat_reporter* reporter, uint32_t id, double delta);

/* The current value of a series as this writer last stored it: a counter's total, a gauge's value, a
 * histogram's or summary's sum. For bindings that expose prometheus_client's internals (`_value.get()`). */
int rankstat_series_value(const rankstat_reporter* reporter, uint32_t id, double* out_value);
/* Count in bucket `bucket` (0-based, bucket_count = the +Inf bucket; non-cumulative) of a histogram, or
 * the count of a summary (bucket 0). */
int rankstat_histogram_bucket(const rankstat_reporter* reporter, uint32_t id, uint32_t bucket,
                              uint64_t* out_count);
/* Adds `count` to bucket `bucket` only (prometheus_client's `child._buckets[i].inc(n)`), and `sum_delta`
 * to the sum through rankstat_histogram_add_sum (`child._sum.inc(x)`). */
int rankstat_histogram_bucket_add(rankstat_reporter* reporter, uint32_t id, uint32_t bucket, uint64_t count);
int rankstat_histogram_add_sum(rankstat_reporter* reporter, uint32_t id, double sum_delta);

/* Records dropped so far because the ring was full. */
uint64_t rankstat_dropped_records(const rankstat_reporter* reporter);

/* The contract this library writes, so bindings can check they match. */
uint32_t rankstat_layout_major(void);
uint32_t rankstat_layout_minor(void);
uint64_t rankstat_layout_hash(void);
uint32_t rankstat_scheduler_snapshot_bytes(void);
/* Field `index` of the scheduler snapshot (0-based): its name, byte offset and type (1 = int64,
 * 2 = double). Returns RANKSTAT_ERR_INVALID_ARGUMENT past the last field. */
int rankstat_scheduler_field(uint32_t index, const char** name, uint32_t* offset, uint32_t* type);

/* ---- What a binding needs besides the scalar fields (so it restates no offsets) ------------------ */

/* report_kind of a scheduler snapshot: which derived values the report owns. */
#define RANKSTAT_REPORT_UNSPECIFIED 0 /* every value is taken as given */
#define RANKSTAT_REPORT_PREFILL 1     /* owns cache_hit_rate; gen_throughput keeps the last decode value */
#define RANKSTAT_REPORT_DECODE 2      /* owns gen_throughput; cache_hit_rate keeps the last prefill value */
#define RANKSTAT_REPORT_IDLE 3        /* idle refresh: gen_throughput falls to 0 */

/* Bits of the snapshot's `groups` word: optional field groups present in the report. */
#define RANKSTAT_GROUP_LORA 0x1ull
#define RANKSTAT_GROUP_HICACHE 0x2ull
#define RANKSTAT_GROUP_STREAMING_SESSIONS 0x4ull
#define RANKSTAT_GROUP_SPECULATIVE 0x8ull
#define RANKSTAT_GROUP_DISAGGREGATION 0x10ull
#define RANKSTAT_GROUP_ROUTING_KEYS 0x20ull

/* Queues of a per-priority entry (the `queue` byte of a 16-byte entry: i32 priority, u8 queue, u8 flags,
 * u16 reserved, i64 count). */
#define RANKSTAT_QUEUE_RUNNING 0
#define RANKSTAT_QUEUE_WAITING 1
#define RANKSTAT_QUEUE_PREFILL_BOOTSTRAP 2
#define RANKSTAT_QUEUE_PREFILL_INFLIGHT 3
#define RANKSTAT_QUEUE_DECODE_PREALLOC 4
#define RANKSTAT_QUEUE_DECODE_TRANSFER 5
#define RANKSTAT_PRIORITY_IS_NONE 1u /* entry flag: SGLang's priority=None requests */

/* Snapshot members that rankstat_scheduler_field does not list (index 0-based): the leading words
 * report_kind and priority_count (type 3 = uint32), groups (type 4 = uint64), and the routing-key bin
 * arrays (type 4, `count` elements). Returns RANKSTAT_ERR_INVALID_ARGUMENT past the last member. */
int rankstat_scheduler_aux_field(uint32_t index, const char** name, uint32_t* offset, uint32_t* type,
                                 uint32_t* count);
/* The finite bounds of the routing-key bins ("gt < count <= le"; one more bin above the last bound).
 * The pointer is to static storage. */
int rankstat_routing_key_bounds(const double** bounds, uint32_t* count);
/* Size of one per-priority entry and the most a report may carry. */
uint32_t rankstat_priority_count_bytes(void);
uint32_t rankstat_max_priority_counts(void);

/* ---- Batched series updates: one call for many counter / gauge / histogram updates --------------- */

#define RANKSTAT_OP_COUNTER_ADD 1
#define RANKSTAT_OP_GAUGE_SET 2
#define RANKSTAT_OP_HISTOGRAM_OBSERVE 3

/* One update, 32 bytes without padding, so bindings can pack an array of them into a plain buffer. */
typedef struct rankstat_update {
  uint32_t op;      /* RANKSTAT_OP_* */
  uint32_t id;      /* from rankstat_register_* */
  double value;     /* counter delta, gauge value, or the observed value (it picks the bucket) */
  uint64_t count;   /* histogram: samples added to the bucket of `value` (ignored by the other ops) */
  double sum_delta; /* histogram: added to the sum (value * count for plain observations) */
} rankstat_update;

/* Applies `count` updates in order, each exactly as the single call would (same checks). A failed entry
 * is skipped and the rest still apply. Returns RANKSTAT_OK when every entry applied, else the code of the
 * first failure; `applied` (may be NULL) receives the number of entries applied. `updates` need not be
 * aligned. Never allocates. */
int rankstat_apply_updates(rankstat_reporter* reporter, const rankstat_update* updates, uint32_t count,
                           uint32_t* applied);

#ifdef __cplusplus
}
#endif
/* NOLINTEND(modernize-use-using,readability-identifier-naming) */

#endif /* RANKSTAT_RANKSTAT_H */
