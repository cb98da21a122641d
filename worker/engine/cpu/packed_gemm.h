// out[m, n] = x[m, k] · w[n, k]^T against a PackedMatrix (f32, f16, int8 or int4 weights), for
// every batch size: the bandwidth-bound decode of one sequence and the compute-bound prefill alike.
//
// The activations are first rearranged into blocks of up to PackedGemmRowBlock() rows, k-major
// (PackActivations). The kernel then keeps a block of rows × 32 outputs in registers, and for each
// input column loads the panel's 32 weights once (widening f16 in registers) and multiplies them
// with each row's broadcast activation. A block's rows are always 1, 2, 4 or 8 (the last block is
// padded with zero rows), so decode at batch 1 does no wasted work. int8 weights are converted to
// f32 in registers as they are loaded (exactly: they are small integers), the products summed in
// f32, and each output multiplied by its row's scale once at the end; each weight byte is read
// once per pass, a quarter of the bytes of f32.
//
// int4 weights (packed_matrix.h has the layout) are unpacked in registers too, an AND and two
// conversions per 8 (AVX2) or 16 (AVX-512) bytes, each weight byte read once per pass. Per
// quantization group the kernel sums x * q from zero, then adds scale * sum - scale * zero * Σx to
// each output (Σx over the group, computed once per call for each row block): two FMAs per output
// and group rather than a multiply per weight. Passes of many blocks dequantize the panel into
// scratch, as for int8.
//
// AVX-512 (F + BW + VL; blocks of 8 rows) and AVX2 + FMA + F16C (blocks of 4), chosen at run time;
// where neither exists, PackedGemmAvailable() is false and f32/f16 weights stay unpacked
// (matmul.h). int8 and int4 weights are always packed; PackedGemmBaseline runs them on any CPU.
//
// Thread-safe: pure functions on caller-owned memory.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_PACKED_GEMM_H_
#define LLMSERVE_WORKER_ENGINE_CPU_PACKED_GEMM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "worker/engine/cpu/packed_matrix.h"

namespace llmserve::worker::cpu {

// Whether this CPU has a packed GEMM kernel.
bool PackedGemmAvailable();

// The instruction sets this CPU runs the packed GEMM with, best first: "avx512", "avx2". Callers
// use the first; tests check each.
std::vector<std::string> PackedGemmIsas();

// The activations are packed in blocks so that threads can share the work: block b holds rows
// [b * R, b * R + R) for R = PackedGemmRowBlock(isa), except the last, which may hold fewer.
int64_t PackedGemmRowBlock(absl::string_view isa);
int64_t PackedActivationBlocks(absl::string_view isa, int64_t m);
// Floats the packed activations of x [m, k] take.
int64_t PackedActivationsSize(absl::string_view isa, int64_t m, int64_t k);
// Rearranges blocks [block_begin, block_end) of x [m, k] (row-major) into `packed` (of
// PackedActivationsSize floats), k-major inside a block, for the kernel of `isa` to broadcast from.
void PackActivations(absl::string_view isa, const float* x, int64_t m, int64_t k,
                     int64_t block_begin, int64_t block_end, float* packed);

// Panels [panel_begin, panel_end) of w times the packed activations of m rows: out[i * ldc + r]
// receives row i times weight row r, for the weight rows those panels hold (padding rows are not
// written). `packed_x` comes from PackActivations with the same isa, m and k = w.cols().
// `panel_scratch` holds PackedMatrix::kPanelRows * w.cols() floats: with f16, int8 or int4 weights
// and more than 4 blocks of rows, each panel is widened (dequantized) into it once rather than in
// every block's registers; with int4 and fewer blocks, it holds the activations' group sums.
void PackedGemm(absl::string_view isa, const float* packed_x, int64_t m, const PackedMatrix& w,
                int64_t panel_begin, int64_t panel_end, float* out, int64_t ldc,
                float* panel_scratch);

// The portable path, for CPUs with neither AVX-512 nor AVX2 (and for tests on every CPU): each
// panel of w is widened (dequantized) to f32 into `panel_scratch` (kPanelRows * w.cols() floats)
// by plain loops and multiplied with OpenBLAS sgemm. x is [m, w.cols()] row-major (not packed);
// out as for PackedGemm.
void PackedGemmBaseline(const float* x, int64_t m, const PackedMatrix& w, int64_t panel_begin,
                        int64_t panel_end, float* out, int64_t ldc, float* panel_scratch);

}  // namespace llmserve::worker::cpu

#endif  // LLMSERVE_WORKER_ENGINE_CPU_PACKED_GEMM_H_
