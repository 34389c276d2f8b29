#include "family_declarations.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string_view>
#include <utility>

#include "engine_collect.hpp"
#include "engine_rules.hpp"
#include "generation_contributions.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"

namespace rankstat {

namespace {

// The order in which declarations of one family win: the newest live declaration first (see
// FamilyDeclarations). A total order over distinct generations.
bool outranks(const RankSegment& a, const RankSegment& b) {
  if (is_live(a.state()) != is_live(b.state())) return is_live(a.state());
  const std::uint64_t a_start = a.identity().created_monotonic_ns;
  const std::uint64_t b_start = b.identity().created_monotonic_ns;
  if (a_start != b_start) return a_start > b_start;
  if (a.name() != b.name()) return a.name() < b.name();
  return a.identity().generation > b.identity().generation;
}

std::string describe_segment(const RankSegment& s) {
  return "segment " + s.name() + " (pid " + std::to_string(s.identity().pid) + ", " +
         std::string(rank_state_name(s.state())) + ")";
}

}  // namespace

FamilyDeclarations::FamilyDeclarations() {
  for (const shm::ScalarField& field : shm::kSchedulerScalarFields) {
    shm::GaugeMode mode = shm::GaugeMode::kMostRecent;
    if (snapshot_field_gauge_mode(field, mode))
      snapshot_declarations_[snapshot_family_name(field)] = FamilyDeclaration::gauge(mode);
  }
}

void FamilyDeclarations::resolve(const std::vector<RankSegment*>& held, const RetiredTotals& retired) {
  std::vector<std::tuple<const RankSegment*, std::uint64_t, std::size_t, bool, bool>> inputs;
  inputs.reserve(held.size());
  bool snapshot_reported = false;
  for (const RankSegment* s : held) {
    inputs.emplace_back(s, s->identity().generation, s->series().size(), is_live(s->state()),
                        s->scheduler().present);
    snapshot_reported = snapshot_reported || s->scheduler().present;
  }
  if (inputs == inputs_ && retired.declarations_version() == retired_version_) return;
  inputs_ = std::move(inputs);
  retired_version_ = retired.declarations_version();
  ++version_;

  // The winning declaration of every family some held generation exports, and who declared it (null:
  // the scheduler snapshot). A generation declares a family by its first exported series of it.
  struct Claim {
    FamilyDeclaration declaration;
    const RankSegment* by = nullptr;
  };
  std::map<std::string_view, Claim> winners;
  if (snapshot_reported) {
    for (const auto& [family, declaration] : snapshot_declarations_) winners[family] = {declaration, nullptr};
  }
  for (const RankSegment* s : held) {
    const bool engine_rule_passed = exports_engine_metrics(s->identity());
    std::set<std::string_view> declared;
    for (const SeriesState& series : s->series()) {
      if (!series_exported(series, engine_rule_passed) || !declared.insert(series.info.family).second)
        continue;
      auto [it, inserted] = winners.try_emplace(series.info.family);
      if (inserted || (it->second.by != nullptr && outranks(*s, *it->second.by)))
        it->second = {FamilyDeclaration::of(series.info), s};
    }
  }

  std::set<std::tuple<std::string, std::string, std::uint64_t>> current;
  const auto report = [&](std::tuple<std::string, std::string, std::uint64_t> key, const auto& log) {
    if (reported_.count(key) == 0) {
      ++conflicts_;
      log();
    }
    current.insert(std::move(key));
  };
  const auto winner_words = [](const Claim& c) {
    return c.by == nullptr ? std::string("the scheduler snapshot") : describe_segment(*c.by);
  };
  std::uint64_t left_out_total = 0;
  for (RankSegment* s : held) {
    const bool engine_rule_passed = exports_engine_metrics(s->identity());
    const std::vector<SeriesState>& all = s->series();
    std::vector<std::uint8_t> left_out(all.size(), 0);
    std::map<std::string_view, std::pair<FamilyDeclaration, std::size_t>> lost;  // family -> (mine, series)
    for (std::size_t position = 0; position < all.size(); ++position) {
      const SeriesState& series = all[position];
      if (!series_exported(series, engine_rule_passed)) continue;
      const auto it = winners.find(series.info.family);
      FamilyDeclaration mine = FamilyDeclaration::of(series.info);
      if (it == winners.end() || it->second.declaration == mine) continue;
      left_out[position] = 1;
      // A folded generation serves its gauges only: its other series are the retired totals' now, whose
      // declaration is judged (and reported) on its own below.
      if (s->folded() && series.info.kind != shm::SeriesKind::kGauge) continue;
      auto [entry, inserted] = lost.try_emplace(series.info.family, std::move(mine), 0);
      ++entry->second.second;
    }
    for (const auto& entry : lost) {
      const std::string_view family = entry.first;  // named, not bound: a lambda may capture it
      const std::pair<FamilyDeclaration, std::size_t>& mine = entry.second;
      const Claim& winner = winners.at(family);
      report({std::string(family), s->name(), s->identity().generation}, [&] {
        spdlog::error(
            "family {} is declared as {} by {} but as {} by {}; the newest live declaration wins (docs/"
            "semantics.md): the {} series of {} from {} are left out, its other families are served "
            "(rankstat_family_conflicts_total)",
            family, describe_declaration(mine.first), describe_segment(*s),
            describe_declaration(winner.declaration), winner_words(winner), mine.second, family, s->name());
      });
    }
    std::size_t count = 0;
    for (const auto& [family, mine] : lost) count += mine.second;
    left_out_total += count;
    if (!lost.empty() || s->series_left_out_count() != 0 ||
        std::find(left_out.begin(), left_out.end(), 1) != left_out.end())
      s->set_series_left_out(std::move(left_out));
  }
  retired_left_out_.clear();
  for (const auto& entry : retired.declarations()) {
    const auto& family = entry.first;  // named, not bound: the log lambda captures them
    const auto& declaration = entry.second;
    const auto it = winners.find(family);
    if (it == winners.end() || it->second.declaration == declaration) continue;
    retired_left_out_.insert(family);
    report({family, "", 0}, [&] {
      spdlog::error(
          "family {} is declared as {} by the retired totals of exited generations but as {} by {}; the "
          "newest live declaration wins: the retired series of {} are left out (and replaced once that "
          "generation's totals retire) (rankstat_family_conflicts_total)",
          family, describe_declaration(declaration), describe_declaration(it->second.declaration),
          winner_words(it->second), family);
    });
  }
  reported_ = std::move(current);
  conflict_series_ = left_out_total;
}

void FamilyDeclarations::note_replaced(RetiredTotals& retired) {
  for (const RetiredTotals::ReplacedDeclaration& r : retired.take_replaced()) {
    spdlog::info(
        "family {}: the retired totals now carry it as {} (generation {} of {} retired), no longer as {}; "
        "{} retired series of the old declaration dropped (they were no longer served)",
        r.family, describe_declaration(r.after), r.by.second, r.by.first, describe_declaration(r.before),
        r.series_dropped);
  }
}

}  // namespace rankstat
