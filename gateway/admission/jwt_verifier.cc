#include "gateway/admission/jwt_verifier.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/read_file.h"
#include "jwt/jwt.hpp"
#include "nlohmann/json.hpp"

namespace llmserve::gateway {
namespace {

using Json = nlohmann::json;

// Real tokens are well under 2 KiB; the bound keeps a hostile header from costing much to parse.
constexpr size_t kMaxTokenBytes = 16 * 1024;
constexpr size_t kMinHs256SecretBytes = 32;
constexpr int kMinRsaBits = 2048;
// OpenSSL refuses to verify with a larger modulus (OPENSSL_RSA_MAX_MODULUS_BITS); refusing such a
// key at startup beats every token failing later.
constexpr int kMaxRsaBits = 16384;
// Key ids appear in refusal messages; a hostile header must not make them long.
constexpr size_t kMaxKidInMessage = 64;
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

// `what` names the kind of file in messages.
absl::StatusOr<std::string> ReadKeyFile(const std::string& path, absl::string_view what,
                                        size_t max_bytes) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is not set"));
  return common::ReadFileUpTo(path, max_bytes, what);
}

template <auto kFree>
struct OpenSslDeleter {
  template <typename T>
  void operator()(T* pointer) const {
    kFree(pointer);
  }
};
using BignumPtr = std::unique_ptr<BIGNUM, OpenSslDeleter<BN_free>>;
using ParamBuildPtr = std::unique_ptr<OSSL_PARAM_BLD, OpenSslDeleter<OSSL_PARAM_BLD_free>>;
using ParamsPtr = std::unique_ptr<OSSL_PARAM, OpenSslDeleter<OSSL_PARAM_free>>;
using PkeyContextPtr = std::unique_ptr<EVP_PKEY_CTX, OpenSslDeleter<EVP_PKEY_CTX_free>>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, OpenSslDeleter<EVP_PKEY_free>>;
using BioPtr = std::unique_ptr<BIO, OpenSslDeleter<BIO_free>>;

// A string member of a JWK: nullopt when absent, INVALID_ARGUMENT when not a string.
absl::StatusOr<std::optional<std::string>> JwkString(const Json& jwk, const char* name) {
  const auto it = jwk.find(name);
  if (it == jwk.end()) return std::nullopt;
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a string"));
  }
  return it->get<std::string>();
}

// A required Base64urlUInt member (RFC 7518 section 2) as a big-endian byte string.
absl::StatusOr<std::string> JwkUnsigned(const Json& jwk, const char* name) {
  absl::StatusOr<std::optional<std::string>> text = JwkString(jwk, name);
  if (!text.ok()) return text.status();
  if (!text->has_value()) return absl::InvalidArgumentError(absl::StrCat("has no '", name, "'"));
  std::optional<std::string> bytes = DecodeBase64Url(**text);
  if (!bytes.has_value() || bytes->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' is not base64url (unpadded, RFC 7518 section 2)"));
  }
  return *std::move(bytes);
}

