// Whole-model quantization and conversion (behind ember_model_quantize, include/ember.h).
#ifndef EMBER_RUNTIME_QUANTIZE_H
#define EMBER_RUNTIME_QUANTIZE_H

#include <cstdint>
#include <functional>
#include <string>

#include "quant/types.h"

struct ember_quantize_options {
    std::string ftype           = "Q4_K_M";  // see ember_quant_ftype_from_name
    int32_t     n_threads       = 0;         // 0 = all cores
    int32_t     output_type     = -1;        // -1 = the recipe's
    int32_t     token_embd_type = -1;        // -1 = the recipe's
    std::string imatrix_path;                // "" = none
    // Calibration (runtime/calibrate.h): the importance matrix measured on this text before
    // quantizing (GGUF input only; not with imatrix_path), used like an imatrix file.
    std::string calibration_path;            // "" = none
    int32_t     calibration_chunks = 16;     // chunks of 512 tokens (>= 1)
    std::string imatrix_out_path;            // "" = none; else the measured matrix as a legacy .dat
    bool        allow_requantize = false;
    bool        pure             = false;
    bool        dry_run          = false;
    // Called after each tensor is written (i from 1 to n); returns true to cancel the run.
    std::function<bool(int32_t i, int32_t n, const std::string & name, ember_type type, double mb_per_s)> progress;
};

struct ember_quantize_result {
    int32_t  n_tensors    = 0;
    int32_t  n_fallback   = 0;  // tensors whose rows forced another type than the rules chose
    uint64_t n_elements   = 0;
    uint64_t input_bytes  = 0;  // tensor data of the input
    uint64_t output_bytes = 0;  // tensor data of the output
    uint64_t file_bytes   = 0;  // the whole output file (header and padding included)
    double   seconds      = 0;
};

// Converts `input` (GGUF file or Hugging Face folder) into the GGUF file `output` (unused for a
// dry run). Per-tensor lines and a summary go to the log at EMBER_LOG_INFO. Throws ember_error:
// EMBER_ERR_INVALID_ARG (bad type, same file, requantizing without allow_requantize),
// EMBER_ERR_IO (incl. too little disk space), EMBER_ERR_BAD_FORMAT, EMBER_ERR_UNSUPPORTED,
// EMBER_ERR_CANCELLED. On any failure no output file exists (an older file at that path is
// left as it was).
ember_quantize_result ember_quantize_model(const std::string & input, const std::string & output, const ember_quantize_options & o);

struct ember_model_source;
// The same from a model source already in hand (generated benchmark models, tests): only the
// output-side checks apply.
ember_quantize_result ember_quantize_source(const ember_model_source & src, const std::string & output, const ember_quantize_options & o);

#endif  // EMBER_RUNTIME_QUANTIZE_H
