// Reed-Solomon erasure coding of raw bytes (ISA-L): k data fragments and m parity fragments, any k
// of the k + m rebuild the others. Plain C++ (no N-API), callable from any thread.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ft {

// ISA-L's Cauchy matrix gives each fragment a distinct field element; its own examples cap the
// total at 255.
constexpr int kMaxEcFragments = 255;

// Fragment numbering: data fragment i is index i, parity fragment j is index k + j. The code is
// systematic: data fragments are the data itself; parity row j is sum_i data[i] / ((k + j) ^ i)
// in GF(2^8) (ISA-L's gf_gen_cauchy1_matrix), so any k fragments determine the rest.
//
// Every buffer is `len` bytes; outputs must not overlap the inputs or each other. Both throw
// std::invalid_argument for bad arguments, in the addon's format and naming the JS method
// ("ec.encode: expected <name> to be <what>, got <what it was>"), as most calls come from there.

// Writes the parity fragments numbered `parityRows` (distinct, in [0, m)) of the k data fragments
// `data` into `parity` (one per row).
void EcEncode(int k, int m, const std::vector<int>& parityRows, size_t len,
              const std::vector<const uint8_t*>& data, const std::vector<uint8_t*>& parity);

// Rebuilds the fragments numbered `wanted` (distinct, in [0, k + m), data or parity) into
// `outputs` from the k fragments `fragments`, numbered `present` (k distinct, in [0, k + m)).
void EcDecode(int k, int m, const std::vector<int>& present, size_t len,
              const std::vector<const uint8_t*>& fragments, const std::vector<int>& wanted,
              const std::vector<uint8_t*>& outputs);

}  // namespace ft
