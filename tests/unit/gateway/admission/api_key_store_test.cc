// ApiKeyStore: the keys file format, constant-time lookup results and hot reload.

#include "gateway/admission/api_key_store.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"

namespace llmserve::gateway {
namespace {

using ::testing::HasSubstr;

// FIPS 180-2's test vector: the SHA-256 of "abc", independent of the code under test.
constexpr char kAbcHash[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

void WriteFile(const std::string& path, const std::string& contents) {
  // Write then rename, as a deploy would, so the store sees a new inode.
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << contents;
  }
  std::filesystem::rename(temp, path);
}

TEST(Sha256HexTest, MatchesKnownVectors) {
  EXPECT_EQ(Sha256Hex("abc"), kAbcHash);
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(ParseApiKeysTest, ParsesNamesHashesCommentsAndBlankLines) {
  const std::string contents =
      absl::StrCat("# production keys\n\n  alice   ", kAbcHash, "  \r\n\t# indented comment\nbob\t",
                   absl::AsciiStrToUpper(Sha256Hex("bob-key")), "\n");
  absl::StatusOr<std::vector<ApiKeyEntry>> entries = ParseApiKeys(contents, "keys.txt");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_EQ((*entries)[0].name, "alice");
  EXPECT_EQ((*entries)[0].key_hash[0], 0xba);
  EXPECT_EQ((*entries)[0].key_hash[31], 0xad);
  EXPECT_EQ((*entries)[1].name, "bob");
}

TEST(ParseApiKeysTest, EmptyFileHasNoKeys) {
  absl::StatusOr<std::vector<ApiKeyEntry>> entries = ParseApiKeys("# nobody\n\n", "keys.txt");
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_TRUE(entries->empty());
}

TEST(ParseApiKeysTest, MalformedLinesNameFileAndLine) {
  struct Case {
    std::string contents;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"alice\n", "keys.txt:1: expected 'NAME SHA256HEX [models=MODEL,...] [admin]', found 1"},
      {absl::StrCat("# c\nalice ", kAbcHash, " extra\n"),
       "keys.txt:2: key \"alice\": unknown attribute \"extra\""},
      {absl::StrCat("alice ", kAbcHash, " models=\n"), "models=: empty list"},
      {absl::StrCat("alice ", kAbcHash, " models=a,,b\n"), "must be 1-256 characters, found 0"},
      {absl::StrCat("alice ", kAbcHash, " models=a models=b\n"), "has models= twice"},
      {absl::StrCat("alice ", kAbcHash, " admin admin\n"), "says admin twice"},
      {absl::StrCat("alice ", kAbcHash, " Admin\n"), "unknown attribute \"Admin\""},
      {absl::StrCat("alice ", kAbcHash, " # trailing comment\n"), "keys.txt:1:"},
      {"alice sk-raw-key-pasted-by-mistake\n", "keys.txt:1: the hash of key \"alice\" must be 64"},
      {absl::StrCat("alice ", std::string(kAbcHash).substr(1), "\n"), "found 63 characters"},
      {absl::StrCat("alice ", std::string(63, 'a'), "g\n"), "must be 64 hex digits"},
      {absl::StrCat("al ice\n"), "keys.txt:1:"},
      {absl::StrCat("al\"ice ", kAbcHash, "\n"), "may only contain"},
      {absl::StrCat(std::string(129, 'n'), " ", kAbcHash, "\n"), "at most 128"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<ApiKeyEntry>> entries = ParseApiKeys(c.contents, "keys.txt");
    EXPECT_EQ(entries.status().code(), absl::StatusCode::kInvalidArgument) << c.contents;
    EXPECT_THAT(entries.status().message(), HasSubstr(c.expected)) << c.contents;
  }
}

TEST(ParseApiKeysTest, KeysMayBeLimitedToModelsAndMarkedAdmin) {
  absl::StatusOr<std::vector<ApiKeyEntry>> entries =
      ParseApiKeys(absl::StrCat("app ", kAbcHash, " models=sql-lora,meta/llama-3,sql-lora\nops ",
                                Sha256Hex("ops-key"), " admin\nboth ", Sha256Hex("both-key"),
                                " admin models=tiny\nplain ", Sha256Hex("plain-key"), "\n"),
                   "keys.txt");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 4u);
  EXPECT_EQ((*entries)[0].models, (std::vector<std::string>{"meta/llama-3", "sql-lora"}));
  EXPECT_FALSE((*entries)[0].admin);
  EXPECT_TRUE((*entries)[1].models.empty());
  EXPECT_TRUE((*entries)[1].admin);
  EXPECT_EQ((*entries)[2].models, std::vector<std::string>{"tiny"});
  EXPECT_TRUE((*entries)[2].admin);
  EXPECT_TRUE((*entries)[3].models.empty());
  EXPECT_FALSE((*entries)[3].admin);
}

TEST(ParseApiKeysTest, RawKeyIsNotEchoedInErrors) {
  absl::StatusOr<std::vector<ApiKeyEntry>> entries =
      ParseApiKeys("alice sk-very-secret-value\n", "keys.txt");
  ASSERT_FALSE(entries.ok());
  EXPECT_THAT(std::string(entries.status().message()),
              ::testing::Not(HasSubstr("sk-very-secret-value")));
}

TEST(ParseApiKeysTest, DuplicateNamesAndHashesAreErrors) {
  absl::StatusOr<std::vector<ApiKeyEntry>> duplicate_name = ParseApiKeys(
      absl::StrCat("alice ", kAbcHash, "\n\nalice ", Sha256Hex("other"), "\n"), "keys.txt");
  EXPECT_EQ(duplicate_name.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(duplicate_name.status().message(),
              HasSubstr("keys.txt:3: duplicate key name \"alice\" (first on line 1)"));

  // The same hash in another case is the same key.
  absl::StatusOr<std::vector<ApiKeyEntry>> duplicate_hash = ParseApiKeys(
      absl::StrCat("alice ", kAbcHash, "\nbob ", absl::AsciiStrToUpper(kAbcHash)), "keys.txt");
  EXPECT_EQ(duplicate_hash.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(duplicate_hash.status().message(),
              HasSubstr("keys.txt:2: key \"bob\" has the same hash as key \"alice\" on line 1"));
}

TEST(ApiKeyStoreTest, AuthenticatesRightKeyAndRejectsWrongOnes) {
  testing::ScopedTempDir dir;
  const std::string path = dir.File("keys.txt");
  WriteFile(path, absl::StrCat("alice ", kAbcHash, "\nbob ", Sha256Hex("bob-key"), "\n"));
  absl::StatusOr<std::unique_ptr<ApiKeyStore>> store = ApiKeyStore::Load(path);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->size(), 2u);

  absl::StatusOr<std::string> alice = (*store)->Authenticate("abc");
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_EQ(*alice, "alice");
  EXPECT_EQ(*(*store)->Authenticate("bob-key"), "bob");

  for (const char* wrong : {"abd", "ab", "abc ", "ABC", "", kAbcHash}) {
    absl::StatusOr<std::string> result = (*store)->Authenticate(wrong);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kUnauthenticated) << wrong;
  }
  EXPECT_THAT((*store)->Authenticate("not-a-key").status().message(),
              ::testing::Not(HasSubstr("not-a-key")));
}

TEST(ApiKeyStoreTest, LoadErrors) {
  testing::ScopedTempDir dir;
  EXPECT_EQ(ApiKeyStore::Load(dir.File("missing.txt")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ApiKeyStore::Load(dir.path()).status().code(), absl::StatusCode::kInvalidArgument);
  const std::string path = dir.File("keys.txt");
  WriteFile(path, "alice not-a-hash\n");
  absl::StatusOr<std::unique_ptr<ApiKeyStore>> store = ApiKeyStore::Load(path);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(store.status().message(), HasSubstr(absl::StrCat(path, ":1:")));
}

TEST(ApiKeyStoreTest, ReloadAddsAndRevokesKeys) {
  testing::ScopedTempDir dir;
  const std::string path = dir.File("keys.txt");
  WriteFile(path, absl::StrCat("alice ", kAbcHash, "\n"));
  absl::StatusOr<std::unique_ptr<ApiKeyStore>> loaded = ApiKeyStore::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ApiKeyStore& store = **loaded;

  absl::StatusOr<bool> unchanged = store.ReloadIfChanged();
  ASSERT_TRUE(unchanged.ok()) << unchanged.status();
  EXPECT_FALSE(*unchanged);

  // alice is revoked, carol is added.
  WriteFile(path, absl::StrCat("carol ", Sha256Hex("carol-key"), "\n"));
  absl::StatusOr<bool> reloaded = store.ReloadIfChanged();
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_TRUE(*reloaded);
  EXPECT_EQ(store.Authenticate("abc").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(*store.Authenticate("carol-key"), "carol");
  EXPECT_FALSE(*store.ReloadIfChanged());
}

TEST(ApiKeyStoreTest, InPlaceRewriteIsNoticed) {
  testing::ScopedTempDir dir;
  const std::string path = dir.File("keys.txt");
  WriteFile(path, absl::StrCat("alice ", kAbcHash, "\n"));
  std::unique_ptr<ApiKeyStore> store = *ApiKeyStore::Load(path);
  {
    // Same inode, different size.
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << "alice " << kAbcHash << "\nbob " << Sha256Hex("bob-key") << "\n";
  }
  EXPECT_TRUE(*store->ReloadIfChanged());
  EXPECT_EQ(*store->Authenticate("bob-key"), "bob");
}

TEST(ApiKeyStoreTest, FailedReloadKeepsOldKeys) {
  testing::ScopedTempDir dir;
  const std::string path = dir.File("keys.txt");
  WriteFile(path, absl::StrCat("alice ", kAbcHash, "\n"));
  std::unique_ptr<ApiKeyStore> store = *ApiKeyStore::Load(path);

  WriteFile(path, absl::StrCat("carol ", Sha256Hex("carol-key"), "\nbroken line here\n"));
  absl::StatusOr<bool> reload = store->ReloadIfChanged();
  EXPECT_EQ(reload.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(reload.status().message(), HasSubstr(absl::StrCat(path, ":2:")));
  EXPECT_THAT(reload.status().message(), HasSubstr("keeping the previous 1 keys"));
  EXPECT_EQ(*store->Authenticate("abc"), "alice");
  EXPECT_EQ(store->Authenticate("carol-key").status().code(), absl::StatusCode::kUnauthenticated);
  // The broken version is reported once, not on every poll.
  EXPECT_FALSE(*store->ReloadIfChanged());

  // A missing file is an error too, and the keys stay.
  std::filesystem::remove(path);
  EXPECT_EQ(store->ReloadIfChanged().status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*store->Authenticate("abc"), "alice");

  // Fixing the file installs the new keys.
  WriteFile(path, absl::StrCat("carol ", Sha256Hex("carol-key"), "\n"));
  EXPECT_TRUE(*store->ReloadIfChanged());
  EXPECT_EQ(*store->Authenticate("carol-key"), "carol");
}

TEST(ApiKeyStoreTest, AuthenticateWhileReloading) {
  testing::ScopedTempDir dir;
  const std::string path = dir.File("keys.txt");
  // "abc" stays valid in every version; only the other key changes.
  WriteFile(path, absl::StrCat("alice ", kAbcHash, "\n"));
  std::unique_ptr<ApiKeyStore> store = *ApiKeyStore::Load(path);
  std::vector<std::thread> readers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        if (!store->Authenticate("abc").ok()) failures.fetch_add(1);
      }
    });
  }
  for (int version = 0; version < 50; ++version) {
    WriteFile(path, absl::StrCat("alice ", kAbcHash, "\nk", version, " ",
                                 Sha256Hex(absl::StrCat("key-", version)), "\n"));
    EXPECT_TRUE(store->ReloadIfChanged().ok());
  }
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(*store->Authenticate("key-49"), "k49");
}

}  // namespace
}  // namespace llmserve::gateway
