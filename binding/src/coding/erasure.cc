// Reed-Solomon erasure coding with ISA-L: the k + m by k generator matrix is the identity over
// Cauchy rows (gf_gen_cauchy1_matrix), so every k by k submatrix is invertible and any k fragments
// rebuild the rest. Encoding multiplies the data by parity rows; decoding multiplies the present
// fragments by the inverse of their rows, times the rows wanted. The tables (32 bytes per
// coefficient) are built on each call: a whole call from JS with k = 2, m = 2 costs about a
// microsecond, so nothing is cached across calls or threads.
//
// No ISA-L function that calls its gf_mul may run here: node exports a gf_mul of its own (OpenSSL's
// curve448), and libisal's calls bind to that one and crash. So the matrix algebra (gf_mul,
// gf_invert_matrix) is done below, and buffers shorter than the SIMD kernels' block, which
// ec_encode_data would hand to ec_encode_data_base, are coded in a padded copy.
#include "coding/erasure.h"

#include <isa-l/erasure_code.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ft {

namespace {
[[noreturn]] void Reject(const char* method, const std::string& name, const std::string& expected,
                         const std::string& got) {
  throw std::invalid_argument(std::string(method) + ": expected " + name + " to be " + expected +
                              ", got " + got);
}

std::string ListOf(const std::vector<int>& values) {
  std::string list = "[";
  for (size_t i = 0; i < values.size(); ++i) list += (i ? ", " : "") + std::to_string(values[i]);
  return list + "]";
}

void CheckCode(const char* method, int k, int m) {
  if (k < 1 || k > kMaxEcFragments - 1) {
    Reject(method, "k", "an integer from 1 to " + std::to_string(kMaxEcFragments - 1), std::to_string(k));
  }
  if (m < 1 || m > kMaxEcFragments - k) {
    Reject(method, "m", "an integer from 1 to " + std::to_string(kMaxEcFragments - k) + " (k + m <= " +
                            std::to_string(kMaxEcFragments) + ")", std::to_string(m));
  }
}

// `indices` distinct, each in [0, limit), and exactly `count` of them unless count is -1.
void CheckIndices(const char* method, const char* name, const std::vector<int>& indices, int count,
                  int limit, const char* what) {
  std::vector<int> sorted = indices;
  std::sort(sorted.begin(), sorted.end());
  bool valid = (count < 0 || static_cast<int>(indices.size()) == count) &&
               std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end() &&
               (sorted.empty() || (sorted.front() >= 0 && sorted.back() < limit));
  if (!valid) {
    std::string expected = (count < 0 ? "" : std::to_string(count) + " ") + "distinct " + what +
                           " from 0 to " + std::to_string(limit - 1);
    Reject(method, name, expected, ListOf(indices));
  }
}

void CheckCount(const char* method, const char* name, size_t count, size_t expected,
                const char* what) {
  if (count != expected) {
    Reject(method, name, std::to_string(expected) + " buffers (" + what + ")", std::to_string(count));
  }
}

// ISA-L reads every input and writes every output across each call: overlapping buffers would
// read bytes already overwritten.
void CheckApart(const char* method, size_t len, const char* inputName,
                const std::vector<const uint8_t*>& inputs, const char* outputName,
                const std::vector<uint8_t*>& outputs) {
  auto overlap = [len](const uint8_t* a, const uint8_t* b) {
    auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
    return len > 0 && x < y + len && y < x + len;
  };
  for (size_t o = 0; o < outputs.size(); ++o) {
    std::string name = std::string(outputName) + "[" + std::to_string(o) + "]";
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (overlap(outputs[o], inputs[i])) {
        Reject(method, name, "apart from every other buffer",
               "it overlapping " + std::string(inputName) + "[" + std::to_string(i) + "]");
      }
    }
    for (size_t p = 0; p < o; ++p) {
      if (overlap(outputs[o], outputs[p])) {
        Reject(method, name, "apart from every other buffer",
               "it overlapping " + std::string(outputName) + "[" + std::to_string(p) + "]");
      }
    }
  }
}

