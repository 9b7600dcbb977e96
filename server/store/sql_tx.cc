// Why our own seam rather than SOCI: SOCI 4.0 (Debian libsoci-dev) was
// tried first. Its installed headers require Boost (soci-config.h defines
// SOCI_HAVE_BOOST, so every user needs libboost-dev), its sqlite3 backend
// cannot write a blob (blob::write_from_start: "not implemented for this
// backend"), and it reports errors by exception, which every call would
// turn back into a Status (and SQLSTATE into UNAVAILABLE / ABORTED) here
// anyway. It abstracts neither FOR UPDATE SKIP LOCKED nor advisory locks.
// What the two backends really differ in is small (sql_dialect.h), and a
// connection is ~150 lines each over sqlite3 and libpq: so the SQL is
// written once, in server/store/sql_*.cc, over SqlConnection; this file
// runs their units of work.

#include "server/store/sql_tx.h"

#include <openssl/sha.h>

#include <ctime>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/deterministic_bytes.h"
#include "base/status_macros.h"

namespace headroom {
namespace sql {

std::string BodyHash(const std::string& body) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(body.data()), body.size(),
         digest);
  return std::string(reinterpret_cast<const char*>(digest), sizeof(digest));
}

std::string Placeholders(size_t n) {
  if (n == 0) return "NULL";
  std::string list = "?";
  for (size_t i = 1; i < n; ++i) list += ", ?";
  return list;
}

absl::Status NotStored(const char* what, const std::string& name) {
  return absl::NotFoundError(
      absl::StrCat(what, " '", name.substr(0, 64), "' is not stored"));
}

std::string ProbeBody(const v1::Probe& probe) {
  v1::Probe body = probe;
  body.clear_results();
  return DeterministicBytes(body);
}

absl::StatusOr<int64_t> NextSeq(Tx& tx, const char* table) {
  if (tx.dialect().numbering_lock[0] != '\0') {
    RETURN_IF_ERROR(tx.Exec("locking numbering", tx.dialect().numbering_lock,
                            SqlParams().Text(table)));
  }
  ASSIGN_OR_RETURN(
      SqlRows rows,
      tx.Query("numbering",
               absl::StrCat("SELECT COALESCE(MAX(seq), 0) + 1 FROM ", table)));
  return rows.Int(0, 0);
}

absl::StatusOr<std::string> InsertVersioned(
    Tx& tx, const char* table, const char* prefix, int64_t created_unix,
    const std::function<std::string(const std::string&)>& body) {
  ASSIGN_OR_RETURN(const int64_t next, NextSeq(tx, table));
  const std::string version = absl::StrCat(prefix, next);
  RETURN_IF_ERROR(tx.Exec(
      "storing a version",
      absl::StrCat("INSERT INTO ", table,
                   " (seq, version, created_unix, body) VALUES (?, ?, ?, ?)"),
      SqlParams()
          .Int(next)
          .Text(version)
          .Int(created_unix)
          .Bytes(body(version))));
  return version;
}

absl::Status MakeCurrent(Tx& tx, const char* what, const char* versions_table,
                         const char* current_table, const char* history_table,
                         const std::string& version, bool check) {
  if (check) {
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("reading a version",
                              absl::StrCat("SELECT 1 FROM ", versions_table,
                                           " WHERE version = ?"),
                              SqlParams().Text(version)));
    if (rows.empty()) return NotStored(what, version);
  }
  RETURN_IF_ERROR(tx.Exec(
      "making a version current",
      absl::StrCat("INSERT INTO ", current_table,
                   " (id, version) VALUES (1, ?) ON CONFLICT (id) DO UPDATE "
                   "SET version = excluded.version"),
      SqlParams().Text(version)));
  return tx.Exec("recording the current version",
                 absl::StrCat("INSERT INTO ", history_table,
                              " (version, changed_unix) VALUES (?, ?)"),
                 SqlParams().Text(version).Int(std::time(nullptr)));
}

