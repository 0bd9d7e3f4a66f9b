// echo_npu "cmodel" kernels: typed loops over contiguous buffers only (no strides, no ATen).
// Dtype codes equal c10::ScalarType values (checked by static_assert in the ATen glue).
#pragma once
#include <cstddef>
#include <cstdint>

namespace enpu::k {

enum class DType : int8_t {
  UInt8 = 0, Int8 = 1, Int16 = 2, Int32 = 3, Int64 = 4, Half = 5,
  Float = 6, Double = 7, Bool = 11, BFloat16 = 15,
};
bool supported(int dtype_code);
size_t elem_size(DType dt);

enum class BinOp { Add, Sub, Mul, Div };
enum class CmpOp { Eq, Ne, Lt, Le, Gt, Ge };
enum class UnOp { Neg, Abs, Exp, Relu, Sqrt };
enum class RedOp { Sum, Mean, Amax, All, Any };

// Deliberate deviations from IEEE round-to-nearest arithmetic, for echo_npu's fault switches
// (0, the default: the results CPU gives). Floating dtypes only.
enum Quirk : unsigned {
  kRoundTowardZero = 1u,  // Mul: the product rounded toward zero instead of to nearest
  kFlushSubnormals = 2u,  // subnormal results become a zero of their sign (FTZ)
  kZeroMinusX = 4u,       // Neg: computed as 0 - x, so -(+0) is +0 and -(-0) is +0
  kSqrtUlpEvery8 = 8u,    // Sqrt: results at flat index % 8 == 7 one ulp away from zero
                          // (zeros, infinities and NaN unchanged)
  kBf16TileSum = 16u,     // reduce Sum, bfloat16: float32 sums of tiles of 16 elements,
                          // accumulated in bfloat16 (rounded after every tile), rows above 16
  kScanCarryInput = 32u,  // cumsum: the carry into every block after the first is the previous
                          // block's last input element instead of its running total
};

// out[i] = a[i] op b[i] (Add/Sub: a + alpha*b, a - alpha*b); alpha as double for floating
// dtypes, as int64 for integral ones.
void binary(BinOp op, DType dt, const void* a, const void* b, void* out, int64_t n,
            double alpha_f, int64_t alpha_i, unsigned quirks = 0);
// Floating dtypes: out[i] = a[i] op s (s op a[i] when scalar_first), the scalar taken in the
// accumulate type (float for half types): one rounding, as CPU's mul and div by a CPU scalar.
void binary_scalar(BinOp op, DType dt, const void* a, double s, bool scalar_first, void* out,
                   int64_t n, double alpha_f, unsigned quirks = 0);
void compare(CmpOp op, DType dt, const void* a, const void* b, bool* out, int64_t n);
void unary(UnOp op, DType dt, const void* in, void* out, int64_t n, unsigned quirks = 0);
void cast(DType src, DType dst, const void* in, void* out, int64_t n);
// Byte-level kernels: value points at one element of elem bytes.
void fill(size_t elem, void* out, int64_t n, const void* value);
void masked_fill(size_t elem, void* self, const bool* mask, int64_t n, const void* value);
void where(size_t elem, const bool* cond, const void* a, const void* b, void* out, int64_t n);
// Batched matrices [batch, rows, cols]; keep (r, c) when c - r <= diag (tril) / >= diag (triu).
void tri(size_t elem, const void* in, void* out, int64_t batch, int64_t rows, int64_t cols,
         int64_t diag, bool upper);
// in: [outer, dim, inner] -> out: [outer, nidx, inner]; idx already bounds-checked.
void index_select(size_t elem, const void* in, const int64_t* idx, void* out, int64_t outer,
                  int64_t dim, int64_t inner, int64_t nidx);
// in: [outer, r] contiguous -> out: [outer]. All/Any write 0/1 bytes; others write dt.
void reduce(RedOp op, DType dt, const void* in, void* out, int64_t outer, int64_t r,
            unsigned quirks = 0);
// Inclusive scan along the middle dim of [outer, len, inner] (in and out of dt), as CPU's
// cumsum: floats accumulated in CPU's accumulate type (double for float/double, float for
// half types), integers in int64 (wrapping), each result rounded/truncated to dt. A block scan:
// blocks of kScanBlock elements along len, each started from the carry of the previous one.
constexpr int64_t kScanBlock = 1024;
void cumsum(DType dt, const void* in, void* out, int64_t outer, int64_t len, int64_t inner,
            unsigned quirks = 0);
// out[n, m] = a[n, k] @ b[k, m], contiguous: floats summed in double (half types in float),
// integers in int64 (wrapping), each result rounded/truncated to dt once. Not for bool.
void mm(DType dt, const void* a, const void* b, void* out, int64_t n, int64_t k, int64_t m);
// NaN elements of a floating buffer become 0 (no-op for other dtypes).
void nan_to_zero(DType dt, void* data, int64_t n);
// softmax over the last dim of [outer, r].
void softmax(DType dt, const void* in, void* out, int64_t outer, int64_t r);

}  // namespace enpu::k
