// Authenticator: Bearer parsing, API key vs JWT dispatch, anonymous mode, and IsLoopbackAddress.

#include "gateway/admission/authenticator.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "jwt/jwt.hpp"
#include "tests/testing/scoped_temp_dir.h"

namespace llmserve::gateway {
namespace {

using ::testing::HasSubstr;

constexpr char kSecret[] = "an-hs256-secret-that-is-long-enough-0123456789";
constexpr int64_t kNow = 1700000000;
const absl::Time kNowTime = absl::FromUnixSeconds(kNow);
// FIPS 180-2's SHA-256 of "abc".
constexpr char kAbcHash[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
}

std::string MintHs256(const std::string& subject, int64_t exp) {
  jwt::jwt_object token{jwt::params::algorithm("HS256"), jwt::params::secret(kSecret)};
  token.add_claim("sub", subject);
  token.add_claim("exp", exp);
  return token.signature();
}

class AuthenticatorTest : public ::testing::Test {
 protected:
  std::shared_ptr<ApiKeyStore> Keys(const std::string& contents) {
    const std::string path = dir_.File("keys.txt");
    WriteFile(path, contents);
    absl::StatusOr<std::unique_ptr<ApiKeyStore>> store = ApiKeyStore::Load(path);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::shared_ptr<ApiKeyStore>(*std::move(store)) : nullptr;
  }
  std::shared_ptr<JwtVerifier> Jwt() {
    JwtVerifierOptions options;
    options.key_file = dir_.File("secret");
    WriteFile(options.key_file, kSecret);
    absl::StatusOr<std::unique_ptr<JwtVerifier>> verifier = JwtVerifier::Create(options);
    EXPECT_TRUE(verifier.ok()) << verifier.status();
    return verifier.ok() ? std::shared_ptr<JwtVerifier>(*std::move(verifier)) : nullptr;
  }

