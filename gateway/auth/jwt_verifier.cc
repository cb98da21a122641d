#include "gateway/auth/jwt_verifier.h"

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>

#include <cmath>
#include <exception>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "jwt/jwt.hpp"
#include "nlohmann/json.hpp"

namespace llmserve::gateway {
namespace {

using Json = nlohmann::json;

// Real tokens are well under 2 KiB; the bound keeps a hostile header from costing much to parse.
constexpr size_t kMaxTokenBytes = 16 * 1024;
constexpr size_t kMinHs256SecretBytes = 32;
constexpr int kMinRsaBits = 2048;
constexpr size_t kMaxSubjectLength = 256;

absl::Status Unauthenticated(absl::string_view why) {
  return absl::UnauthenticatedError(absl::StrCat("JWT rejected: ", why));
}

bool IsBase64UrlChar(char c) { return absl::ascii_isalnum(c) || c == '-' || c == '_'; }

// Strict base64url without padding (RFC 7515 section 2); nullopt on any other character.
std::optional<std::string> DecodeBase64Url(absl::string_view text) {
  for (char c : text) {
    if (!IsBase64UrlChar(c)) return std::nullopt;
  }
  if (text.size() % 4 == 1) return std::nullopt;  // no base64 length leaves 6 bits over
  std::string decoded;
  if (!absl::WebSafeBase64Unescape(text, &decoded)) return std::nullopt;
  return decoded;
}

// A JSON object, or nullopt. nlohmann is asked not to throw; the catch is for the rest.
std::optional<Json> ParseJsonObject(absl::string_view text) {
  try {
    Json value = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded() || !value.is_object()) return std::nullopt;
    return value;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

absl::StatusOr<std::string> ReadKeyFile(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("JWT key file is not set");
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot open JWT key file ", path));
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad()) return absl::UnavailableError(absl::StrCat("cannot read JWT key file ", path));
  return contents.str();
}

absl::Status CheckRsaPublicKey(const std::string& pem, const std::string& path) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return absl::InternalError("BIO_new_mem_buf failed");
  EVP_PKEY* key = PEM_read_bio_PUBKEY(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("JWT key file ", path,
                     " is not a PEM public key (expected \"-----BEGIN PUBLIC KEY-----\"; "
                     "`openssl rsa -in private.pem -pubout` makes one)"));
  }
  const int type = EVP_PKEY_get_base_id(key);
  const int bits = EVP_PKEY_get_bits(key);
  EVP_PKEY_free(key);
  if (type != EVP_PKEY_RSA) {
    return absl::InvalidArgumentError(
        absl::StrCat("JWT key file ", path, " holds a non-RSA public key; RS256 needs RSA"));
  }
  if (bits < kMinRsaBits) {
    return absl::InvalidArgumentError(absl::StrCat("JWT key file ", path, " holds a ", bits,
                                                   "-bit RSA key; at least ", kMinRsaBits,
                                                   " bits are required"));
  }
  return absl::OkStatus();
}

std::string FormatUnixSeconds(double seconds) {
  if (!(std::abs(seconds) < 1e13)) return absl::StrCat(seconds, " (unix seconds)");
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                          absl::FromUnixSeconds(static_cast<int64_t>(std::floor(seconds))),
                          absl::UTCTimeZone());
}

// A NumericDate claim (RFC 7519 section 2: seconds since the epoch, possibly fractional), nullopt
// when absent, INVALID when present but not a number.
absl::StatusOr<std::optional<double>> NumericDateClaim(const Json& claims, const char* name) {
  const auto it = claims.find(name);
  if (it == claims.end()) return std::nullopt;
  if (!it->is_number()) {
    return Unauthenticated(absl::StrCat("claim '", name, "' is not a number"));
  }
  return it->get<double>();
}

bool IsValidSubject(absl::string_view subject) {
  if (subject.empty() || subject.size() > kMaxSubjectLength) return false;
  for (unsigned char c : subject) {
    if (c < 0x20 || c == 0x7f) return false;  // no control characters in logs or headers
  }
  return true;
}

}  // namespace

absl::StatusOr<JwtAlgorithm> ParseJwtAlgorithm(absl::string_view name) {
  const std::string upper = absl::AsciiStrToUpper(name);
  if (upper == "HS256") return JwtAlgorithm::kHs256;
  if (upper == "RS256") return JwtAlgorithm::kRs256;
  return absl::InvalidArgumentError(absl::StrCat("JWT algorithm \"", absl::CHexEscape(name),
                                                 "\" is not supported (HS256, RS256)"));
}

