// echo_npu cmodel kernels: plain typed loops over contiguous buffers.
#include "kernels.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace enpu::k {
namespace {

using c10::BFloat16;
using c10::Half;

template <typename T>
struct Acc { using type = T; };
template <> struct Acc<Half> { using type = float; };
template <> struct Acc<BFloat16> { using type = float; };

template <typename T>
constexpr bool is_fp = std::is_floating_point_v<T> || std::is_same_v<T, Half> ||
                       std::is_same_v<T, BFloat16>;

// One ulp toward zero (a zero, an infinity's neighbour and NaN as they are).
template <typename T>
T toward_zero(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    if ((v.x & 0x7fff) == 0 || std::isnan(static_cast<float>(v))) return v;
    return T(static_cast<uint16_t>(v.x - 1), T::from_bits());  // sign-magnitude: |v| - 1 ulp
  } else {
    return std::nextafter(v, T(0));
  }
}

// The product x * y rounded toward zero (fault quirk kRoundTowardZero): the exact product is
// known (in float for half types, in double for float, by fma for double).
template <typename T, typename A>
T mul_toward_zero(A x, A y) {
  if constexpr (std::is_same_v<T, double>) {
    double r = x * y;
    double err = std::fma(x, y, -r);  // exact product = r + err
    if (std::isfinite(r) && r != 0 && err != 0 && ((err < 0) == (r > 0))) r = toward_zero(r);
    return r;
  } else {
    double exact = static_cast<double>(x) * static_cast<double>(y);
    T o = static_cast<T>(exact);
    double back = static_cast<double>(static_cast<A>(o));
    if (std::isfinite(exact) && std::fabs(back) > std::fabs(exact)) o = toward_zero(o);
    return o;
  }
}

// One ulp away from zero (zeros, infinities and NaN as they are).
template <typename T>
T away_from_zero(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    const float f = static_cast<float>(v);
    if ((v.x & 0x7fff) == 0 || std::isnan(f) || std::isinf(f)) return v;
    return T(static_cast<uint16_t>(v.x + 1), T::from_bits());  // sign-magnitude: |v| + 1 ulp
  } else {
    if (v == T(0) || std::isnan(v) || std::isinf(v)) return v;
    return std::nextafter(v, std::signbit(v) ? -std::numeric_limits<T>::infinity()
                                             : std::numeric_limits<T>::infinity());
  }
}

// sqrt of x correctly rounded to T, with the NaN CPU's kernels return: float and double (MKL's
// VML on x86 builds) give +NaN for a negative x and keep a NaN input; float16 goes through
// float's sqrt (x86's default NaN, negative); bfloat16's vectorized conversion makes every NaN
// 0xFFFF. sqrt(-0.0) is -0.0.
template <typename T>
T sqrt_rounded(T v) {
  if constexpr (std::is_same_v<T, double>) {
    if (v < 0) return std::numeric_limits<double>::quiet_NaN();
    return std::sqrt(v);
  } else if constexpr (std::is_same_v<T, float>) {
    if (v < 0) return std::numeric_limits<float>::quiet_NaN();
    return static_cast<float>(std::sqrt(static_cast<double>(v)));  // 53 >= 2*24+2: one rounding
  } else if constexpr (std::is_same_v<T, Half>) {
    const float x = static_cast<float>(v);
    if (x < 0) return Half(static_cast<uint16_t>(0xFE00), Half::from_bits());
    return static_cast<Half>(std::sqrt(x));  // 24 >= 2*11+2: rounding float's result is exact
  } else {
    const float r = std::sqrt(static_cast<float>(v));
    if (std::isnan(r)) return BFloat16(static_cast<uint16_t>(0xFFFF), BFloat16::from_bits());
    return static_cast<BFloat16>(r);
  }
}

template <typename T>
T flushed(T v) {
  const double d = static_cast<double>(v);
  if (d != 0 && std::fabs(d) < static_cast<double>(std::numeric_limits<T>::min()))
    return static_cast<T>(std::signbit(d) ? -0.0f : 0.0f);
  return v;
}

