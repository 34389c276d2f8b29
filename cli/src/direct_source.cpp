// RankSource over the segments themselves, mapped read-only (like AeronStat on Aeron's CnC file). It
// never writes a byte: no head, no consumer heartbeat, no unlink. It therefore works with the daemon
// down and cannot disturb it when it is up. Its documents come from the daemon's builder (rankview), its
// liveness verdicts and report-kind rule from the contract (shmproto/liveness.hpp, ReportOwnership);
// docs/api.md lists the few fields that differ by nature (records_drained, rejected_segments,
// records_per_second's window).
//
// Like the daemon, it reads every mapping under a shm::BusGuard: a segment file truncated while it is
// mapped (a fault, or anyone with write access) must not kill the CLI with SIGBUS. A segment whose
// memory went missing is dropped from what is shown, counted under rejected_segments with the daemon's
// quarantine reason ("bus_error", "truncated") and never read again in this run.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/json/value.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>
#include <utility>

#include "rankstat/rankview/rank_documents.hpp"
#include "rankstat/shmproto/bus_guard.hpp"
#include "rankstat/shmproto/cumulative.hpp"
#include "rankstat/shmproto/liveness.hpp"
#include "rankstat/shmproto/naming.hpp"
#include "rankstat/shmproto/process.hpp"
#include "rankstat/shmproto/reader.hpp"
#include "rankstat/shmproto/ring.hpp"
#include "rankstat/shmproto/scheduler_snapshot.hpp"
#include "rankstat/shmproto/trust.hpp"
#include "source.hpp"

namespace rankstat::cli {
namespace {

// A peek can lose a race with a writer that laps the ring; a few retries settle it.
constexpr int kPeekAttempts = 8;

// One segment generation as this observer sees it.
struct Observed {
  std::string id;
  std::string instance;  // the one its file name claims
  shm::OpenedSegment opened;
  // records_per_second: the last sample of records_written.
  std::uint64_t sample_ns = 0;
  std::uint64_t sample_records = 0;
  double records_per_second = 0;
  bool have_rate = false;
  // Report-kind ownership over the snapshots sampled so far (the daemon's rule: shm::ReportOwnership).
  shm::ReportOwnership ownership;
  // "bus_error" once a read of the mapping raised SIGBUS, "truncated" once the file was seen smaller
  // than the mapping; empty while the memory is readable. Whatever was read alongside is garbage.
  std::string_view memory_fault;
};

// A generation whose memory went missing: known by its file, so later scans (top) count it without
// mapping it again, and forgotten once a new generation is renamed onto its name.
struct Quarantined {
  std::uint64_t inode = 0;
  std::uint64_t device = 0;
  std::string_view reason;
};

std::string memory_fault_message(const std::string& path, std::string_view reason) {
  return path + ": the file shrank below this reader's mapping (" + std::string(reason) +
         "); its memory is not read again";
}

// Runs `read` with o's mapping guarded against SIGBUS. Returns false without reading if the memory was
// already found missing, and false (recording "bus_error") if it went missing during `read`.
template <typename Read>
bool read_guarded(Observed& o, Read&& read) {
  if (!o.memory_fault.empty()) return false;
  if (shm::run_bus_guarded(o.opened.file.bytes(), o.opened.file.size(), std::forward<Read>(read)))
    return true;
  o.memory_fault = "bus_error";
  return false;
}

class DirectSource final : public RankSource {
 public:
  explicit DirectSource(DirectOptions options) : options_(std::move(options)) {
    // Before anything is mapped; without it a truncated segment kills the CLI.
    shm::install_bus_guard();
    trust_.allowed_uids = options_.trusted_uids;
  }

  boost::json::object ranks() override {
    scan();
    const std::uint64_t now = shm::monotonic_ns();
    boost::json::array list;
    for (auto& [name, observed] : observed_) {
      boost::json::object entry = summary(observed, now);
      if (observed.memory_fault.empty()) list.emplace_back(std::move(entry));
    }
    quarantine_faulted();
    return document(std::move(list), false);
  }

  std::optional<boost::json::object> rank(const std::string& id) override {
    scan();
    const std::string name = std::string(shm::kSegmentPrefix) + id;
    if (auto it = observed_.find(name); it != observed_.end()) {
      boost::json::object out = detail(it->second, shm::monotonic_ns());
      if (it->second.memory_fault.empty()) return out;
      quarantine_faulted();
    }
    if (auto q = quarantined_.find(name); q != quarantined_.end()) {
      throw SourceError("rank " + id + " cannot be read: " +
                        memory_fault_message(options_.shm_dir + "/" + name, q->second.reason));
    }
    return std::nullopt;
  }

