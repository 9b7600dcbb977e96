#include "client/microbatch_commands.h"

#include <iomanip>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/json_io.h"
#include "client/autotune_commands.h"
#include "client/cli_context.h"
#include "client/cli_json.h"
#include "client/commands.h"
#include "core/microbatch/select.h"
#include "headroom/v1/microbatch.pb.h"
#include "io/files.h"

namespace headroom::cli {
namespace {

// What the record was measured for: the GPU as torch named it, the model
// (by its source's hash: a record does not name it) and the settings.
void PrintRecordKey(const std::string& path, const v1::AutotuneRecord& record,
                    std::ostream& out) {
  const v1::AutotuneCacheKey& key = record.cache_key();
  out << "record " << path << ": GPU "
      << (key.gpu().name().empty() ? "(not recorded)" : key.gpu().name());
  if (key.gpu().total_memory() > 0) {
    out << absl::StrFormat(" (%.2f GB)", key.gpu().total_memory() / 1e9);
  }
  out << "; model "
      << (key.source().empty()
              ? std::string("(not recorded)")
              : absl::StrCat("source sha256 ", key.source().substr(0, 12),
                             "... (a record names its model by the hash of "
                             "its source)"))
      << "; context " << key.settings().context() << ", global batch "
      << key.settings().global_batch() << "\n";
}

// The selection, its figures in GB (the record's GiB converted).
void PrintTable(const v1::MicrobatchSelection& selection, std::ostream& out) {
  out << "selection_policy " << selection.selection_policy() << "  budget "
      << absl::StrFormat("%.2f", RecordGb(selection.budget_gb())) << " GB\n";
  if (selection.has_selected()) {
    const v1::MicrobatchMeasurement& s = selection.selected();
    out << "selected microbatch " << s.microbatch() << "  mode " << s.mode()
        << "  peak " << absl::StrFormat("%.2f", RecordGb(s.peak_gb()))
        << " GB  microbatch_seconds " << s.microbatch_seconds()
        << "  estimated_update_seconds " << s.estimated_update_seconds()
        << "  input_tokens_per_second " << s.input_tokens_per_second() << "\n";
  } else {
    out << "selected (none)\n";
  }
  out << "failures " << selection.failures_size() << "\n";
  for (const v1::MicrobatchFailure& failure : selection.failures()) {
    out << "  " << std::left << std::setw(10) << failure.mode() << std::right
        << std::setw(6) << failure.microbatch() << "  " << failure.reason()
        << "\n";
  }
}

}  // namespace

int MicrobatchSelect(const std::string& record_path, const std::string& policy,
                     bool json, std::ostream& out, std::ostream& err) {
  if (record_path.empty()) return Fail(err, "--record FILE is required");
  absl::StatusOr<std::string> text = ReadFile(record_path);
  if (!text.ok()) return Fail(err, text.status());
  v1::AutotuneRecord record;
  const absl::Status parsed =
      ParseJson(*text, record_path, /*ignore_unknown=*/false, &record);
  if (!parsed.ok()) return Fail(err, parsed);
  absl::StatusOr<v1::MicrobatchSelection> selection =
      SelectMicrobatch(record, policy);
  if (!selection.ok()) {
    return Fail(err,
                absl::StrCat(record_path, ": ", selection.status().message()));
  }
  if (!selection->has_selected()) {
    err << "headroom: no candidate fits the budget of "
        << absl::StrFormat("%.2f", RecordGb(selection->budget_gb())) << " GB\n";
  }
  if (json) {
    out << CliJson(*selection) << "\n";
  } else {
    PrintRecordKey(record_path, record, out);
    PrintTable(*selection, out);
  }
  return 0;
}

void RegisterMicrobatchCommands(CLI::App& app, CliContext& ctx) {
  struct SelectFlags {
    std::string record;
    std::string policy;
  };
  SelectFlags& s = ctx.Keep<SelectFlags>();
  CLI::App* microbatch =
      ctx.Command(&app, "microbatch", "microbatch plans and autotune");
  CLI::App* select = ctx.Command(microbatch, "select",
                                 "the microbatch an autotune record chose");
  select->add_option("--record", s.record, "an autotune record");
  select->add_option("--policy", s.policy,
                     "max_batch or max_throughput (default: the record's)");
  AddJson(select, ctx.options);
  ctx.Run(select, [&ctx, &s] {
    return MicrobatchSelect(s.record, s.policy, ctx.options.json, ctx.out,
                            ctx.err);
  });
  RegisterAutotuneCommands(*microbatch, ctx);
}

}  // namespace headroom::cli
