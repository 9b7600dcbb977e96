#ifndef HEADROOM_CORE_JOBS_JOB_READER_H_
#define HEADROOM_CORE_JOBS_JOB_READER_H_

// Internal to core/jobs: one job file's tree as the kind readers consume
// it. Every key a reader looks up is marked read; what it makes of a key is
// written to the derivation (from_file, defaults), and Finish sorts the
// keys nobody read into `ignored` or, when they could change the memory
// figure, an INVALID_ARGUMENT naming them.

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/jobs/job_tree.h"
#include "headroom/v1/planner.pb.h"

namespace headroom::jobs {

class JobReader {
 public:
  // `tree` and `derivation` must outlive the reader.
  JobReader(std::string file_name, const Tree& tree,
            v1::JobDerivation* derivation);

  JobReader(const JobReader&) = delete;
  JobReader& operator=(const JobReader&) = delete;

  const std::string& file() const { return file_; }

  // The value at the dotted `key` ("train.micro_batch_size"); nullptr when
  // absent or null. Marks the key (and everything under it) read.
  const Tree* Find(absl::string_view key);

  // Typed look-ups: nullopt when absent or null, INVALID_ARGUMENT naming
  // file and key for a value of another type. Int accepts min..max; Bool
  // also accepts the strings "true"/"false" (HfArgumentParser's JSON).
  absl::StatusOr<std::optional<int64_t>> Int(absl::string_view key, int64_t min,
                                             int64_t max);
  absl::StatusOr<std::optional<bool>> Bool(absl::string_view key);
  absl::StatusOr<std::optional<std::string>> String(absl::string_view key);
  absl::StatusOr<std::optional<double>> Number(absl::string_view key);
  // A list of strings, or one string split at commas and spaces (HF's
  // "full_shard auto_wrap").
  absl::StatusOr<std::optional<std::vector<std::string>>> Strings(
      absl::string_view key);

  // Writes "file: key = value -> field" to from_file.
  void FromFile(absl::string_view key, absl::string_view value,
                absl::string_view field);
  // Writes "field = value: why (source @ commit)" to defaults.
  void Default(absl::string_view field, absl::string_view value,
               absl::string_view why);

  // INVALID_ARGUMENT "file: key = value ...; allowed ...".
  absl::Status Bad(absl::string_view key, absl::string_view problem) const;

  // Sorts the keys nobody read: those matching `memory_keys` (a dotted key,
  // or a prefix ending in '.' or '_' or '*') make an INVALID_ARGUMENT naming
  // file and keys; the rest go to `ignored` as "file: key", one per
  // highest unread key.
  absl::Status Finish(const std::vector<std::string>& memory_keys);

 private:
  bool IsRead(const std::string& path) const;
  bool AnyRead(const std::string& path) const;
  void Unread(const Tree& node, const std::string& path,
              const std::vector<std::string>& memory_keys,
              std::vector<std::string>* memory,
              std::vector<std::string>* ignored) const;

  std::string file_;
  const Tree& tree_;
  v1::JobDerivation* derivation_;
  std::set<std::string> read_;
};

// The value as a file would write it, for from_file lines and errors.
std::string ValueText(const Tree& value);

}  // namespace headroom::jobs

#endif  // HEADROOM_CORE_JOBS_JOB_READER_H_