  boost::json::object all_details() override {
    scan();
    const std::uint64_t now = shm::monotonic_ns();
    boost::json::array list;
    for (auto& [name, observed] : observed_) {
      boost::json::object entry = detail(observed, now);
      if (observed.memory_fault.empty()) list.emplace_back(std::move(entry));
    }
    quarantine_faulted();
    return document(std::move(list), true);
  }

  std::string description() const override { return "direct " + options_.shm_dir; }

 private:
  // The ranks document around `ranks` (summaries, or details when `details`), as the daemon answers it.
  boost::json::object document(boost::json::array ranks, bool details) const {
    return rankview::ranks_document(options_.shm_dir, std::move(ranks), rejected_, details);
  }

  // Lists the directory, maps new segments and new generations read-only, forgets vanished ones,
  // samples the record rates and quarantines segments whose memory went missing meanwhile. Throws
  // SourceUnavailable when there is nothing to show.
  void scan() {
    rejected_.clear();
    DIR* dir = opendir(options_.shm_dir.c_str());
    if (dir == nullptr) {
      throw SourceUnavailable("cannot list the shm directory " + options_.shm_dir + ": " +
                              shm::errno_text(errno));
    }
    std::vector<std::string> names;
    // NOLINTNEXTLINE(concurrency-mt-unsafe): readdir is thread-safe on a stream no other thread uses
    while (const dirent* entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (shm::parse_segment_name(name)) names.push_back(std::move(name));
    }
    closedir(dir);
    std::sort(names.begin(), names.end());
    std::map<std::string, Observed> next;
    std::map<std::string, Quarantined> still_quarantined;
    messages_.clear();
    for (const std::string& name : names) {
      const std::string path = options_.shm_dir + "/" + name;
      const std::string instance = shm::parse_segment_name(name)->instance;
      struct stat st {};
      if (lstat(path.c_str(), &st) != 0 || refused(path, st, instance)) continue;
      if (auto q = quarantined_.find(name);
          q != quarantined_.end() && q->second.inode == st.st_ino && q->second.device == st.st_dev) {
        count_memory_fault(name, q->second.reason);
        still_quarantined.insert(*q);
        continue;
      }
      auto known = observed_.find(name);
      if (known != observed_.end() && known->second.opened.inode == st.st_ino &&
          known->second.opened.device == st.st_dev) {
        // The size by name is the size of the mapped file (same inode): a shrunk one is quarantined
        // before anything touches the vanished pages.
        if (static_cast<std::uint64_t>(st.st_size) < known->second.opened.file.size()) {
          known->second.memory_fault = "truncated";
        }
        next.emplace(name, std::move(known->second));
        continue;
      }
      shm::OpenedSegment opened;
      // The file may be truncated between open_segment's fstat and its reads of the header.
      if (!shm::run_bus_guarded(nullptr, 0, [&] { opened = shm::open_segment(path, /*consumer=*/false); })) {
        count_memory_fault(name, "bus_error");
        still_quarantined[name] = Quarantined{static_cast<std::uint64_t>(st.st_ino),
                                              static_cast<std::uint64_t>(st.st_dev), "bus_error"};
        continue;
      }
      if (opened.reason == shm::RejectReason::kNotReady) continue;  // a writer mid-creation
      if (opened.reason != shm::RejectReason::kNone) {
        ++rejected_[std::string(shm::reject_reason_name(opened.reason))];
        messages_.push_back(opened.message);
        continue;
      }
      // Judged again on the file opened (one swapped in after lstat), and on what its header claims.
      struct stat held {};
      if (fstat(opened.file.fd(), &held) != 0 || refused(path, held, instance)) continue;
      std::string why;
      if (const auto mismatch = shm::SegmentTrust::judge_header(opened.identity, instance, why)) {
        refuse(path, *mismatch, why);
        continue;
      }
      Observed observed;
      observed.id = name.substr(shm::kSegmentPrefix.size());
      observed.instance = instance;
      observed.opened = std::move(opened);
      next.emplace(name, std::move(observed));
    }
    observed_ = std::move(next);
    quarantined_ = std::move(still_quarantined);
    sample_rates();
    quarantine_faulted();
    if (observed_.empty()) {
      std::string what = "no rankstat segments in " + options_.shm_dir;
      if (!messages_.empty()) {
        what += "; " + std::to_string(messages_.size()) + " could not be read, e.g. " + messages_.front();
        if (rejected_.count("open_failed") != 0) what += " (is this user in the engine's group?)";
      }
      throw SourceUnavailable(what);
    }
  }

