// The rank documents of the JSON API (docs/api.md): /api/v1/ranks and /api/v1/ranks/<id> from
// rankstatd, and the same documents from `rankstat --direct`. Both readers collect what they saw of a
// rank into the structs below and build the JSON here, so the two cannot drift apart in shape or
// spelling; they differ only in what each can know (an observer drains nothing, a daemon refuses an
// untrusted segment instead of flagging it).
//
// Pure functions of their arguments; thread-compatible.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>

#include "rankstat/shmproto/cumulative.hpp"
#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/liveness.hpp"
#include "rankstat/shmproto/reader.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"

namespace rankstat::rankview {

// What a reader knows of one segment generation for its summary.
struct RankFacts {
  std::string id;                                // the segment name without its prefix
  const shm::SegmentHeader* identity = nullptr;  // group A as copied at open
  shm::ProducerState producer;                   // as just read
  shm::RankState state = shm::RankState::kLive;
  double records_per_second = 0;
  std::optional<std::uint64_t> records_drained;  // nullopt: the reader drains nothing
  double ring_fill_ratio = 0;
  bool ring_quarantined = false;
  std::optional<std::uint32_t> untrusted_owner_uid;  // set: shown with a warning (rankstat --direct)
  std::string untrusted_owner_name;                  // a user name or "uid N", for the warning
};

// The newest scheduler snapshot a reader holds, after SGLang's report-kind rule.
struct SchedulerSample {
  const shm::SchedulerSnapshot* fixed = nullptr;
  std::span<const shm::PriorityCount> priorities;
  std::uint64_t sequence = 0;
  std::uint64_t timestamp_ns = 0;
};

boost::json::object rank_summary(const RankFacts& facts, std::uint64_t now_ns);
// The "scheduler" member of a detail document; null when the rank sent no snapshot.
boost::json::value scheduler_document(const SchedulerSample* sample, std::uint64_t now_ns);
// One entry of a detail document's "series": an inconsistent read (a writer that died mid-update)
// shows a null value, as does a gauge never set.
boost::json::object series_document(const shm::SeriesInfo& info, const shm::SeriesValue& value);
// The ranks document around summaries or details (`details` marks the latter).
boost::json::object ranks_document(const std::string& shm_dir, boost::json::array ranks,
                                   const std::map<std::string, std::uint64_t>& rejected_by_reason,
                                   bool details);

}  // namespace rankstat::rankview
