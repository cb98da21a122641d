// JwtVerifier: HS256 and RS256 tokens minted by cpp-jwt (an implementation independent of the
// verifier's HS256 path), claim checks against an injected clock, and the attacks the pinned
// algorithm must stop (alg swap, alg none). JWKS files are built from keys generated here, with
// n and e taken from OpenSSL, and tokens signed with OpenSSL directly so `kid` can be set.

#include "gateway/admission/jwt_verifier.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "jwt/jwt.hpp"
#include "nlohmann/json.hpp"
#include "tests/testing/scoped_temp_dir.h"

namespace llmserve::gateway {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr char kSecret[] = "0123456789abcdef0123456789abcdef-test-secret";
// A fixed instant, 2023-11-14T22:13:20Z: tokens are minted relative to it and verified at it, so
// no test depends on the real clock.
constexpr int64_t kNow = 1700000000;
const absl::Time kNowTime = absl::FromUnixSeconds(kNow);

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
}

// A token signed by cpp-jwt with `alg` and `key` (a secret, or a PEM private key).
std::string Mint(const std::string& alg, const std::string& key, const Json& claims) {
  jwt::jwt_object token{jwt::params::algorithm(alg), jwt::params::secret(key)};
  for (const auto& [name, value] : claims.items()) token.add_claim(name, value);
  return token.signature();
}

std::string Base64Url(absl::string_view bytes) { return absl::WebSafeBase64Escape(bytes); }

// A token assembled by hand, for headers cpp-jwt would not produce.
std::string Handmade(const Json& header, const Json& claims, const std::string& hmac_secret) {
  const std::string input = absl::StrCat(Base64Url(header.dump()), ".", Base64Url(claims.dump()));
  if (hmac_secret.empty()) return absl::StrCat(input, ".");
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), hmac_secret.data(), static_cast<int>(hmac_secret.size()),
       reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac, &length);
  return absl::StrCat(input, ".",
                      Base64Url(absl::string_view(reinterpret_cast<char*>(mac), length)));
}

struct RsaKeyPair {
  std::string private_pem;
  std::string public_pem;
};

std::string PemOf(EVP_PKEY* key, bool private_key) {
  BIO* bio = BIO_new(BIO_s_mem());
  if (private_key) {
    PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  } else {
    PEM_write_bio_PUBKEY(bio, key);
  }
  char* data = nullptr;
  const long length = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(length));
  BIO_free(bio);
  return pem;
}

RsaKeyPair GenerateRsaKeyPair(unsigned int bits) {
  EVP_PKEY* key = EVP_RSA_gen(bits);
  EXPECT_NE(key, nullptr);
  RsaKeyPair pair{.private_pem = PemOf(key, true), .public_pem = PemOf(key, false)};
  EVP_PKEY_free(key);
  return pair;
}

// One 2048-bit key for the whole binary: generating it takes a moment.
const RsaKeyPair& TestRsaKey() {
  static const RsaKeyPair* pair = new RsaKeyPair(GenerateRsaKeyPair(2048));
  return *pair;
}

EVP_PKEY* ReadPem(const std::string& pem, bool private_key) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  EVP_PKEY* key = private_key ? PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr)
                              : PEM_read_bio_PUBKEY(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  EXPECT_NE(key, nullptr);
  return key;
}

// The big-endian bytes of an RSA parameter (OSSL_PKEY_PARAM_RSA_N or _E), base64url.
std::string RsaParamBase64Url(EVP_PKEY* key, const char* name) {
  BIGNUM* value = nullptr;
  EXPECT_EQ(EVP_PKEY_get_bn_param(key, name, &value), 1);
  std::string bytes(static_cast<size_t>(BN_num_bytes(value)), '\0');
  BN_bn2bin(value, reinterpret_cast<unsigned char*>(bytes.data()));
  BN_free(value);
  return Base64Url(bytes);
}

// The RFC 7517 JWK of `pair`'s public key, with `kid` when given.
Json RsaJwk(const RsaKeyPair& pair, std::optional<std::string> kid) {
  EVP_PKEY* key = ReadPem(pair.public_pem, /*private_key=*/false);
  Json jwk{{"kty", "RSA"},
           {"n", RsaParamBase64Url(key, OSSL_PKEY_PARAM_RSA_N)},
           {"e", RsaParamBase64Url(key, OSSL_PKEY_PARAM_RSA_E)}};
  EVP_PKEY_free(key);
  if (kid.has_value()) jwk["kid"] = *kid;
  return jwk;
}

