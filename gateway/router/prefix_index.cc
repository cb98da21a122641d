#include "gateway/router/prefix_index.h"

namespace llmserve::gateway {

void PrefixIndex::Apply(const std::string& worker, const worker::v1::LoadReport& report) {
  absl::flat_hash_set<uint64_t>& blocks = blocks_[worker];
  if (report.reset()) blocks.clear();
  for (const worker::v1::PrefixCacheEvent& event : report.events()) {
    switch (event.kind()) {
      case worker::v1::PrefixCacheEvent::KIND_STORED:
        blocks.insert(event.block_hashes().begin(), event.block_hashes().end());
        break;
      case worker::v1::PrefixCacheEvent::KIND_EVICTED:
        for (uint64_t hash : event.block_hashes()) blocks.erase(hash);
        break;
      case worker::v1::PrefixCacheEvent::KIND_CLEARED:
        blocks.clear();
        break;
      default:  // a kind from a newer worker: ignoring it only costs routing quality
        break;
    }
  }
}

void PrefixIndex::Remove(const std::string& worker) { blocks_.erase(worker); }

int PrefixIndex::MatchedBlocks(const std::string& worker,
                               absl::Span<const uint64_t> prompt_hashes) const {
  const auto it = blocks_.find(worker);
  if (it == blocks_.end()) return 0;
  int matched = 0;
  for (uint64_t hash : prompt_hashes) {
    if (!it->second.contains(hash)) break;
    ++matched;
  }
  return matched;
}

size_t PrefixIndex::NumBlocks(const std::string& worker) const {
  const auto it = blocks_.find(worker);
  return it == blocks_.end() ? 0 : it->second.size();
}

}  // namespace llmserve::gateway
