// Importance matrices made by llama.cpp's llama-imatrix: the mean squared activation of every
// input column of every matrix, measured on calibration text. Two file formats:
//   - legacy binary (.dat): int32 n_entries; per entry int32 name_len, name bytes, int32 ncall,
//     int32 nval, float[nval] (sums already scaled by ncall); optionally int32 chunk_count,
//     int32 dataset_len, dataset bytes.
//   - GGUF (general.type = "imatrix"): per matrix NAME.in_sum2 (F32 [ne0, n_mat], sums of
//     squares) and NAME.counts (F32 [1, n_mat], activations seen), optionally NAME.in_sum;
//     metadata imatrix.datasets (string[]), imatrix.chunk_count, imatrix.chunk_size.
// Both become per-column means, as llama-quantize computes them.
#ifndef EMBER_RUNTIME_IMATRIX_H
#define EMBER_RUNTIME_IMATRIX_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

struct ember_imatrix {
    // Tensor name ("blk.0.attn_q.weight") -> importance, ne0 values per matrix (experts: one
    // run of ne0 per expert).
    std::map<std::string, std::vector<float>> entries;
    std::vector<std::string>                  datasets;     // calibration data names
    int32_t                                   chunk_count = 0;
    bool                                      legacy      = false;

    const std::vector<float> * find(const std::string & name) const {
        auto it = entries.find(name);
        return it == entries.end() ? nullptr : &it->second;
    }
};

// Reads either format (told apart by the GGUF magic). Throws ember_error: EMBER_ERR_IO when the
// file cannot be read, EMBER_ERR_BAD_FORMAT (naming the entry) for a malformed file, counts that
// do not match the sums, or values that are not finite.
ember_imatrix ember_imatrix_load(const std::string & path);

#endif  // EMBER_RUNTIME_IMATRIX_H
