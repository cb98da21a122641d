// Runs a libFuzzer entry point without libFuzzer: every seed file, then a bounded number of
// deterministic mutations of the seeds (bit flips, byte insertions and deletions, splices,
// truncations). It lets `make test` exercise each fuzz target with any compiler; real
// coverage-guided fuzzing uses LLMSERVE_FUZZ=ON with clang.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::string> ReadSeeds(const std::filesystem::path& dir) {
  std::vector<std::string> seeds;
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) return seeds;
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    if (entry.is_regular_file()) paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());  // deterministic order, hence deterministic mutations
  for (const auto& path : paths) {
    std::ifstream in(path, std::ios::binary);
    seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return seeds;
}

std::string Mutate(const std::vector<std::string>& seeds, std::mt19937_64& rng) {
  std::string input = seeds[rng() % seeds.size()];
  const int edits = 1 + static_cast<int>(rng() % 8);
  for (int i = 0; i < edits; ++i) {
    const size_t pos = input.empty() ? 0 : rng() % (input.size() + 1);
    switch (rng() % 6) {
      case 0:  // flip a bit
        if (!input.empty()) input[pos % input.size()] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // insert a random byte
        input.insert(input.begin() + pos, static_cast<char>(rng() & 0xff));
        break;
      case 2:  // delete a run
        if (!input.empty()) input.erase(pos % input.size(), 1 + rng() % 16);
        break;
      case 3:  // splice in part of another seed
      {
        const std::string& other = seeds[rng() % seeds.size()];
        if (!other.empty()) {
          const size_t from = rng() % other.size();
          input.insert(pos, other.substr(from, 1 + rng() % 64));
        }
        break;
      }
      case 4:  // truncate
        input.resize(pos);
        break;
      default:  // duplicate a run
        if (!input.empty()) {
          const size_t from = rng() % input.size();
          input.insert(pos, input.substr(from, 1 + rng() % 32));
        }
        break;
    }
  }
  return input;
}

}  // namespace

int main(int argc, char** argv) {
  std::filesystem::path seeds_dir;
  long mutations = 1000;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.rfind("--seeds=", 0) == 0) {
      seeds_dir = std::string(arg.substr(8));
    } else if (arg.rfind("--mutations=", 0) == 0) {
      mutations = std::strtol(std::string(arg.substr(12)).c_str(), nullptr, 10);
    } else {
      std::cerr << "usage: " << argv[0] << " --seeds=DIR [--mutations=N]\n";
      return 2;
    }
  }
  std::vector<std::string> seeds = ReadSeeds(seeds_dir);
  if (seeds.empty()) seeds.push_back("");
  for (const std::string& seed : seeds) {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(seed.data()), seed.size());
  }
  std::mt19937_64 rng(0x11a5e7);
  for (long i = 0; i < mutations; ++i) {
    const std::string input = Mutate(seeds, rng);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  std::cout << "fuzz driver: " << seeds.size() << " seeds, " << mutations
            << " mutations, no crash\n";
  return 0;
}
