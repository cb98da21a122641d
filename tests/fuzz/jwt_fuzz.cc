// Fuzz target: JWT verification (the bearer token of every HTTP and gRPC request when JWT auth is
// on) and JWKS parsing (the key set an operator points the gateway at). The first byte picks:
//   '0' (and any byte = 0 mod 3): the rest is a token, verified by an HS256 verifier, an RS256 one
//       with a PEM key and an RS256 one with a JWKS file;
//   '1' (= 1 mod 3): HEADER '\0' PAYLOAD, two JSON texts that this target base64url-encodes and
//       signs with the HS256 verifier's secret, so that the fuzzer reaches the header and claim
//       checks that come after the signature check (iss, aud, exp, nbf, sub);
//   '2' (= 2 mod 3): the rest is a JWKS file; a verifier made from it verifies two RS256 tokens
//       signed by the key of the seeds' JWKS (one naming kid "k1", one without kid).
// Verify must give a subject (1-256 printable characters) or UNAUTHENTICATED whose message does
// not quote a signed token's signature; Create from a JWKS a verifier or INVALID_ARGUMENT.
//
// Key files are anonymous memory files (memfd) opened by their /proc/self/fd path, because
// JwtVerifier only reads keys from paths: nothing is written to disk.

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gateway/admission/jwt_verifier.h"

namespace {

using llmserve::gateway::JwtAlgorithm;
using llmserve::gateway::JwtVerifier;
using llmserve::gateway::JwtVerifierOptions;

// Time is fixed so that a run is reproducible: 2023-11-14T22:13:20Z.
constexpr int64_t kNowUnixSeconds = 1700000000;
constexpr char kHs256Secret[] = "fuzz-secret-0123456789abcdefghijklmnopqrstuvwxyz";
constexpr char kIssuer[] = "https://issuer.example";
constexpr char kAudience[] = "llmserve";

// The public half of a 2048-bit RSA key made for this target (the private half was thrown away
// after signing the RS256 tokens below and in seeds/jwt).
constexpr char kRsaPublicKeyPem[] = R"pem(-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAq+etzV2cPqS5NleJtXHF
3w3V5mq/mC8rh1NPRYkxe+PhWj73arC6trXpn6vuRqO//44a6vd2dOxwhkwv/GdP
7UExGrWCJw7dHbuvPiyD7gPTrWi9IB2ZMznu83fqq1hIsnqxXhBBXG1oF6fpSJVD
S7Mu+A+394thSWJ044VOLD8xdEgrutyHWOcdt98Sz6DR+eIupKB6VnEEjEskmxpv
vIKhrSTJXP+leehMs9c502H/p59C/KKd/Xfj9MUoiLLEg8ChnCYS8K5FU4r/nj+L
JosNf7+xnpIdOIC2SY5dmP1fCvPYCCryZkMd/4m/kBNlSQmZObQCC5KLVcNXWm9d
rQIDAQAB
-----END PUBLIC KEY-----
)pem";
// The same key as JWKS members (base64url, RFC 7518 section 6.3.1).
constexpr char kRsaModulus[] =
    "q-etzV2cPqS5NleJtXHF3w3V5mq_mC8rh1NPRYkxe-PhWj73arC6trXpn6vuRqO__44a6vd2dOxwhkwv_GdP7UEx"
    "GrWCJw7dHbuvPiyD7gPTrWi9IB2ZMznu83fqq1hIsnqxXhBBXG1oF6fpSJVDS7Mu-A-394thSWJ044VOLD8xdEgr"
    "utyHWOcdt98Sz6DR-eIupKB6VnEEjEskmxpvvIKhrSTJXP-leehMs9c502H_p59C_KKd_Xfj9MUoiLLEg8ChnCYS"
    "8K5FU4r_nj-LJosNf7-xnpIdOIC2SY5dmP1fCvPYCCryZkMd_4m_kBNlSQmZObQCC5KLVcNXWm9drQ";