  testing::ScopedTempDir dir_;
};

TEST_F(AuthenticatorTest, NothingConfiguredMeansAnonymous) {
  Authenticator authenticator(nullptr, nullptr);
  EXPECT_TRUE(authenticator.allows_anonymous());
  for (const char* header : {"", "Bearer whatever", "garbage"}) {
    absl::StatusOr<Principal> principal = authenticator.Authenticate(header, kNowTime);
    ASSERT_TRUE(principal.ok()) << principal.status();
    EXPECT_EQ(principal->name, "anonymous");
    EXPECT_EQ(principal->kind, Principal::Kind::kAnonymous);
    // Only a loopback gateway runs without auth: its callers may do everything.
    EXPECT_TRUE(principal->admin);
    EXPECT_TRUE(principal->MayUseModel("any"));
  }
}

TEST_F(AuthenticatorTest, KeysAndTokensCarryTheirModelsAndOnlyKeysAreAdmin) {
  Authenticator authenticator(Keys(absl::StrCat("app ", kAbcHash, " models=sql,tiny\nops ",
                                                Sha256Hex("ops-key"), " admin\n")),
                              Jwt());
  absl::StatusOr<Principal> app = authenticator.Authenticate("Bearer abc", kNowTime);
  ASSERT_TRUE(app.ok()) << app.status();
  EXPECT_FALSE(app->admin);
  EXPECT_TRUE(app->MayUseModel("sql"));
  EXPECT_TRUE(app->MayUseModel("tiny"));
  EXPECT_FALSE(app->MayUseModel("sq"));
  EXPECT_TRUE(CheckModelAccess(*app, "tiny").ok());
  const absl::Status denied = CheckModelAccess(*app, "big");
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(denied.message(), "API key \"app\" may not use model \"big\"");

  absl::StatusOr<Principal> ops = authenticator.Authenticate("Bearer ops-key", kNowTime);
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_TRUE(ops->admin);
  EXPECT_TRUE(ops->MayUseModel("big"));

  jwt::jwt_object token{jwt::params::algorithm("HS256"), jwt::params::secret(kSecret)};
  token.add_claim("sub", "carol");
  token.add_claim("exp", kNow + 60);
  token.add_claim("models", std::vector<std::string>{"tiny", "sql"});
  absl::StatusOr<Principal> carol =
      authenticator.Authenticate(absl::StrCat("Bearer ", token.signature()), kNowTime);
  ASSERT_TRUE(carol.ok()) << carol.status();
  EXPECT_EQ(carol->models, (std::vector<std::string>{"sql", "tiny"}));
  EXPECT_FALSE(carol->admin);
  EXPECT_EQ(CheckModelAccess(*carol, "big").message(),
            "the token of \"carol\" may not use model \"big\"");
  // A JWT without the claim may use every model.
  absl::StatusOr<Principal> bob =
      authenticator.Authenticate(absl::StrCat("Bearer ", MintHs256("bob", kNow + 60)), kNowTime);
  ASSERT_TRUE(bob.ok()) << bob.status();
  EXPECT_TRUE(bob->models.empty());
  EXPECT_FALSE(bob->admin);
}

TEST_F(AuthenticatorTest, ApiKeyInBearerHeader) {
  Authenticator authenticator(Keys(absl::StrCat("alice ", kAbcHash, "\n")), nullptr);
  EXPECT_FALSE(authenticator.allows_anonymous());
  for (const char* header : {"Bearer abc", "bearer abc", "BEARER   abc", "  Bearer abc \r\n"}) {
    absl::StatusOr<Principal> principal = authenticator.Authenticate(header, kNowTime);
    ASSERT_TRUE(principal.ok()) << header << ": " << principal.status();
    EXPECT_EQ(principal->name, "alice");
    EXPECT_EQ(principal->kind, Principal::Kind::kApiKey);
  }
  EXPECT_EQ(PrincipalKindName(Principal::Kind::kApiKey), "api_key");
}

TEST_F(AuthenticatorTest, BadHeadersAreUnauthenticated) {
  Authenticator authenticator(Keys(absl::StrCat("alice ", kAbcHash, "\n")), Jwt());
  struct Case {
    std::string header;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"", "missing credentials"},
      {"Bearer", "not a Bearer token"},
      {"Bearer ", "not a Bearer token"},
      {"Basic YWxpY2U6YWJj", "not a Bearer token"},
      {"Bearerabc", "not a Bearer token"},
      {"abc", "not a Bearer token"},
      {"Bearer ab c", "contains a space"},
      {"Bearer ab\x01", "non-printable"},
      {"Bearer \xc3\xa9t\xc3\xa9", "non-printable"},
      {"Bearer wrong-key", "invalid API key"},
      {absl::StrCat("Bearer ", std::string(20000, 'k')), "more than"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Principal> principal = authenticator.Authenticate(c.header, kNowTime);
    EXPECT_EQ(principal.status().code(), absl::StatusCode::kUnauthenticated) << c.header;
    EXPECT_THAT(principal.status().message(), HasSubstr(c.reason)) << c.header;
  }
}

TEST_F(AuthenticatorTest, JwtInBearerHeader) {
  Authenticator authenticator(Keys(absl::StrCat("alice ", kAbcHash, "\n")), Jwt());
  absl::StatusOr<Principal> principal =
      authenticator.Authenticate(absl::StrCat("Bearer ", MintHs256("bob", kNow + 60)), kNowTime);
  ASSERT_TRUE(principal.ok()) << principal.status();
  EXPECT_EQ(principal->name, "bob");
  EXPECT_EQ(principal->kind, Principal::Kind::kJwt);

  // A JWT's own error is reported, not "invalid API key".
  absl::StatusOr<Principal> expired =
      authenticator.Authenticate(absl::StrCat("Bearer ", MintHs256("bob", kNow - 600)), kNowTime);
  EXPECT_EQ(expired.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(expired.status().message(), HasSubstr("expired"));

  // API keys still work next to JWTs.
  EXPECT_EQ(authenticator.Authenticate("Bearer abc", kNowTime)->name, "alice");
}

TEST_F(AuthenticatorTest, ApiKeyWithTwoDotsStillWorksWhenJwtIsConfigured) {
  Authenticator authenticator(Keys(absl::StrCat("dotted ", Sha256Hex("sk.odd.key"), "\n")), Jwt());
  absl::StatusOr<Principal> principal = authenticator.Authenticate("Bearer sk.odd.key", kNowTime);
  ASSERT_TRUE(principal.ok()) << principal.status();
  EXPECT_EQ(principal->name, "dotted");
  EXPECT_EQ(principal->kind, Principal::Kind::kApiKey);
}

TEST_F(AuthenticatorTest, JwtOnlyRejectsOtherTokens) {
  Authenticator authenticator(nullptr, Jwt());
  absl::StatusOr<Principal> principal = authenticator.Authenticate("Bearer abc", kNowTime);
  EXPECT_EQ(principal.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(principal.status().message(), HasSubstr("not a JWT, and API keys are not enabled"));
}

TEST_F(AuthenticatorTest, RevokedKeyIsRejectedAfterReload) {
  std::shared_ptr<ApiKeyStore> keys = Keys(absl::StrCat("alice ", kAbcHash, "\n"));
  Authenticator authenticator(keys, nullptr);
  EXPECT_TRUE(authenticator.Authenticate("Bearer abc", kNowTime).ok());
  // A new file (new inode, different size) without alice.
  const std::string replacement = dir_.File("keys.new");
  WriteFile(replacement, absl::StrCat("bob ", Sha256Hex("bob-key"), "\n# alice revoked\n"));
  std::filesystem::rename(replacement, keys->path());
  ASSERT_TRUE(*keys->ReloadIfChanged());
  EXPECT_EQ(authenticator.Authenticate("Bearer abc", kNowTime).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(authenticator.Authenticate("Bearer bob-key", kNowTime)->name, "bob");
}

TEST(IsLoopbackAddressTest, Loopback) {
  for (const char* host :
       {"localhost", "LOCALHOST", "127.0.0.1", "127.1.2.3", "127.0.0.1:8080", "localhost:80", "::1",
        "[::1]", "[::1]:8080", "::ffff:127.0.0.1", "0:0:0:0:0:0:0:1", " 127.0.0.1 "}) {
    EXPECT_TRUE(IsLoopbackAddress(host)) << host;
  }
}

TEST(IsLoopbackAddressTest, NotLoopback) {
  for (const char* host :
       {"", "0.0.0.0", "0.0.0.0:8080", "::", "[::]:8080", "10.0.0.1", "128.0.0.1", "192.168.1.1:80",
        "example.com", "localhost.evil.com", "127.0.0.1.nip.io", "[::1", "[::1]x",
        "::ffff:10.0.0.1", "fe80::1", "1.2.3"}) {
    EXPECT_FALSE(IsLoopbackAddress(host)) << host;
  }
}

}  // namespace
}  // namespace llmserve::gateway