  // The daemon's trust rule (shmproto/trust.hpp) on a segment file: true, and counted as rejected in
  // this read under the daemon's reason, when the daemon would refuse it. An owner the daemon would
  // refuse is the exception: the segment is shown, marked untrusted (summary()), since an operator
  // looking at the segments directly wants to see them; its numbers may be forged.
  bool refused(const std::string& path, const struct stat& st, const std::string& instance) {
    std::string why;
    const auto refusal = trust_.judge_file(st, instance, why);
    if (!refusal || *refusal == shm::TrustRefusal::kUnexpectedOwner) return false;
    refuse(path, *refusal, why);
    return true;
  }
  void refuse(const std::string& path, shm::TrustRefusal refusal, const std::string& why) {
    ++rejected_[std::string(shm::trust_refusal_name(refusal))];
    messages_.push_back(path + ": " + why);
  }

  // Counts, as rejected in this read, a segment whose memory went missing.
  void count_memory_fault(const std::string& name, std::string_view reason) {
    ++rejected_[std::string(reason)];
    messages_.push_back(memory_fault_message(options_.shm_dir + "/" + name, reason));
  }

  // Moves every segment whose memory went missing out of observed_ (unmapping it) into quarantined_,
  // and counts it as rejected in this read.
  void quarantine_faulted() {
    for (auto it = observed_.begin(); it != observed_.end();) {
      const Observed& o = it->second;
      if (o.memory_fault.empty()) {
        ++it;
        continue;
      }
      count_memory_fault(it->first, o.memory_fault);
      quarantined_[it->first] = Quarantined{o.opened.inode, o.opened.device, o.memory_fault};
      it = observed_.erase(it);
    }
  }

  // records_per_second from two samples of records_written: the previous call's, or (first sight) one
  // taken rate_window earlier.
  void sample_rates() {
    bool fresh = false;
    for (auto& [name, o] : observed_) {
      if (o.sample_ns != 0) continue;
      o.sample_ns = shm::monotonic_ns();
      o.sample_records = producer(o).records_written;
      fresh = true;
    }
    if (fresh && options_.rate_window.count() > 0) std::this_thread::sleep_for(options_.rate_window);
    const std::uint64_t now = shm::monotonic_ns();
    for (auto& [name, o] : observed_) {
      const std::uint64_t written = producer(o).records_written;
      const std::uint64_t elapsed = now > o.sample_ns ? now - o.sample_ns : 0;
      if (elapsed < 50'000'000 && o.have_rate) continue;  // too close to the last sample to say more
      if (elapsed == 0) continue;
      const std::uint64_t delta = written >= o.sample_records ? written - o.sample_records : 0;
      o.records_per_second = static_cast<double>(delta) * 1e9 / static_cast<double>(elapsed);
      o.have_rate = true;
      o.sample_ns = now;
      o.sample_records = written;
    }
  }

  // Producer-group fields; garbage once o.memory_fault is set (the rank is then not shown).
  static shm::ProducerState producer(Observed& o) {
    shm::ProducerState state;
    read_guarded(o, [&] { state = shm::read_producer_state(*o.opened.file.header()); });
    return state;
  }

  // The daemon's rule (shmproto/liveness.hpp), at first sight: an observer keeps no verdict between
  // runs, and a process check it could not make leaves the heartbeat to decide, never DEAD.
  shm::RankState state_of(const Observed& o, const shm::ProducerState& p, std::uint64_t now) const {
    const auto stall_ns = static_cast<std::uint64_t>(options_.stall_after.count()) * 1'000'000ull;
    const std::optional<shm::ProcessStart> probe =
        p.closed ? std::nullopt : std::optional(shm::probe_process_start(o.opened.identity.pid));
    return shm::judge_liveness(o.opened.identity, p, probe, std::nullopt, now, stall_ns);
  }

