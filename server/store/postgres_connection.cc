// PostgreSQL's side of the SQL seam: statements on one libpq connection
// (binary results, `?` placeholders numbered), the error each failure
// stands for, reconnecting, and opening the store. No SQL of the store's
// tables lives here.

#include <libpq-fe.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "server/store/postgres_store.h"
#include "server/store/sql_connection.h"

namespace headroom {
namespace {

// Type OIDs of the integer columns (pg_type.dat).
constexpr Oid kInt8Oid = 20, kInt2Oid = 21, kInt4Oid = 23;

std::string TrimmedMessage(const char* message) {
  return std::string(absl::StripAsciiWhitespace(message ? message : ""));
}

// "host=.. port=.. dbname=.. user=.." from a URL or key=value string,
// never the password; "" when `url` does not parse.
std::string DescribeConnection(const std::string& url) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.c_str(), &error);
  PQfreemem(error);
  if (options == nullptr) return "";
  std::string host = "localhost", port = "5432", dbname, user;
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val == nullptr || o->val[0] == '\0') continue;
    const std::string keyword = o->keyword;
    if (keyword == "host") host = o->val;
    if (keyword == "hostaddr" && host == "localhost") host = o->val;
    if (keyword == "port") port = o->val;
    if (keyword == "dbname") dbname = o->val;
    if (keyword == "user") user = o->val;
  }
  PQconninfoFree(options);
  std::string where = absl::StrCat("host=", host, " port=", port);
  if (!dbname.empty()) absl::StrAppend(&where, " dbname=", dbname);
  if (!user.empty()) absl::StrAppend(&where, " user=", user);
  return where;
}

// `sql` with each `?` outside quotes as $1, $2, ...
std::string NumberPlaceholders(const std::string& sql) {
  std::string out;
  int next = 1;
  char quote = 0;
  for (const char c : sql) {
    if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '?') {
      absl::StrAppend(&out, "$", next++);
      continue;
    }
    out += c;
  }
  return out;
}

class PostgresConnection : public SqlConnection {
 public:
  static absl::StatusOr<std::unique_ptr<PostgresConnection>> Open(
      const std::string& url, const std::string& where) {
    // Defaults first: the URL's own settings, expanded at "dbname", win.
    const char* const keywords[] = {"connect_timeout", "application_name",
                                    "dbname", nullptr};
    const char* const values[] = {"10", "headroom-planner", url.c_str(),
                                  nullptr};
    PGconn* conn = PQconnectdbParams(keywords, values, /*expand_dbname=*/1);
    if (conn == nullptr) {
      return absl::ResourceExhaustedError("postgres: out of memory connecting");
    }
    if (PQstatus(conn) != CONNECTION_OK) {
      const std::string message = TrimmedMessage(PQerrorMessage(conn));
      PQfinish(conn);
      return absl::UnavailableError(
          absl::StrCat("cannot reach PostgreSQL at ", where, ": ", message));
    }
    // CREATE TABLE IF NOT EXISTS and friends would print notices to stderr.
    PQsetNoticeProcessor(
        conn, [](void*, const char*) {}, nullptr);
    return std::unique_ptr<PostgresConnection>(
        new PostgresConnection(conn, where));
  }

  ~PostgresConnection() override { PQfinish(conn_); }