// The PEM ("-----BEGIN PUBLIC KEY-----") of the RSA key with modulus `n` and exponent `e`, so
// that JWKS keys go through the same cpp-jwt verification as a configured PEM key.
absl::StatusOr<std::string> RsaPublicKeyPem(absl::string_view n_bytes, absl::string_view e_bytes) {
  const BignumPtr n(BN_bin2bn(reinterpret_cast<const unsigned char*>(n_bytes.data()),
                              static_cast<int>(n_bytes.size()), nullptr));
  const BignumPtr e(BN_bin2bn(reinterpret_cast<const unsigned char*>(e_bytes.data()),
                              static_cast<int>(e_bytes.size()), nullptr));
  if (n == nullptr || e == nullptr) return absl::InternalError("BN_bin2bn failed");
  // Checked here because OpenSSL takes any numbers as a public key, and with e = 1 the padded
  // digest itself is a valid signature: anyone could forge tokens.
  if (!BN_is_odd(n.get())) return absl::InvalidArgumentError("'n' is not an RSA modulus (even)");
  if (!BN_is_odd(e.get()) || BN_is_one(e.get())) {
    return absl::InvalidArgumentError("'e' is not an RSA public exponent (odd, at least 3)");
  }
  const int bits = BN_num_bits(n.get());
  if (bits < kMinRsaBits || bits > kMaxRsaBits) {
    return absl::InvalidArgumentError(absl::StrCat("is a ", bits, "-bit RSA key; ", kMinRsaBits,
                                                   " to ", kMaxRsaBits, " bits are required"));
  }

  const ParamBuildPtr build(OSSL_PARAM_BLD_new());
  if (build == nullptr || !OSSL_PARAM_BLD_push_BN(build.get(), OSSL_PKEY_PARAM_RSA_N, n.get()) ||
      !OSSL_PARAM_BLD_push_BN(build.get(), OSSL_PKEY_PARAM_RSA_E, e.get())) {
    ERR_clear_error();
    return absl::InternalError("OSSL_PARAM_BLD failed");
  }
  const ParamsPtr params(OSSL_PARAM_BLD_to_param(build.get()));
  const PkeyContextPtr context(EVP_PKEY_CTX_new_from_name(nullptr, "RSA", nullptr));
  EVP_PKEY* raw_key = nullptr;
  if (params == nullptr || context == nullptr || EVP_PKEY_fromdata_init(context.get()) <= 0 ||
      EVP_PKEY_fromdata(context.get(), &raw_key, EVP_PKEY_PUBLIC_KEY, params.get()) <= 0) {
    ERR_clear_error();
    return absl::InvalidArgumentError("'n' and 'e' do not make an RSA public key");
  }
  const PkeyPtr key(raw_key);
  const BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || PEM_write_bio_PUBKEY(bio.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InternalError("PEM_write_bio_PUBKEY failed");
  }
  char* data = nullptr;
  const long length = BIO_get_mem_data(bio.get(), &data);
  if (data == nullptr || length <= 0) {
    return absl::InternalError("PEM_write_bio_PUBKEY wrote nothing");
  }
  return std::string(data, static_cast<size_t>(length));
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
  if (!options.jwks_file.empty()) {
    if (options.algorithm != JwtAlgorithm::kRs256) {
      return absl::InvalidArgumentError(absl::StrCat(
          "JWKS file ", options.jwks_file, " holds RS256 keys; it cannot be used with HS256"));
    }
    if (!options.key_file.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("both a JWT key file (", options.key_file,
                                                     ") and a JWKS file (", options.jwks_file,
                                                     ") are set; give one"));
    }
    absl::StatusOr<std::vector<RsaKey>> keys = LoadJwks(options.jwks_file);
    if (!keys.ok()) return keys.status();
    return std::unique_ptr<JwtVerifier>(new JwtVerifier(options, "", *std::move(keys)));
  }
  // Key files are far smaller; the JWKS bound is only there to refuse a wrong path cheaply.
  absl::StatusOr<std::string> key =
      ReadKeyFile(options.key_file, "JWT key file", kMaxJwksFileBytes);
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
      return std::unique_ptr<JwtVerifier>(new JwtVerifier(options, std::move(secret), {}));
    }
    case JwtAlgorithm::kRs256: {
      absl::Status checked = CheckRsaPublicKey(*key, options.key_file);
      if (!checked.ok()) return checked;
      std::vector<RsaKey> keys;
      keys.push_back({.kid = std::nullopt, .pem = *std::move(key)});
      return std::unique_ptr<JwtVerifier>(new JwtVerifier(options, "", std::move(keys)));
    }
  }
  return absl::InvalidArgumentError("unknown JWT algorithm");
}

