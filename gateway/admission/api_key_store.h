// API keys for the gateway: a file of `NAME SHA256HEX` lines (the hex SHA-256 of each raw key),
// so the gateway never stores a usable key, and the file can be swapped at run time (a rotated
// Kubernetes secret) without a restart.
//
// Format, one key per line, `NAME SHA256HEX [models=MODEL,MODEL...] [admin]`:
//   # comment lines and blank lines are ignored
//   alice  d48fce52832c460238fb82e9f6c57be593ad27ea6ddb5e15d74d1fb4245a76cd
//   sql-team  9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 models=sql-lora
//   ops  021311f6e96612fdd20ba8dca53dc2b56d973a72ef97cf78c54c562ad402d30a admin
// NAME is 1-128 characters of [A-Za-z0-9._:@/+-]; it becomes the principal's name (rate limits,
// logs). SHA256HEX is 64 hex digits (`printf %s KEY | sha256sum`). Names and hashes are unique.
// `models=` limits the key to those models (base models or LoRA adapters, by the name requests
// use; 1-256 printable characters each, no comma); without it the key may use every model.
// `admin` lets the key call the admin endpoints (loading and unloading LoRA adapters).
//
// Thread-safe: Authenticate() may run on any number of threads while one thread calls
// ReloadIfChanged(); a request sees either the old or the new set of keys, never a mix.

#ifndef LLMSERVE_GATEWAY_ADMISSION_API_KEY_STORE_H_
#define LLMSERVE_GATEWAY_ADMISSION_API_KEY_STORE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace llmserve::gateway {

using Sha256Digest = std::array<uint8_t, 32>;

// The SHA-256 of `data` as 64 lower-case hex digits, the form a keys file stores.
std::string Sha256Hex(absl::string_view data);

struct ApiKeyEntry {
  std::string name;
  Sha256Digest key_hash;
  // The only models the key may use, sorted; empty: every model.
  std::vector<std::string> models;
  bool admin = false;
};

// Parses the contents of a keys file. `source_name` (usually the path) prefixes every error as
// "source_name:LINE: ...". INVALID_ARGUMENT on a malformed line or a duplicate name or hash.
// An empty list is valid: it accepts no key.
absl::StatusOr<std::vector<ApiKeyEntry>> ParseApiKeys(absl::string_view contents,
                                                      absl::string_view source_name);

class ApiKeyStore {
 public:
  // Reads and parses `path`. NOT_FOUND / PERMISSION_DENIED when the file cannot be read,
  // INVALID_ARGUMENT when it is malformed.
  static absl::StatusOr<std::unique_ptr<ApiKeyStore>> Load(std::string path);

  ApiKeyStore(const ApiKeyStore&) = delete;
  ApiKeyStore& operator=(const ApiKeyStore&) = delete;

  // The name of the key whose SHA-256 equals that of `presented_key`, or UNAUTHENTICATED.
  // Every stored hash is compared in constant time, so timing says nothing about which keys exist
  // or how close a guess was. The message never echoes the key.
  absl::StatusOr<std::string> Authenticate(absl::string_view presented_key) const;
  // The same, with what the key may do (its models, admin).
  absl::StatusOr<ApiKeyEntry> AuthenticateEntry(absl::string_view presented_key) const;

  // Re-reads the file when its identity, size or modification time differ from the version loaded
  // last; meant to be called periodically. Returns true when new keys were installed, false when
  // the file is unchanged. On an error the old keys stay in force. A malformed version is
  // remembered, so its error is returned once rather than on every call, and the next change to
  // the file is tried again; a file that cannot be stat'ed or read fails every call until it can.
  absl::StatusOr<bool> ReloadIfChanged() ABSL_LOCKS_EXCLUDED(reload_mutex_, keys_mutex_);

  // The number of keys in force.
  size_t size() const ABSL_LOCKS_EXCLUDED(keys_mutex_);
  const std::string& path() const { return path_; }

 private:
  // What identifies one version of the file: a rename over it (atomic replace, Kubernetes'
  // symlink swap) changes the inode, an in-place write changes size or mtime.
  struct FileVersion {
    uint64_t device = 0;
    uint64_t inode = 0;
    int64_t size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const FileVersion&) const = default;
  };
  struct FileContents {
    std::string text;
    FileVersion version;
  };
  using KeyTable = std::vector<ApiKeyEntry>;

  explicit ApiKeyStore(std::string path) : path_(std::move(path)) {}
  // Reads the file and the version of exactly what was read (fstat on the open descriptor).
  absl::StatusOr<FileContents> ReadFile() const;
  absl::StatusOr<FileVersion> StatFile() const;

  const std::string path_;
  // Serializes reloads; held while reading the file so readers are never blocked by I/O.
  absl::Mutex reload_mutex_;
  FileVersion last_seen_ ABSL_GUARDED_BY(reload_mutex_);
  mutable absl::Mutex keys_mutex_;
  // Replaced whole on reload; readers copy the pointer and compare without the lock held.
  std::shared_ptr<const KeyTable> keys_ ABSL_GUARDED_BY(keys_mutex_);
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ADMISSION_API_KEY_STORE_H_