absl::string_view JwtAlgorithmName(JwtAlgorithm algorithm) {
  return algorithm == JwtAlgorithm::kHs256 ? "HS256" : "RS256";
}

absl::StatusOr<std::unique_ptr<JwtVerifier>> JwtVerifier::Create(
    const JwtVerifierOptions& options) {
  if (options.leeway < absl::ZeroDuration() || options.leeway > absl::Hours(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "JWT leeway ", absl::FormatDuration(options.leeway), " must be between 0 and 1h"));
  }
  if (!options.subject_fallback.empty() && !IsValidSubject(options.subject_fallback)) {
    return absl::InvalidArgumentError("JWT subject fallback must be 1-256 printable characters");
  }
  absl::StatusOr<std::string> key = ReadKeyFile(options.key_file);
  if (!key.ok()) return key.status();
  switch (options.algorithm) {
    case JwtAlgorithm::kHs256: {
      // `echo secret > file` leaves a newline that the token issuer did not sign with.
      std::string secret(absl::StripTrailingAsciiWhitespace(*key));
      if (secret.size() < kMinHs256SecretBytes) {
        return absl::InvalidArgumentError(absl::StrCat("HS256 secret in ", options.key_file, " is ",
                                                       secret.size(), " bytes; at least ",
                                                       kMinHs256SecretBytes, " are required"));
      }
      return std::unique_ptr<JwtVerifier>(new JwtVerifier(options, std::move(secret)));
    }
    case JwtAlgorithm::kRs256: {
      absl::Status checked = CheckRsaPublicKey(*key, options.key_file);
      if (!checked.ok()) return checked;
      return std::unique_ptr<JwtVerifier>(new JwtVerifier(options, *std::move(key)));
    }
  }
  return absl::InvalidArgumentError("unknown JWT algorithm");
}

bool JwtVerifier::SignatureVerifies(absl::string_view signing_input,
                                    absl::string_view signature_b64url,
                                    absl::string_view signature) const {
  switch (options_.algorithm) {
    case JwtAlgorithm::kHs256: {
      unsigned char mac[EVP_MAX_MD_SIZE];
      unsigned int mac_length = 0;
      if (HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
               reinterpret_cast<const unsigned char*>(signing_input.data()), signing_input.size(),
               mac, &mac_length) == nullptr) {
        return false;
      }
      return signature.size() == mac_length &&
             CRYPTO_memcmp(mac, signature.data(), mac_length) == 0;
    }
    case JwtAlgorithm::kRs256: {
      try {
        const jwt::verify_result_t result = jwt::PEMSign<jwt::algo::RS256>::verify(
            key_, std::string_view(signing_input.data(), signing_input.size()),
            std::string_view(signature_b64url.data(), signature_b64url.size()));
        return result.first && !result.second;
      } catch (const std::exception&) {
        return false;
      }
    }
  }
  return false;
}

