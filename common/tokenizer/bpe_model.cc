#include "common/tokenizer/bpe_model.h"

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/base/string_views.h"
#include "common/status/status_macros.h"
#include "common/utf8/utf8.h"

namespace llmserve::common::tokenizer {
namespace {

// Debian's Abseil has its own string_view; heterogeneous lookup needs that type.
constexpr char32_t kDirectCharLimit = 0x10000;
// The per-thread word cache: words up to kMaxCachedWordBytes, at most kMaxCachedWords of them
// (then it is cleared), so its memory stays bounded (about 1 MiB per thread).
constexpr size_t kMaxCachedWordBytes = 48;
constexpr size_t kMaxCachedWords = 16384;

std::atomic<uint64_t> next_model_serial{1};

// Results of recent Tokenize calls on this thread. Natural text repeats words a lot, so this
// skips most merge work. thread_local keeps Tokenize const and lock-free; `owner` (a serial
// number, never reused, unlike an address) ties the entries to one model.
struct WordCache {
  uint64_t owner = 0;
  absl::flat_hash_map<std::string, std::pair<uint32_t, uint32_t>> words;  // -> [offset, size)
  std::vector<int32_t> ids;
};

// A candidate merge of symbols[pos] with its right neighbour.
struct QueueEntry {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
};
// std::push_heap builds a max-heap; "greater" ordering pops the lowest rank, then leftmost pos.
struct LaterFirst {
  bool operator()(const QueueEntry& a, const QueueEntry& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

absl::Status CheckUnsupportedOptions(const Json& model) {
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = model.find(key);
    if (it != model.end() && !it->is_null() &&
        !(it->is_string() && it->get<std::string>().empty())) {
      return absl::InvalidArgumentError(absl::StrCat("model BPE: \"", key, "\" is not supported"));
    }
  }
  const auto dropout = model.find("dropout");
  if (dropout != model.end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return absl::InvalidArgumentError("model BPE: \"dropout\" is not supported");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const Json& model) {
  const std::string type = ComponentType(model);
  if (type != "BPE" && !(type.empty() && model.is_object() && model.contains("merges"))) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported model type \"", type, "\" (BPE and Unigram are supported)"));
  }
  LLMSERVE_RETURN_IF_ERROR(CheckUnsupportedOptions(model));
  std::unique_ptr<BpeModel> bpe(new BpeModel());
  bpe->serial_ = next_model_serial.fetch_add(1);
  LLMSERVE_ASSIGN_OR_RETURN(bpe->fuse_unk_, GetBoolOr(model, "fuse_unk", false, "model BPE"));
  LLMSERVE_ASSIGN_OR_RETURN(bpe->byte_fallback_,
                            GetBoolOr(model, "byte_fallback", false, "model BPE"));
  LLMSERVE_ASSIGN_OR_RETURN(bpe->ignore_merges_,
                            GetBoolOr(model, "ignore_merges", false, "model BPE"));
  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) {
    return absl::InvalidArgumentError("model BPE: \"vocab\" must be an object");
  }
  LLMSERVE_RETURN_IF_ERROR(bpe->LoadVocab(*vocab));
  std::string unk;
  LLMSERVE_ASSIGN_OR_RETURN(unk, GetStringOr(model, "unk_token", "", "model BPE"));
  if (!unk.empty()) {
    bpe->unk_id_ = bpe->TokenToId(unk);
    if (!bpe->unk_id_) {
      return absl::InvalidArgumentError(
          absl::StrCat("model BPE: unk_token \"", unk, "\" is not in the vocabulary"));
    }
  }
  const auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) {
    return absl::InvalidArgumentError("model BPE: \"merges\" must be an array");
  }
  LLMSERVE_RETURN_IF_ERROR(bpe->LoadMerges(*merges));
  return bpe;
}