// x op y (Add/Sub: x +- alpha * y) in the accumulate type A, rounded once to T.
template <typename T, typename A>
T fp_binary(BinOp op, A x, A y, A alpha, unsigned quirks) {
  A r;
  switch (op) {
    case BinOp::Add: r = alpha == A(1) ? x + y : x + alpha * y; break;
    case BinOp::Sub: r = alpha == A(1) ? x - y : x - alpha * y; break;
    case BinOp::Mul: r = x * y; break;
    default: r = x / y;
  }
  T o = static_cast<T>(r);
  if ((quirks & kRoundTowardZero) && op == BinOp::Mul) o = mul_toward_zero<T, A>(x, y);
  if (quirks & kFlushSubnormals) o = flushed(o);
  return o;
}

template <typename F>
void dispatch(DType dt, F&& f) {
  switch (dt) {
    case DType::UInt8: f(uint8_t{}); break;
    case DType::Int8: f(int8_t{}); break;
    case DType::Int16: f(int16_t{}); break;
    case DType::Int32: f(int32_t{}); break;
    case DType::Int64: f(int64_t{}); break;
    case DType::Half: f(Half{}); break;
    case DType::Float: f(float{}); break;
    case DType::Double: f(double{}); break;
    case DType::Bool: f(bool{}); break;
    case DType::BFloat16: f(BFloat16{}); break;
  }
}

template <typename T>
bool isnan_(T v) {
  if constexpr (is_fp<T>) return std::isnan(static_cast<float>(static_cast<typename Acc<T>::type>(v)));
  else return false;
}

}  // namespace

bool supported(int c) {
  switch (c) {
    case 0: case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 11: case 15: return true;
    default: return false;
  }
}

size_t elem_size(DType dt) {
  size_t s = 0;
  dispatch(dt, [&](auto t) { s = sizeof(t); });
  return s;
}

void binary(BinOp op, DType dt, const void* a_, const void* b_, void* out_, int64_t n,
            double alpha_f, int64_t alpha_i, unsigned quirks) {
  dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    using A = typename Acc<T>::type;
    const T* a = static_cast<const T*>(a_);
    const T* b = static_cast<const T*>(b_);
    T* out = static_cast<T*>(out_);
    if constexpr (std::is_same_v<T, bool>) {
      for (int64_t i = 0; i < n; ++i) {
        int64_t x = a[i], y = b[i];
        int64_t r = op == BinOp::Add ? x + alpha_i * y : op == BinOp::Sub ? x - alpha_i * y
                  : op == BinOp::Mul ? x * y : (y ? x / y : 0);
        out[i] = r != 0;
      }
    } else if constexpr (is_fp<T>) {
      const A alpha = static_cast<A>(alpha_f);
      for (int64_t i = 0; i < n; ++i)
        out[i] = fp_binary<T, A>(op, static_cast<A>(a[i]), static_cast<A>(b[i]), alpha, quirks);
    } else {
      const T alpha = static_cast<T>(alpha_i);
      for (int64_t i = 0; i < n; ++i) {
        T x = a[i], y = b[i];
        switch (op) {
          case BinOp::Add: out[i] = static_cast<T>(x + alpha * y); break;
          case BinOp::Sub: out[i] = static_cast<T>(x - alpha * y); break;
          case BinOp::Mul: out[i] = static_cast<T>(x * y); break;
          default: out[i] = y ? static_cast<T>(x / y) : T(0);  // glue never divides integers
        }
      }
    }
  });
}