// Row r of the generator: fragment r as a combination of the k data fragments.
std::vector<uint8_t> Generator(int k, int m) {
  std::vector<uint8_t> matrix(static_cast<size_t>(k + m) * k);
  gf_gen_cauchy1_matrix(matrix.data(), k + m, k);
  return matrix;
}

// Rows `first + r` of a generator for each r of `rows`, one after the other (k coefficients each).
std::vector<uint8_t> RowsOf(const std::vector<uint8_t>& generator, int k, int first, const std::vector<int>& rows) {
  std::vector<uint8_t> selected;
  for (int row : rows) {
    auto start = generator.begin() + static_cast<size_t>(first + row) * k;
    selected.insert(selected.end(), start, start + k);
  }
  return selected;
}

// Product in GF(2^8) modulo ISA-L's polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11d).
uint8_t GfMul(uint8_t a, uint8_t b) {
  unsigned product = 0, shifted = a;
  for (; b != 0; b >>= 1) {
    if (b & 1) product ^= shifted;
    shifted <<= 1;
    if (shifted & 0x100) shifted ^= 0x11d;
  }
  return static_cast<uint8_t>(product);
}

// a^254 = 1/a, as every nonzero a has a^255 = 1.
uint8_t GfInverse(uint8_t a) {
  uint8_t result = 1;
  for (int bit = 7; bit >= 0; --bit) {
    result = GfMul(result, result);
    if ((254 >> bit) & 1) result = GfMul(result, a);
  }
  return result;
}

// The inverse of the n x n `matrix` by Gauss-Jordan elimination; empty if it is singular.
std::vector<uint8_t> Invert(std::vector<uint8_t> matrix, int n) {
  std::vector<uint8_t> inverse(static_cast<size_t>(n) * n, 0);
  for (int i = 0; i < n; ++i) inverse[static_cast<size_t>(i) * n + i] = 1;
  auto row = [n](std::vector<uint8_t>& m, int r) { return m.begin() + static_cast<size_t>(r) * n; };
  for (int col = 0; col < n; ++col) {
    int pivot = col;
    while (pivot < n && row(matrix, pivot)[col] == 0) ++pivot;
    if (pivot == n) return {};
    std::swap_ranges(row(matrix, pivot), row(matrix, pivot) + n, row(matrix, col));
    std::swap_ranges(row(inverse, pivot), row(inverse, pivot) + n, row(inverse, col));
    uint8_t scale = GfInverse(row(matrix, col)[col]);
    for (int j = 0; j < n; ++j) {
      row(matrix, col)[j] = GfMul(row(matrix, col)[j], scale);
      row(inverse, col)[j] = GfMul(row(inverse, col)[j], scale);
    }
    for (int r = 0; r < n; ++r) {
      uint8_t factor = row(matrix, r)[col];
      if (r == col || factor == 0) continue;
      for (int j = 0; j < n; ++j) {
        row(matrix, r)[j] ^= GfMul(factor, row(matrix, col)[j]);
        row(inverse, r)[j] ^= GfMul(factor, row(inverse, col)[j]);
      }
    }
  }
  return inverse;
}

// ec_encode_data's SIMD kernels take at least 16 (SSE), 32 (AVX2) or 64 (AVX-512) bytes.
constexpr size_t kMinSimdLength = 64;

