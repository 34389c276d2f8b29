// One liveness rule for every reader of a segment: rankstatd and `rankstat --direct` call the same
// function, so the two never disagree about whether a rank is alive.
//
//   CLOSED   the writer said goodbye (`closed`, release-stored on a clean exit);
//   DEAD     the writer's process is gone, or its pid now names another process (start time differs);
//   STALLED  alive, but no append or heartbeat for longer than the stall threshold (a long step), for a
//            writer that steps on a clock (it has reported a typed scheduler snapshot: ProducerState::
//            reports_steps). A writer that reports on events only (the metric classes under an engine's
//            own collectors) is never STALLED: an idle tokenizer or an empty queue sends nothing;
//   LIVE     otherwise.
// A process that has exited but is not reaped yet (a zombie) is DEAD (probe_process_start).
// CLOSED and DEAD are final for a generation. A process check that could not be made (out of
// descriptors, no permission on /proc, a torn read) says nothing about the process: the previous verdict
// stands, and at first sight the heartbeat alone decides. Never "dead" for want of a file descriptor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string_view>

#include "rankstat/shmproto/layout.hpp"
#include "rankstat/shmproto/process.hpp"
#include "rankstat/shmproto/reader.hpp"

namespace rankstat::shm {

// A rank's liveness verdict. X(enumerator, name): the name is the API's and the log's.
#define RANKSTAT_RANK_STATES(X) X(kLive, "LIVE") X(kStalled, "STALLED") X(kDead, "DEAD") X(kClosed, "CLOSED")

RANKSTAT_DEFINE_ENUM_WITH_TEXTS(RankState, kRankStateNames, RANKSTAT_RANK_STATES)
inline constexpr int kRankStateCount = static_cast<int>(std::size(kRankStateNames));

inline std::string_view rank_state_name(RankState state) {
  const auto index = static_cast<std::size_t>(state);
  return index < std::size(kRankStateNames) ? kRankStateNames[index] : std::string_view("UNKNOWN");
}

// The state the API names `name`; nullopt for a name this build does not know (a newer daemon's).
inline std::optional<RankState> rank_state_from_name(std::string_view name) {
  for (int i = 0; i < kRankStateCount; ++i) {
    const auto state = static_cast<RankState>(i);
    if (rank_state_name(state) == name) return state;
  }
  return std::nullopt;
}

inline bool is_live(RankState state) {
  return state == RankState::kLive || state == RankState::kStalled;
}

// No verdict follows these for the same generation.
inline bool is_final(RankState state) {
  return state == RankState::kDead || state == RankState::kClosed;
}

// The verdict on a generation from its header, its producer group as just read and, when the caller
// checked it, the writer's /proc entry (`probe`; nullopt when the caller need not look: it holds a
// verified pidfd, or the pid is not visible from here). `previous` is the last verdict, nullopt at
// first sight. Pure: no I/O of its own.
inline RankState judge_liveness(const SegmentHeader& identity, const ProducerState& producer,
                                const std::optional<ProcessStart>& probe, std::optional<RankState> previous,
                                std::uint64_t now_ns, std::uint64_t stall_after_ns) {
  if (previous && is_final(*previous)) return *previous;
  if (producer.closed) return RankState::kClosed;
  if (probe) {
    switch (probe->status) {
      case ProcessStart::Status::kGone:
        return RankState::kDead;
      case ProcessStart::Status::kFound:
        // A writer that could not read its own start time (0) is judged by the pid alone.
        if (identity.pid_start_ticks != 0 && probe->ticks != identity.pid_start_ticks)
          return RankState::kDead;
        break;
      case ProcessStart::Status::kUnknown:
        if (previous) return *previous;
        break;
    }
  }
  if (producer.reports_steps && now_ns > producer.heartbeat_ns &&
      now_ns - producer.heartbeat_ns > stall_after_ns)
    return RankState::kStalled;
  return RankState::kLive;
}

}  // namespace rankstat::shm