void binary_scalar(BinOp op, DType dt, const void* a_, double s, bool scalar_first, void* out_,
                   int64_t n, double alpha_f, unsigned quirks) {
  dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    using A = typename Acc<T>::type;
    if constexpr (is_fp<T>) {
      const T* a = static_cast<const T*>(a_);
      T* out = static_cast<T*>(out_);
      const A alpha = static_cast<A>(alpha_f), y = static_cast<A>(s);
      for (int64_t i = 0; i < n; ++i) {
        const A x = static_cast<A>(a[i]);
        out[i] = scalar_first ? fp_binary<T, A>(op, y, x, alpha, quirks)
                              : fp_binary<T, A>(op, x, y, alpha, quirks);
      }
    }
  });
}

void compare(CmpOp op, DType dt, const void* a_, const void* b_, bool* out, int64_t n) {
  dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    using A = typename Acc<T>::type;
    const T* a = static_cast<const T*>(a_);
    const T* b = static_cast<const T*>(b_);
    for (int64_t i = 0; i < n; ++i) {
      A x = static_cast<A>(a[i]), y = static_cast<A>(b[i]);
      switch (op) {
        case CmpOp::Eq: out[i] = x == y; break;
        case CmpOp::Ne: out[i] = x != y; break;
        case CmpOp::Lt: out[i] = x < y; break;
        case CmpOp::Le: out[i] = x <= y; break;
        case CmpOp::Gt: out[i] = x > y; break;
        case CmpOp::Ge: out[i] = x >= y; break;
      }
    }
  });
}

void unary(UnOp op, DType dt, const void* in_, void* out_, int64_t n, unsigned quirks) {
  dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    using A = typename Acc<T>::type;
    const T* in = static_cast<const T*>(in_);
    T* out = static_cast<T*>(out_);
    if (op == UnOp::Sqrt) {
      if constexpr (is_fp<T>) {
        for (int64_t i = 0; i < n; ++i) {
          T r = sqrt_rounded(in[i]);
          if ((quirks & kSqrtUlpEvery8) && i % 8 == 7) r = away_from_zero(r);
          out[i] = r;
        }
      }  // glue stages integer inputs to float first
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      A x = static_cast<A>(in[i]);
      A r;
      switch (op) {
        case UnOp::Neg:
          if constexpr (is_fp<T>) r = (quirks & kZeroMinusX) ? A(0) - x : -x;
          else r = static_cast<A>(-x);
          break;
        case UnOp::Abs:
          if constexpr (std::is_unsigned_v<A> || std::is_same_v<T, bool>) r = x;
          else r = x < A(0) ? static_cast<A>(-x) : (x == A(0) ? A(0) : x);
          break;
        case UnOp::Exp:
          if constexpr (is_fp<T>) r = std::exp(x);
          else r = x;  // glue stages integer inputs to float first
          break;
        default:  // relu as CPU's clamp_min(x, 0): NaN and -0.0 stay as they are
          if constexpr (is_fp<T>) r = x < A(0) ? A(0) : x;
          else r = x > A(0) ? x : A(0);
      }
      out[i] = static_cast<T>(r);
    }
  });
}

void cast(DType src, DType dst, const void* in_, void* out_, int64_t n) {
  dispatch(src, [&](auto st) {
    using S = decltype(st);
    dispatch(dst, [&](auto dtag) {
      using D = decltype(dtag);
      const S* in = static_cast<const S*>(in_);
      D* out = static_cast<D*>(out_);
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<D, bool>) {
          out[i] = static_cast<typename Acc<S>::type>(in[i]) != 0;
        } else if constexpr (is_fp<S> && !is_fp<D>) {
          // float -> integer: go through int64 like c10::convert (truncation)
          out[i] = static_cast<D>(static_cast<int64_t>(static_cast<typename Acc<S>::type>(in[i])));
        } else {
          out[i] = static_cast<D>(static_cast<typename Acc<S>::type>(in[i]));
        }
      }
    });
  });
}

void fill(size_t elem, void* out, int64_t n, const void* value) {
  char* o = static_cast<char*>(out);
  for (int64_t i = 0; i < n; ++i) std::memcpy(o + i * elem, value, elem);
}

