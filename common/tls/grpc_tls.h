// gRPC credentials from PEM files, shared by the gateway (TLS on its public port, mTLS client
// towards workers) and the worker (TLS, optionally requiring client certificates).
//
// Thread-safe: pure functions (they read files).

#ifndef LLMSERVE_COMMON_TLS_GRPC_TLS_H_
#define LLMSERVE_COMMON_TLS_GRPC_TLS_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace llmserve::common {

struct ServerTlsFiles {
  // The server's certificate chain and private key (PEM). Both empty: no TLS.
  std::string cert_file;
  std::string key_file;
  // When set, clients must present a certificate signed by this CA (mutual TLS).
  std::string client_ca_file;
};

// Insecure credentials when no files are given; INVALID_ARGUMENT naming the flag for a cert
// without a key (or the reverse) or a client CA without a server certificate; NOT_FOUND /
// INVALID_ARGUMENT naming the file when one cannot be read or is not PEM.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsFiles& files, const std::string& flag_prefix);

struct ClientTlsFiles {
  // The CA that signed the servers' certificates. Empty: no TLS (plaintext).
  std::string ca_file;
  // A client certificate and key for mutual TLS (both or neither).
  std::string cert_file;
  std::string key_file;
};

// Insecure credentials when no CA is given; errors as MakeServerCredentials.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsFiles& files, const std::string& flag_prefix);

// A whole PEM file, checked to look like PEM. NOT_FOUND / INVALID_ARGUMENT naming `path`.
absl::StatusOr<std::string> ReadPemFile(const std::string& path);

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_TLS_GRPC_TLS_H_
