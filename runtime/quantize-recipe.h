// Which type each tensor gets when a model is quantized: the target names ember-quantize
// accepts ("Q4_K_M", "q8_0", "NF4", ...) and llama.cpp's per-tensor rules for its mixes
// (llama_tensor_get_type in llama.cpp src/llama-quant.cpp), so that a GGUF quantized here has
// the same tensor types as one from llama-quantize.
#ifndef EMBER_RUNTIME_QUANTIZE_RECIPE_H
#define EMBER_RUNTIME_QUANTIZE_RECIPE_H

#include <cstdint>
#include <string>
#include <vector>

#include "quant/types.h"
#include "runtime/model-source.h"

// A quantization target: a llama.cpp ftype (a mix of types chosen per tensor) or one of
// Ember's own types.
struct ember_quant_ftype {
    std::string name;              // canonical spelling: "Q4_K_M", "Q8_0", "F16", "INT4", "NF4"
    int32_t     file_type = 0;     // general.file_type: llama.cpp's LLAMA_FTYPE_* number, or
                                   // EMBER_QUANT_FILE_TYPE_FIRST + (id - EMBER_TYPE_EMBER_FIRST)
                                   // for Ember's types
    ember_type  base = EMBER_TYPE_F32;  // the type of most matrices
    bool        llama = false;     // one of llama.cpp's ftypes: its mix rules apply
};

// general.file_type of the files whose matrices are mostly one of Ember's own types. llama.cpp's
// numbers stay below 64; Ember's start far above so that no llama.cpp ftype is ever mistaken
// for one: INT4 1024, INT4_G32 1025, NF4 1026, FP8_E4M3 1027, FP8_E5M2 1028,
// FP8_E4M3_ROW 1029, FP8_E5M2_ROW 1030.
constexpr int32_t EMBER_QUANT_FILE_TYPE_FIRST = 1024;

// Looks up a target by name, case-insensitively: llama-quantize's names (Q4_0 ... Q8_0, Q2_K,
// Q3_K_S/M/L, Q4_K_S/M, Q5_K_S/M, Q6_K, IQ4_NL, IQ4_XS, F16, BF16, F32, and its aliases Q3_K,
// Q4_K, Q5_K for the _M mixes) and the name of every type of the traits table that can be
// produced from floats (q4_k is the Q4_K_M mix, as in llama-quantize; --pure gives plain q4_k),
// or a general.file_type number ("15"). False for anything else.
bool ember_quant_ftype_from_name(const std::string & name, ember_quant_ftype & out);
// The accepted names, for help and error texts ("Q4_0, Q4_1, ...").
std::string ember_quant_ftype_list();
// The target whose general.file_type is `file_type`, false when none.
bool ember_quant_ftype_from_file_type(int32_t file_type, ember_quant_ftype & out);

// What the rules need to know about the model (from its metadata).
struct ember_quant_hparams {
    std::string arch;           // general.architecture
    int32_t     n_layer   = 0;  // ARCH.block_count
    int32_t     n_head    = 0;  // ARCH.attention.head_count (first layer's when per layer)
    int32_t     n_head_kv = 0;  // ARCH.attention.head_count_kv (default n_head)
    int32_t     n_expert  = 0;  // ARCH.expert_count
};
ember_quant_hparams ember_quant_hparams_from(const ember_model_source & src);

struct ember_quant_recipe {
    ember_quant_ftype ftype;
    bool    pure            = false;  // every matrix gets ftype.base (shape fallbacks still apply)
    int32_t output_type     = -1;     // output.weight (or token_embd.weight when tied), -1 = rules
    int32_t token_embd_type = -1;     // token_embd.weight, -1 = rules
    bool    has_imatrix     = false;  // an importance matrix is given (some rules depend on it)
    bool    norms_to_f32    = false;  // 1-D F16/BF16 tensors become F32 (Hugging Face input)
};

struct ember_quant_choice {
    ember_type type        = EMBER_TYPE_F32;  // the type written
    ember_type wanted      = EMBER_TYPE_F32;  // the type the rules chose before the shape fallback
    bool       quantizable = false;           // a matrix the recipe chose a type for
};

// One choice per tensor, in the order of `tensors`. Throws ember_error(EMBER_ERR_INVALID_ARG)
// when an explicitly asked type (output_type, token_embd_type) does not fit a tensor's rows.
std::vector<ember_quant_choice> ember_quant_plan(const ember_quant_hparams & hp, const std::vector<ember_source_tensor> & tensors,
                                                 const ember_quant_recipe & recipe);

#endif  // EMBER_RUNTIME_QUANTIZE_RECIPE_H
