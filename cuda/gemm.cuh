// Row-major strided-batched SGEMM on cuBLAS (which is column-major):
//   C_n = alpha op(A_n) op(B_n) + beta C_n,  C (M, N), op(A) (M, K), op(B) (K, N),
// for n < batch, X_n = X + n * stride_X; ld* are the row-major leading
// dimensions (columns of the stored matrix). A row-major C is a column-major
// C^T = op(B)^T op(A)^T, so cuBLAS gets B first and M, N swapped.
#pragma once

#include "cuda/check.cuh"
#include "autograd/device/context.h"

namespace attnlab::device {

struct GemmOperand {
    const float* data;
    int ld;
    long long stride;
    bool transpose = false;
};

inline void gemm_batched(Context& context, int M, int N, int K, float alpha, const GemmOperand& A, const GemmOperand& B,
                         float beta, float* C, int ldc, long long stride_c, int batch, const char* where) {
    check_cublas(cublasSgemmStridedBatched(context.blas(), B.transpose ? CUBLAS_OP_T : CUBLAS_OP_N,
                                           A.transpose ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B.data, B.ld,
                                           B.stride, A.data, A.ld, A.stride, &beta, C, ldc, stride_c, batch),
                 where);
}

}  // namespace attnlab::device
