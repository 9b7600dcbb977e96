#ifndef HEADROOM_IO_FILES_H_
#define HEADROOM_IO_FILES_H_

// Reading the planner's input files: the edge where bytes come off disk.
// The core takes what these return (text, parsed messages) and reads no
// file itself.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "headroom/v1/calibration.pb.h"

namespace headroom {

// Reads a whole file; NOT_FOUND when it cannot be opened.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Reads and parses runs files from disk (memory-runs.jsonl format, parsed
// by the core's ParseRunsJsonl): one path, or several separated by commas,
// read in order (errors name the file).
absl::StatusOr<std::vector<v1::MeasuredRun>> LoadRunsJsonl(
    const std::string& paths);

}  // namespace headroom

#endif  // HEADROOM_IO_FILES_H_
