#include "tests/unit/worker/engine/reference_model.h"

#include <cmath>
#include <cstring>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "worker/model/dtype.h"

namespace llmserve::worker::testing {
namespace {

using Matrix = std::vector<std::vector<double>>;  // [rows][cols]

// x rounded to bf16 (through f32), as the CPU backend's bf16 mode feeds its projections.
std::vector<double> RoundedToBf16(const std::vector<double>& x) {
  std::vector<double> rounded(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t bits = uint32_t{FloatToBFloat16(static_cast<float>(x[i]))} << 16;
    float value;
    std::memcpy(&value, &bits, sizeof value);
    rounded[i] = value;
  }
  return rounded;
}

// y = W x for W stored [out][in] (Linear) or [in][out] (GPT-2 Conv1D); x rounded to bf16 first
// when `bf16_inputs`.
std::vector<double> Apply(bool bf16_inputs, const std::vector<double>& w,
                          const std::vector<double>& input, int64_t out, bool in_out_layout) {
  const std::vector<double> x = bf16_inputs ? RoundedToBf16(input) : input;
  const int64_t in = static_cast<int64_t>(x.size());
  std::vector<double> y(out, 0.0);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i)
      y[o] += (in_out_layout ? w[i * out + o] : w[o * in + i]) * x[i];
  }
  return y;
}

void AddTo(std::vector<double>& x, const std::vector<double>& y) {
  for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
}

std::vector<double> Normalize(const ModelConfig& c, const std::vector<double>& x,
                              const std::vector<double>& weight, const std::vector<double>* bias) {
  const double n = static_cast<double>(x.size());
  std::vector<double> out(x.size());
  if (c.norm == NormKind::kRmsNorm) {
    double ms = 0;
    for (double v : x) ms += v * v / n;
    for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] / std::sqrt(ms + c.norm_eps) * weight[i];
  } else {
    double mean = 0, var = 0;
    for (double v : x) mean += v / n;
    for (double v : x) var += (v - mean) * (v - mean) / n;
    for (size_t i = 0; i < x.size(); ++i) {
      out[i] = (x[i] - mean) / std::sqrt(var + c.norm_eps) * weight[i] + (*bias)[i];
    }
  }
  return out;
}