absl::Status BpeModel::LoadVocab(const Json& vocab) {
  constexpr int64_t kMaxId = (int64_t{1} << 31) - 2;
  int64_t limit = 0;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > kMaxId) {
      return absl::InvalidArgumentError(
          absl::StrCat("model BPE: vocab entry \"", it.key(), "\" has an invalid id"));
    }
    limit = std::max(limit, it.value().get<int64_t>() + 1);
  }
  if (limit > 16 * static_cast<int64_t>(vocab.size()) + 1024) {
    return absl::InvalidArgumentError("model BPE: vocab ids are too sparse");
  }
  id_to_token_.assign(limit, std::string());
  id_present_.assign(limit, false);
  char_ids_.assign(kDirectCharLimit, -1);
  byte_fallback_ids_.fill(-1);
  vocab_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int32_t id = static_cast<int32_t>(it.value().get<int64_t>());
    const std::string& token = it.key();
    vocab_[token] = id;
    id_to_token_[id] = token;
    id_present_[id] = true;
    char32_t cp;
    if (!token.empty() &&
        common::utf8::DecodeOne(token, 0, &cp) == static_cast<int>(token.size()) &&
        cp < kDirectCharLimit) {
      char_ids_[cp] = id;
    }
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    if (auto id = TokenToId(name)) byte_fallback_ids_[b] = *id;
  }
  return absl::OkStatus();
}

absl::Status BpeModel::LoadMerges(const Json& merges) {
  merges_.reserve(merges.size());
  int32_t rank = 0;
  for (const Json& merge : merges) {
    std::string left;
    std::string right;
    if (merge.is_string()) {
      const std::string& line = merge.get_ref<const std::string&>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == line.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("model BPE: merge ", rank, " (\"", line, "\") is not \"left right\""));
      }
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "model BPE: merge ", rank, " must be a \"left right\" string or a [left, right] pair"));
    }
    LLMSERVE_RETURN_IF_ERROR(AddMerge(left, right, rank));
    ++rank;
  }
  return absl::OkStatus();
}

