#include "gateway/admission/api_key_store.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace llmserve::gateway {
namespace {

// A keys file is a handful of lines; anything this large is a wrong path, not a keys file.
constexpr int64_t kMaxKeysFileBytes = 16 << 20;
constexpr size_t kMaxNameLength = 128;

bool IsNameChar(char c) {
  return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-' || c == ':' || c == '@' ||
         c == '/' || c == '+';
}

absl::Status ErrnoStatus(int error, absl::string_view what, absl::string_view path) {
  const std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::UnavailableError(message);
  }
}

// False only when OpenSSL cannot allocate.
bool ComputeSha256(absl::string_view data, Sha256Digest& digest) {
  unsigned int length = 0;
  return EVP_Digest(data.data(), data.size(), digest.data(), &length, EVP_sha256(), nullptr) == 1 &&
         length == digest.size();
}

// `a,b,c`: each name 1-256 printable ASCII characters; sorted and deduplicated into `models`.
absl::Status ParseModelList(absl::string_view list, std::vector<std::string>& models) {
  if (list.empty()) return absl::InvalidArgumentError("empty list (leave models= out for all)");
  for (absl::string_view model : absl::StrSplit(list, ',')) {
    if (model.empty() || model.size() > 256) {
      return absl::InvalidArgumentError(
          absl::StrCat("a model name must be 1-256 characters, found ", model.size()));
    }
    for (unsigned char c : model) {
      if (c < 0x21 || c > 0x7e) {
        return absl::InvalidArgumentError(absl::StrCat("model name \"", absl::CHexEscape(model),
                                                       "\" has a non-printable character"));
      }
    }
    models.emplace_back(model);
  }
  std::sort(models.begin(), models.end());
  models.erase(std::unique(models.begin(), models.end()), models.end());
  return absl::OkStatus();
}

}  // namespace

std::string Sha256Hex(absl::string_view data) {
  Sha256Digest digest{};
  if (!ComputeSha256(data, digest)) return "";
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
}

absl::StatusOr<std::vector<ApiKeyEntry>> ParseApiKeys(absl::string_view contents,
                                                      absl::string_view source_name) {
  std::vector<ApiKeyEntry> entries;
  absl::flat_hash_map<std::string, int> line_of_name;
  absl::flat_hash_map<std::string, std::pair<int, std::string>> owner_of_hash;
  int line_number = 0;
  for (absl::string_view raw_line : absl::StrSplit(contents, '\n')) {
    ++line_number;
    const absl::string_view line = absl::StripAsciiWhitespace(raw_line);
    if (line.empty() || line[0] == '#') continue;
    auto invalid = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(source_name, ":", line_number, ": ", why));
    };
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() < 2) {
      return invalid(absl::StrCat("expected 'NAME SHA256HEX [models=MODEL,...] [admin]', found ",
                                  fields.size(), " field"));
    }
    const absl::string_view name = fields[0];
    const absl::string_view hex = fields[1];
    if (name.size() > kMaxNameLength) {
      return invalid(absl::StrCat("key name is ", name.size(), " characters, at most ",
                                  kMaxNameLength, " allowed"));
    }
    for (char c : name) {
      if (!IsNameChar(c)) {
        return invalid(absl::StrCat("key name \"", absl::CHexEscape(name),
                                    "\" may only contain letters, digits and . _ - : @ / +"));
      }
    }
    bool all_hex = hex.size() == 64;
    for (char c : hex) all_hex = all_hex && absl::ascii_isxdigit(c);
    if (!all_hex) {
      // Deliberately not echoing the value: it may be a raw key pasted by mistake.
      return invalid(absl::StrCat("the hash of key \"", name,
                                  "\" must be 64 hex digits (the SHA-256 of the key: printf %s "
                                  "KEY | sha256sum), found ",
                                  hex.size(), " characters"));
    }
    const std::string hash_bytes = absl::HexStringToBytes(hex);
    if (auto it = line_of_name.find(name); it != line_of_name.end()) {
      return invalid(
          absl::StrCat("duplicate key name \"", name, "\" (first on line ", it->second, ")"));
    }
    if (auto it = owner_of_hash.find(hash_bytes); it != owner_of_hash.end()) {
      return invalid(absl::StrCat("key \"", name, "\" has the same hash as key \"",
                                  it->second.second, "\" on line ", it->second.first));
    }
    ApiKeyEntry entry{.name = std::string(name)};
    for (size_t i = 2; i < fields.size(); ++i) {
      absl::string_view attribute = fields[i];
      if (attribute == "admin") {
        if (entry.admin) return invalid(absl::StrCat("key \"", name, "\" says admin twice"));
        entry.admin = true;
      } else if (absl::ConsumePrefix(&attribute, "models=")) {
        if (!entry.models.empty()) {
          return invalid(absl::StrCat("key \"", name, "\" has models= twice"));
        }
        if (absl::Status models = ParseModelList(attribute, entry.models); !models.ok()) {
          return invalid(absl::StrCat("key \"", name, "\": models=: ", models.message()));
        }
      } else {
        return invalid(absl::StrCat("key \"", name, "\": unknown attribute \"",
                                    absl::CHexEscape(attribute.substr(0, 64)),
                                    "\" (known: models=MODEL,..., admin; comments must be on "
                                    "their own line)"));
      }
    }
    line_of_name.emplace(name, line_number);
    owner_of_hash.emplace(hash_bytes, std::make_pair(line_number, std::string(name)));
    std::memcpy(entry.key_hash.data(), hash_bytes.data(), entry.key_hash.size());
    entries.push_back(std::move(entry));
  }
  return entries;
}