absl::StatusOr<Page<std::string>> History(Tx& tx, const char* table,
                                          const PageSpec& page) {
  ASSIGN_OR_RETURN(const int64_t after, SeqAfter(page.after));
  ASSIGN_OR_RETURN(
      SqlRows rows,
      tx.Query("reading history",
               absl::StrCat("SELECT seq, version FROM ", table,
                            " WHERE seq > ? ORDER BY seq LIMIT ?"),
               SqlParams().Int(after).Int(int64_t{page.max_entries} + 1)));
  std::vector<std::pair<std::string, std::string>> versions;
  versions.reserve(rows.size());
  for (int i = 0; i < rows.size(); ++i) {
    versions.emplace_back(absl::StrCat(rows.Int(i, 0)), rows.Bytes(i, 1));
  }
  return FillPage(std::move(versions), page);
}

absl::StatusOr<int64_t> Count(Tx& tx, const char* table) {
  ASSIGN_OR_RETURN(
      SqlRows rows,
      tx.Query("counting", absl::StrCat("SELECT COUNT(*) FROM ", table)));
  return rows.Int(0, 0);
}

absl::StatusOr<int64_t> InsertRun(Tx& tx, const v1::MeasuredRun& run) {
  const std::string body = DeterministicBytes(run);
  const std::string hash = BodyHash(body);
  RETURN_IF_ERROR(tx.Exec(
      "storing run",
      "INSERT INTO measured_runs (template, gpu, batch, body, body_hash) "
      "VALUES (?, ?, ?, ?, ?) ON CONFLICT (body_hash) DO NOTHING",
      SqlParams()
          .Text(run.template_())
          .Text(run.gpu())
          .Int(static_cast<int64_t>(run.batch()))
          .Bytes(body)
          .Bytes(hash)));
  ASSIGN_OR_RETURN(SqlRows rows,
                   tx.Query("finding run",
                            "SELECT seq FROM measured_runs WHERE body_hash = ?",
                            SqlParams().Bytes(hash)));
  if (rows.empty()) return absl::InternalError("a stored run went missing");
  return rows.Int(0, 0);
}

}  // namespace sql

using Tx = SqlStore::Tx;

SqlStore::SqlStore(const SqlDialect& dialect,
                   std::unique_ptr<ConnectionPool> writers,
                   std::unique_ptr<ConnectionPool> readers)
    : dialect_(dialect),
      writers_(std::move(writers)),
      readers_(std::move(readers)) {}

void SqlStore::SetReaders(std::unique_ptr<ConnectionPool> readers) {
  readers_ = std::move(readers);
}

absl::Status SqlStore::Run(ConnectionPool& pool, const char* begin,
                           const std::function<absl::Status(Tx&)>& body) {
  ASSIGN_OR_RETURN(ConnectionPool::Lease connection, pool.Acquire());
  for (int attempt = 0;; ++attempt) {
    if (connection->Lost()) RETURN_IF_ERROR(connection->Reconnect());
    connection->ResetAnswered();
    Tx tx(*connection, dialect_);
    absl::Status status = tx.Script("beginning a transaction", begin);
    if (status.ok()) status = body(tx);
    if (status.ok()) status = tx.Script("committing", "COMMIT");
    if (!status.ok() && !connection->Lost()) {
      (void)tx.Script("rolling back", "ROLLBACK");
    }
    // A connection found dead at the first statement ran nothing: safe to
    // reconnect and run the unit again, once.
    const bool dropped_before_start =
        !status.ok() && connection->Lost() && connection->answered() == 0;
    if (!dropped_before_start || attempt == 1) return status;
  }
}

absl::Status SqlStore::Write(const std::function<absl::Status(Tx&)>& body) {
  return Run(*writers_, dialect_.begin_write, body);
}

absl::Status SqlStore::Read(const std::function<absl::Status(Tx&)>& body) {
  return Run(readers_ ? *readers_ : *writers_, dialect_.begin_read, body);
}

}  // namespace headroom
