// Generation checkpoints: what survives a daemon restart. The retired totals are persisted (retried until
// a save succeeds); every held generation's totals and integrals are checkpointed before a scrape is
// answered, so a restarted daemon that finds a generation gone serves at least what was served (counters
// never go backwards); at the first scans, checkpointed generations whose file is gone join the retired
// totals (resolve_checkpoints), and those still on disk are left for the scan to open.
// Thread contract: the daemon's io thread only; save_checkpoints is called by it before each scrape
// answer is published.
#include "segment_registry.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cerrno>

#include "generation_contributions.hpp"
#include "rankstat/shmproto/naming.hpp"

namespace rankstat {

bool SegmentRegistry::generation_gone(const RetiredTotals::GenerationKey& key) const {
  struct stat st {};
  if (::lstat((options_.directory + "/" + key.first).c_str(), &st) != 0) return errno == ENOENT;
  auto it = tracked_.find(key.first);
  if (it == tracked_.end()) return false;  // present but not opened (refused, being created, over budget)
  const Tracked& t = it->second;
  if (t.current && t.current->inode() == st.st_ino && t.current->device() == st.st_dev)
    return t.current->identity().generation != key.second;
  // The name holds a retired generation's file: another generation (the key is not retired).
  return !t.current && t.retired_inode == st.st_ino && t.retired_device == st.st_dev;
}

void SegmentRegistry::resolve_checkpoints() {
  bool recovered = false;
  for (const RetiredTotals::GenerationKey& key : retired_.checkpoints().unclaimed_totals()) {
    if (retired_.holds(key)) continue;  // dropped below once persisted
    const auto parsed = shm::parse_segment_name(key.first);
    if (retired_.holds_nonce(key.second) || !parsed || !wanted(parsed->instance)) {
      retired_.checkpoints().drop(key);  // retired under another name, or not this daemon's to serve
      continue;
    }
    if (!generation_gone(key)) continue;  // its file may still be opened: never counted twice
    // Its successor was renamed over it, or its file removed, while no daemon ran: what the previous
    // daemon last saw of it (at least what Prometheus read) joins the retired totals.
    retired_.fold_unclaimed(key);
    FamilyDeclarations::note_replaced(retired_);
    ++counters_.generations_recovered;
    recovered = true;
    spdlog::info(
        "segment {}: generation {:016x} ended while no daemon ran; its checkpointed totals are retired",
        key.first, key.second);
  }
  if (recovered) persist_retired();
  for (const RetiredTotals::GenerationKey& key : retired_.checkpoints().unclaimed_totals()) {
    if (retired_.persisted(key)) retired_.checkpoints().drop(key);
  }
}

bool SegmentRegistry::persist_retired() {
  if (!retired_.unsaved()) return true;
  std::string error;
  if (retired_.save(error)) {
    persist_failure_logged_ = false;
    return true;
  }
  if (!persist_failure_logged_) {
    persist_failure_logged_ = true;
    spdlog::error(
        "retired totals not persisted (retried on every liveness pass; their segments stay on disk): {}",
        error);
  }
  return false;
}

bool SegmentRegistry::save_checkpoints(std::string& error) {
  checkpoint_due_ = false;
  if (!retired_.persistent()) return true;
  resolve_declarations();  // a checkpoint keeps what the scrape serves
  // Called before every scrape is answered: what a scrape serves of a held generation (its totals and
  // integrals) must be on disk first, so that a daemon killed right after the answer, restarted, and
  // finding the generation gone, serves at least as much (counters never go backwards). The checkpoint
  // is therefore never skipped because of time, only when it would say nothing new: each generation's
  // entry is brought up to date in place, and the file is written only if some entry moved, a generation
  // came or went (or its totals reached the retired totals on disk), or the loaded checkpoints changed.
  // When nothing moved, the file written last (successfully) already holds every value this scrape
  // serves, which is what the guarantee needs. A failed write leaves checkpoint_current_ false: the next
  // call writes again whatever changed.
  bool changed = !checkpoint_current_;
  std::map<RetiredTotals::GenerationKey, HeldCheckpoint> held;
  for (const RankSegment* s : generations()) {
    const RetiredTotals::GenerationKey key{s->name(), s->identity().generation};
    auto node = checkpoints_.extract(key);
    if (node.empty()) changed = true;
    HeldCheckpoint& entry = node.empty() ? held[key] : held.insert(std::move(node)).position->second;
    RetiredTotals::LiveCheckpoint& checkpoint = entry.checkpoint;
    for (const IntegratedGauge& g : s->integrated()) {
      if (!g.track.has_value()) continue;
      const IntegralCheckpoint now{g.track.integral(), g.track.value(), g.track.integrated_until_ns()};
      auto [it, inserted] = checkpoint.integrals.try_emplace(g.checkpoint_key, now);
      if (!inserted && it->second.integral == now.integral && it->second.value == now.value &&
          it->second.until_ns == now.until_ns)
        continue;
      it->second = now;
      changed = true;
    }
    // Until the retired totals on disk hold it, a generation's totals are kept here: a restarted daemon
    // that no longer finds its file retires these.
    if (retired_.persisted(key)) {
      if (checkpoint.totals.has_value()) {
        checkpoint.totals.reset();
        changed = true;
      }
    } else if (!checkpoint.totals.has_value() || entry.resolution != declarations_.version() ||
               !refresh_cumulative_totals(*s, *checkpoint.totals, changed)) {
      checkpoint.totals = cumulative_totals(*s, options_.instance_label, &entry.labels);
      entry.resolution = declarations_.version();
      changed = true;
    }
  }
  if (!checkpoints_.empty()) changed = true;  // generations no longer held
  checkpoints_ = std::move(held);
  const bool drop_unclaimed = scanned_once();
  if (retired_.checkpoints().unclaimed() != checkpoint_unclaimed_ ||
      drop_unclaimed != checkpoint_dropped_unclaimed_)
    changed = true;
  if (!changed) return true;
  std::map<RetiredTotals::GenerationKey, const RetiredTotals::LiveCheckpoint*> live;
  for (const auto& [key, entry] : checkpoints_) live.emplace(key, &entry.checkpoint);
  checkpoint_current_ = retired_.checkpoints().save_live(live, drop_unclaimed, error);
  checkpoint_unclaimed_ = retired_.checkpoints().unclaimed();
  checkpoint_dropped_unclaimed_ = drop_unclaimed;
  return checkpoint_current_;
}

}  // namespace rankstat