// outputs[r] = sum_i coefficients[r * k + i] * inputs[i] over GF(2^8), for each output r.
void Apply(int k, std::vector<uint8_t>& coefficients, size_t len,
           const std::vector<const uint8_t*>& inputs, const std::vector<uint8_t*>& outputs) {
  if (outputs.empty() || len == 0) return;
  int rows = static_cast<int>(outputs.size());
  std::vector<uint8_t> tables(32 * coefficients.size());
  ec_init_tables(k, rows, coefficients.data(), tables.data());
  std::vector<uint8_t*> in(k), out = outputs;
  for (int i = 0; i < k; ++i) in[i] = const_cast<uint8_t*>(inputs[i]);  // ISA-L only reads them
  if (len < kMinSimdLength) {
    std::vector<uint8_t> padded(static_cast<size_t>(k + rows) * kMinSimdLength, 0);
    for (int i = 0; i < k + rows; ++i) {
      uint8_t* copy = &padded[static_cast<size_t>(i) * kMinSimdLength];
      if (i < k) std::copy(in[i], in[i] + len, copy);
      (i < k ? in[i] : out[i - k]) = copy;
    }
    ec_encode_data(kMinSimdLength, k, rows, tables.data(), in.data(), out.data());
    for (int r = 0; r < rows; ++r) std::copy(out[r], out[r] + len, outputs[r]);
    return;
  }
  // ec_encode_data takes an int length: longer buffers go through in pieces of 1 GiB (each piece,
  // the last included, at least kMinSimdLength long).
  constexpr size_t kPiece = size_t{1} << 30;
  for (size_t done = 0; done < len;) {
    size_t left = len - done;
    size_t piece = left <= kPiece ? left : std::min(kPiece, left - kMinSimdLength);
    ec_encode_data(static_cast<int>(piece), k, rows, tables.data(), in.data(), out.data());
    for (auto& p : in) p += piece;
    for (auto& p : out) p += piece;
    done += piece;
  }
}
}  // namespace

void EcEncode(int k, int m, const std::vector<int>& parityRows, size_t len,
              const std::vector<const uint8_t*>& data, const std::vector<uint8_t*>& parity) {
  const char* method = "ec.encode";
  CheckCode(method, k, m);
  CheckIndices(method, "rows", parityRows, -1, m, "parity rows");
  CheckCount(method, "data", data.size(), k, "one per data fragment");
  CheckCount(method, "parity", parity.size(), parityRows.size(), "one per entry of rows");
  CheckApart(method, len, "data", data, "parity", parity);
  std::vector<uint8_t> coefficients = RowsOf(Generator(k, m), k, k, parityRows);
  Apply(k, coefficients, len, data, parity);
}

void EcDecode(int k, int m, const std::vector<int>& present, size_t len,
              const std::vector<const uint8_t*>& fragments, const std::vector<int>& wanted,
              const std::vector<uint8_t*>& outputs) {
  const char* method = "ec.decode";
  CheckCode(method, k, m);
  CheckIndices(method, "present", present, k, k + m, "fragment indices");
  CheckIndices(method, "wanted", wanted, -1, k + m, "fragment indices");
  CheckCount(method, "fragments", fragments.size(), k, "one per entry of present");
  CheckCount(method, "outputs", outputs.size(), wanted.size(), "one per entry of wanted");
  CheckApart(method, len, "fragments", fragments, "outputs", outputs);
  // present fragments = rows(present) x data, so data = inverse x present fragments
  std::vector<uint8_t> generator = Generator(k, m);
  std::vector<uint8_t> inverse = Invert(RowsOf(generator, k, 0, present), k);
  if (inverse.empty()) {
    throw std::logic_error("ec.decode: the generator rows " + ListOf(present) + " are singular");
  }
  // fragment w = row(w) x data = (row(w) x inverse) x present fragments
  std::vector<uint8_t> coefficients(wanted.size() * k);
  for (size_t w = 0; w < wanted.size(); ++w) {
    const uint8_t* row = &generator[static_cast<size_t>(wanted[w]) * k];
    for (int j = 0; j < k; ++j) {
      uint8_t sum = 0;
      for (int i = 0; i < k; ++i) sum ^= GfMul(row[i], inverse[static_cast<size_t>(i) * k + j]);
      coefficients[w * k + j] = sum;
    }
  }
  Apply(k, coefficients, len, fragments, outputs);
}

}  // namespace ft
