#include "gateway/request_log/postgres_sink.h"

#include <libpq-fe.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"

namespace llmserve::gateway {
namespace {

constexpr char kTable[] = "llmserve_request_log";
// Serializes schema changes between gateway replicas (the key is "llms" in ASCII).
constexpr char kMigrationLock[] = "SELECT pg_advisory_xact_lock(1819110771)";
constexpr int kColumns = 22;
// PostgreSQL takes at most 65535 parameters per statement.
constexpr size_t kMaxRowsPerInsert = 65535 / kColumns;

// Our defaults, for what the URL leaves unset: a dead or unreachable server must fail a Write in
// seconds (the records wait, they are not lost), not hang the writer.
const std::vector<std::pair<std::string, std::string>>& DefaultParameters() {
  static const auto* const defaults = new std::vector<std::pair<std::string, std::string>>{
      {"connect_timeout", "5"},
      {"keepalives", "1"},
      {"keepalives_idle", "10"},
      {"keepalives_interval", "5"},
      {"keepalives_count", "3"},
      {"tcp_user_timeout", "30000"},
      {"application_name", "llmserve-gateway"}};
  return *defaults;
}

std::string ParameterOr(const std::vector<std::pair<std::string, std::string>>& parameters,
                        absl::string_view keyword, absl::string_view fallback) {
  for (const auto& [key, value] : parameters) {
    if (key == keyword && !value.empty()) return value;
  }
  return std::string(fallback);
}

std::string ErrorText(const PGconn* connection) {
  return std::string(absl::StripAsciiWhitespace(PQerrorMessage(connection)));
}

// Runs `sql` (no parameters, no rows wanted): OK, or UNAVAILABLE with the server's message.
absl::Status Execute(PGconn* connection, const std::string& sql) {
  PGresult* result = PQexec(connection, sql.c_str());
  const ExecStatusType status = PQresultStatus(result);
  absl::Status outcome = absl::OkStatus();
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    outcome = absl::UnavailableError(
        absl::StrCat(ErrorText(connection), " (in: ", sql.substr(0, 80), ")"));
  }
  PQclear(result);
  return outcome;
}

}  // namespace

const std::vector<std::string>& PostgresSink::Migrations() {
  static const auto* const migrations = new std::vector<std::string>{
      absl::StrCat("CREATE TABLE ", kTable,
                   " (\n"
                   "  record_id text PRIMARY KEY,\n"
                   "  time timestamptz NOT NULL,\n"
                   "  request_id text NOT NULL,\n"
                   "  principal text NOT NULL,\n"
                   "  principal_kind text NOT NULL,\n"
                   "  model text NOT NULL,\n"
                   "  api text NOT NULL,\n"
                   "  endpoint text NOT NULL,\n"
                   "  status text NOT NULL,\n"
                   "  error text NOT NULL,\n"
                   "  finish_reasons text NOT NULL,\n"
                   "  choices integer NOT NULL,\n"
                   "  prompt_tokens bigint NOT NULL,\n"
                   "  cached_prompt_tokens bigint NOT NULL,\n"
                   "  completion_tokens bigint NOT NULL,\n"
                   "  reasoning_tokens bigint NOT NULL,\n"
                   "  time_to_first_token_s double precision,\n"
                   "  duration_s double precision NOT NULL,\n"
                   "  worker text NOT NULL,\n"
                   "  gateway text NOT NULL\n"
                   ")"),
      absl::StrCat("CREATE INDEX ", kTable, "_principal_time ON ", kTable, " (principal, time)"),
      absl::StrCat("CREATE INDEX ", kTable, "_time ON ", kTable, " (time)"),
      // --request_log_content: NULL when not recorded.
      absl::StrCat("ALTER TABLE ", kTable, " ADD COLUMN prompt text, ADD COLUMN output text"),
  };
  return *migrations;
}

