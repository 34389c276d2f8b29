#include "rank_integrals.hpp"

namespace rankstat {

bool RankIntegrals::start(const IntegralSettings* settings, bool snapshot_exported,
                          std::map<std::string, IntegralCheckpoint> checkpoints, std::uint32_t descriptors) {
  if (settings == nullptr || !settings->enabled()) return false;
  settings_ = settings;
  unclaimed_checkpoints_ = std::move(checkpoints);
  for (const shm::ScalarField& field : shm::kSchedulerScalarFields) {
    std::string family = std::string(shm::kSnapshotFamilyPrefix).append(field.name);
    if (snapshot_exported && field.exported != shm::FieldExport::kNotExported && settings->wants(family)) {
      snapshot_fields_.emplace_back(&field, gauges_.size());
      add(std::move(family), &field, 0, std::string("field:").append(field.name));
    }
  }
  series_integral_.assign(descriptors, -1);
  return true;
}

void RankIntegrals::add(std::string family, const shm::ScalarField* field, std::uint32_t series_position,
                        std::string checkpoint_key) {
  IntegratedGauge gauge{std::move(family), field, series_position, std::move(checkpoint_key), {}, {}, {}, {}};
  gauge.integral_name = integral_family_name(gauge.family);
  gauge.window_max_name = window_max_family_name(gauge.family);
  gauge.window_min_name = window_min_family_name(gauge.family);
  if (auto it = unclaimed_checkpoints_.find(gauge.checkpoint_key); it != unclaimed_checkpoints_.end()) {
    gauge.track.restore(it->second.integral, it->second.value, it->second.until_ns);
    unclaimed_checkpoints_.erase(it);
  }
  gauges_.push_back(std::move(gauge));
  last_observed_.push_back(std::numeric_limits<double>::quiet_NaN());  // never equal: logged
}

void RankIntegrals::track_series(const SeriesState& series, std::size_t position, std::uint32_t descriptor) {
  if (!enabled() || series.info.kind != shm::SeriesKind::kGauge || !settings_->wants(series.info.family))
    return;
  if (descriptor < series_integral_.size())
    series_integral_[descriptor] = static_cast<std::int32_t>(gauges_.size());
  add(series.info.family, nullptr, static_cast<std::uint32_t>(position),
      "series:" + std::to_string(descriptor));
}

void RankIntegrals::apply_pending() {
  for (const PendingUpdate& u : pending_updates_) {
    if (u.series_index < series_integral_.size() && series_integral_[u.series_index] >= 0)
      note_observation(static_cast<std::size_t>(series_integral_[u.series_index]), u.timestamp_ns, u.value);
  }
  pending_updates_.clear();
}

void RankIntegrals::settle(std::uint64_t heartbeat_ns, const std::vector<SeriesState>& series) {
  for (IntegratedGauge& g : gauges_) {
    if (g.field == nullptr && !g.track.has_value() && g.series_position < series.size()) {
      const shm::SeriesValue& v = series[g.series_position].value;
      if (v.set_ns != 0) g.track.observe(v.set_ns, v.value, settings_->peak_window_ns);
    }
    g.track.hold_until(heartbeat_ns);
  }
}

}  // namespace rankstat
