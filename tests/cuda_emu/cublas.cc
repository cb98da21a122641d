// cuBLAS as the CUDA backend calls it, for the CUDA emulator: handles with a stream and a
// workspace, and cublasGemmEx as a plain reference GEMM (f32 sums) that honours both transposes,
// the leading dimensions and the data types, and rejects what cuBLAS rejects (a leading dimension
// below the rows of its matrix, an unsupported type), so that a wrong lda/ldb/transpose in the
// backend gives the same wrong answer or error as on a GPU. The declarations are cuBLAS's own.
//
// Thread-safe: handles keep no state that a GEMM changes.

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <vector>

struct cublasContext {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

namespace {

bool Supported16Or32(cudaDataType type) {
  return type == CUDA_R_16F || type == CUDA_R_16BF || type == CUDA_R_32F;
}

float Load(const void* base, cudaDataType type, int64_t index) {
  switch (type) {
    case CUDA_R_16F: {
      __half v;
      std::memcpy(&v, static_cast<const char*>(base) + index * 2, 2);
      return __half2float(v);
    }
    case CUDA_R_16BF: {
      __nv_bfloat16 v;
      std::memcpy(&v, static_cast<const char*>(base) + index * 2, 2);
      return __bfloat162float(v);
    }
    default:
      return static_cast<const float*>(base)[index];
  }
}

void Store(void* base, cudaDataType type, int64_t index, float value) {
  switch (type) {
    case CUDA_R_16F: {
      const __half v = __float2half_rn(value);
      std::memcpy(static_cast<char*>(base) + index * 2, &v, 2);
      return;
    }
    case CUDA_R_16BF: {
      const __nv_bfloat16 v = __float2bfloat16_rn(value);
      std::memcpy(static_cast<char*>(base) + index * 2, &v, 2);
      return;
    }
    default:
      static_cast<float*>(base)[index] = value;
  }
}

// op(M) of a column-major matrix as a row-major [rows, cols] f32 copy: element (r, c) of op(M) is
// M[r + c * ld] without a transpose, M[c + r * ld] with one.
template <cudaDataType kType>
void UnpackAs(const void* m, int ld, bool transposed, int rows, int cols, float* out) {
  // The loop walks the stored matrix in memory order (the copy strides instead).
  if (transposed) {
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c)
        out[size_t(r) * cols + c] = Load(m, kType, c + int64_t{r} * ld);
    }
  } else {
    for (int c = 0; c < cols; ++c) {
      for (int r = 0; r < rows; ++r)
        out[size_t(r) * cols + c] = Load(m, kType, r + int64_t{c} * ld);
    }
  }
}

std::vector<float> Unpack(const void* m, cudaDataType type, int ld, bool transposed, int rows,
                          int cols) {
  std::vector<float> out(size_t(rows) * cols);
  switch (type) {
    case CUDA_R_16F:
      UnpackAs<CUDA_R_16F>(m, ld, transposed, rows, cols, out.data());
      break;
    case CUDA_R_16BF:
      UnpackAs<CUDA_R_16BF>(m, ld, transposed, rows, cols, out.data());
      break;
    default:
      UnpackAs<CUDA_R_32F>(m, ld, transposed, rows, cols, out.data());
  }
  return out;
}

// The dot product of two f32 rows in 16 interleaved partial sums (an order the compiler can
// vectorize; cuBLAS's own order is unspecified too, and the tolerances cover any).
float Dot(const float* a, const float* b, int k) {
  constexpr int kLanes = 16;
  float partial[kLanes] = {};
  int l = 0;
  for (; l + kLanes <= k; l += kLanes) {
    for (int i = 0; i < kLanes; ++i) partial[i] += a[l + i] * b[l + i];
  }
  float sum = 0.0f;
  for (; l < k; ++l) sum += a[l] * b[l];
  for (int i = 0; i < kLanes; ++i) sum += partial[i];
  return sum;
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->workspace = workspace;
  handle->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t) {
  return handle == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_SUCCESS;
}

// C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C, all column-major.
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t compute_type,
                            cublasGemmAlgo_t) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  // The leading dimension of each stored matrix is at least its stored rows.
  if (lda < (ta ? k : m) || lda < 1 || ldb < (tb ? n : k) || ldb < 1 || ldc < m || ldc < 1) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!Supported16Or32(Atype) || !Supported16Or32(Btype) || !Supported16Or32(Ctype) ||
      Atype != Btype) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (compute_type != CUBLAS_COMPUTE_32F && compute_type != CUBLAS_COMPUTE_32F_FAST_16F &&
      compute_type != CUBLAS_COMPUTE_32F_FAST_16BF &&
      compute_type != CUBLAS_COMPUTE_32F_FAST_TF32 && compute_type != CUBLAS_COMPUTE_32F_PEDANTIC) {
    return CUBLAS_STATUS_NOT_SUPPORTED;  // the 16-bit and integer compute types: not emulated
  }
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  const std::vector<float> op_a = Unpack(A, Atype, lda, ta, m, k);    // [m, k]
  const std::vector<float> op_bt = Unpack(B, Btype, ldb, !tb, n, k);  // op(B)^T: [n, k]
  for (int j = 0; j < n; ++j) {
    const float* column = op_bt.data() + size_t(j) * k;
    for (int i = 0; i < m; ++i) {
      const float* row = op_a.data() + size_t(i) * k;
      const float sum = Dot(row, column, k);
      const int64_t index = i + int64_t{j} * ldc;
      // beta == 0: C is not read (it may hold NaNs), as in cuBLAS.
      const float value = b == 0.0f ? a * sum : a * sum + b * Load(C, Ctype, index);
      Store(C, Ctype, index, value);
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "CUBLAS_STATUS_UNKNOWN";
  }
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    default:
      return "unknown error";
  }
}

}  // extern "C"