absl::StatusOr<std::unique_ptr<PostgresSink>> PostgresSink::Create(const std::string& url) {
  if (!absl::StartsWith(url, "postgres://") && !absl::StartsWith(url, "postgresql://")) {
    return absl::InvalidArgumentError(
        "request log: a PostgreSQL URL starts with postgres:// or postgresql://");
  }
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.c_str(), &error);
  if (options == nullptr) {
    // libpq's reason names the part that is wrong; the URL itself may hold a password.
    std::string reason(error != nullptr ? absl::StripAsciiWhitespace(error) : "out of memory");
    if (error != nullptr) PQfreemem(error);
    return absl::InvalidArgumentError(
        absl::StrCat("request log: malformed PostgreSQL URL: ", reason));
  }
  std::vector<std::pair<std::string, std::string>> parameters;
  for (const PQconninfoOption* option = options; option->keyword != nullptr; ++option) {
    if (option->val != nullptr) parameters.emplace_back(option->keyword, option->val);
  }
  PQconninfoFree(options);
  for (const std::pair<std::string, std::string>& fallback : DefaultParameters()) {
    const bool set = std::any_of(parameters.begin(), parameters.end(), [&](const auto& parameter) {
      return parameter.first == fallback.first;
    });
    if (!set) parameters.push_back(fallback);
  }
  const std::string user = ParameterOr(parameters, "user", "");
  const std::string port = ParameterOr(parameters, "port", "");
  std::string description = absl::StrCat(
      "postgres://", user.empty() ? "" : absl::StrCat(user, "@"),
      ParameterOr(parameters, "host", ParameterOr(parameters, "hostaddr", "localhost")),
      port.empty() ? "" : absl::StrCat(":", port), "/", ParameterOr(parameters, "dbname", user));
  return std::unique_ptr<PostgresSink>(
      new PostgresSink(std::move(parameters), std::move(description)));
}

PostgresSink::~PostgresSink() { Disconnect(); }

void PostgresSink::Disconnect() {
  {
    absl::MutexLock lock(&cancel_mutex_);
    if (cancel_ != nullptr) PQfreeCancel(cancel_);
    cancel_ = nullptr;
  }
  if (connection_ != nullptr) PQfinish(connection_);
  connection_ = nullptr;
}

void PostgresSink::Interrupt() {
  absl::MutexLock lock(&cancel_mutex_);
  if (cancel_ == nullptr) return;
  char error[256];
  PQcancel(cancel_, error, sizeof(error));
}

absl::Status PostgresSink::Connect() {
  std::vector<const char*> keywords;
  std::vector<const char*> values;
  for (const auto& [keyword, value] : parameters_) {
    keywords.push_back(keyword.c_str());
    values.push_back(value.c_str());
  }
  keywords.push_back(nullptr);
  values.push_back(nullptr);
  connection_ = PQconnectdbParams(keywords.data(), values.data(), /*expand_dbname=*/0);
  if (connection_ == nullptr || PQstatus(connection_) != CONNECTION_OK) {
    absl::Status error = absl::UnavailableError(absl::StrCat(
        "cannot connect: ", connection_ == nullptr ? "out of memory" : ErrorText(connection_)));
    Disconnect();
    return error;
  }
  {
    absl::MutexLock lock(&cancel_mutex_);
    cancel_ = PQgetCancel(connection_);
  }
  absl::Status ready = absl::OkStatus();
  if (!absl::StrContains(ParameterOr(parameters_, "options", ""), "statement_timeout")) {
    ready = Execute(connection_, "SET statement_timeout = '10s'");
  }
  if (ready.ok()) ready = Migrate();
  if (!ready.ok()) Disconnect();
  return ready;
}

absl::Status PostgresSink::Migrate() {
  if (absl::Status begun = Execute(connection_, "BEGIN"); !begun.ok()) return begun;
  absl::Status status = Execute(connection_, kMigrationLock);
  if (status.ok()) {
    status = Execute(connection_,
                     "CREATE TABLE IF NOT EXISTS llmserve_schema_migrations (component text NOT "
                     "NULL, version integer NOT NULL, applied_at timestamptz NOT NULL DEFAULT "
                     "now(), PRIMARY KEY (component, version))");
  }
  int applied = 0;
  if (status.ok()) {
    PGresult* result = PQexec(connection_,
                              "SELECT coalesce(max(version), 0) FROM llmserve_schema_migrations "
                              "WHERE component = 'request_log'");
    if (PQresultStatus(result) == PGRES_TUPLES_OK && PQntuples(result) == 1) {
      applied = std::atoi(PQgetvalue(result, 0, 0));
    } else {
      status = absl::UnavailableError(ErrorText(connection_));
    }
    PQclear(result);
  }
  const std::vector<std::string>& migrations = Migrations();
  for (int version = applied + 1; status.ok() && version <= static_cast<int>(migrations.size());
       ++version) {
    status = Execute(connection_, migrations[version - 1]);
    if (status.ok()) {
      status = Execute(connection_,
                       absl::StrCat("INSERT INTO llmserve_schema_migrations (component, version) "
                                    "VALUES ('request_log', ",
                                    version, ")"));
    }
    if (status.ok()) {
      LLMSERVE_LOG(INFO) << "request log: applied schema migration " << version << " to "
                         << description_;
    }
  }
  if (!status.ok()) {
    Execute(connection_, "ROLLBACK").IgnoreError();
    return absl::UnavailableError(absl::StrCat("schema migration: ", status.message()));
  }
  return Execute(connection_, "COMMIT");
}

