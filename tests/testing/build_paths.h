// Where the build put the binaries and data files that tests run or read (absolute paths).
//
// They are defined in build_paths.cc, the one file compiled with the paths of this build tree: a
// path in a test's own compile flags made that test a compiler-cache miss in every fresh clone
// (CI clones into a new directory each run), about two and a half minutes of compiling per tree.
#ifndef LLMSERVE_TESTS_TESTING_BUILD_PATHS_H_
#define LLMSERVE_TESTS_TESTING_BUILD_PATHS_H_

namespace llmserve::testing {

const char* WorkerBinary();       // llmserve-worker
const char* GatewayBinary();      // llmserve-gateway
const char* BenchBinary();        // llmserve-bench
const char* BenchEngineBinary();  // llmserve-bench-engine
const char* DumpLogitsBinary();   // llmserve-dump-logits
const char* RunToolBinary();      // llmserve-run
const char* MakeModelBinary();    // llmserve-make-model
const char* PerplexityBinary();   // llmserve-perplexity
// The source tree's root.
const char* SourceDir();
// tests/unit/common/chat_template/corpus in the source tree.
const char* ChatTemplateCorpusDir();
// The serialized FileDescriptorSet of proto/ that the build writes.
const char* ProtoDescriptorSet();
// libllmserve_cuda_emu.so (tests/cuda_emu); empty in a tree without the CUDA emulator.
const char* CudaEmuPlugin();

}  // namespace llmserve::testing

#endif  // LLMSERVE_TESTS_TESTING_BUILD_PATHS_H_
