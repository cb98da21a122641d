// Counter-based random numbers for sampling: Philox4x32-10 (Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3", SC'11; the generator of cuRAND and PyTorch's CUDA sampling).
//
// A counter-based generator is a keyed bijection: the k-th number of a stream is a pure function
// of (key, k), with no engine state to carry or share. A request's draw at output step `step` is
// therefore Philox(key = seed, counter = step), whatever else runs in the batch, in whatever order,
// and it survives preemption (recompute) without saving anything.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_WORKER_SAMPLING_RANDOM_H_
#define LLMSERVE_WORKER_SAMPLING_RANDOM_H_

#include <array>
#include <cstdint>

namespace llmserve::worker {

// One Philox4x32-10 block: 128 random bits from a 128-bit counter and a 64-bit key. Matches the
// known-answer vectors of the Random123 reference implementation.
std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// A uniform double in [0, 1) with 53 random bits: block (step, 0) of the stream `seed`.
double UniformFromSeed(uint64_t seed, uint64_t step);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SAMPLING_RANDOM_H_