void masked_fill(size_t elem, void* self, const bool* mask, int64_t n, const void* value) {
  char* o = static_cast<char*>(self);
  for (int64_t i = 0; i < n; ++i)
    if (mask[i]) std::memcpy(o + i * elem, value, elem);
}

void where(size_t elem, const bool* cond, const void* a, const void* b, void* out, int64_t n) {
  char* o = static_cast<char*>(out);
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(o + i * elem, (cond[i] ? static_cast<const char*>(a) : static_cast<const char*>(b)) + i * elem, elem);
}

void tri(size_t elem, const void* in, void* out, int64_t batch, int64_t rows, int64_t cols,
         int64_t diag, bool upper) {
  const char* s = static_cast<const char*>(in);
  char* o = static_cast<char*>(out);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        int64_t off = ((b * rows + r) * cols + c) * static_cast<int64_t>(elem);
        bool keep = upper ? (c - r >= diag) : (c - r <= diag);
        if (keep) std::memcpy(o + off, s + off, elem);
        else std::memset(o + off, 0, elem);
      }
}

void index_select(size_t elem, const void* in, const int64_t* idx, void* out, int64_t outer,
                  int64_t dim, int64_t inner, int64_t nidx) {
  const char* s = static_cast<const char*>(in);
  char* o = static_cast<char*>(out);
  const size_t row = static_cast<size_t>(inner) * elem;
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t j = 0; j < nidx; ++j)
      std::memcpy(o + (a * nidx + j) * row, s + (a * dim + idx[j]) * row, row);
}

void reduce(RedOp op, DType dt, const void* in_, void* out_, int64_t outer, int64_t r,
            unsigned quirks) {
  dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    using A = std::conditional_t<is_fp<T>, double, std::conditional_t<std::is_same_v<T, bool>, int64_t, T>>;
    const T* in = static_cast<const T*>(in_);
    for (int64_t o = 0; o < outer; ++o) {
      const T* row = in + o * r;
      if (op == RedOp::All || op == RedOp::Any) {
        bool acc = op == RedOp::All;
        for (int64_t i = 0; i < r; ++i) {
          bool v = static_cast<double>(static_cast<typename Acc<T>::type>(row[i])) != 0.0;
          acc = op == RedOp::All ? (acc && v) : (acc || v);
        }
        static_cast<uint8_t*>(out_)[o] = acc ? 1 : 0;
        continue;
      }
      T* out = static_cast<T*>(out_);
      if (op == RedOp::Amax) {
        A m = static_cast<A>(static_cast<typename Acc<T>::type>(row[0]));
        for (int64_t i = 1; i < r; ++i) {
          if (isnan_(m)) break;
          A v = static_cast<A>(static_cast<typename Acc<T>::type>(row[i]));
          if (isnan_(v) || v > m) m = v;
        }
        out[o] = static_cast<T>(static_cast<typename Acc<T>::type>(m));
        continue;
      }
      if constexpr (std::is_same_v<T, BFloat16>) {
        if (op == RedOp::Sum && (quirks & kBf16TileSum) && r > 16) {
          // float32 tiles of 16 elements; the running total kept in bfloat16
          BFloat16 total(0.0f);
          for (int64_t t = 0; t < r; t += 16) {
            float tile = 0.0f;
            for (int64_t i = t; i < std::min(r, t + 16); ++i) tile += static_cast<float>(row[i]);
            total = static_cast<BFloat16>(static_cast<float>(total) + tile);
          }
          out[o] = total;
          continue;
        }
      }
      A acc = 0;
      for (int64_t i = 0; i < r; ++i) acc += static_cast<A>(static_cast<typename Acc<T>::type>(row[i]));
      if (op == RedOp::Mean) {
        if constexpr (is_fp<T>) acc = acc / static_cast<A>(r);
      }
      out[o] = static_cast<T>(static_cast<typename Acc<T>::type>(acc));
    }
  });
}

