#ifndef HEADROOM_TESTS_SUPPORT_SQLITE_FILES_H_
#define HEADROOM_TESTS_SUPPORT_SQLITE_FILES_H_

// A test's SQLite database is several files: the database and, beside it,
// its write-ahead log, shared-memory index and rollback journal.

#include <filesystem>
#include <string>
#include <system_error>

namespace headroom {

// Removes the database at `path` and the files SQLite keeps beside it;
// a file that is not there is no error.
inline void RemoveSqliteFiles(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    std::error_code ignored;
    std::filesystem::remove(path + suffix, ignored);
  }
}

}  // namespace headroom

#endif  // HEADROOM_TESTS_SUPPORT_SQLITE_FILES_H_