absl::StatusOr<std::string> JwtVerifier::Verify(absl::string_view token, absl::Time now) const {
  if (token.empty()) return Unauthenticated("empty token");
  if (token.size() > kMaxTokenBytes) {
    return Unauthenticated(
        absl::StrCat("token is ", token.size(), " bytes, more than ", kMaxTokenBytes));
  }
  const std::vector<absl::string_view> parts = absl::StrSplit(token, '.');
  if (parts.size() != 3) {
    return Unauthenticated(
        absl::StrCat("malformed token: expected 3 '.'-separated parts, found ", parts.size()));
  }
  const std::optional<std::string> header_text = DecodeBase64Url(parts[0]);
  if (!header_text.has_value() || parts[0].empty()) {
    return Unauthenticated("malformed token: the header is not base64url");
  }
  const std::optional<Json> header = ParseJsonObject(*header_text);
  if (!header.has_value())
    return Unauthenticated("malformed token: the header is not a JSON object");
  const auto alg = header->find("alg");
  if (alg == header->end() || !alg->is_string()) {
    return Unauthenticated("malformed token: the header has no 'alg' string");
  }
  const std::string& alg_name = alg->get_ref<const std::string&>();
  if (absl::AsciiStrToLower(alg_name) == "none") {
    return Unauthenticated("unsigned tokens (alg 'none') are not accepted");
  }
  const absl::string_view expected_alg = JwtAlgorithmName(options_.algorithm);
  // Exact match (RFC 7515: alg is case-sensitive): "hs256" is not a spelling of HS256.
  if (alg_name != expected_alg) {
    return Unauthenticated(absl::StrCat("token algorithm '", absl::CHexEscape(alg_name),
                                        "' is not the configured ", expected_alg));
  }
  if (header->contains("crit")) {
    // RFC 7515 section 4.1.11: extensions we do not understand must make the token invalid.
    return Unauthenticated("token header has 'crit' extensions, which are not supported");
  }

  if (parts[2].empty()) return Unauthenticated("token has no signature");
  const std::optional<std::string> signature = DecodeBase64Url(parts[2]);
  if (!signature.has_value()) {
    return Unauthenticated("malformed token: the signature is not base64url");
  }
  const absl::string_view signing_input = token.substr(0, parts[0].size() + 1 + parts[1].size());
  if (!SignatureVerifies(signing_input, parts[2], *signature)) {
    return Unauthenticated("signature does not verify");
  }

  const std::optional<std::string> payload_text = DecodeBase64Url(parts[1]);
  if (!payload_text.has_value() || parts[1].empty()) {
    return Unauthenticated("malformed token: the payload is not base64url");
  }
  const std::optional<Json> claims = ParseJsonObject(*payload_text);
  if (!claims.has_value()) {
    return Unauthenticated("malformed token: the payload is not a JSON object");
  }
  const double now_seconds = absl::ToDoubleSeconds(now - absl::UnixEpoch());
  const double leeway_seconds = absl::ToDoubleSeconds(options_.leeway);

  absl::StatusOr<std::optional<double>> expiry = NumericDateClaim(*claims, "exp");
  if (!expiry.ok()) return expiry.status();
  if (!expiry->has_value()) {
    if (options_.require_expiry) return Unauthenticated("token has no 'exp' (expiry) claim");
  } else if (now_seconds >= **expiry + leeway_seconds) {
    return Unauthenticated(absl::StrCat("token expired at ", FormatUnixSeconds(**expiry),
                                        " (leeway ", absl::FormatDuration(options_.leeway), ")"));
  }
  absl::StatusOr<std::optional<double>> not_before = NumericDateClaim(*claims, "nbf");
  if (!not_before.ok()) return not_before.status();
  if (not_before->has_value() && now_seconds + leeway_seconds < **not_before) {
    return Unauthenticated(absl::StrCat("token is not valid before ",
                                        FormatUnixSeconds(**not_before), " (leeway ",
                                        absl::FormatDuration(options_.leeway), ")"));
  }

  if (!options_.issuer.empty()) {
    const auto iss = claims->find("iss");
    if (iss == claims->end() || !iss->is_string()) {
      return Unauthenticated(
          absl::StrCat("token has no 'iss' claim; issuer '", options_.issuer, "' is required"));
    }
    if (iss->get_ref<const std::string&>() != options_.issuer) {
      return Unauthenticated(absl::StrCat("wrong issuer '",
                                          absl::CHexEscape(iss->get_ref<const std::string&>()),
                                          "', expected '", options_.issuer, "'"));
    }
  }

  if (!options_.audience.empty()) {
    const auto aud = claims->find("aud");
    bool matches = false;
    if (aud != claims->end() && aud->is_string()) {
      matches = aud->get_ref<const std::string&>() == options_.audience;
    } else if (aud != claims->end() && aud->is_array()) {
      for (const Json& entry : *aud) {
        matches = matches ||
                  (entry.is_string() && entry.get_ref<const std::string&>() == options_.audience);
      }
    } else {
      return Unauthenticated(
          absl::StrCat("token has no 'aud' claim; audience '", options_.audience, "' is required"));
    }
    if (!matches) {
      return Unauthenticated(
          absl::StrCat("wrong audience: the token is not meant for '", options_.audience, "'"));
    }
  }

  const auto sub = claims->find("sub");
  if (sub == claims->end()) {
    if (options_.subject_fallback.empty()) return Unauthenticated("token has no 'sub' claim");
    return options_.subject_fallback;
  }
  if (!sub->is_string() || !IsValidSubject(sub->get_ref<const std::string&>())) {
    return Unauthenticated("claim 'sub' must be a string of 1-256 printable characters");
  }
  return sub->get<std::string>();
}

}  // namespace llmserve::gateway