  boost::json::object summary(Observed& o, std::uint64_t now) const {
    const shm::SegmentHeader& h = o.opened.identity;
    rankview::RankFacts facts;
    facts.id = o.id;
    facts.identity = &h;
    facts.producer = producer(o);
    const shm::ProducerState& p = facts.producer;
    facts.state = state_of(o, p, now);
    facts.records_per_second = o.records_per_second;
    // The consumer's published head against the writer's tail: how full the ring really is.
    const bool indices_sane = p.tail >= p.head && p.tail - p.head <= h.ring_bytes;
    facts.ring_fill_ratio =
        indices_sane && h.ring_bytes != 0
            ? std::min(1.0, static_cast<double>(p.tail - p.head) / static_cast<double>(h.ring_bytes))
            : 0.0;
    facts.ring_quarantined = !indices_sane;
    if (!trust_.owner_trusted(o.opened.owner_uid, o.instance)) {
      // Shown, but not as normal: the daemon would refuse it (unexpected_owner).
      facts.untrusted_owner_uid = o.opened.owner_uid;
      facts.untrusted_owner_name = shm::describe_user(o.opened.owner_uid);
    }
    return rankview::rank_summary(facts, now);
  }

  boost::json::object detail(Observed& o, std::uint64_t now) {
    boost::json::object out = summary(o, now);
    out["scheduler"] = scheduler_json(o, now);
    out["series"] = series_json(o);
    return out;
  }

  // The newest scheduler snapshot, copied without consuming (peek_latest_record); null if none.
  boost::json::value scheduler_json(Observed& o, std::uint64_t now) {
    const shm::SegmentHeader& h = o.opened.identity;
    shm::RecordHeader record{};
    std::int64_t bytes = -1;
    const bool read = read_guarded(o, [&] {
      for (int attempt = 0; attempt < kPeekAttempts && bytes < 0; ++attempt) {
        bytes = shm::peek_latest_record(o.opened.file.header(), o.opened.ring(), h.ring_bytes,
                                        shm::RecordType::kSchedulerSnapshot, record, payload_);
      }
    });
    if (!read || bytes < 0 || record.type_version < 1 ||
        static_cast<std::uint64_t>(bytes) < sizeof(shm::SchedulerSnapshot)) {
      return nullptr;
    }
    shm::SchedulerSnapshot fixed{};
    std::memcpy(&fixed, payload_.data(), sizeof fixed);
    const std::size_t room = (static_cast<std::size_t>(bytes) - sizeof fixed) / sizeof(shm::PriorityCount);
    const std::size_t count =
        std::min<std::size_t>({fixed.priority_count, room, std::size_t{shm::kMaxPriorityCounts}});
    o.ownership.apply(fixed, record.timestamp_ns);
    o.ownership.apply_staleness(fixed, now, shm::kGenThroughputStaleNs);
    std::vector<shm::PriorityCount> priorities(count);
    if (count != 0)
      std::memcpy(priorities.data(), payload_.data() + sizeof fixed, count * sizeof(shm::PriorityCount));
    const rankview::SchedulerSample sample{&fixed, priorities, record.sequence, record.timestamp_ns};
    return rankview::scheduler_document(&sample, now);
  }

  static boost::json::array series_json(Observed& o) {
    boost::json::array out;
    if (!read_guarded(o, [&] { out = read_series(o); })) return {};
    return out;
  }

  // Reads the mapping: only under read_guarded.
  static boost::json::array read_series(const Observed& o) {
    boost::json::array out;
    const shm::CumulativeReader reader(o.opened.cumulative(), o.opened.cumulative_geometry);
    const std::uint32_t published = reader.published_series();
    shm::SeriesValue value;
    for (std::uint32_t i = 0; i < published; ++i) {
      const auto info = reader.read_descriptor(i);
      if (!info) continue;  // malformed: the daemon skips and counts it too
      reader.read_value(*info, value);
      out.emplace_back(rankview::series_document(*info, value));
    }
    return out;
  }

  DirectOptions options_;
  shm::SegmentTrust trust_;                         // the daemon's rule, with --allowed-uids
  std::map<std::string, Observed> observed_;        // by segment file name
  std::map<std::string, Quarantined> quarantined_;  // by segment file name, while the file is there
  std::map<std::string, std::uint64_t> rejected_;   // by reason, in the last scan
  std::vector<std::string> messages_;               // why, one per rejected segment of the last scan
  alignas(8) std::array<std::uint8_t, shm::kMaxRecordBytes> payload_{};
};

}  // namespace

std::unique_ptr<RankSource> make_direct_source(DirectOptions options) {
  return std::make_unique<DirectSource>(std::move(options));
}

}  // namespace rankstat::cli
