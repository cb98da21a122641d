// The request log's record as JSON, the JSON-lines file sink, and which sink a --request_log value
// names.

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gateway/request_log/json_lines_sink.h"
#include "gateway/request_log/open_sink.h"
#include "gateway/request_log/postgres_sink.h"
#include "gateway/request_log/request_record.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace llmserve::gateway {
namespace {

RequestRecord FullRecord() {
  RequestRecord record;
  record.record_id = "abc-1";
  record.time = absl::FromUnixMicros(1795000000123456);
  record.request_id = "chatcmpl-7";
  record.principal = "alice";
  record.principal_kind = "api_key";
  record.model = "tiny\"'); DROP TABLE x;--\n";
  record.api = "http";
  record.endpoint = "/v1/chat/completions";
  record.status = "OK";
  record.finish_reasons = "stop,length";
  record.choices = 2;
  record.prompt_tokens = 11;
  record.cached_prompt_tokens = 8;
  record.completion_tokens = 9;
  record.reasoning_tokens = 3;
  record.time_to_first_token_s = 0.25;
  record.duration_s = 1.5;
  record.worker = "10.0.0.1:50051";
  record.gateway = "gw-0";
  return record;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name, "-", getpid());
}

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::vector<std::string> lines = absl::StrSplit(text.str(), '\n', absl::SkipEmpty());
  return lines;
}

TEST(RequestRecordTest, JsonHasEveryFieldWithItsValueAndEscapesText) {
  const nlohmann::json json = nlohmann::json::parse(RequestRecordJson(FullRecord()));
  EXPECT_EQ(json["time"], "2026-11-18T11:06:40.123456Z");
  EXPECT_EQ(json["record_id"], "abc-1");
  EXPECT_EQ(json["request_id"], "chatcmpl-7");
  EXPECT_EQ(json["principal"], "alice");
  EXPECT_EQ(json["principal_kind"], "api_key");
  EXPECT_EQ(json["model"], "tiny\"'); DROP TABLE x;--\n");
  EXPECT_EQ(json["api"], "http");
  EXPECT_EQ(json["endpoint"], "/v1/chat/completions");
  EXPECT_EQ(json["status"], "OK");
  EXPECT_EQ(json["error"], "");
  EXPECT_EQ(json["finish_reasons"], "stop,length");
  EXPECT_EQ(json["choices"], 2);
  EXPECT_EQ(json["prompt_tokens"], 11);
  EXPECT_EQ(json["cached_prompt_tokens"], 8);
  EXPECT_EQ(json["completion_tokens"], 9);
  EXPECT_EQ(json["reasoning_tokens"], 3);
  EXPECT_DOUBLE_EQ(json["time_to_first_token_s"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(json["duration_s"].get<double>(), 1.5);
  EXPECT_EQ(json["worker"], "10.0.0.1:50051");
  EXPECT_EQ(json["gateway"], "gw-0");
  EXPECT_EQ(json.size(), 20u);
  // One line, whatever the text holds.
  EXPECT_FALSE(absl::StrContains(RequestRecordJson(FullRecord()), "\n"));

  RequestRecord no_token = FullRecord();
  no_token.time_to_first_token_s.reset();
  EXPECT_TRUE(
      nlohmann::json::parse(RequestRecordJson(no_token))["time_to_first_token_s"].is_null());
}

TEST(RequestRecordTest, SanitizingReplacesInvalidUtf8AndNulAndCutsLongErrorsOnACharacter) {
  RequestRecord record;
  record.principal = std::string("a\0b", 3);
  record.model = "\xc3";  // a lone lead byte
  // 1023 ASCII bytes then a 2-byte character: the cut at 1024 would split it.
  record.error = std::string(1023, 'e') + "\xc3\xa9" + "tail";
  SanitizeRecordText(record);
  EXPECT_EQ(record.principal,
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(record.model, "\xEF\xBF\xBD");
  EXPECT_EQ(record.error, std::string(1023, 'e'));
}

TEST(JsonLinesSinkTest, AppendsOneJsonLinePerRecordAndReopensAFileMovedAway) {
  const std::string path = TempPath("request-log.jsonl");
  std::remove(path.c_str());
  std::unique_ptr<JsonLinesSink> sink = *JsonLinesSink::Open(path);
  std::vector<RequestRecord> batch = {FullRecord(), FullRecord()};
  batch[1].record_id = "abc-2";
  ASSERT_TRUE(sink->Write(batch).ok());
  std::vector<std::string> lines = Lines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(lines[1])["record_id"], "abc-2");

  // Log rotation: the file is renamed; the next batch starts a new file at the path.
  const std::string rotated = path + ".1";
  ASSERT_EQ(std::rename(path.c_str(), rotated.c_str()), 0);
  ASSERT_TRUE(sink->Write({FullRecord()}).ok());
  EXPECT_EQ(Lines(path).size(), 1u);
  EXPECT_EQ(Lines(rotated).size(), 2u);
  std::remove(path.c_str());
  std::remove(rotated.c_str());
}

TEST(JsonLinesSinkTest, AFileThatCannotBeOpenedIsNamedInTheError) {
  absl::StatusOr<std::unique_ptr<JsonLinesSink>> sink =
      JsonLinesSink::Open("/nonexistent-dir/requests.jsonl");
  ASSERT_FALSE(sink.ok());
  EXPECT_TRUE(absl::StrContains(sink.status().message(), "/nonexistent-dir/requests.jsonl"))
      << sink.status();
  absl::StatusOr<std::unique_ptr<JsonLinesSink>> directory = JsonLinesSink::Open("/tmp");
  EXPECT_FALSE(directory.ok());
}

TEST(OpenRequestLogSinkTest, PicksTheSinkByTheValueAndRefusesWhatItCannotUse) {
  absl::StatusOr<std::unique_ptr<RequestLogSink>> postgres =
      OpenRequestLogSink("postgresql://llm:secret@db.example:5433/usage?sslmode=disable");
  ASSERT_TRUE(postgres.ok()) << postgres.status();
  // Described without the password.
  EXPECT_EQ((*postgres)->Describe(), "postgres://llm@db.example:5433/usage");

  const std::string path = TempPath("open-sink.jsonl");
  absl::StatusOr<std::unique_ptr<RequestLogSink>> file = OpenRequestLogSink(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->Describe(), path);
  std::remove(path.c_str());

  absl::Status scheme = OpenRequestLogSink("mysql://db/usage").status();
  EXPECT_TRUE(absl::IsInvalidArgument(scheme));
  EXPECT_TRUE(absl::StrContains(scheme.message(), "'mysql'")) << scheme;

  absl::Status query = OpenRequestLogSink("postgres://db/usage?no_such_option=1").status();
  EXPECT_TRUE(absl::IsInvalidArgument(query));
  EXPECT_TRUE(absl::StrContains(query.message(), "no_such_option")) << query;
  EXPECT_TRUE(absl::IsInvalidArgument(OpenRequestLogSink("").status()));
}

TEST(PostgresSinkTest, AnUnreachableServerFailsAWriteAsUnavailableWithinTheConnectTimeout) {
  // Port 1 on loopback refuses at once: the records would wait for a retry, not be dropped.
  std::unique_ptr<PostgresSink> sink =
      *PostgresSink::Create("postgres://nobody@127.0.0.1:1/none?connect_timeout=2");
  const absl::Status status = sink->Write({FullRecord()});
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
}

}  // namespace
}  // namespace llmserve::gateway
