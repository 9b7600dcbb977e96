#include "worker/daemon/result_journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"

namespace headroom::worker {
namespace {

namespace fs = std::filesystem;

constexpr char kPrefix[] = "r-";
constexpr char kSuffix[] = ".pb";

absl::Status OsError(const std::string& what, const std::string& path) {
  return absl::InternalError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// Writes all of `bytes` to `fd`.
bool WriteAll(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return OsError("opening", dir);
  const bool ok = fsync(fd) == 0;
  close(fd);
  return ok ? absl::OkStatus() : OsError("syncing", dir);
}

// The sequence number of a journal file's name; 0 when it is not one.
uint64_t SequenceOf(const std::string& name) {
  if (!absl::StartsWith(name, kPrefix) || !absl::EndsWith(name, kSuffix)) {
    return 0;
  }
  const size_t prefix = std::strlen(kPrefix);
  const size_t suffix = std::strlen(kSuffix);
  if (name.size() <= prefix + suffix) return 0;
  uint64_t seq = 0;
  const std::string digits = name.substr(prefix, name.size() - prefix - suffix);
  return absl::SimpleAtoi(digits, &seq) ? seq : 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ResultJournal>> ResultJournal::Open(
    std::string dir, Limits limits) {
  if (dir.empty()) {
    return absl::InvalidArgumentError("journal directory is empty");
  }
  std::error_code error;
  fs::create_directories(dir, error);
  if (error || !fs::is_directory(dir)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "journal directory ", dir,
        " cannot be created: ", error ? error.message() : "not a directory"));
  }
  if (access(dir.c_str(), W_OK) != 0) return OsError("cannot write", dir);
  return std::unique_ptr<ResultJournal>(
      new ResultJournal(std::move(dir), limits));
}

void ResultJournal::MoveAsideLocked(const std::string& name,
                                    const std::string& why) {
  const fs::path aside = fs::path(dir_) / "unreadable";
  std::error_code error;
  fs::create_directories(aside, error);
  fs::rename(fs::path(dir_) / name, aside / name, error);
  if (error) fs::remove(fs::path(dir_) / name, error);
  spdlog::warn(
      "event=journal_entry_moved_aside dir={} file={} why=\"{}\" to={}", dir_,
      name, why, aside.string());
}

std::vector<v1::ProbeResult> ResultJournal::Load() {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<uint64_t, std::string>> names;
  std::error_code error;
  // Bounded: the directory is the worker's own, but count what is listed.
  size_t listed = 0;
  for (fs::directory_iterator it(dir_, error), end; !error && it != end;
       it.increment(error)) {
    if (++listed > 16 * limits_.max_entries) break;
    const std::string name = it->path().filename().string();
    std::error_code entry_error;
    if (!it->is_regular_file(entry_error)) continue;
    if (absl::StartsWith(name, ".tmp-")) {
      fs::remove(it->path(), entry_error);  // a write that never finished
      continue;
    }
    const uint64_t seq = SequenceOf(name);
    if (seq == 0) continue;  // not ours
    names.emplace_back(seq, name);
  }
  std::sort(names.begin(), names.end());
  std::vector<v1::ProbeResult> results;
  for (const auto& [seq, name] : names) {
    next_seq_ = std::max(next_seq_, seq + 1);
    if (results.size() >= limits_.max_entries) {
      MoveAsideLocked(
          name, absl::StrCat("more than ", limits_.max_entries, " entries"));
      continue;
    }
    const fs::path path = fs::path(dir_) / name;
    const uintmax_t bytes = fs::file_size(path, error);
    if (error || bytes > limits_.max_entry_bytes) {
      MoveAsideLocked(name, error
                                ? error.message()
                                : absl::StrCat(bytes, " bytes; allowed up to ",
                                               limits_.max_entry_bytes));
      continue;
    }
    std::ifstream in(path, std::ios::binary);
    std::ostringstream content;
    content << in.rdbuf();
    v1::ProbeResult result;
    if (!in || !result.ParseFromString(content.str()) || result.key().empty()) {
      MoveAsideLocked(name, "not a ProbeResult with a key");
      continue;
    }
    auto [it, inserted] = files_.emplace(result.key(), name);
    if (!inserted) {
      // The same key twice (a crash between writing the new entry and
      // removing the old): the newer one wins.
      fs::remove(fs::path(dir_) / it->second, error);
      it->second = name;
      results.erase(std::remove_if(results.begin(), results.end(),
                                   [&](const v1::ProbeResult& r) {
                                     return r.key() == result.key();
                                   }),
                    results.end());
    }
    results.push_back(std::move(result));
  }
  return results;
}

absl::Status ResultJournal::Add(const v1::ProbeResult& result) {
  const std::string bytes = result.SerializeAsString();
  if (bytes.size() > limits_.max_entry_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "result ", result.key().substr(0, 200), " is ", bytes.size(),
        " bytes; the journal keeps up to ", limits_.max_entry_bytes));
  }
  absl::MutexLock lock(&mu_);
  auto existing = files_.find(result.key());
  if (existing == files_.end() && files_.size() >= limits_.max_entries) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the journal in ", dir_, " holds ", files_.size(),
                     " entries already (the limit)"));
  }
  const std::string name =
      absl::StrFormat("%s%020d%s", kPrefix, next_seq_++, kSuffix);
  const std::string temp = absl::StrCat(dir_, "/.tmp-", name);
  const std::string path = absl::StrCat(dir_, "/", name);
  const int fd =
      open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return OsError("creating", temp);
  const bool written = WriteAll(fd, bytes) && fsync(fd) == 0;
  close(fd);
  if (!written || rename(temp.c_str(), path.c_str()) != 0) {
    const absl::Status status = OsError("writing", temp);
    unlink(temp.c_str());
    return status;
  }
  if (absl::Status synced = SyncDirectory(dir_); !synced.ok()) return synced;
  if (existing != files_.end()) {
    unlink(absl::StrCat(dir_, "/", existing->second).c_str());
    existing->second = name;
  } else {
    files_.emplace(result.key(), name);
  }
  return absl::OkStatus();
}

void ResultJournal::Remove(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = files_.find(key);
  if (it == files_.end()) return;
  unlink(absl::StrCat(dir_, "/", it->second).c_str());
  files_.erase(it);
}

size_t ResultJournal::size() const {
  absl::MutexLock lock(&mu_);
  return files_.size();
}

}  // namespace headroom::worker
