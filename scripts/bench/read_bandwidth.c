// Memory read bandwidth of one or more threads, for the decode roofline of
// scripts/bench/quantized_side_by_side.sh: sums a buffer (default 1 GiB, far larger than any
// cache) several times, each thread a contiguous share of it, as a GEMV's threads stream their
// rows, and prints one JSON line with the best pass in GB/s (1e9 bytes/s).
//
// Build: gcc -O2 -march=native -pthread -o read_bandwidth read_bandwidth.c
// Usage: read_bandwidth [MiB] [passes] [threads]
//
// The sum is over 64-bit integers in 8 independent accumulators, which the compiler
// vectorizes; at -O2 with -march=native that is enough to be bound by memory, not by adds.
#define _POSIX_C_SOURCE 199309L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_THREADS 256

static double NowSeconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t SumWords(const uint64_t* words, size_t n) {
  uint64_t acc[8] = {0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += words[i + k];
  }
  for (; i < n; ++i) acc[0] += words[i];
  uint64_t total = 0;
  for (int k = 0; k < 8; ++k) total += acc[k];
  return total;
}

struct Share {
  const uint64_t* words;
  size_t n;
  uint64_t sum;
};

static void* SumShare(void* arg) {
  struct Share* share = (struct Share*)arg;
  share->sum = SumWords(share->words, share->n);
  return NULL;
}

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 1024;
  const int passes = argc > 2 ? atoi(argv[2]) : 5;
  const int threads = argc > 3 ? atoi(argv[3]) : 1;
  const size_t bytes = mib << 20;
  const size_t n = bytes / sizeof(uint64_t);
  if (passes < 1 || threads < 1 || threads > MAX_THREADS || mib == 0) {
    fprintf(stderr, "read_bandwidth: usage: read_bandwidth [MiB >= 1] [passes >= 1] "
                    "[threads 1..%d]\n", MAX_THREADS);
    return 1;
  }
  uint64_t* words = (uint64_t*)aligned_alloc(64, bytes);
  if (words == NULL) {
    fprintf(stderr, "read_bandwidth: cannot allocate %zu MiB\n", mib);
    return 1;
  }
  // Touch every page (and give the sum something to add) before timing.
  for (size_t i = 0; i < n; ++i) words[i] = i;

  struct Share shares[MAX_THREADS];
  pthread_t ids[MAX_THREADS];
  const size_t per_thread = n / (size_t)threads;
  double best_s = 1e30;
  double total_s = 0.0;
  uint64_t check = 0;
  for (int p = 0; p < passes; ++p) {
    const double t0 = NowSeconds();
    for (int t = 0; t < threads; ++t) {
      shares[t].words = words + (size_t)t * per_thread;
      shares[t].n = t + 1 == threads ? n - (size_t)t * per_thread : per_thread;
      if (t > 0 && pthread_create(&ids[t], NULL, SumShare, &shares[t]) != 0) {
        fprintf(stderr, "read_bandwidth: cannot start thread %d\n", t);
        return 1;
      }
    }
    SumShare(&shares[0]);
    for (int t = 1; t < threads; ++t) pthread_join(ids[t], NULL);
    const double dt = NowSeconds() - t0;
    for (int t = 0; t < threads; ++t) check += shares[t].sum;
    total_s += dt;
    if (dt < best_s) best_s = dt;
  }
  printf("{\"engine\": \"read_bandwidth\", \"threads\": %d, \"bytes\": %zu, \"passes\": %d, "
         "\"best_gb_s\": %.2f, \"mean_gb_s\": %.2f, \"check\": %llu}\n",
         threads, bytes, passes, (double)bytes / best_s * 1e-9,
         (double)bytes * passes / total_s * 1e-9, (unsigned long long)(check & 0xffff));
  free(words);
  return 0;
}
