// Checks the contracts in proto/: every service, method, message, field, enum and enum value has
// a comment (its meaning, unit, default and limit belong there), and the generated code agrees
// with what the contracts of docs/api.md promise.

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "llmserve/v1/inference.pb.h"
#include "llmserve/worker/v1/worker.pb.h"
#include "tests/testing/build_paths.h"

namespace {

using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::EnumDescriptor;
using google::protobuf::FileDescriptor;
using google::protobuf::FileDescriptorSet;
using google::protobuf::SourceLocation;

bool HasComment(const SourceLocation& location) {
  return !location.leading_comments.empty() || !location.trailing_comments.empty();
}

template <typename T>
void ExpectDocumented(const T* descriptor, std::vector<std::string>* undocumented) {
  SourceLocation location;
  if (!descriptor->GetSourceLocation(&location) || !HasComment(location)) {
    undocumented->push_back(descriptor->full_name());
  }
}

void CheckEnum(const EnumDescriptor* enum_type, std::vector<std::string>* undocumented) {
  for (int v = 0; v < enum_type->value_count(); ++v) {
    ExpectDocumented(enum_type->value(v), undocumented);
  }
}

void CheckMessage(const Descriptor* message, std::vector<std::string>* undocumented) {
  ExpectDocumented(message, undocumented);
  for (int f = 0; f < message->field_count(); ++f)
    ExpectDocumented(message->field(f), undocumented);
  for (int n = 0; n < message->nested_type_count(); ++n) {
    CheckMessage(message->nested_type(n), undocumented);
  }
  for (int e = 0; e < message->enum_type_count(); ++e)
    CheckEnum(message->enum_type(e), undocumented);
}

class ProtoContractTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ifstream in(::llmserve::testing::ProtoDescriptorSet(), std::ios::binary);
    ASSERT_TRUE(in) << "cannot open " << ::llmserve::testing::ProtoDescriptorSet();
    ASSERT_TRUE(set_.ParseFromIstream(&in));
    for (const auto& file : set_.file()) ASSERT_NE(pool_.BuildFile(file), nullptr) << file.name();
  }

  FileDescriptorSet set_;
  DescriptorPool pool_;
};

TEST_F(ProtoContractTest, EverythingIsDocumented) {
  std::vector<std::string> undocumented;
  for (const char* name : {"llmserve/v1/inference.proto", "llmserve/worker/v1/worker.proto"}) {
    const FileDescriptor* file = pool_.FindFileByName(name);
    ASSERT_NE(file, nullptr) << name;
    for (int s = 0; s < file->service_count(); ++s) {
      ExpectDocumented(file->service(s), &undocumented);
      for (int m = 0; m < file->service(s)->method_count(); ++m) {
        ExpectDocumented(file->service(s)->method(m), &undocumented);
      }
    }
    for (int m = 0; m < file->message_type_count(); ++m) {
      CheckMessage(file->message_type(m), &undocumented);
    }
    for (int e = 0; e < file->enum_type_count(); ++e) {
      ExpectDocumented(file->enum_type(e), &undocumented);
      CheckEnum(file->enum_type(e), &undocumented);
    }
  }
  std::string list;
  for (const auto& name : undocumented) absl::StrAppend(&list, "\n  ", name);
  EXPECT_TRUE(undocumented.empty()) << "undocumented:" << list;
}

TEST_F(ProtoContractTest, ServicesHaveTheMethodsTheDesignNames) {
  const auto* inference = pool_.FindServiceByName("llmserve.v1.Inference");
  ASSERT_NE(inference, nullptr);
  for (const char* method : {"Generate", "GenerateStream", "Tokenize", "ListModels"}) {
    EXPECT_NE(inference->FindMethodByName(method), nullptr) << method;
  }
  EXPECT_TRUE(inference->FindMethodByName("GenerateStream")->server_streaming());

  const auto* worker = pool_.FindServiceByName("llmserve.worker.v1.Worker");
  ASSERT_NE(worker, nullptr);
  for (const char* method : {"Generate", "GetModelInfo", "WatchLoad"}) {
    EXPECT_NE(worker->FindMethodByName(method), nullptr) << method;
  }
  EXPECT_TRUE(worker->FindMethodByName("Generate")->server_streaming());
  EXPECT_TRUE(worker->FindMethodByName("WatchLoad")->server_streaming());
}

TEST(ProtoGeneratedCodeTest, PromptIsAOneofAndOptionalsTrackPresence) {
  llmserve::v1::GenerateRequest request;
  EXPECT_EQ(request.prompt_case(), llmserve::v1::GenerateRequest::PROMPT_NOT_SET);
  request.set_text("hello");
  request.mutable_token_ids()->add_ids(7);
  EXPECT_EQ(request.prompt_case(), llmserve::v1::GenerateRequest::kTokenIds);
  EXPECT_FALSE(request.sampling().has_temperature());
  request.mutable_sampling()->set_temperature(0.0f);
  EXPECT_TRUE(request.sampling().has_temperature());  // 0 (greedy) is told apart from unset

  llmserve::worker::v1::LoadReport report;
  auto* event = report.add_events();
  event->set_kind(llmserve::worker::v1::PrefixCacheEvent::KIND_STORED);
  event->add_block_hashes(0xfedcba9876543210ull);
  llmserve::worker::v1::LoadReport parsed;
  ASSERT_TRUE(parsed.ParseFromString(report.SerializeAsString()));
  EXPECT_EQ(parsed.events(0).block_hashes(0), 0xfedcba9876543210ull);
}

}  // namespace
