#ifndef HEADROOM_IO_PUBLISHED_RUNS_H_
#define HEADROOM_IO_PUBLISHED_RUNS_H_

// Published runs as a measured source (issue 30): data/published-runs.jsonl,
// one headroom.v1.PublishedRun a line (protobuf JSON, snake_case or
// camelCase keys), each row a figure a publication reports for one training
// job, with the config.json files its rows name in published-configs/
// beside it. Read here into MeasuredRuns (measured_by PUBLISHED) that
// anchor answers and calibrate the per-kind bounds; they never fit the
// component factors (core/calibration/calibrate.cc).

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/catalog/model_catalog.h"
#include "headroom/v1/calibration.pb.h"

namespace headroom {

// The file's conventional name, and the folder of configs beside it.
inline constexpr char kPublishedRunsFile[] = "published-runs.jsonl";
inline constexpr char kPublishedConfigsDir[] = "published-configs";

// Bounds on what a published runs file may hold.
inline constexpr size_t kMaxPublishedLines = 100000;
inline constexpr size_t kMaxPublishedLineBytes = size_t{64} << 10;
inline constexpr size_t kMaxPublishedConfigBytes = size_t{16} << 20;

// A published runs file read: the rows the planner may use, and the rows it
// lists but does not use, each with `excluded` saying why (setup_clear
// false, a feature the setup cannot say, no config, a card the catalog does
// not know).
struct PublishedRuns {
  std::vector<v1::MeasuredRun> usable;
  std::vector<v1::MeasuredRun> unused;
};

// Reads the published runs file `path` against `catalog`. Each row becomes
// a MeasuredRun: measured_by PUBLISHED, metric from the row's word,
// publication, source "published <publication>/<row>", spec (the row's
// `config` under <dir of path>/published-configs/ converted by the Hugging
// Face front-end at setup.positions, or the catalog spec of its `template`)
// and setup, batch, gpu (the catalog's name when it knows the card),
// measured_peak_gb = the row's measured_gb in its metric, or oom_on_gb = the
// card's memory (the catalog's, else gpu_memory_gb). Strict: a line that is
// not a PublishedRun (unknown keys included), a row without publication,
// row name, citation (repo + path + commit, or url; and a quote), metric,
// setup, or batch (unless setup_clear is false: listed only), with both or
// neither of measured_gb and oom, an unknown card without gpu_memory_gb, both
// config and template, an unknown template, framework or unmodelled word, a
// config file missing, unreadable or outside published-configs/, a duplicate
// row, or a usable row the run checks refuse, fails the whole file with
// INVALID_ARGUMENT "<path>:<line> (row <row>): <field> ...; allowed ...".
// Bounded by kMaxPublishedLines, kMaxPublishedLineBytes and
// kMaxPublishedConfigBytes. NOT_FOUND when the file cannot be opened.
absl::StatusOr<PublishedRuns> LoadPublishedRuns(const std::string& path,
                                                const ModelCatalog& catalog);

// Whether the runs file `path`, whose text begins with `first_line`, is a
// published runs file: named published-runs.jsonl, or its first line holds
// "publication".
bool IsPublishedRunsFile(absl::string_view path, absl::string_view first_line);

// Reads runs files as the planner's --runs names them: one path, or several
// separated by commas, read in order; a published runs file
// (IsPublishedRunsFile) through LoadPublishedRuns (its usable rows, then its
// unused rows on catalog cards, stored as excluded), every other file as
// memory-runs.jsonl (LoadRunsJsonl). Errors name the file.
absl::StatusOr<std::vector<v1::MeasuredRun>> LoadRunsFiles(
    const std::string& paths, const ModelCatalog& catalog);

}  // namespace headroom

#endif  // HEADROOM_IO_PUBLISHED_RUNS_H_
