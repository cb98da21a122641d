// Which sanitizer this test binary was built with, and how much slower than an optimized build
// the code under test runs because of it. Tests whose work is sized in wall time (a stream that
// must still be running when a worker is stopped, and must end before a deadline) divide that
// work by kSanitizerSlowdown, so that they take about as long, and keep their margins, in every
// build (docs/building.md, "Sanitizers").

#ifndef LLMSERVE_TESTS_TESTING_SANITIZERS_H_
#define LLMSERVE_TESTS_TESTING_SANITIZERS_H_

namespace llmserve::testing {

#if defined(__SANITIZE_THREAD__)
#define LLMSERVE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LLMSERVE_TSAN 1
#endif
#endif

#if defined(__SANITIZE_ADDRESS__)
#define LLMSERVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LLMSERVE_ASAN 1
#endif
#endif

// Measured on the model kernels that dominate the integration tests' time: the ASan + UBSan +
// coverage build (make test-sanitize) decodes about 8 times slower than RelWithDebInfo; TSan
// (make test-tsan) more.
#if defined(LLMSERVE_TSAN)
inline constexpr int kSanitizerSlowdown = 10;
#elif defined(LLMSERVE_ASAN)
inline constexpr int kSanitizerSlowdown = 8;
#else
inline constexpr int kSanitizerSlowdown = 1;
#endif

}  // namespace llmserve::testing

#endif  // LLMSERVE_TESTS_TESTING_SANITIZERS_H_
