#ifndef HEADROOM_TESTS_SERVER_SERVICE_FLEET_FLEET_TEST_STORE_H_
#define HEADROOM_TESTS_SERVER_SERVICE_FLEET_FLEET_TEST_STORE_H_

// A SQLite store on a temporary file of the test's own, opened through
// OpenStore as the planner does; a second handle reaches the same data.

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/store/open_store.h"
#include "tests/support/sqlite_files.h"

namespace headroom {

class TempStoreFile {
 public:
  TempStoreFile() {
    static std::atomic<int> counter{0};
    path_ =
        std::filesystem::temp_directory_path() /
        absl::StrCat("headroom-fleet-test-", getpid(), "-", counter++, ".db");
    Remove();
  }
  ~TempStoreFile() { Remove(); }
  TempStoreFile(const TempStoreFile&) = delete;
  TempStoreFile& operator=(const TempStoreFile&) = delete;

  // A new handle on the file.
  absl::StatusOr<std::unique_ptr<Store>> Open() const {
    return OpenStore(path_.string());
  }

 private:
  void Remove() { RemoveSqliteFiles(path_.string()); }

  std::filesystem::path path_;
};

}  // namespace headroom

#endif  // HEADROOM_TESTS_SERVER_SERVICE_FLEET_FLEET_TEST_STORE_H_
