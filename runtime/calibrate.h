// Importance matrices computed by Ember itself: run the model over a calibration text and
// record, for every weight matrix of the blocks ("blk.N.*.weight"), the mean squared
// activation of each input column -- the quantity llama.cpp's llama-imatrix stores, so the
// result is used exactly like an imatrix file (runtime/imatrix.h).
#ifndef EMBER_RUNTIME_CALIBRATE_H
#define EMBER_RUNTIME_CALIBRATE_H

#include <cstdint>
#include <string>

#include "runtime/imatrix.h"

struct ember_calibration_options {
    std::string text_path;       // UTF-8 text, tokenized with the model's vocabulary
    int32_t     n_chunks  = 16;  // chunks evaluated (fewer when the text is shorter); >= 1
    int32_t     n_ctx     = 512; // tokens per chunk (capped at the model's trained context)
    int32_t     n_threads = 0;   // 0 = all cores
};

// Loads the GGUF model at model_path on the CPU and measures it on the text. The result has
// datasets = {text_path} and chunk_count = the chunks evaluated. Throws ember_error:
// EMBER_ERR_IO (unreadable text), EMBER_ERR_INVALID_ARG (too little text, bad options),
// EMBER_ERR_UNSUPPORTED (a model without a usable tokenizer), and the loader's errors.
ember_imatrix ember_calibrate(const std::string & model_path, const ember_calibration_options & o);

// Writes m in llama.cpp's legacy .dat format (what ember_imatrix_load reads back): per entry
// ncall = chunk_count (at least 1) and the means scaled by it, then the chunk count and the
// first dataset name. Throws ember_error EMBER_ERR_IO.
void ember_imatrix_save_legacy(const ember_imatrix & m, const std::string & path);

#endif  // EMBER_RUNTIME_CALIBRATE_H
