// ForwardBatch: the plain-data input of one forward pass over tokens of several sequences.
//
// Each token carries its sequence (a row of the block table), its position, and the KV slot
// its key/value is written to (slot = block_id * block_size + position % block_size). The
// forward pass returns logits only for the tokens listed in logits_idx.
#pragma once

#include <cstdint>
#include <vector>

#include "common/check.h"

namespace sluice {

struct ForwardBatch {
  std::vector<int32_t> token_ids;    // [num_tokens]
  std::vector<int32_t> positions;    // [num_tokens]
  std::vector<int32_t> seq_idx;      // [num_tokens] row of block_table
  std::vector<int32_t> slots;        // [num_tokens] KV slot written by the token
  std::vector<int32_t> block_table;  // [num_seqs, max_blocks_per_seq], unused entries -1
  int32_t max_blocks_per_seq = 0;
  int32_t block_size = 0;
  std::vector<int32_t> logits_idx;   // [num_logits] indices into the token arrays

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t num_seqs() const {
    return max_blocks_per_seq ? static_cast<int64_t>(block_table.size()) / max_blocks_per_seq : 0;
  }

  // Builder helpers for callers that hold sequences one at a time.
  // Adds a sequence with the given physical blocks; returns its row.
  // REQUIRES: blocks.size() <= max_blocks_per_seq (set before the first call).
  int32_t add_sequence(const std::vector<int32_t>& blocks) {
    SLUICE_CHECK(static_cast<int32_t>(blocks.size()) <= max_blocks_per_seq) << blocks.size();
    const auto row = static_cast<int32_t>(num_seqs());
    block_table.insert(block_table.end(), blocks.begin(), blocks.end());
    block_table.insert(block_table.end(), max_blocks_per_seq - blocks.size(), -1);
    return row;
  }
  // Adds one token of sequence `seq` at `position`; REQUIRES: its block is in the table.
  void add_token(int32_t seq, int32_t token, int32_t position, bool want_logits) {
    const int32_t block = block_table[static_cast<size_t>(seq) * max_blocks_per_seq + position / block_size];
    SLUICE_CHECK(block >= 0) << "position " << position << " has no block";
    if (want_logits) logits_idx.push_back(static_cast<int32_t>(token_ids.size()));
    token_ids.push_back(token);
    positions.push_back(position);
    seq_idx.push_back(seq);
    slots.push_back(block * block_size + position % block_size);
  }
};

}  // namespace sluice