void softmax(DType dt, const void* in_, void* out_, int64_t outer, int64_t r) {
  dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_fp<T>) {
      using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
      const T* in = static_cast<const T*>(in_);
      T* out = static_cast<T*>(out_);
      for (int64_t o = 0; o < outer; ++o) {
        const T* x = in + o * r;
        A m = -std::numeric_limits<A>::infinity();
        for (int64_t i = 0; i < r; ++i) m = std::max(m, static_cast<A>(x[i]));
        A s = 0;
        for (int64_t i = 0; i < r; ++i) s += std::exp(static_cast<A>(x[i]) - m);
        for (int64_t i = 0; i < r; ++i) out[o * r + i] = static_cast<T>(std::exp(static_cast<A>(x[i]) - m) / s);
      }
    }
  });
}

}  // namespace enpu::k

namespace enpu::k {

void nan_to_zero(DType dt, void* data, int64_t n) {
  dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_fp<T>) {
      T* p = static_cast<T*>(data);
      for (int64_t i = 0; i < n; ++i)
        if (isnan_(p[i])) p[i] = T(0);
    }
  });
}

}  // namespace enpu::k

namespace enpu::k {

void cumsum(DType dt, const void* in_, void* out_, int64_t outer, int64_t len, int64_t inner,
            unsigned quirks) {
  dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    // CPU's at::acc_type<T, /*is_cuda=*/false>: double for float/double, float for half types,
    // int64 for integers (bool included here: an int64 sum is nonzero iff an OR scan is true)
    using A = std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, double>, double,
                                 std::conditional_t<is_fp<T>, float, int64_t>>;
    const T* in = static_cast<const T*>(in_);
    T* out = static_cast<T*>(out_);
    std::vector<A> acc(static_cast<size_t>(inner));
    for (int64_t o = 0; o < outer; ++o) {
      const T* x = in + o * len * inner;
      T* y = out + o * len * inner;
      for (int64_t b = 0; b < len; b += kScanBlock) {
        const int64_t end = std::min(len, b + kScanBlock);
        for (int64_t i = 0; i < inner; ++i) {
          // the carry: the running total of the blocks before (fault kScanCarryInput: the
          // previous block's last input element)
          if (b == 0) acc[i] = A(0);
          else if (quirks & kScanCarryInput)
            acc[i] = static_cast<A>(static_cast<typename Acc<T>::type>(x[(b - 1) * inner + i]));
        }
        for (int64_t j = b; j < end; ++j)
          for (int64_t i = 0; i < inner; ++i) {
            if constexpr (is_fp<T>) acc[i] += static_cast<A>(x[j * inner + i]);
            else acc[i] = static_cast<A>(static_cast<uint64_t>(acc[i]) +  // wraps like CPU
                                         static_cast<uint64_t>(static_cast<int64_t>(x[j * inner + i])));
            y[j * inner + i] = static_cast<T>(acc[i]);
          }
      }
    }
  });
}

void mm(DType dt, const void* a_, const void* b_, void* out_, int64_t n, int64_t k, int64_t m) {
  dispatch(dt, [&](auto tag) {
    using T = decltype(tag);
    using A = std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, double>, double,
                                 std::conditional_t<is_fp<T>, float, int64_t>>;
    const T* a = static_cast<const T*>(a_);
    const T* b = static_cast<const T*>(b_);
    T* out = static_cast<T*>(out_);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        A acc = A(0);
        for (int64_t p = 0; p < k; ++p) {
          if constexpr (is_fp<T>) {
            acc += static_cast<A>(a[i * k + p]) * static_cast<A>(b[p * m + j]);
          } else {  // wraps like CPU
            acc = static_cast<A>(static_cast<uint64_t>(acc) +
                                 static_cast<uint64_t>(static_cast<int64_t>(a[i * k + p])) *
                                     static_cast<uint64_t>(static_cast<int64_t>(b[p * m + j])));
          }
        }
        out[i * m + j] = static_cast<T>(acc);
      }
  });
}

}  // namespace enpu::k