double Act(Activation a, double v) {
  switch (a) {
    case Activation::kSilu:
      return v / (1 + std::exp(-v));
    case Activation::kGeluTanh:
      return 0.5 * v *
             (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
    case Activation::kGeluErf:
      return 0.5 * v * (1 + std::erf(v / std::numbers::sqrt2));
  }
  return v;
}

// Hugging Face's rotate_half rotary embedding, with the frequency scaling of Llama 3.1 written
// out as in transformers' _compute_llama3_parameters.
void Rope(const ModelConfig& c, int64_t position, double* head) {
  const int64_t d = c.head_dim, half = d / 2;
  for (int64_t i = 0; i < half; ++i) {
    double freq = std::pow(c.rope_theta, -2.0 * i / d);
    const RopeScaling& s = c.rope_scaling;
    if (s.kind == RopeScaling::Kind::kLinear) freq /= s.factor;
    if (s.kind == RopeScaling::Kind::kLlama3) {
      const double wavelen = 2 * std::numbers::pi / freq;
      const double old = static_cast<double>(s.original_max_position_embeddings);
      if (wavelen > old / s.low_freq_factor) {
        freq = freq / s.factor;
      } else if (wavelen >= old / s.high_freq_factor) {
        const double smooth =
            (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        freq = (1 - smooth) * freq / s.factor + smooth * freq;
      }
    }
    const double angle = position * freq;
    const double a = head[i], b = head[i + half];
    head[i] = a * std::cos(angle) - b * std::sin(angle);
    head[i + half] = b * std::cos(angle) + a * std::sin(angle);
  }
}

}  // namespace

std::vector<double> ReferenceModel::Get(const std::string& name) const {
  const SafetensorsTensor* tensor = files_.Find(name);
  if (tensor == nullptr) return {};
  const DType dtype = *ParseSafetensorsDType(tensor->dtype);
  std::vector<float> values(tensor->NumElements());
  ConvertElements(tensor->data, dtype, values.data(), DType::kF32, values.size());
  return std::vector<double>(values.begin(), values.end());
}

std::vector<std::vector<double>> ReferenceModel::Logits(const std::vector<int32_t>& tokens) const {
  const ModelConfig& c = config_;
  const bool gpt2 = c.family == ModelFamily::kGpt2;
  const auto head = c.tied_embeddings ? Get(gpt2 ? "wte.weight" : "model.embed_tokens.weight")
                                      : Get("lm_head.weight");
  Matrix logits;
  for (const std::vector<double>& row : Hidden(tokens)) {
    logits.push_back(Apply(options_.bf16_matmul_inputs, head, row, c.vocab_size, false));
  }
  return logits;
}

std::vector<std::vector<double>> ReferenceModel::Hidden(const std::vector<int32_t>& tokens) const {
  const bool bf16 = options_.bf16_matmul_inputs;
  const ModelConfig& c = config_;
  const bool gpt2 = c.family == ModelFamily::kGpt2;
  const int64_t n = static_cast<int64_t>(tokens.size()), h = c.hidden_size, d = c.head_dim;
  const int64_t q_dim = c.num_heads * d, kv_dim = c.num_kv_heads * d;
  const std::vector<double> embed = Get(gpt2 ? "wte.weight" : "model.embed_tokens.weight");
  Matrix x(n, std::vector<double>(h));
  for (int64_t p = 0; p < n; ++p) {
    for (int64_t i = 0; i < h; ++i) x[p][i] = embed[tokens[p] * h + i];
    if (gpt2) {
      const std::vector<double> wpe = Get("wpe.weight");
      for (int64_t i = 0; i < h; ++i) x[p][i] += wpe[p * h + i];
    }
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = gpt2 ? absl::StrCat("h.", l, ".") : absl::StrCat("model.layers.", l, ".");
    const std::string ln1 = gpt2 ? "ln_1" : "input_layernorm";
    const std::string ln2 = gpt2 ? "ln_2" : "post_attention_layernorm";
    const auto ln1_w = Get(p + ln1 + ".weight"), ln1_b = Get(p + ln1 + ".bias");
    const auto ln2_w = Get(p + ln2 + ".weight"), ln2_b = Get(p + ln2 + ".bias");
    Matrix q(n), k(n), v(n);
    for (int64_t t = 0; t < n; ++t) {
      const auto xn = Normalize(c, x[t], ln1_w, &ln1_b);
      if (gpt2) {
        auto qkv = Apply(bf16, Get(p + "attn.c_attn.weight"), xn, 3 * h, true);
        AddTo(qkv, Get(p + "attn.c_attn.bias"));
        q[t].assign(qkv.begin(), qkv.begin() + h);
        k[t].assign(qkv.begin() + h, qkv.begin() + 2 * h);
        v[t].assign(qkv.begin() + 2 * h, qkv.end());
      } else {
        q[t] = Apply(bf16, Get(p + "self_attn.q_proj.weight"), xn, q_dim, false);
        k[t] = Apply(bf16, Get(p + "self_attn.k_proj.weight"), xn, kv_dim, false);
        v[t] = Apply(bf16, Get(p + "self_attn.v_proj.weight"), xn, kv_dim, false);
        if (c.qkv_bias) {
          AddTo(q[t], Get(p + "self_attn.q_proj.bias"));
          AddTo(k[t], Get(p + "self_attn.k_proj.bias"));
          AddTo(v[t], Get(p + "self_attn.v_proj.bias"));
        }
        for (int64_t head = 0; head < c.num_heads; ++head) Rope(c, t, &q[t][head * d]);
        for (int64_t head = 0; head < c.num_kv_heads; ++head) Rope(c, t, &k[t][head * d]);
      }
    }
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> attn(q_dim, 0.0);
      for (int64_t head = 0; head < c.num_heads; ++head) {
        const int64_t kv_head = head / (c.num_heads / c.num_kv_heads);
        std::vector<double> scores(t + 1);
        double max = -1e300, sum = 0;
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (int64_t i = 0; i < d; ++i) dot += q[t][head * d + i] * k[j][kv_head * d + i];
          scores[j] = dot / std::sqrt(static_cast<double>(d));
          max = std::max(max, scores[j]);
        }
        for (double& s : scores) sum += (s = std::exp(s - max));
        for (int64_t j = 0; j <= t; ++j) {
          for (int64_t i = 0; i < d; ++i) {
            attn[head * d + i] += scores[j] / sum * v[j][kv_head * d + i];
          }
        }
      }
      auto o = gpt2 ? Apply(bf16, Get(p + "attn.c_proj.weight"), attn, h, true)
                    : Apply(bf16, Get(p + "self_attn.o_proj.weight"), attn, h, false);
      if (gpt2) AddTo(o, Get(p + "attn.c_proj.bias"));
      if (c.o_bias && !gpt2) AddTo(o, Get(p + "self_attn.o_proj.bias"));
      AddTo(x[t], o);
      const auto xn = Normalize(c, x[t], ln2_w, &ln2_b);
      std::vector<double> mlp;
      if (gpt2) {
        auto up = Apply(bf16, Get(p + "mlp.c_fc.weight"), xn, c.intermediate_size, true);
        AddTo(up, Get(p + "mlp.c_fc.bias"));
        for (double& u : up) u = Act(c.activation, u);
        mlp = Apply(bf16, Get(p + "mlp.c_proj.weight"), up, h, true);
        AddTo(mlp, Get(p + "mlp.c_proj.bias"));
      } else {
        auto gate = Apply(bf16, Get(p + "mlp.gate_proj.weight"), xn, c.intermediate_size, false);
        auto up = Apply(bf16, Get(p + "mlp.up_proj.weight"), xn, c.intermediate_size, false);
        if (c.mlp_bias) {
          AddTo(gate, Get(p + "mlp.gate_proj.bias"));
          AddTo(up, Get(p + "mlp.up_proj.bias"));
        }
        for (size_t i = 0; i < up.size(); ++i) up[i] *= Act(c.activation, gate[i]);
        mlp = Apply(bf16, Get(p + "mlp.down_proj.weight"), up, h, false);
        if (c.mlp_bias) AddTo(mlp, Get(p + "mlp.down_proj.bias"));
      }
      AddTo(x[t], mlp);
    }
  }
  const auto final_w = Get(gpt2 ? "ln_f.weight" : "model.norm.weight");
  const auto final_b = Get(gpt2 ? "ln_f.bias" : "");
  Matrix hidden(n);
  for (int64_t t = 0; t < n; ++t) hidden[t] = Normalize(c, x[t], final_w, &final_b);
  return hidden;
}

}  // namespace llmserve::worker::testing
