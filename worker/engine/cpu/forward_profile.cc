#include "worker/engine/cpu/forward_profile.h"

namespace llmserve::worker::cpu {

absl::string_view ForwardPhaseName(ForwardPhase phase) {
  switch (phase) {
    case ForwardPhase::kEmbed:
      return "embed";
    case ForwardPhase::kNorm:
      return "norm_residual";
    case ForwardPhase::kQkv:
      return "qkv_proj";
    case ForwardPhase::kAttention:
      return "attention";
    case ForwardPhase::kO:
      return "o_proj";
    case ForwardPhase::kMlpUp:
      return "gate_up_proj";
    case ForwardPhase::kActivation:
      return "activation";
    case ForwardPhase::kMlpDown:
      return "down_proj";
    case ForwardPhase::kLora:
      return "lora";
    case ForwardPhase::kFinalNorm:
      return "final_norm";
    case ForwardPhase::kLmHead:
      return "lm_head";
    case ForwardPhase::kCount:
      break;
  }
  return "unknown";
}

}  // namespace llmserve::worker::cpu
