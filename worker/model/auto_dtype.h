// --dtype=auto: the runtime dtype a checkpoint asks for, picked as vLLM's "auto" does, so that an
// f16 or bf16 model is not silently widened to f32 (twice the bytes read per token).
//
// Thread-safe: pure functions (they read the model directory).

#ifndef LLMSERVE_WORKER_MODEL_AUTO_DTYPE_H_
#define LLMSERVE_WORKER_MODEL_AUTO_DTYPE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/model/dtype.h"
#include "worker/model/model_files.h"

namespace llmserve::worker {

// The checkpoint's own dtype: config.json's "torch_dtype" (or "dtype", as newer transformers
// write it): "float32", "float16" or "bfloat16"; when it has neither, the dtype of the
// checkpoint's largest tensor. INVALID_ARGUMENT naming the field for any other value (float64,
// int8, ...).
absl::StatusOr<DType> CheckpointDType(const ModelFiles& files);

// A GGUF file's own dtype: that of its largest tensor when F32, F16 or BF16; f32 when it is
// quantized (its dequantized values are exact in f32, not always in 16 bits).
absl::StatusOr<DType> GgufCheckpointDType(const std::string& path);

// The value of a --dtype flag for the model at `model_dir` (a directory or a GGUF file, as
// model_loader.h tells them apart) on `backend` ("cpu", "cuda"):
// "f32"/"f16"/"bf16" (and their long names) as given; "auto" the checkpoint's dtype, except that
// an f32 checkpoint runs as f16 on the CUDA backend, which has 16-bit kernels only. Errors
// (unknown value, unreadable model directory) are returned as they are, for the caller to prefix
// with the flag's name.
absl::StatusOr<DType> ResolveDTypeFlag(absl::string_view flag, const std::string& model_dir,
                                       absl::string_view backend);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_AUTO_DTYPE_H_