// An EC P-256 JWK (the kind of key the verifier must pass over).
Json EcJwk(const std::string& kid) {
  return Json{{"kty", "EC"},
              {"crv", "P-256"},
              {"kid", kid},
              {"use", "sig"},
              {"alg", "ES256"},
              {"x", "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU"},
              {"y", "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}};
}

// An RS256 token signed with OpenSSL, with any header (`kid`, or none).
std::string SignRs256(const Json& header, const Json& claims, const RsaKeyPair& pair) {
  const std::string input = absl::StrCat(Base64Url(header.dump()), ".", Base64Url(claims.dump()));
  EVP_PKEY* key = ReadPem(pair.private_pem, /*private_key=*/true);
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  size_t length = 0;
  EXPECT_EQ(EVP_DigestSignInit(context, nullptr, EVP_sha256(), nullptr, key), 1);
  EXPECT_EQ(EVP_DigestSign(context, nullptr, &length,
                           reinterpret_cast<const unsigned char*>(input.data()), input.size()),
            1);
  std::string signature(length, '\0');
  EXPECT_EQ(EVP_DigestSign(context, reinterpret_cast<unsigned char*>(signature.data()), &length,
                           reinterpret_cast<const unsigned char*>(input.data()), input.size()),
            1);
  signature.resize(length);
  EVP_MD_CTX_free(context);
  EVP_PKEY_free(key);
  return absl::StrCat(input, ".", Base64Url(signature));
}

Json Rs256Header(std::optional<std::string> kid) {
  Json header{{"alg", "RS256"}, {"typ", "JWT"}};
  if (kid.has_value()) header["kid"] = *kid;
  return header;
}

// Two more keys for JWKS tests, generated once like TestRsaKey().
const RsaKeyPair& SecondRsaKey() {
  static const RsaKeyPair* pair = new RsaKeyPair(GenerateRsaKeyPair(2048));
  return *pair;
}
const RsaKeyPair& UnlistedRsaKey() {
  static const RsaKeyPair* pair = new RsaKeyPair(GenerateRsaKeyPair(2048));
  return *pair;
}

Json ValidClaims() { return Json{{"sub", "alice"}, {"exp", kNow + 600}, {"iat", kNow}}; }

class JwtVerifierTest : public ::testing::Test {
 protected:
  std::unique_ptr<JwtVerifier> Hs256(JwtVerifierOptions options = {}) {
    options.algorithm = JwtAlgorithm::kHs256;
    options.key_file = dir_.File("secret");
    WriteFile(options.key_file, absl::StrCat(kSecret, "\n"));  // as `echo` writes it
    absl::StatusOr<std::unique_ptr<JwtVerifier>> verifier = JwtVerifier::Create(options);
    EXPECT_TRUE(verifier.ok()) << verifier.status();
    return verifier.ok() ? *std::move(verifier) : nullptr;
  }
  std::unique_ptr<JwtVerifier> Rs256(JwtVerifierOptions options = {}) {
    options.algorithm = JwtAlgorithm::kRs256;
    options.key_file = dir_.File("public.pem");
    WriteFile(options.key_file, TestRsaKey().public_pem);
    absl::StatusOr<std::unique_ptr<JwtVerifier>> verifier = JwtVerifier::Create(options);
    EXPECT_TRUE(verifier.ok()) << verifier.status();
    return verifier.ok() ? *std::move(verifier) : nullptr;
  }
  static void ExpectRejected(const JwtVerifier& verifier, const std::string& token,
                             const std::string& reason) {
    absl::StatusOr<std::string> subject = verifier.Verify(token, kNowTime);
    EXPECT_EQ(subject.status().code(), absl::StatusCode::kUnauthenticated) << token;
    EXPECT_THAT(subject.status().message(), HasSubstr(reason)) << token;
  }

  // `keys` written as a JWKS file.
  absl::StatusOr<std::unique_ptr<JwtVerifier>> CreateWithJwks(const Json& keys) {
    return CreateWithJwksText(Json{{"keys", keys}}.dump(2));
  }
  absl::StatusOr<std::unique_ptr<JwtVerifier>> CreateWithJwksText(const std::string& text) {
    JwtVerifierOptions options;
    options.algorithm = JwtAlgorithm::kRs256;
    options.jwks_file = dir_.File("jwks.json");
    WriteFile(options.jwks_file, text);
    return JwtVerifier::Create(options);
  }
  // A verifier for TestRsaKey() as kid "a" and SecondRsaKey() as kid "b".
  std::unique_ptr<JwtVerifier> TwoKeyJwks() {
    absl::StatusOr<std::unique_ptr<JwtVerifier>> verifier =
        CreateWithJwks(Json::array({RsaJwk(TestRsaKey(), "a"), RsaJwk(SecondRsaKey(), "b")}));
    EXPECT_TRUE(verifier.ok()) << verifier.status();
    return verifier.ok() ? *std::move(verifier) : nullptr;
  }
  void ExpectJwksRefused(const Json& keys, const std::vector<std::string>& reasons) {
    absl::StatusOr<std::unique_ptr<JwtVerifier>> verifier = CreateWithJwks(keys);
    EXPECT_EQ(verifier.status().code(), absl::StatusCode::kInvalidArgument) << keys.dump();
    EXPECT_THAT(verifier.status().message(), HasSubstr(dir_.File("jwks.json")));
    for (const std::string& reason : reasons) {
      EXPECT_THAT(verifier.status().message(), HasSubstr(reason)) << keys.dump();
    }
  }

  testing::ScopedTempDir dir_;
};

TEST_F(JwtVerifierTest, Hs256ValidTokenGivesSubject) {
  std::unique_ptr<JwtVerifier> verifier = Hs256();
  absl::StatusOr<std::string> subject =
      verifier->Verify(Mint("HS256", kSecret, ValidClaims()), kNowTime);
  ASSERT_TRUE(subject.ok()) << subject.status();
  EXPECT_EQ(*subject, "alice");
}

TEST_F(JwtVerifierTest, TokenSignedElsewhereVerifies) {
  // Made with Python's hmac module: header {"alg":"HS256","typ":"JWT"}, payload
  // {"sub":"bob","exp":1700000600}, key kSecret.
  constexpr char kToken[] =
      "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJib2IiLCJleHAiOjE3MDAwMDA2MDB9."
      "u_bsRtEWu9atcHRzrJCMIxSB2bkSKr-dpjNhTVmLDQE";
  std::unique_ptr<JwtVerifier> verifier = Hs256();
  absl::StatusOr<std::string> subject = verifier->Verify(kToken, kNowTime);
  ASSERT_TRUE(subject.ok()) << subject.status();
  EXPECT_EQ(*subject, "bob");
  ExpectRejected(*verifier, std::string(kToken).replace(sizeof(kToken) - 2, 1, "A"),
                 "signature does not verify");
}

TEST_F(JwtVerifierTest, ExpiryIsCheckedWithLeeway) {
  JwtVerifierOptions options;
  options.leeway = absl::Seconds(30);
  std::unique_ptr<JwtVerifier> verifier = Hs256(options);
  const std::string token = Mint("HS256", kSecret, Json{{"sub", "alice"}, {"exp", kNow}});
  // Inside the leeway: still good.
  EXPECT_TRUE(verifier->Verify(token, kNowTime + absl::Seconds(29)).ok());
  absl::StatusOr<std::string> expired = verifier->Verify(token, kNowTime + absl::Seconds(30));
  EXPECT_EQ(expired.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(expired.status().message(), HasSubstr("expired at 2023-11-14T22:13:20Z"));
  ExpectRejected(*verifier, Mint("HS256", kSecret, Json{{"sub", "alice"}, {"exp", kNow - 3600}}),
                 "expired");
}

TEST_F(JwtVerifierTest, MissingExpiryIsRejectedUnlessAllowed) {
  const std::string token = Mint("HS256", kSecret, Json{{"sub", "alice"}});
  ExpectRejected(*Hs256(), token, "no 'exp'");
  JwtVerifierOptions options;
  options.require_expiry = false;
  EXPECT_EQ(*Hs256(options)->Verify(token, kNowTime), "alice");
}

TEST_F(JwtVerifierTest, NotYetValidIsRejected) {
  JwtVerifierOptions options;
  options.leeway = absl::Seconds(10);
  std::unique_ptr<JwtVerifier> verifier = Hs256(options);
  Json claims = ValidClaims();
  claims["nbf"] = kNow + 60;
  ExpectRejected(*verifier, Mint("HS256", kSecret, claims), "not valid before");
  claims["nbf"] = kNow + 5;  // within the leeway
  EXPECT_TRUE(verifier->Verify(Mint("HS256", kSecret, claims), kNowTime).ok());
}

TEST_F(JwtVerifierTest, AudienceIsChecked) {
  JwtVerifierOptions options;
  options.audience = "llmserve";
  std::unique_ptr<JwtVerifier> verifier = Hs256(options);
  Json claims = ValidClaims();
  ExpectRejected(*verifier, Mint("HS256", kSecret, claims), "no 'aud' claim");
  claims["aud"] = "other-service";
  ExpectRejected(*verifier, Mint("HS256", kSecret, claims), "wrong audience");
  claims["aud"] = Json::array({"a", "b"});
  ExpectRejected(*verifier, Mint("HS256", kSecret, claims), "wrong audience");
  claims["aud"] = "llmserve";
  EXPECT_TRUE(verifier->Verify(Mint("HS256", kSecret, claims), kNowTime).ok());
  claims["aud"] = Json::array({"other", "llmserve"});
  EXPECT_TRUE(verifier->Verify(Mint("HS256", kSecret, claims), kNowTime).ok());
}

TEST_F(JwtVerifierTest, IssuerIsChecked) {
  JwtVerifierOptions options;
  options.issuer = "https://auth.example.com";
  std::unique_ptr<JwtVerifier> verifier = Hs256(options);
  Json claims = ValidClaims();
  ExpectRejected(*verifier, Mint("HS256", kSecret, claims), "no 'iss' claim");
  claims["iss"] = "https://evil.example.com";
  ExpectRejected(*verifier, Mint("HS256", kSecret, claims), "wrong issuer");
  claims["iss"] = "https://auth.example.com";
  EXPECT_TRUE(verifier->Verify(Mint("HS256", kSecret, claims), kNowTime).ok());
}

TEST_F(JwtVerifierTest, BadSignatureIsRejected) {
  std::unique_ptr<JwtVerifier> verifier = Hs256();
  ExpectRejected(*verifier, Mint("HS256", "another-secret-of-at-least-32-bytes!!", ValidClaims()),
                 "signature does not verify");
  // A valid signature on a different payload.
  const std::string good = Mint("HS256", kSecret, ValidClaims());
  Json changed = ValidClaims();
  changed["sub"] = "mallory";
  const std::string forged_payload = Mint("HS256", kSecret, changed);
  const std::string spliced =
      absl::StrCat(good.substr(0, good.find('.')), ".",
                   forged_payload.substr(forged_payload.find('.') + 1,
                                         forged_payload.rfind('.') - forged_payload.find('.') - 1),
                   good.substr(good.rfind('.')));
  ExpectRejected(*verifier, spliced, "signature does not verify");
  // Claims of an unsigned token are not looked at: an expired forged token says "signature".
  ExpectRejected(*verifier,
                 Mint("HS256", "another-secret-of-at-least-32-bytes!!",
                      Json{{"sub", "x"}, {"exp", kNow - 10000}}),
                 "signature does not verify");
}

TEST_F(JwtVerifierTest, AlgNoneIsRejected) {
  std::unique_ptr<JwtVerifier> verifier = Hs256();
  for (const char* none : {"none", "None", "NONE"}) {
    ExpectRejected(*verifier, Handmade(Json{{"alg", none}, {"typ", "JWT"}}, ValidClaims(), ""),
                   "alg 'none'");
  }
  // Even with a signature segment attached.
  ExpectRejected(*verifier, Handmade(Json{{"alg", "none"}}, ValidClaims(), kSecret), "alg 'none'");
}

TEST_F(JwtVerifierTest, AlgSwapToHs256WithPublicKeyIsRejected) {
  std::unique_ptr<JwtVerifier> verifier = Rs256();
  // The classic attack: an HS256 token whose HMAC key is the RSA public key the server holds.
  ExpectRejected(*verifier, Mint("HS256", TestRsaKey().public_pem, ValidClaims()),
                 "token algorithm 'HS256' is not the configured RS256");
  ExpectRejected(*verifier,
                 Handmade(Json{{"alg", "HS256"}}, ValidClaims(), TestRsaKey().public_pem),
                 "not the configured RS256");
}

TEST_F(JwtVerifierTest, OtherAlgorithmsAndCaseVariantsAreRejected) {
  std::unique_ptr<JwtVerifier> verifier = Hs256();
  ExpectRejected(*verifier, Handmade(Json{{"alg", "hs256"}}, ValidClaims(), kSecret),
                 "is not the configured HS256");
  ExpectRejected(*verifier, Handmade(Json{{"alg", "HS512"}}, ValidClaims(), kSecret),
                 "is not the configured HS256");
  ExpectRejected(*verifier, Mint("RS256", TestRsaKey().private_pem, ValidClaims()),
                 "'RS256' is not the configured HS256");
  ExpectRejected(*verifier, Handmade(Json{{"alg", 256}}, ValidClaims(), kSecret), "no 'alg'");
  ExpectRejected(*verifier, Handmade(Json{{"typ", "JWT"}}, ValidClaims(), kSecret), "no 'alg'");
  ExpectRejected(
      *verifier,
      Handmade(Json{{"alg", "HS256"}, {"crit", Json::array({"b64"})}}, ValidClaims(), kSecret),
      "'crit'");
}

TEST_F(JwtVerifierTest, Rs256ValidTokenGivesSubject) {
  std::unique_ptr<JwtVerifier> verifier = Rs256();
  absl::StatusOr<std::string> subject =
      verifier->Verify(Mint("RS256", TestRsaKey().private_pem, ValidClaims()), kNowTime);
  ASSERT_TRUE(subject.ok()) << subject.status();
  EXPECT_EQ(*subject, "alice");
}

TEST_F(JwtVerifierTest, Rs256WrongKeyIsRejected) {
  std::unique_ptr<JwtVerifier> verifier = Rs256();
  const RsaKeyPair other = GenerateRsaKeyPair(2048);
  ExpectRejected(*verifier, Mint("RS256", other.private_pem, ValidClaims()),
                 "signature does not verify");
}

TEST_F(JwtVerifierTest, SubjectFallbackAndValidation) {
  const std::string no_subject = Mint("HS256", kSecret, Json{{"exp", kNow + 60}});
  EXPECT_EQ(*Hs256()->Verify(no_subject, kNowTime), "jwt");
  JwtVerifierOptions options;
  options.subject_fallback = "";
  ExpectRejected(*Hs256(options), no_subject, "no 'sub'");
  ExpectRejected(*Hs256(), Mint("HS256", kSecret, Json{{"exp", kNow + 60}, {"sub", 42}}),
                 "'sub' must be a string");
  ExpectRejected(*Hs256(), Mint("HS256", kSecret, Json{{"exp", kNow + 60}, {"sub", "a\nb"}}),
                 "'sub' must be a string");
  ExpectRejected(*Hs256(), Mint("HS256", kSecret, Json{{"exp", "tomorrow"}, {"sub", "a"}}),
                 "'exp' is not a number");
}

TEST_F(JwtVerifierTest, ModelsClaimLimitsTheTokenAndIsValidated) {
  std::unique_ptr<JwtVerifier> verifier = Hs256();
  absl::StatusOr<JwtIdentity> limited = verifier->VerifyIdentity(
      Mint("HS256", kSecret,
           Json{{"sub", "alice"}, {"exp", kNow + 60}, {"models", {"tiny", "sql", "tiny"}}}),
      kNowTime);
  ASSERT_TRUE(limited.ok()) << limited.status();
  EXPECT_EQ(limited->subject, "alice");
  EXPECT_EQ(limited->models, (std::vector<std::string>{"sql", "tiny"}));
  absl::StatusOr<JwtIdentity> open =
      verifier->VerifyIdentity(Mint("HS256", kSecret, ValidClaims()), kNowTime);
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_TRUE(open->models.empty());
  for (const Json& models : {Json("tiny"), Json::array(), Json{1, 2}, Json{"ok", "a\nb"},
                             Json(std::vector<std::string>(kMaxJwtModels + 1, "m"))}) {
    ExpectRejected(
        *verifier,
        Mint("HS256", kSecret, Json{{"sub", "a"}, {"exp", kNow + 60}, {"models", models}}),
        "claim 'models' must");
  }
}

TEST_F(JwtVerifierTest, MalformedTokensAreRejectedWithoutCrashing) {
  std::unique_ptr<JwtVerifier> verifier = Hs256();
  const std::string good = Mint("HS256", kSecret, ValidClaims());
  ExpectRejected(*verifier, "", "empty token");
  ExpectRejected(*verifier, "abc", "expected 3");
  ExpectRejected(*verifier, "a.b", "expected 3");
  ExpectRejected(*verifier, "a.b.c.d", "expected 3");
  ExpectRejected(*verifier, "..", "header is not base64url");
  ExpectRejected(*verifier, "!!!.e30.abc", "header is not base64url");
  ExpectRejected(*verifier, absl::StrCat(Base64Url("not json"), ".e30.abc"), "not a JSON object");
  ExpectRejected(*verifier, absl::StrCat(Base64Url("[1,2]"), ".e30.abc"), "not a JSON object");
  ExpectRejected(*verifier, good.substr(0, good.rfind('.') + 1), "no signature");
  ExpectRejected(*verifier, absl::StrCat(good, "="), "signature is not base64url");
  ExpectRejected(*verifier, std::string(20000, 'a'), "more than");
  // Every single-byte truncation of a good token fails cleanly.
  for (size_t length = 0; length < good.size(); ++length) {
    EXPECT_FALSE(verifier->Verify(good.substr(0, length), kNowTime).ok()) << length;
  }
  // A correctly signed payload that is not a JSON object.
  ExpectRejected(*verifier, Handmade(Json{{"alg", "HS256"}}, Json::array(), kSecret),
                 "payload is not a JSON object");
}

TEST_F(JwtVerifierTest, CreateValidatesKeys) {
  JwtVerifierOptions options;
  options.key_file = dir_.File("missing");
  EXPECT_EQ(JwtVerifier::Create(options).status().code(), absl::StatusCode::kNotFound);

  options.key_file = dir_.File("short");
  WriteFile(options.key_file, "too-short\n");
  absl::StatusOr<std::unique_ptr<JwtVerifier>> short_secret = JwtVerifier::Create(options);
  EXPECT_EQ(short_secret.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(short_secret.status().message(), HasSubstr("is 9 bytes; at least 32"));

  options.algorithm = JwtAlgorithm::kRs256;
  options.key_file = dir_.File("private.pem");
  WriteFile(options.key_file, TestRsaKey().private_pem);
  absl::StatusOr<std::unique_ptr<JwtVerifier>> private_key = JwtVerifier::Create(options);
  EXPECT_EQ(private_key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(private_key.status().message(), HasSubstr("is not a PEM public key"));

  options.key_file = dir_.File("small.pem");
  WriteFile(options.key_file, GenerateRsaKeyPair(1024).public_pem);
  absl::StatusOr<std::unique_ptr<JwtVerifier>> small_key = JwtVerifier::Create(options);
  EXPECT_EQ(small_key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(small_key.status().message(), HasSubstr("1024-bit RSA key"));

  options.key_file = dir_.File("public.pem");
  WriteFile(options.key_file, TestRsaKey().public_pem);
  options.leeway = absl::Seconds(-1);
  EXPECT_EQ(JwtVerifier::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(JwtVerifierTest, JwksTokenWithKidIsCheckedAgainstThatKey) {
  std::unique_ptr<JwtVerifier> verifier = TwoKeyJwks();
  ASSERT_NE(verifier, nullptr);
  absl::StatusOr<std::string> subject =
      verifier->Verify(SignRs256(Rs256Header("a"), ValidClaims(), TestRsaKey()), kNowTime);
  ASSERT_TRUE(subject.ok()) << subject.status();
  EXPECT_EQ(*subject, "alice");
  subject = verifier->Verify(SignRs256(Rs256Header("b"), ValidClaims(), SecondRsaKey()), kNowTime);
  ASSERT_TRUE(subject.ok()) << subject.status();
  EXPECT_EQ(*subject, "alice");
  // Claims are still checked after a JWKS signature check.
  ExpectRejected(
      *verifier,
      SignRs256(Rs256Header("a"), Json{{"sub", "x"}, {"exp", kNow - 3600}}, TestRsaKey()),
      "expired");
}

TEST_F(JwtVerifierTest, JwksWrongOrUnknownKidIsRejected) {
  std::unique_ptr<JwtVerifier> verifier = TwoKeyJwks();
  ASSERT_NE(verifier, nullptr);
  // Signed with key a, naming key b: only b is tried.
  ExpectRejected(*verifier, SignRs256(Rs256Header("b"), ValidClaims(), TestRsaKey()),
                 "signature does not verify");
  ExpectRejected(*verifier, SignRs256(Rs256Header("c"), ValidClaims(), TestRsaKey()),
                 "unknown key id 'c'");
  ExpectRejected(*verifier, SignRs256(Rs256Header(""), ValidClaims(), TestRsaKey()),
                 "unknown key id ''");
  // A hostile kid is escaped and cut short in the message.
  absl::StatusOr<std::string> long_kid = verifier->Verify(
      SignRs256(Rs256Header(std::string(1000, 'k') + "\n"), ValidClaims(), TestRsaKey()), kNowTime);
  EXPECT_EQ(long_kid.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(long_kid.status().message(), HasSubstr("unknown key id 'kkk"));
  EXPECT_LT(long_kid.status().message().size(), 200u);
  Json numeric_kid = Rs256Header(std::nullopt);
  numeric_kid["kid"] = 7;
  ExpectRejected(*verifier, SignRs256(numeric_kid, ValidClaims(), TestRsaKey()),
                 "'kid' is not a string");
}

TEST_F(JwtVerifierTest, JwksTokenWithoutKidTriesEveryKey) {
  std::unique_ptr<JwtVerifier> verifier = TwoKeyJwks();
  ASSERT_NE(verifier, nullptr);
  EXPECT_TRUE(
      verifier->Verify(SignRs256(Rs256Header(std::nullopt), ValidClaims(), TestRsaKey()), kNowTime)
          .ok());
  EXPECT_TRUE(
      verifier
          ->Verify(SignRs256(Rs256Header(std::nullopt), ValidClaims(), SecondRsaKey()), kNowTime)
          .ok());
  // cpp-jwt's own RS256 tokens (no kid) verify too.
  EXPECT_TRUE(
      verifier->Verify(Mint("RS256", SecondRsaKey().private_pem, ValidClaims()), kNowTime).ok());
  ExpectRejected(*verifier, SignRs256(Rs256Header(std::nullopt), ValidClaims(), UnlistedRsaKey()),
                 "signature does not verify");
}

TEST_F(JwtVerifierTest, JwksKeysWithoutKidAreTriedOnlyForTokensWithoutKid) {
  absl::StatusOr<std::unique_ptr<JwtVerifier>> verifier = CreateWithJwks(
      Json::array({RsaJwk(TestRsaKey(), std::nullopt), RsaJwk(SecondRsaKey(), "b")}));
  ASSERT_TRUE(verifier.ok()) << verifier.status();
  EXPECT_TRUE(
      (*verifier)
          ->Verify(SignRs256(Rs256Header(std::nullopt), ValidClaims(), TestRsaKey()), kNowTime)
          .ok());
  ExpectRejected(**verifier, SignRs256(Rs256Header("a"), ValidClaims(), TestRsaKey()),
                 "unknown key id 'a'");
}

TEST_F(JwtVerifierTest, JwksAlgSwapIsRejected) {
  std::unique_ptr<JwtVerifier> verifier = TwoKeyJwks();
  ASSERT_NE(verifier, nullptr);
  // HMAC keyed with what an attacker can see: the PEM, or the JWK's n.
  const std::string n = RsaJwk(TestRsaKey(), "a")["n"].get<std::string>();
  for (const std::string& public_material : {TestRsaKey().public_pem, n}) {
    ExpectRejected(*verifier,
                   Handmade(Json{{"alg", "HS256"}, {"kid", "a"}}, ValidClaims(), public_material),
                   "token algorithm 'HS256' is not the configured RS256");
    ExpectRejected(*verifier, Mint("HS256", public_material, ValidClaims()),
                   "not the configured RS256");
  }
  ExpectRejected(*verifier, Handmade(Json{{"alg", "none"}, {"kid", "a"}}, ValidClaims(), ""),
                 "alg 'none'");
}

TEST_F(JwtVerifierTest, JwksSkipsKeysForOtherAlgorithmsAndUses) {
  Json encryption_key = RsaJwk(UnlistedRsaKey(), "enc");
  encryption_key["use"] = "enc";
  Json rs512_key = RsaJwk(UnlistedRsaKey(), "rs512");
  rs512_key["alg"] = "RS512";
  Json explicit_key = RsaJwk(TestRsaKey(), "a");
  explicit_key["alg"] = "RS256";
  explicit_key["use"] = "sig";
  absl::StatusOr<std::unique_ptr<JwtVerifier>> verifier =
      CreateWithJwks(Json::array({EcJwk("ec"), Json{{"kty", "oct"}, {"k", "c2VjcmV0"}},
                                  encryption_key, rs512_key, explicit_key}));
  ASSERT_TRUE(verifier.ok()) << verifier.status();
  EXPECT_TRUE(
      (*verifier)->Verify(SignRs256(Rs256Header("a"), ValidClaims(), TestRsaKey()), kNowTime).ok());
  // Skipped keys are not there at all: not by kid, not by trying every key.
  ExpectRejected(**verifier, SignRs256(Rs256Header("ec"), ValidClaims(), TestRsaKey()),
                 "unknown key id 'ec'");
  ExpectRejected(**verifier, SignRs256(Rs256Header("enc"), ValidClaims(), UnlistedRsaKey()),
                 "unknown key id 'enc'");
  ExpectRejected(**verifier, SignRs256(Rs256Header(std::nullopt), ValidClaims(), UnlistedRsaKey()),
                 "signature does not verify");
}

TEST_F(JwtVerifierTest, JwksWithoutUsableKeyIsRefused) {
  ExpectJwksRefused(Json::array({EcJwk("ec1"), EcJwk("ec2")}),
                    {"no usable key", "2 entries were skipped"});
  ExpectJwksRefused(Json::array(), {"no usable key"});
}

TEST_F(JwtVerifierTest, MalformedJwksIsRefusedNamingFileAndKey) {
  for (const std::string& text :
       {std::string("{\"keys\": [{\"kty\": \"RSA\",}]}"), std::string(""), std::string("[]"),
        std::string("{\"keys\": {}}"), std::string("{}")}) {
    absl::StatusOr<std::unique_ptr<JwtVerifier>> verifier = CreateWithJwksText(text);
    EXPECT_EQ(verifier.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(verifier.status().message(), HasSubstr(dir_.File("jwks.json"))) << text;
  }
  EXPECT_THAT(CreateWithJwksText("{\"keys\": [{\"kty\": \"RSA\",}]}").status().message(),
              HasSubstr("is not valid JSON (error at byte"));

  const Json good = RsaJwk(TestRsaKey(), "a");
  ExpectJwksRefused(Json::array({good, 42}), {"key 1: is not a JSON object"});
  Json bad_n = RsaJwk(SecondRsaKey(), "b");
  bad_n["n"] = "not+base64/url==";
  ExpectJwksRefused(Json::array({good, bad_n}), {"key 1: 'n' is not base64url"});
  Json bad_e = RsaJwk(SecondRsaKey(), "b");
  bad_e["e"] = "A";  // one base64 character cannot encode a byte
  ExpectJwksRefused(Json::array({bad_e, good}), {"key 0: 'e' is not base64url"});
  Json no_n = RsaJwk(SecondRsaKey(), "b");
  no_n.erase("n");
  ExpectJwksRefused(Json::array({good, no_n}), {"key 1: has no 'n'"});
  ExpectJwksRefused(Json::array({Json{{"kid", "x"}}}), {"key 0: has no 'kty'"});
  Json numeric_kid = RsaJwk(SecondRsaKey(), std::nullopt);
  numeric_kid["kid"] = 3;
  ExpectJwksRefused(Json::array({good, numeric_kid}), {"key 1: 'kid' is not a string"});
}

TEST_F(JwtVerifierTest, JwksRefusesUnsafeKeys) {
  const Json good = RsaJwk(TestRsaKey(), "a");
  // Too small: refused, not skipped, as a 1024-bit PEM key file is.
  ExpectJwksRefused(Json::array({good, RsaJwk(GenerateRsaKeyPair(1024), "small")}),
                    {"key 1: is a 1024-bit RSA key"});
  // e = 1 would accept forged signatures.
  Json exponent_one = RsaJwk(SecondRsaKey(), "b");
  exponent_one["e"] = "AQ";
  ExpectJwksRefused(Json::array({good, exponent_one}),
                    {"key 1: 'e' is not an RSA public exponent"});
  Json private_key = RsaJwk(SecondRsaKey(), "b");
  private_key["d"] = "AQAB";
  ExpectJwksRefused(Json::array({good, private_key}), {"key 1: holds private key material"});
  ExpectJwksRefused(Json::array({good, RsaJwk(SecondRsaKey(), "a")}),
                    {"key 1: kid 'a' is already used"});
}

TEST_F(JwtVerifierTest, JwksLimits) {
  const Json good = RsaJwk(TestRsaKey(), std::nullopt);
  Json keys = Json::array();
  for (size_t i = 0; i < kMaxJwksKeys; ++i) keys.push_back(EcJwk(absl::StrCat("ec", i)));
  keys.push_back(good);
  ExpectJwksRefused(keys, {"has 65 keys; at most 64"});
  keys.erase(keys.begin());
  EXPECT_TRUE(CreateWithJwks(keys).ok());

  Json padded{{"keys", Json::array({good})}, {"padding", std::string(kMaxJwksFileBytes, ' ')}};
  absl::StatusOr<std::unique_ptr<JwtVerifier>> too_large = CreateWithJwksText(padded.dump());
  EXPECT_EQ(too_large.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_large.status().message(), HasSubstr("is larger than 1048576 bytes"));
}

TEST_F(JwtVerifierTest, JwksOptionsAreChecked) {
  JwtVerifierOptions options;
  options.algorithm = JwtAlgorithm::kRs256;
  options.jwks_file = dir_.File("missing.json");
  EXPECT_EQ(JwtVerifier::Create(options).status().code(), absl::StatusCode::kNotFound);

  options.jwks_file = dir_.File("jwks.json");
  WriteFile(options.jwks_file, Json{{"keys", Json::array({RsaJwk(TestRsaKey(), "a")})}}.dump());
  options.key_file = dir_.File("public.pem");
  WriteFile(options.key_file, TestRsaKey().public_pem);
  absl::StatusOr<std::unique_ptr<JwtVerifier>> both = JwtVerifier::Create(options);
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(both.status().message(), HasSubstr("give one"));

  options.key_file = "";
  options.algorithm = JwtAlgorithm::kHs256;
  absl::StatusOr<std::unique_ptr<JwtVerifier>> hs256 = JwtVerifier::Create(options);
  EXPECT_EQ(hs256.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(hs256.status().message(), HasSubstr("cannot be used with HS256"));
}

TEST_F(JwtVerifierTest, PemKeyFileIgnoresKid) {
  // A single configured key is the issuer's key whatever the token's kid says (as before JWKS).
  std::unique_ptr<JwtVerifier> verifier = Rs256();
  EXPECT_TRUE(
      verifier->Verify(SignRs256(Rs256Header("any"), ValidClaims(), TestRsaKey()), kNowTime).ok());
}

TEST(JwtAlgorithmTest, ParsesNames) {
  EXPECT_EQ(*ParseJwtAlgorithm("HS256"), JwtAlgorithm::kHs256);
  EXPECT_EQ(*ParseJwtAlgorithm("rs256"), JwtAlgorithm::kRs256);
  EXPECT_EQ(ParseJwtAlgorithm("none").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseJwtAlgorithm("ES256").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(JwtAlgorithmName(JwtAlgorithm::kRs256), "RS256");
}

}  // namespace
}  // namespace llmserve::gateway
