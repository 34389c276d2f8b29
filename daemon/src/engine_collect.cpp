#include "engine_collect.hpp"

#include <iterator>

#include "generation_contributions.hpp"
#include "rankstat/shmproto/naming.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"

namespace rankstat {

std::string snapshot_family_name(const shm::ScalarField& field) {
  return std::string(shm::kSnapshotFamilyPrefix).append(field.name);
}

bool snapshot_field_gauge_mode(const shm::ScalarField& field, shm::GaugeMode& mode) {
  switch (field.exported) {
    case shm::FieldExport::kMostRecentGauge:
      mode = shm::GaugeMode::kMostRecent;
      return true;
    case shm::FieldExport::kPerProcessGauge:
      mode = shm::GaugeMode::kAll;
      return true;
    case shm::FieldExport::kNotExported:
      break;
  }
  return false;
}

namespace {

std::string_view queue_field_name(std::uint8_t queue) {
  return shm::kQueueTotalField[queue];
}

// SGLang's routing-key GaugeHistograms: a mostrecent gauge per bin with gt/le labels
// (routing_key_bin_labels, engine_rules.hpp), sent in the snapshot as per-bin key counts.
void collect_routing_key_bins(const SchedulerView& view, const Labels& base, const Contributor& from,
                              FamilySet& out, std::vector<FamilySet::Slot>& slots) {
  if ((view.fixed.groups & shm::kGroupRoutingKeys) == 0) return;
  const struct {
    const shm::RoutingKeyFamily& family;
    const std::uint64_t* bins;
  } histograms[] = {{shm::kRoutingKeyFamilies[0], view.fixed.routing_key_running_req_counts},
                    {shm::kRoutingKeyFamilies[1], view.fixed.routing_key_all_req_counts}};
  slots.resize(std::size(histograms) * shm::kRoutingKeyBins);
  std::size_t index = 0;
  for (const auto& h : histograms) {
    const std::string name = h.family.name;
    for (std::size_t i = 0; i < shm::kRoutingKeyBins; ++i) {
      FamilySet::Slot& slot = slots[index++];
      Labels labels;
      std::string_view help;
      if (!out.slot_valid(slot, 0)) {  // else the slot knows the series: no labels to build
        labels = base;
        auto [gt, le] = routing_key_bin_labels(i);
        labels.push_back({"gt", std::move(gt)});
        labels.push_back({"le", std::move(le)});
        help = h.family.help;
      }
      out.add_gauge(name, help, shm::GaugeMode::kMostRecent, labels, static_cast<double>(h.bins[i]),
                    view.timestamp_ns, from, &slot);
    }
  }
}

void collect_snapshot(const RankSegment& s, const Labels& base, const Contributor& from, bool keep_all_mode,
                      FamilySet& out, FamilySet::SegmentSlots& slots) {
  const SchedulerView& view = s.scheduler();
  if (!view.present) return;
  const bool priorities_on = (s.identity().flags & shm::kFlagPriorityScheduling) != 0;
  std::string name;
  slots.snapshot.resize(std::size(shm::kSchedulerScalarFields));
  std::size_t field_index = 0;
  std::size_t priority_index = 0;
  for (const shm::ScalarField& field : shm::kSchedulerScalarFields) {
    FamilySet::Slot& slot = slots.snapshot[field_index++];
    if (!shm::field_present(view.fixed, field)) continue;
    shm::GaugeMode mode = shm::GaugeMode::kMostRecent;
    if (!snapshot_field_gauge_mode(field, mode)) continue;
    const double value = shm::read_scalar(view.fixed, field).as_double();
    name.assign(shm::kSnapshotFamilyPrefix).append(field.name);
    if (mode == shm::GaugeMode::kAll && !keep_all_mode) continue;
    const std::string_view help = out.slot_valid(slot, 0) ? std::string_view() : std::string_view(field.help);
    out.add_gauge(name, help, mode, base, value, view.timestamp_ns, from, &slot);
    if (!priorities_on) continue;
    // Per-priority breakdown: every priority seen so far on this queue, 0 when absent now.
    for (const SeenPriority& seen : s.seen_priorities()) {
      if (queue_field_name(seen.queue) != field.name) continue;
      std::int64_t count = 0;
      for (const shm::PriorityCount& e : view.priorities) {
        const bool none = (e.flags & shm::kPriorityIsNone) != 0;
        if (e.queue == seen.queue && none == seen.is_none && (none || e.priority == seen.priority))
          count += e.count;
      }
      // The slot remembers which priority it held: the set of seen priorities only grows, but in order.
      const std::uint64_t tag = (std::uint64_t{1} << 63) | (std::uint64_t{field_index} << 48) |
                                (std::uint64_t{seen.queue} << 40) | (std::uint64_t{seen.is_none} << 32) |
                                static_cast<std::uint32_t>(seen.priority);
      if (slots.priorities.size() <= priority_index) slots.priorities.resize(priority_index + 1);
      FamilySet::Slot& priority_slot = slots.priorities[priority_index++];
      Labels labels;
      std::string_view priority_help;
      if (!out.slot_valid(priority_slot, tag)) {
        labels = base;
        set_label(labels, "priority", priority_label_value(seen));
        priority_help = field.help;
      }
      out.add_gauge(name, priority_help, mode, labels, static_cast<double>(count), view.timestamp_ns, from,
                    &priority_slot, tag);
    }
  }
  collect_routing_key_bins(view, base, from, out, slots.routing);
}

// Every contribution of `s` but its scheduler snapshot (for_each_contribution, the one definition the
// retired totals and checkpoints use too). A folded generation's counters, histograms, summaries and
// integrals are in the retired totals (SegmentRegistry::fold): only its gauges are taken from it.
void collect_contributions(const RankSegment& s, const Labels& base, const Contributor& from,
                           bool keep_all_mode, const CollectOptions& options, FamilySet& out,
                           FamilySet::SegmentSlots& slots) {
  slots.cumulative.resize(s.series().size());
  slots.integrals.resize(s.integrated().size() * 3);
  ContributionWindow window;
  if (options.integrals != nullptr) window = {options.now_ns, options.integrals->peak_window_ns};
  Labels labels;
  for_each_contribution(s, window, [&](const Contribution& c) {
    if (s.folded() && c.cumulative()) return;
    if (c.kind == shm::SeriesKind::kGauge && c.mode == shm::GaugeMode::kAll && !keep_all_mode) return;
    FamilySet::Slot& slot =
        c.source == Contribution::Source::kSeries ? slots.cumulative[c.slot()] : slots.integrals[c.slot()];
    // A published series never changes: once its slot is filled, neither its labels nor its help are
    // needed again (they are only used to fill a slot).
    const bool known = out.slot_valid(slot, 0);
    std::string help;
    if (!known) {
      labels = c.labels(base);
      help = c.help();
    }
    switch (c.kind) {
      case shm::SeriesKind::kCounter:
        out.add_counter(*c.family, help, labels, c.value, from, &slot);
        break;
      case shm::SeriesKind::kGauge:
        out.add_gauge(*c.family, help, c.mode, labels, c.value, c.timestamp_ns, from, &slot);
        break;
      case shm::SeriesKind::kHistogram:
      case shm::SeriesKind::kSummary:
        out.add_histogram(*c.family, help, labels, c.bounds(), c.counts(), c.sum(), from, &slot, 0,
                          c.summary());
        break;
    }
  });
}

}  // namespace

void collect_engine_metrics(const std::vector<const RankSegment*>& generations, const CollectOptions& options,
                            FamilySet& out) {
  for (const RankSegment* s : generations) {
    const bool engine_rule_passed = exports_engine_metrics(s->identity());
    const Labels base = identity_labels(s->identity(), options.instance_label);
    Contributor from;
    from.live = is_live(s->state());
    from.pid = s->identity().pid;
    from.created_ns = s->identity().created_monotonic_ns;
    from.segment_name = s->name();
    from.instance = s->identity().instance;
    // A dead process's per-pid (`all` mode) series stay for the grace period only: no pile-up.
    const bool keep_all_mode = from.live || options.now_ns < s->state_since_ns() ||
                               options.now_ns - s->state_since_ns() <= options.dead_grace_ns;
    FamilySet::SegmentSlots& slots = out.slots(s->name(), s->identity().generation, options.instance_label);
    if (engine_rule_passed) collect_snapshot(*s, base, from, keep_all_mode, out, slots);
    collect_contributions(*s, base, from, keep_all_mode, options, out, slots);
  }
}

}  // namespace rankstat