// A key set with that key (kid "k1") between an EC key and an encryption key, both skipped.
std::string Jwks() {
  return absl::StrCat(
      R"({"keys": [{"kty": "EC", "crv": "P-256", "kid": "ec1", "use": "sig",)"
      R"( "x": "5COYF8BDdyChN8G7VuUpAumonZytS-Vw7j5JHShKQPU",)"
      R"( "y": "N7IBhMvkwCIlhdlVWhOgseN0THJli3vuyvM2byMelJk"},)"
      R"( {"kty": "RSA", "kid": "k1", "alg": "RS256", "use": "sig", "e": "AQAB", "n": ")",
      kRsaModulus, R"("}, {"kty": "RSA", "kid": "enc", "use": "enc", "e": "AQAB", "n": ")",
      kRsaModulus, R"("}]})");
}
// Signed by that key; sub "alice", exp an hour after the fixed "now" (kNowUnixSeconds).
constexpr char kRs256TokenWithKid[] =
    "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6ImsxIn0.eyJzdWIiOiJhbGljZSIsImlzcyI6Imh0dHBz"
    "Oi8vaXNzdWVyLmV4YW1wbGUiLCJhdWQiOlsib3RoZXIiLCJsbG1zZXJ2ZSJdLCJleHAiOjE3MDAwMDM2MDAsIm5i"
    "ZiI6MTY5OTk5OTk0MCwiaWF0IjoxNjk5OTk5OTQwfQ.IA5FeRPI3sIOhxZjWd7v7HprT94BI5on_o09_fAoe6Hml"
    "1rWI7kpuDCsTdy5TfZQpODKEWm80by7WbjcYhtby6W0dBcd8StF7-LRTYTvlbfICRoIdAkYYnJ2LYzYswcH8VjvH"
    "hbtY7uvCblpWn54qgblnSJO6ZLUbxjT1CDlHb0O52VmOl5IgAN6_5-rbix5Oa92PYcalRpUJZnxtgk3DkxjaJTE8"
    "K8C-8U3wHr14dVcKkBkT6NoTzQby234jV76qjO_Q7y9YRZ_CEXmxP9_pYdiQ77g-jOyXg4kUdaf2zvSVVnHKHb-z"
    "jCHJom-a35UIDQVk57fBOf5lGxDdxpQxw";
constexpr char kRs256TokenWithoutKid[] =
    "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsImlzcyI6Imh0dHBzOi8vaXNzdWVyLmV"
    "4YW1wbGUiLCJhdWQiOlsib3RoZXIiLCJsbG1zZXJ2ZSJdLCJleHAiOjE3MDAwMDM2MDAsIm5iZiI6MTY5OTk5OTk"
    "0MCwiaWF0IjoxNjk5OTk5OTQwfQ.hs_mHE6MQ6SYBRltQsAaXYrkNwjEAPLaEzuZuftyjpBFu6jaHjMK2MD-fJ2_"
    "4DZY1b3fkeW6EpsVn2jJHtI8v80WN6MDeUx0QvUjigMAhG6eszyec6s8Rxnyv3YYUR9aL3nz3JKKvKrGVGjNePwD"
    "NS58AFHlwh82Wu46ecmfSDELBhqx_D4eoibWETYdtnMYNirDX944ymjygIDjnQJf2ifBB4r2WD6PF7gyRY3T_gIy"
    "SygZKQiSew2oKDBBh69zLtELQmo3SvfqmR--F-52g-fSGYYbYi9_aG0tWcoRqzdwvvHnNXggB_P68M6wURuP5SW5"
    "k1tiGiuB1uukrxeozA";

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "jwt_fuzz: %s\n", what);
  std::abort();
}