absl::Status BpeModel::AddMerge(const std::string& left, const std::string& right, int32_t rank) {
  const std::optional<int32_t> left_id = TokenToId(left);
  const std::optional<int32_t> right_id = TokenToId(right);
  const std::optional<int32_t> new_id = TokenToId(left + right);
  if (!left_id || !right_id || !new_id) {
    return absl::InvalidArgumentError(
        absl::StrCat("model BPE: merge ", rank, " (\"", left, "\", \"", right,
                     "\") uses a token that is not in the vocabulary"));
  }
  const uint64_t key = (static_cast<uint64_t>(*left_id) << 32) | static_cast<uint32_t>(*right_id);
  // The first (highest-priority) occurrence of a pair wins, as in HF.
  merges_.try_emplace(key, MergeResult{rank, *new_id});
  return absl::OkStatus();
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  const auto it = vocab_.find(AsAbsl(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= id_limit() || !id_present_[id]) return nullptr;
  return &id_to_token_[id];
}

int32_t BpeModel::CharId(std::string_view chr, char32_t cp) const {
  if (cp < kDirectCharLimit) return char_ids_[cp];
  const auto it = vocab_.find(AsAbsl(chr));
  return it == vocab_.end() ? -1 : it->second;
}

const BpeModel::MergeResult* BpeModel::FindMerge(int32_t left, int32_t right) const {
  const uint64_t key = (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
  const auto it = merges_.find(key);
  return it == merges_.end() ? nullptr : &it->second;
}

// HF BPE::merge_word: one symbol per char, byte fallback or (fused) unk for unknown chars.
void BpeModel::InitialSymbols(std::string_view word, std::vector<Symbol>* symbols) const {
  int32_t pending_unk = -1;  // an unk symbol not yet emitted, so that fuse_unk can extend it
  auto add = [symbols](int32_t id) {
    symbols->push_back({id, static_cast<int32_t>(symbols->size()) - 1, -1});
  };
  size_t pos = 0;
  char32_t cp;
  while (pos < word.size()) {
    const int n = common::utf8::DecodeOne(word, pos, &cp);
    const size_t len = n > 0 ? n : -n;
    const std::string_view chr = word.substr(pos, len);
    pos += len;
    const int32_t id = n > 0 ? CharId(chr, cp) : -1;
    if (id >= 0) {
      if (pending_unk >= 0) add(pending_unk);
      pending_unk = -1;
      add(id);
      continue;
    }
    if (byte_fallback_ && std::all_of(chr.begin(), chr.end(), [this](char c) {
          return byte_fallback_ids_[static_cast<uint8_t>(c)] >= 0;
        })) {
      if (pending_unk >= 0) add(pending_unk);
      pending_unk = -1;
      for (char c : chr) add(byte_fallback_ids_[static_cast<uint8_t>(c)]);
      continue;
    }
    if (!unk_id_) continue;  // HF drops the char when there is no unk token
    if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
    pending_unk = *unk_id_;
  }
  if (pending_unk >= 0) add(pending_unk);
  for (size_t i = 0; i + 1 < symbols->size(); ++i) (*symbols)[i].next = static_cast<int32_t>(i + 1);
}

void BpeModel::MergeAll(std::vector<Symbol>* symbols_ptr) const {
  std::vector<Symbol>& symbols = *symbols_ptr;
  thread_local std::vector<QueueEntry> queue;
  queue.clear();
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const MergeResult* m = FindMerge(symbols[i].id, symbols[i + 1].id)) {
      queue.push_back({m->rank, static_cast<int32_t>(i), m->new_id});
    }
  }
  std::make_heap(queue.begin(), queue.end(), LaterFirst());
  auto push = [](QueueEntry entry) {
    queue.push_back(entry);
    std::push_heap(queue.begin(), queue.end(), LaterFirst());
  };
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), LaterFirst());
    const QueueEntry top = queue.back();
    queue.pop_back();
    Symbol& current = symbols[top.pos];
    if (current.id < 0 || current.next < 0) continue;
    const int32_t next_pos = current.next;
    const MergeResult* m = FindMerge(current.id, symbols[next_pos].id);
    if (m == nullptr || m->new_id != top.new_id) continue;  // stale entry
    current.id = top.new_id;
    current.next = symbols[next_pos].next;
    symbols[next_pos].id = -1;
    if (current.next >= 0) symbols[current.next].prev = top.pos;
    if (current.prev >= 0) {
      if (const MergeResult* left = FindMerge(symbols[current.prev].id, current.id)) {
        push({left->rank, current.prev, left->new_id});
      }
    }
    if (current.next >= 0) {
      if (const MergeResult* right = FindMerge(current.id, symbols[current.next].id)) {
        push({right->rank, top.pos, right->new_id});
      }
    }
  }
  if (queue.capacity() > (1u << 16)) queue.shrink_to_fit();
}

void BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto id = TokenToId(word)) {
      ids->push_back(*id);
      return;
    }
  }
  thread_local WordCache cache;
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    if (cache.owner != serial_ || cache.words.size() >= kMaxCachedWords) {
      cache.owner = serial_;
      cache.words.clear();
      cache.ids.clear();
    }
    const auto it = cache.words.find(AsAbsl(word));
    if (it != cache.words.end()) {
      const auto [offset, size] = it->second;
      ids->insert(ids->end(), cache.ids.begin() + offset, cache.ids.begin() + offset + size);
      return;
    }
  }
  const size_t first = ids->size();
  thread_local std::vector<Symbol> symbols;
  symbols.clear();
  InitialSymbols(word, &symbols);
  if (symbols.size() > 1) MergeAll(&symbols);
  for (const Symbol& s : symbols) {
    if (s.id >= 0) ids->push_back(s.id);
  }
  if (symbols.capacity() > (1u << 16)) symbols.shrink_to_fit();
  if (cacheable) {
    const auto offset = static_cast<uint32_t>(cache.ids.size());
    cache.ids.insert(cache.ids.end(), ids->begin() + first, ids->end());
    cache.words.emplace(std::string(word),
                        std::make_pair(offset, static_cast<uint32_t>(ids->size() - first)));
  }
}

}  // namespace llmserve::common::tokenizer
