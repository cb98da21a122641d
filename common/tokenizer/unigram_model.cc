#include "common/tokenizer/unigram_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status/status_macros.h"

namespace llmserve::common::tokenizer {
namespace {

// SentencePiece's kUnkPenalty: an unknown character scores this much below the rarest piece.
constexpr double kUnkPenalty = 10.0;
// Pieces at most: ids are int32 and a vocabulary this large is already unusual.
constexpr size_t kMaxPieces = size_t{1} << 24;

// Bytes of the UTF-8 character starting at text[i] (1 for a stray continuation byte, so that the
// walk always advances; the tokenizer hands over valid UTF-8).
size_t CharBytes(std::string_view text, size_t i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  const size_t n = lead < 0x80           ? 1
                   : (lead >> 5) == 0x6  ? 2
                   : (lead >> 4) == 0xE  ? 3
                   : (lead >> 3) == 0x1E ? 4
                                         : 1;
  return std::min(n, text.size() - i);
}

}  // namespace

absl::StatusOr<std::unique_ptr<UnigramModel>> UnigramModel::FromJson(const Json& model) {
  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_array()) {
    return absl::InvalidArgumentError("model Unigram: \"vocab\" must be an array");
  }
  if (vocab->empty() || vocab->size() > kMaxPieces) {
    return absl::InvalidArgumentError(absl::StrCat("model Unigram: \"vocab\" has ", vocab->size(),
                                                   " pieces (1 to ", kMaxPieces, " accepted)"));
  }
  std::unique_ptr<UnigramModel> unigram(new UnigramModel());
  LLMSERVE_ASSIGN_OR_RETURN(unigram->byte_fallback_,
                            GetBoolOr(model, "byte_fallback", false, "model Unigram"));
  unigram->pieces_.reserve(vocab->size());
  unigram->scores_.reserve(vocab->size());
  unigram->ids_.reserve(vocab->size());
  double min_score = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < vocab->size(); ++i) {
    const Json& entry = (*vocab)[i];
    if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_number() ||
        !std::isfinite(entry[1].get<double>())) {
      return absl::InvalidArgumentError(
          absl::StrCat("model Unigram: vocab[", i, "] must be a [piece, finite score] pair"));
    }
    std::string piece = entry[0].get<std::string>();
    if (piece.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("model Unigram: vocab[", i, "] is empty"));
    }
    if (!unigram->ids_.emplace(piece, static_cast<int32_t>(i)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("model Unigram: vocab[", i, "] \"", piece, "\" is repeated"));
    }
    const double score = entry[1].get<double>();
    min_score = std::min(min_score, score);
    unigram->max_piece_bytes_ = std::max(unigram->max_piece_bytes_, piece.size());
    unigram->pieces_.push_back(std::move(piece));
    unigram->scores_.push_back(score);
  }
  unigram->unk_score_ = min_score - kUnkPenalty;
  const auto unk = model.find("unk_id");
  if (unk != model.end() && !unk->is_null()) {
    if (!unk->is_number_integer() || unk->get<int64_t>() < 0 ||
        unk->get<int64_t>() >= static_cast<int64_t>(vocab->size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("model Unigram: \"unk_id\" must be null or an index below ", vocab->size()));
    }
    unigram->unk_id_ = static_cast<int32_t>(unk->get<int64_t>());
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const auto it = unigram->ids_.find(name);
    unigram->byte_ids_[b] = it == unigram->ids_.end() ? -1 : it->second;
  }
  return unigram;
}

std::optional<int32_t> UnigramModel::TokenToId(std::string_view token) const {
  const auto it = ids_.find(absl::string_view(token.data(), token.size()));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string* UnigramModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= id_limit()) return nullptr;
  return &pieces_[id];
}

void UnigramModel::EmitUnknown(std::string_view text, std::vector<int32_t>* ids) const {
  if (byte_fallback_) {
    const bool all = std::all_of(text.begin(), text.end(), [this](char c) {
      return byte_ids_[static_cast<unsigned char>(c)] >= 0;
    });
    if (all) {
      for (char c : text) ids->push_back(byte_ids_[static_cast<unsigned char>(c)]);
      return;
    }
  }
  if (unk_id_) ids->push_back(*unk_id_);
}

void UnigramModel::Tokenize(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  struct Node {
    int32_t id = -1;         // the piece ending here on the best path; -1: the unk piece
    int64_t starts_at = -1;  // -1: no path reaches here yet
    double score = 0;
  };
  const size_t size = word.size();
  std::vector<Node> best(size + 1);
  best[0].starts_at = 0;
  for (size_t start = 0; start < size;) {
    const size_t char_bytes = CharBytes(word, start);
    const double here = best[start].score;
    bool covered = false;
    // Every piece starting at `start`: prefixes ending at character boundaries.
    for (size_t end = start + char_bytes; end <= size && end - start <= max_piece_bytes_;
         end += CharBytes(word, end)) {
      const auto it = ids_.find(absl::string_view(word.data() + start, end - start));
      if (it != ids_.end()) {
        const double candidate = here + scores_[it->second];
        Node& node = best[end];
        if (node.starts_at < 0 || candidate > node.score) {
          node = {it->second, static_cast<int64_t>(start), candidate};
        }
        covered = covered || end - start == char_bytes;
      }
      if (end == size) break;
    }
    if (!covered) {
      const double candidate = here + unk_score_;
      Node& node = best[start + char_bytes];
      if (node.starts_at < 0 || candidate > node.score) {
        node = {-1, static_cast<int64_t>(start), candidate};
      }
    }
    start += char_bytes;
  }
  // Back from the end; runs of unknown pieces fuse into one.
  std::vector<std::pair<int32_t, std::string_view>> path;  // (id or -1, text), last first
  for (size_t end = size; end > 0;) {
    const Node& node = best[end];
    const auto start = static_cast<size_t>(node.starts_at);
    const std::string_view text = word.substr(start, end - start);
    const bool unknown = node.id < 0;
    if (unknown && !path.empty() && path.back().first < 0) {
      path.back().second = word.substr(start, path.back().second.size() + text.size());
    } else {
      path.emplace_back(unknown ? -1 : node.id, text);
    }
    end = start;
  }
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    if (it->first >= 0) {
      ids->push_back(it->first);
    } else {
      EmitUnknown(it->second, ids);
    }
  }
}

}  // namespace llmserve::common::tokenizer
