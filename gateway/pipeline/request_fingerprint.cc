#include "gateway/pipeline/request_fingerprint.h"

#include <string>

#include "absl/hash/hash.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace llmserve::gateway {

uint64_t RequestFingerprint(absl::string_view model, const worker::v1::GenerateRequest& request) {
  worker::v1::GenerateRequest same = request;
  same.clear_request_id();
  same.clear_cache_salt();
  same.clear_priority();
  same.mutable_sampling()->clear_seed();
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream output(&bytes);
    google::protobuf::io::CodedOutputStream coded(&output);
    coded.SetSerializationDeterministic(true);
    same.SerializeToCodedStream(&coded);
  }
  return absl::HashOf(model, bytes);
}

}  // namespace llmserve::gateway