absl::StatusOr<std::vector<JwtVerifier::RsaKey>> JwtVerifier::LoadJwks(const std::string& path) {
  absl::StatusOr<std::string> text = ReadKeyFile(path, "JWKS file", kMaxJwksFileBytes);
  if (!text.ok()) return text.status();
  Json jwks;
  try {
    jwks = Json::parse(*text);
  } catch (const Json::parse_error& error) {
    // The parser's own message quotes the file; the position is enough to find the mistake.
    return absl::InvalidArgumentError(
        absl::StrCat("JWKS file ", path, " is not valid JSON (error at byte ", error.byte, ")"));
  } catch (const std::exception&) {
    return absl::InvalidArgumentError(absl::StrCat("JWKS file ", path, " is not valid JSON"));
  }
  const auto keys = jwks.is_object() ? jwks.find("keys") : jwks.end();
  if (keys == jwks.end() || !keys->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("JWKS file ", path, " is not a JSON object with a \"keys\" array"));
  }
  if (keys->size() > kMaxJwksKeys) {
    return absl::InvalidArgumentError(absl::StrCat("JWKS file ", path, " has ", keys->size(),
                                                   " keys; at most ", kMaxJwksKeys,
                                                   " are accepted"));
  }
  std::vector<RsaKey> usable;
  for (size_t index = 0; index < keys->size(); ++index) {
    const auto refuse = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("JWKS file ", path, " key ", index, ": ", why));
    };
    const Json& jwk = (*keys)[index];
    if (!jwk.is_object()) return refuse("is not a JSON object");
    // A private key in a file meant to be public is a leak to report, not a key to use.
    if (jwk.contains("d")) {
      return refuse("holds private key material ('d'); publish public keys only");
    }
    absl::StatusOr<std::optional<std::string>> kty = JwkString(jwk, "kty");
    if (!kty.ok()) return refuse(kty.status().message());
    if (!kty->has_value()) return refuse("has no 'kty'");
    absl::StatusOr<std::optional<std::string>> alg = JwkString(jwk, "alg");
    if (!alg.ok()) return refuse(alg.status().message());
    absl::StatusOr<std::optional<std::string>> use = JwkString(jwk, "use");
    if (!use.ok()) return refuse(use.status().message());
    // Key sets commonly mix key types and purposes (EC signing keys, encryption keys); those are
    // for other verifiers, so they are passed over rather than failing the whole file.
    if (**kty != "RSA" || (alg->has_value() && **alg != "RS256") ||
        (use->has_value() && **use != "sig")) {
      continue;
    }
    absl::StatusOr<std::optional<std::string>> kid = JwkString(jwk, "kid");
    if (!kid.ok()) return refuse(kid.status().message());
    absl::StatusOr<std::string> n = JwkUnsigned(jwk, "n");
    if (!n.ok()) return refuse(n.status().message());
    absl::StatusOr<std::string> e = JwkUnsigned(jwk, "e");
    if (!e.ok()) return refuse(e.status().message());
    absl::StatusOr<std::string> pem = RsaPublicKeyPem(*n, *e);
    if (!pem.ok()) {
      if (pem.status().code() != absl::StatusCode::kInvalidArgument) return pem.status();
      return refuse(pem.status().message());
    }
    // A token's kid must pick one key: two keys sharing a kid would make the choice arbitrary.
    if (kid->has_value()) {
      for (const RsaKey& other : usable) {
        if (other.kid == *kid) {
          return refuse(absl::StrCat("kid '", absl::CHexEscape(**kid),
                                     "' is already used by an earlier key"));
        }
      }
    }
    usable.push_back({.kid = *std::move(kid), .pem = *std::move(pem)});
  }
  if (usable.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("JWKS file ", path, " has no usable key (kty RSA, alg RS256 or none, ",
                     "use sig or none); ", keys->size(),
                     keys->size() == 1 ? " entry was" : " entries were", " skipped"));
  }
  return usable;
}

