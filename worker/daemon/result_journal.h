#ifndef HEADROOM_WORKER_DAEMON_RESULT_JOURNAL_H_
#define HEADROOM_WORKER_DAEMON_RESULT_JOURNAL_H_

// The worker's journal of results the planner has not acknowledged (issue
// 19, item 8): each result is one file in a directory, written durably
// before it is sent and removed once the planner acknowledges (or rejects)
// it, so a worker killed and restarted sends it again. The planner stores a
// result once, however often it comes.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "headroom/v1/fleet.pb.h"

namespace headroom::worker {

class ResultJournal {
 public:
  struct Limits {
    // Entries kept at most; past it a result is sent but not journaled.
    size_t max_entries = 4096;
    // Largest entry written or read back (a gRPC message's default limit).
    size_t max_entry_bytes = 4 << 20;
  };

  // Opens (creating it and its parents) the journal in `dir`.
  // INVALID_ARGUMENT or the OS error names the directory.
  static absl::StatusOr<std::unique_ptr<ResultJournal>> Open(std::string dir,
                                                             Limits limits);
  ResultJournal(const ResultJournal&) = delete;
  ResultJournal& operator=(const ResultJournal&) = delete;

  // The results on disk, oldest first. An entry that cannot be read or
  // parsed, is too large, or is past max_entries, is moved aside into
  // `<dir>/unreadable/` with a warning; none stops the worker.
  std::vector<v1::ProbeResult> Load();

  // Writes `result` under its key (replacing an entry with the same key):
  // to a temporary file, fsync, rename, fsync of the directory. When this
  // returns OK the result survives a crash of the process or the machine.
  absl::Status Add(const v1::ProbeResult& result);

  // Removes the entry of `key`, if any (no fsync: an entry that comes back
  // after a crash is sent again and stored once).
  void Remove(const std::string& key);

  // Entries held now.
  size_t size() const;
  const std::string& dir() const { return dir_; }

 private:
  ResultJournal(std::string dir, Limits limits)
      : dir_(std::move(dir)), limits_(limits) {}
  void MoveAsideLocked(const std::string& name, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  const Limits limits_;
  mutable absl::Mutex mu_;
  // Key -> file name ("r-<seq>.pb", seq increasing: oldest first).
  std::map<std::string, std::string> files_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace headroom::worker

#endif  // HEADROOM_WORKER_DAEMON_RESULT_JOURNAL_H_
