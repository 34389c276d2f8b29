// One trust rule for every reader of a segment: which files rankstatd opens, and which `rankstat --direct`
// refuses or marks, decided by the same function, so the two never disagree about a segment.
//
// A segment file is believed only if
//   - it is a regular file: never a symlink, directory, FIFO or device (judged on lstat before anything
//     is opened, then on the descriptor opened, so a file swapped in between is caught too);
//   - no user but its owner and group may write it (writers create segments 0660 or 0640), unless
//     allow_world_writable;
//   - its owner is the reader's user, root, or allowed: per instance when instance_owners names the
//     instance the file name claims (only those owners, and root), else allowed_uids, or any owner with
//     any_owner;
//   - its header claims the instance its file name claims (trust is per instance and judged by the name:
//     a header that says otherwise is a renamed segment).
// What the file holds (size, layout, versions, geometry) is shm::open_segment's to check (reader.hpp);
// which inode is already read under another name (a hard link) is the registry's.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rankstat/shmproto/layout.hpp"

namespace rankstat::shm {

// Why a reader refuses a segment file before it believes anything in it, as logged, and the reason label
// of rankstat_segments_rejected_total and of --direct's rejected_segments.
#define RANKSTAT_TRUST_REFUSALS(X)        \
  X(kNotRegularFile, "not_regular_file")  \
  X(kWorldWritable, "world_writable")     \
  X(kUnexpectedOwner, "unexpected_owner") \
  X(kInstanceMismatch, "instance_mismatch")
RANKSTAT_DEFINE_ENUM_WITH_TEXTS(TrustRefusal, kTrustRefusalNames, RANKSTAT_TRUST_REFUSALS)
inline constexpr std::size_t kTrustRefusalCount = std::size(kTrustRefusalNames);

inline std::string_view trust_refusal_name(TrustRefusal refusal) {
  const auto index = static_cast<std::size_t>(refusal);
  return index < kTrustRefusalCount ? kTrustRefusalNames[index] : "unknown";
}

struct SegmentTrust {
  std::vector<std::uint32_t> allowed_uids;  // owners trusted besides the reader's user and root
  bool any_owner = false;
  bool allow_world_writable = false;
  // Instance -> the only owners (besides root) whose segments may carry that instance. An instance
  // listed here is closed to everyone else, allowed_uids included.
  std::map<std::string, std::vector<std::uint32_t>> instance_owners;

  // Whether `uid` may own a segment of `instance` (the instance its file name claims).
  bool owner_trusted(std::uint32_t uid, std::string_view instance) const {
    if (const auto owners = instance_owners.find(std::string(instance)); owners != instance_owners.end())
      return uid == 0 || std::find(owners->second.begin(), owners->second.end(), uid) != owners->second.end();
    return any_owner || uid == geteuid() || uid == 0 ||
           std::find(allowed_uids.begin(), allowed_uids.end(), uid) != allowed_uids.end();
  }

  // nullopt if a file of this stat (lstat of the name, or fstat of the descriptor opened) may be read as
  // a segment of `instance`; else the rule it breaks, with `message` saying why in words.
  std::optional<TrustRefusal> judge_file(const struct stat& st, std::string_view instance,
                                         std::string& message) const {
    if (!S_ISREG(st.st_mode)) {
      message = "not a regular file (a symlink, directory, FIFO or device); never opened";
      return TrustRefusal::kNotRegularFile;
    }
    if ((st.st_mode & S_IWOTH) != 0 && !allow_world_writable) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      message = std::string("mode ") + mode +
                " lets any local user write it; writers create segments 0660 or 0640 "
                "(--shm.allow-world-writable accepts it anyway)";
      return TrustRefusal::kWorldWritable;
    }
    const std::uint32_t uid = st.st_uid;
    if (owner_trusted(uid, instance)) return std::nullopt;
    if (instance_owners.count(std::string(instance)) != 0) {
      message = "owned by uid " + std::to_string(uid) +
                ", which --shm.instance-owner does not allow for instance " + std::string(instance);
    } else {
      message = "owned by uid " + std::to_string(uid) + ", which is neither this reader's uid " +
                std::to_string(geteuid()) +
                ", root, nor an allowed uid (rankstatd --shm.allowed-uids, rankstat --direct --allowed-uids)";
    }
    return TrustRefusal::kUnexpectedOwner;
  }

  // nullopt if the header opened under a name that claims `instance` claims it too.
  static std::optional<TrustRefusal> judge_header(const SegmentHeader& header, std::string_view instance,
                                                  std::string& message) {
    const std::string_view claimed(header.instance, strnlen(header.instance, sizeof header.instance));
    if (claimed == instance) return std::nullopt;
    message = "its header says instance '" + std::string(claimed) + "' but its name says '" +
              std::string(instance) + "'";
    return TrustRefusal::kInstanceMismatch;
  }
};

}  // namespace rankstat::shm
