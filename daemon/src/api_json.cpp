#include "api_json.hpp"

#include <boost/json/serialize.hpp>

#include "rankstat/rankview/rank_documents.hpp"

namespace rankstat {
namespace {

rankview::RankFacts facts_of(const RankSegment& s) {
  rankview::RankFacts facts;
  facts.id = s.id();
  facts.identity = &s.identity();
  facts.producer = s.producer();
  facts.state = s.state();
  facts.records_per_second = s.records_per_second();
  facts.records_drained = s.drained().records;
  facts.ring_fill_ratio = s.ring_fill_ratio();
  facts.ring_quarantined = s.ring_corrupt();
  return facts;
}

}  // namespace

boost::json::object rank_summary_json(const RankSegment& s, std::uint64_t now_ns) {
  return rankview::rank_summary(facts_of(s), now_ns);
}

boost::json::object rank_detail_json(const RankSegment& s, std::uint64_t now_ns) {
  boost::json::object o = rank_summary_json(s, now_ns);
  const SchedulerView& view = s.scheduler();
  const rankview::SchedulerSample sample{&view.fixed, view.priorities, view.sequence, view.timestamp_ns};
  o["scheduler"] = rankview::scheduler_document(view.present ? &sample : nullptr, now_ns);
  boost::json::array series;
  for (const SeriesState& st : s.series()) series.push_back(rankview::series_document(st.info, st.value));
  o["series"] = std::move(series);
  return o;
}

std::string ranks_json(const SegmentRegistry& registry, std::uint64_t now_ns, bool details) {
  boost::json::array ranks;
  for (const RankSegment* s : registry.current()) {
    ranks.push_back(details ? rank_detail_json(*s, now_ns) : rank_summary_json(*s, now_ns));
  }
  std::map<std::string, std::uint64_t> rejected;
  const auto& c = registry.counters();
  for (int i = 1; i < shm::kRejectReasonCount; ++i) {
    if (c.rejected_by_reason[static_cast<std::size_t>(i)] == 0) continue;
    rejected[std::string(shm::reject_reason_name(static_cast<shm::RejectReason>(i)))] =
        c.rejected_by_reason[static_cast<std::size_t>(i)];
  }
  return boost::json::serialize(
      rankview::ranks_document(registry.directory(), std::move(ranks), rejected, details));
}

}  // namespace rankstat