  absl::StatusOr<SqlRows> Query(const char* what, const std::string& sql,
                                const SqlParams& params) override {
    std::vector<const char*> values;
    std::vector<int> lengths, formats;
    std::vector<std::string> integers;
    integers.reserve(params.values().size());
    for (const SqlValue& value : params.values()) {
      switch (value.kind) {
        case SqlValue::Kind::kNull:
          values.push_back(nullptr);
          lengths.push_back(0);
          formats.push_back(0);
          break;
        case SqlValue::Kind::kInt:
          integers.push_back(std::to_string(value.integer));
          values.push_back(integers.back().c_str());
          lengths.push_back(static_cast<int>(integers.back().size()));
          formats.push_back(0);
          break;
        case SqlValue::Kind::kText:
        case SqlValue::Kind::kBytes:
          values.push_back(value.bytes.data());
          lengths.push_back(static_cast<int>(value.bytes.size()));
          formats.push_back(value.kind == SqlValue::Kind::kBytes ? 1 : 0);
          break;
      }
    }
    // std::string data() ends in NUL, as text parameters must.
    PGresult* result = PQexecParams(
        conn_, NumberPlaceholders(sql).c_str(), static_cast<int>(values.size()),
        /*paramTypes=*/nullptr, values.data(), lengths.data(), formats.data(),
        /*resultFormat=*/1);
    std::unique_ptr<PGresult, void (*)(PGresult*)> owned(result, &PQclear);
    RETURN_IF_ERROR(Answered(what, result));
    SqlRows rows;
    const int columns = PQnfields(result);
    for (int r = 0; r < PQntuples(result); ++r) {
      std::vector<SqlValue>& row = rows.AddRow();
      for (int c = 0; c < columns; ++c) {
        SqlValue& value = row.emplace_back();
        if (PQgetisnull(result, r, c)) continue;
        const char* bytes = PQgetvalue(result, r, c);
        const int length = PQgetlength(result, r, c);
        const Oid type = PQftype(result, c);
        if (type == kInt8Oid || type == kInt4Oid || type == kInt2Oid) {
          // Big-endian, sign-extended from its width.
          uint64_t integer = 0;
          for (int i = 0; i < length; ++i) {
            integer = (integer << 8) | static_cast<unsigned char>(bytes[i]);
          }
          if (length > 0 && length < 8 && (bytes[0] & 0x80)) {
            integer |= ~uint64_t{0} << (8 * length);
          }
          value.kind = SqlValue::Kind::kInt;
          value.integer = static_cast<int64_t>(integer);
        } else {
          value.kind = SqlValue::Kind::kBytes;
          value.bytes.assign(bytes, length);
        }
      }
    }
    const char* tuples = PQcmdTuples(result);
    rows.set_changed(tuples[0] == '\0' ? 0 : std::strtoll(tuples, nullptr, 10));
    return rows;
  }

  absl::Status Script(const char* what, const std::string& sql) override {
    std::unique_ptr<PGresult, void (*)(PGresult*)> owned(
        PQexec(conn_, sql.c_str()), &PQclear);
    return Answered(what, owned.get());
  }

  bool Lost() override { return PQstatus(conn_) != CONNECTION_OK; }

  absl::Status Reconnect() override {
    PQreset(conn_);
    if (PQstatus(conn_) != CONNECTION_OK) {
      return absl::UnavailableError(absl::StrCat(
          "lost PostgreSQL at ", where_,
          " and cannot reconnect: ", TrimmedMessage(PQerrorMessage(conn_))));
    }
    return absl::OkStatus();
  }

 private:
  PostgresConnection(PGconn* conn, std::string where)
      : conn_(conn), where_(std::move(where)) {}

  // OK, counted, when `result` is a statement's success; otherwise the
  // error it stands for.
  absl::Status Answered(const char* what, const PGresult* result) {
    const ExecStatusType status =
        result ? PQresultStatus(result) : PGRES_FATAL_ERROR;
    if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
      return Error(what, result);
    }
    CountAnswered();
    return absl::OkStatus();
  }

  // The error a failed statement stands for (`result` null: no reply at
  // all).
  absl::Status Error(const char* what, const PGresult* result) {
    std::string message = result ? TrimmedMessage(PQresultErrorField(
                                       result, PG_DIAG_MESSAGE_PRIMARY))
                                 : "";
    if (message.empty()) message = TrimmedMessage(PQerrorMessage(conn_));
    const char* field =
        result ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
    const std::string sqlstate = field ? field : "";
    const std::string text =
        absl::StrCat("postgres (", where_, "): ", what, ": ", message);
    if (PQstatus(conn_) != CONNECTION_OK || sqlstate.rfind("08", 0) == 0 ||
        sqlstate.rfind("57P", 0) == 0) {
      return absl::UnavailableError(text);
    }
    if (sqlstate == "40001" || sqlstate == "40P01") {
      return absl::AbortedError(text);
    }
    if (sqlstate == "23505") return absl::AlreadyExistsError(text);
    return absl::InternalError(text);
  }

  PGconn* const conn_;
  const std::string where_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PostgresStore>> PostgresStore::Open(
    const std::string& url, int pool) {
  const std::string where = DescribeConnection(url);
  if (where.empty()) {
    // The parse error may quote the URL, password included: not repeated.
    return absl::InvalidArgumentError(
        "PostgreSQL connection string does not parse; expected "
        "postgresql://user@host:port/dbname or host=.. dbname=..");
  }
  std::vector<std::unique_ptr<SqlConnection>> connections;
  for (int i = 0; i < std::max(pool, 1); ++i) {
    ASSIGN_OR_RETURN(connections.emplace_back(),
                     PostgresConnection::Open(url, where));
  }
  auto store = std::make_unique<PostgresStore>(
      PostgresDialect(),
      std::make_unique<ConnectionPool>(std::move(connections),
                                       absl::Seconds(30)),
      nullptr);
  RETURN_IF_ERROR(store->Migrate(where));
  return store;
}

}  // namespace headroom