absl::Status PostgresSink::Write(absl::Span<const RequestRecord> records) {
  if (connection_ != nullptr && PQstatus(connection_) != CONNECTION_OK) Disconnect();
  if (connection_ == nullptr) {
    if (absl::Status connected = Connect(); !connected.ok()) return connected;
  }
  for (size_t begin = 0; begin < records.size(); begin += kMaxRowsPerInsert) {
    const size_t end = std::min(records.size(), begin + kMaxRowsPerInsert);
    std::string sql = absl::StrCat(
        "INSERT INTO ", kTable,
        " (record_id, time, request_id, principal, principal_kind, model, api, endpoint, status, "
        "error, finish_reasons, choices, prompt_tokens, cached_prompt_tokens, completion_tokens, "
        "reasoning_tokens, time_to_first_token_s, duration_s, worker, gateway, prompt, output) "
        "VALUES ");
    // Every value is a parameter: text from requests never becomes SQL.
    std::vector<std::string> storage;
    storage.reserve((end - begin) * kColumns);
    std::vector<const char*> values;
    values.reserve((end - begin) * kColumns);
    int parameter = 0;
    for (size_t row = begin; row < end; ++row) {
      const RequestRecord& record = records[row];
      absl::StrAppend(&sql, row == begin ? "" : ", ", "(");
      auto add = [&](std::string value) {
        storage.push_back(std::move(value));
        values.push_back(nullptr);  // pointed at once `storage` stops growing
        const bool first_in_row = parameter % kColumns == 0;
        ++parameter;
        absl::StrAppend(&sql, first_in_row ? "$" : ", $", parameter);
      };
      add(record.record_id);
      add(FormatRecordTime(record.time));
      add(record.request_id);
      add(record.principal);
      add(record.principal_kind);
      add(record.model);
      add(record.api);
      add(record.endpoint);
      add(record.status);
      add(record.error);
      add(record.finish_reasons);
      add(absl::StrCat(record.choices));
      add(absl::StrCat(record.prompt_tokens));
      add(absl::StrCat(record.cached_prompt_tokens));
      add(absl::StrCat(record.completion_tokens));
      add(absl::StrCat(record.reasoning_tokens));
      add(record.time_to_first_token_s.has_value()
              ? absl::StrFormat("%.6f", *record.time_to_first_token_s)
              : std::string());
      add(absl::StrFormat("%.6f", record.duration_s));
      add(record.worker);
      add(record.gateway);
      add(record.prompt.value_or(""));
      add(record.output.value_or(""));
      absl::StrAppend(&sql, ")");
    }
    for (size_t i = 0; i < storage.size(); ++i) values[i] = storage[i].c_str();
    // The time to first token is NULL when no token came; the content when it is not recorded.
    for (size_t row = 0; row < end - begin; ++row) {
      const RequestRecord& record = records[begin + row];
      if (!record.time_to_first_token_s.has_value()) values[row * kColumns + 16] = nullptr;
      if (!record.prompt.has_value()) values[row * kColumns + 20] = nullptr;
      if (!record.output.has_value()) values[row * kColumns + 21] = nullptr;
    }
    absl::StrAppend(&sql, " ON CONFLICT (record_id) DO NOTHING");
    PGresult* result = PQexecParams(connection_, sql.c_str(), parameter, /*paramTypes=*/nullptr,
                                    values.data(), /*paramLengths=*/nullptr,
                                    /*paramFormats=*/nullptr, /*resultFormat=*/0);
    const bool ok = PQresultStatus(result) == PGRES_COMMAND_OK;
    const char* sqlstate = PQresultErrorField(result, PG_DIAG_SQLSTATE);
    const std::string state = sqlstate != nullptr ? sqlstate : "";
    PQclear(result);
    if (ok) continue;
    const std::string message = ErrorText(connection_);
    // Data exceptions (class 22) and constraint violations (23) are about these rows: sending
    // them again cannot help. Anything else (a lost connection, a cancelled or timed-out
    // statement, a missing table) may pass later, on a fresh connection.
    if (absl::StartsWith(state, "22") || absl::StartsWith(state, "23")) {
      return absl::InvalidArgumentError(absl::StrCat(message, " (SQLSTATE ", state, ")"));
    }
    Disconnect();
    return absl::UnavailableError(
        absl::StrCat(message, state.empty() ? "" : absl::StrCat(" (SQLSTATE ", state, ")")));
  }
  return absl::OkStatus();
}

}  // namespace llmserve::gateway