// An anonymous in-memory file, named by a path that JwtVerifier can open.
class MemoryFile {
 public:
  MemoryFile() : fd_(memfd_create("jwt_fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) Fail("memfd_create failed");
  }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  ~MemoryFile() { close(fd_); }

  void Set(absl::string_view contents) {
    if (ftruncate(fd_, 0) != 0) Fail("ftruncate failed");
    size_t written = 0;
    while (written < contents.size()) {
      const ssize_t n = pwrite(fd_, contents.data() + written, contents.size() - written,
                               static_cast<off_t>(written));
      if (n <= 0) Fail("pwrite failed");
      written += static_cast<size_t>(n);
    }
  }
  std::string path() const { return absl::StrCat("/proc/self/fd/", fd_); }

 private:
  const int fd_;
};

std::unique_ptr<JwtVerifier> MakeVerifier(JwtVerifierOptions options, absl::string_view key,
                                          bool jwks) {
  static MemoryFile* const key_file = new MemoryFile();  // the verifier keeps the key, not the file
  key_file->Set(key);
  (jwks ? options.jwks_file : options.key_file) = key_file->path();
  absl::StatusOr<std::unique_ptr<JwtVerifier>> verifier = JwtVerifier::Create(options);
  if (!verifier.ok()) {
    std::fprintf(stderr, "%s\n", verifier.status().ToString().c_str());
    Fail("a fixed verifier could not be created");
  }
  return *std::move(verifier);
}

JwtVerifierOptions Hs256Options() {
  return {.algorithm = JwtAlgorithm::kHs256, .issuer = kIssuer, .audience = kAudience};
}

JwtVerifierOptions Rs256Options() {
  return {.algorithm = JwtAlgorithm::kRs256, .issuer = kIssuer, .audience = kAudience};
}

const JwtVerifier& Hs256Verifier() {
  static const JwtVerifier* const verifier =
      MakeVerifier(Hs256Options(), kHs256Secret, /*jwks=*/false).release();
  return *verifier;
}

// Requires no issuer, audience or expiry, and `sub` falls back to "jwt": tokens without those
// claims reach the end too.
const JwtVerifier& Hs256VerifierWithoutIssuer() {
  static const JwtVerifier* const verifier =
      MakeVerifier({.algorithm = JwtAlgorithm::kHs256, .require_expiry = false}, kHs256Secret,
                   /*jwks=*/false)
          .release();
  return *verifier;
}

const JwtVerifier& PemVerifier() {
  static const JwtVerifier* const verifier =
      MakeVerifier(Rs256Options(), kRsaPublicKeyPem, /*jwks=*/false).release();
  return *verifier;
}

const JwtVerifier& JwksVerifier() {
  static const JwtVerifier* const verifier =
      MakeVerifier(Rs256Options(), Jwks(), /*jwks=*/true).release();
  return *verifier;
}

bool IsValidSubject(absl::string_view subject) {
  if (subject.empty() || subject.size() > 256) return false;
  for (unsigned char c : subject) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

// `signed_token`: the token carries a real signature (made here, not by the fuzzer), which a
// refusal message must not quote: messages are logged and sent to the client. Only then is the
// check sound: a fuzzed token can be any text, the messages' own words included, and a fuzzed
// header value that the message names (alg, kid) can be a copy of the fuzzed signature.
void VerifyAndCheck(const JwtVerifier& verifier, absl::string_view token, bool signed_token) {
  const absl::StatusOr<std::string> subject =
      verifier.Verify(token, absl::FromUnixSeconds(kNowUnixSeconds));
  if (subject.ok()) {
    if (!IsValidSubject(*subject)) Fail("an accepted token gave an invalid subject");
    return;
  }
  if (!absl::IsUnauthenticated(subject.status())) Fail("a refusal that is not UNAUTHENTICATED");
  const absl::string_view signature = token.substr(token.rfind('.') + 1);
  if (signed_token && absl::StrContains(subject.status().message(), signature)) {
    Fail("a refusal message quotes the token's signature");
  }
}

std::string Base64Url(absl::string_view bytes) { return absl::WebSafeBase64Escape(bytes); }

// HEADER '\0' PAYLOAD as a token signed with kHs256Secret.
std::string SignHs256(absl::string_view input) {
  const size_t split = input.find('\0');
  const absl::string_view header = input.substr(0, split);
  const absl::string_view payload =
      split == absl::string_view::npos ? absl::string_view() : input.substr(split + 1);
  const std::string signing_input = absl::StrCat(Base64Url(header), ".", Base64Url(payload));
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_length = 0;
  if (HMAC(EVP_sha256(), kHs256Secret, sizeof(kHs256Secret) - 1,
           reinterpret_cast<const unsigned char*>(signing_input.data()), signing_input.size(), mac,
           &mac_length) == nullptr) {
    Fail("HMAC failed");
  }
  return absl::StrCat(signing_input, ".",
                      Base64Url(absl::string_view(reinterpret_cast<const char*>(mac), mac_length)));
}

void FuzzJwks(absl::string_view jwks) {
  static MemoryFile* const file = new MemoryFile();
  file->Set(jwks);
  JwtVerifierOptions options = Rs256Options();
  options.jwks_file = file->path();
  const absl::StatusOr<std::unique_ptr<JwtVerifier>> verifier = JwtVerifier::Create(options);
  if (!verifier.ok()) {
    if (!absl::IsInvalidArgument(verifier.status())) {
      std::fprintf(stderr, "%s\n", verifier.status().ToString().c_str());
      Fail("a JWKS refusal that is not INVALID_ARGUMENT");
    }
    return;
  }
  VerifyAndCheck(**verifier, kRs256TokenWithKid, /*signed_token=*/true);
  VerifyAndCheck(**verifier, kRs256TokenWithoutKid, /*signed_token=*/true);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      VerifyAndCheck(Hs256Verifier(), input, /*signed_token=*/false);
      VerifyAndCheck(PemVerifier(), input, /*signed_token=*/false);
      VerifyAndCheck(JwksVerifier(), input, /*signed_token=*/false);
      break;
    case 1: {
      const std::string token = SignHs256(input);
      VerifyAndCheck(Hs256Verifier(), token, /*signed_token=*/true);
      VerifyAndCheck(Hs256VerifierWithoutIssuer(), token, /*signed_token=*/true);
      break;
    }
    default:
      FuzzJwks(input);
      break;
  }
  return 0;
}