absl::Status JwtVerifier::CheckSignature(absl::string_view signing_input,
                                         absl::string_view signature_b64url,
                                         absl::string_view signature,
                                         const std::optional<std::string>& kid) const {
  switch (options_.algorithm) {
    case JwtAlgorithm::kHs256: {
      unsigned char mac[EVP_MAX_MD_SIZE];
      unsigned int mac_length = 0;
      if (HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
               reinterpret_cast<const unsigned char*>(signing_input.data()), signing_input.size(),
               mac, &mac_length) == nullptr ||
          signature.size() != mac_length || CRYPTO_memcmp(mac, signature.data(), mac_length) != 0) {
        return Unauthenticated("signature does not verify");
      }
      return absl::OkStatus();
    }
    case JwtAlgorithm::kRs256: {
      const bool by_kid = kid.has_value() && !options_.jwks_file.empty();
      bool kid_known = false;
      for (const RsaKey& key : rsa_keys_) {
        if (by_kid && key.kid != kid) continue;
        kid_known = true;
        try {
          const jwt::verify_result_t result = jwt::PEMSign<jwt::algo::RS256>::verify(
              key.pem, std::string_view(signing_input.data(), signing_input.size()),
              std::string_view(signature_b64url.data(), signature_b64url.size()));
          if (result.first && !result.second) return absl::OkStatus();
        } catch (const std::exception&) {
          // Treated as a key that does not verify; the next key may.
        }
      }
      if (by_kid && !kid_known) {
        return Unauthenticated(
            absl::StrCat("unknown key id '", absl::CHexEscape(kid->substr(0, kMaxKidInMessage)),
                         kid->size() > kMaxKidInMessage ? "...'" : "'", " (not in the JWKS file)"));
      }
      return Unauthenticated("signature does not verify");
    }
  }
  return Unauthenticated("signature does not verify");
}

absl::StatusOr<std::string> JwtVerifier::Verify(absl::string_view token, absl::Time now) const {
  absl::StatusOr<JwtIdentity> identity = VerifyIdentity(token, now);
  if (!identity.ok()) return identity.status();
  return std::move(identity->subject);
}

absl::StatusOr<JwtIdentity> JwtVerifier::VerifyIdentity(absl::string_view token,
                                                        absl::Time now) const {
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
  std::optional<std::string> kid;
  // Only a JWKS file gives `kid` a meaning; elsewhere it is ignored as before.
  if (const auto kid_member = header->find("kid");
      !options_.jwks_file.empty() && kid_member != header->end()) {
    if (!kid_member->is_string()) {
      return Unauthenticated("malformed token: the header's 'kid' is not a string");
    }
    kid = kid_member->get<std::string>();
  }

  if (parts[2].empty()) return Unauthenticated("token has no signature");
  const std::optional<std::string> signature = DecodeBase64Url(parts[2]);
  if (!signature.has_value()) {
    return Unauthenticated("malformed token: the signature is not base64url");
  }
  const absl::string_view signing_input = token.substr(0, parts[0].size() + 1 + parts[1].size());
  if (absl::Status checked = CheckSignature(signing_input, parts[2], *signature, kid);
      !checked.ok()) {
    return checked;
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

  JwtIdentity identity;
  if (const auto models = claims->find("models"); models != claims->end()) {
    if (!models->is_array() || models->empty() || models->size() > kMaxJwtModels) {
      return Unauthenticated(
          absl::StrCat("claim 'models' must be an array of 1-", kMaxJwtModels, " model names"));
    }
    for (const Json& model : *models) {
      if (!model.is_string() || !IsValidSubject(model.get_ref<const std::string&>())) {
        return Unauthenticated("claim 'models' must hold strings of 1-256 printable characters");
      }
      identity.models.push_back(model.get<std::string>());
    }
    std::sort(identity.models.begin(), identity.models.end());
    identity.models.erase(std::unique(identity.models.begin(), identity.models.end()),
                          identity.models.end());
  }
  const auto sub = claims->find("sub");
  if (sub == claims->end()) {
    if (options_.subject_fallback.empty()) return Unauthenticated("token has no 'sub' claim");
    identity.subject = options_.subject_fallback;
    return identity;
  }
  if (!sub->is_string() || !IsValidSubject(sub->get_ref<const std::string&>())) {
    return Unauthenticated("claim 'sub' must be a string of 1-256 printable characters");
  }
  identity.subject = sub->get<std::string>();
  return identity;
}

}  // namespace llmserve::gateway
