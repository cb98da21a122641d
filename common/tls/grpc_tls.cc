#include "common/tls/grpc_tls.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/read_file.h"

namespace llmserve::common {
namespace {

constexpr size_t kMaxPemBytes = 1 << 20;

}  // namespace

absl::StatusOr<std::string> ReadPemFile(const std::string& path) {
  // Bounded: a wrong path such as /dev/zero ends in an error, not in reading forever.
  absl::StatusOr<std::string> read = ReadFileUpTo(path, kMaxPemBytes, "PEM file");
  if (!read.ok()) return read.status();
  std::string pem = *std::move(read);
  if (!absl::StrContains(pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a PEM file (no -----BEGIN line)"));
  }
  return pem;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsFiles& files, const std::string& flag_prefix) {
  if (files.cert_file.empty() != files.key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag_prefix, "tls_cert and --", flag_prefix, "tls_key go together"));
  }
  if (files.cert_file.empty()) {
    if (!files.client_ca_file.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag_prefix, "tls_client_ca needs --",
                                                     flag_prefix, "tls_cert and --", flag_prefix,
                                                     "tls_key"));
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions options(
      files.client_ca_file.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                   : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  absl::StatusOr<std::string> cert = ReadPemFile(files.cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPemFile(files.key_file);
  if (!key.ok()) return key.status();
  pair.cert_chain = *std::move(cert);
  pair.private_key = *std::move(key);
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!files.client_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPemFile(files.client_ca_file);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsFiles& files, const std::string& flag_prefix) {
  if (files.cert_file.empty() != files.key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag_prefix, "tls_cert and --", flag_prefix, "tls_key go together"));
  }
  if (files.ca_file.empty()) {
    if (!files.cert_file.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag_prefix, "tls_cert needs --", flag_prefix, "tls_ca"));
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions options;
  absl::StatusOr<std::string> ca = ReadPemFile(files.ca_file);
  if (!ca.ok()) return ca.status();
  options.pem_root_certs = *std::move(ca);
  if (!files.cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadPemFile(files.cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPemFile(files.key_file);
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *std::move(cert);
    options.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(options);
}

}  // namespace llmserve::common
