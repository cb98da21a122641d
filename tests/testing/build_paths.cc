#include "tests/testing/build_paths.h"

namespace llmserve::testing {

const char* WorkerBinary() { return LLMSERVE_WORKER_BINARY; }
const char* GatewayBinary() { return LLMSERVE_GATEWAY_BINARY; }
const char* BenchBinary() { return LLMSERVE_BENCH_BINARY; }
const char* BenchEngineBinary() { return LLMSERVE_BENCH_ENGINE_BINARY; }
const char* DumpLogitsBinary() { return LLMSERVE_DUMP_LOGITS_BINARY; }
const char* RunToolBinary() { return LLMSERVE_RUN_BINARY; }
const char* MakeModelBinary() { return LLMSERVE_MAKE_MODEL_BINARY; }
const char* PerplexityBinary() { return LLMSERVE_PERPLEXITY_BINARY; }
const char* SourceDir() { return LLMSERVE_SOURCE_DIR; }
const char* ChatTemplateCorpusDir() { return LLMSERVE_CHAT_TEMPLATE_CORPUS; }
const char* ProtoDescriptorSet() { return LLMSERVE_PROTO_DESCRIPTOR_SET; }
const char* CudaEmuPlugin() {
#ifdef LLMSERVE_CUDA_EMU_PLUGIN
  return LLMSERVE_CUDA_EMU_PLUGIN;
#else
  return "";
#endif
}

}  // namespace llmserve::testing