absl::StatusOr<std::unique_ptr<ApiKeyStore>> ApiKeyStore::Load(std::string path) {
  std::unique_ptr<ApiKeyStore> store(new ApiKeyStore(std::move(path)));
  absl::StatusOr<FileContents> contents = store->ReadFile();
  if (!contents.ok()) return contents.status();
  absl::StatusOr<std::vector<ApiKeyEntry>> entries = ParseApiKeys(contents->text, store->path_);
  if (!entries.ok()) return entries.status();
  {
    absl::MutexLock lock(&store->reload_mutex_);
    store->last_seen_ = contents->version;
  }
  absl::MutexLock lock(&store->keys_mutex_);
  store->keys_ = std::make_shared<const KeyTable>(*std::move(entries));
  return store;
}

absl::StatusOr<std::string> ApiKeyStore::Authenticate(absl::string_view presented_key) const {
  absl::StatusOr<ApiKeyEntry> entry = AuthenticateEntry(presented_key);
  if (!entry.ok()) return entry.status();
  return std::move(entry->name);
}

absl::StatusOr<ApiKeyEntry> ApiKeyStore::AuthenticateEntry(absl::string_view presented_key) const {
  if (presented_key.empty()) return absl::UnauthenticatedError("empty API key");
  std::shared_ptr<const KeyTable> keys;
  {
    absl::ReaderMutexLock lock(&keys_mutex_);
    keys = keys_;
  }
  Sha256Digest presented_hash{};
  if (!ComputeSha256(presented_key, presented_hash)) {
    return absl::InternalError("cannot compute SHA-256 of the presented API key");
  }
  // No early exit: every entry is compared so the time taken does not depend on which one (if
  // any) matched.
  const ApiKeyEntry* match = nullptr;
  for (const ApiKeyEntry& entry : *keys) {
    const bool equal =
        CRYPTO_memcmp(entry.key_hash.data(), presented_hash.data(), presented_hash.size()) == 0;
    if (equal) match = &entry;
  }
  if (match == nullptr) return absl::UnauthenticatedError("invalid API key");
  return *match;
}

absl::StatusOr<bool> ApiKeyStore::ReloadIfChanged() {
  absl::MutexLock reload_lock(&reload_mutex_);
  // A cheap stat first: the common case is "unchanged", and it should not read the file.
  absl::StatusOr<FileVersion> current = StatFile();
  if (!current.ok()) return current.status();
  if (*current == last_seen_) return false;
  absl::StatusOr<FileContents> contents = ReadFile();
  if (!contents.ok()) return contents.status();
  last_seen_ = contents->version;
  absl::StatusOr<std::vector<ApiKeyEntry>> entries = ParseApiKeys(contents->text, path_);
  if (!entries.ok()) {
    return absl::Status(
        entries.status().code(),
        absl::StrCat(entries.status().message(), " (keeping the previous ", size(), " keys)"));
  }
  auto table = std::make_shared<const KeyTable>(*std::move(entries));
  absl::MutexLock keys_lock(&keys_mutex_);
  keys_ = std::move(table);
  return true;
}

size_t ApiKeyStore::size() const {
  absl::ReaderMutexLock lock(&keys_mutex_);
  return keys_ == nullptr ? 0 : keys_->size();
}

absl::StatusOr<ApiKeyStore::FileVersion> ApiKeyStore::StatFile() const {
  struct stat info;
  if (stat(path_.c_str(), &info) != 0) return ErrnoStatus(errno, "cannot stat keys file", path_);
  return FileVersion{
      .device = static_cast<uint64_t>(info.st_dev),
      .inode = static_cast<uint64_t>(info.st_ino),
      .size = static_cast<int64_t>(info.st_size),
      .mtime_ns = static_cast<int64_t>(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec};
}

absl::StatusOr<ApiKeyStore::FileContents> ApiKeyStore::ReadFile() const {
  const int fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open keys file", path_);
  struct stat info;
  if (fstat(fd, &info) != 0) {
    const int error = errno;
    close(fd);
    return ErrnoStatus(error, "cannot stat keys file", path_);
  }
  if (!S_ISREG(info.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("keys file ", path_, " is not a regular file"));
  }
  if (info.st_size > kMaxKeysFileBytes) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("keys file ", path_, " is ", info.st_size,
                                                   " bytes, more than the ", kMaxKeysFileBytes,
                                                   " a keys file may have"));
  }
  FileContents contents;
  contents.version = FileVersion{
      .device = static_cast<uint64_t>(info.st_dev),
      .inode = static_cast<uint64_t>(info.st_ino),
      .size = static_cast<int64_t>(info.st_size),
      .mtime_ns = static_cast<int64_t>(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec};
  char buffer[65536];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      close(fd);
      return ErrnoStatus(error, "cannot read keys file", path_);
    }
    contents.text.append(buffer, static_cast<size_t>(n));
    if (static_cast<int64_t>(contents.text.size()) > kMaxKeysFileBytes) {
      close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat("keys file ", path_, " grew past ", kMaxKeysFileBytes, " bytes"));
    }
  }
  close(fd);
  return contents;
}

}  // namespace llmserve::gateway
