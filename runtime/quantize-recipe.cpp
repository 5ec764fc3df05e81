// Per-tensor type choice. The rules for llama.cpp's ftypes follow llama_tensor_get_type of
// llama.cpp (src/llama-quant.cpp) for the ftypes Ember offers; written from its description,
// in Ember's terms. Where llama.cpp versions differ, the choice is noted at the rule.
#include "runtime/quantize-recipe.h"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "runtime/error.h"

namespace {

// llama.cpp's LLAMA_FTYPE_* numbers (include/llama.h); they are stored in general.file_type.
enum llama_ftype_id : int32_t {
    FT_ALL_F32 = 0,
    FT_F16     = 1,
    FT_Q4_0    = 2,
    FT_Q4_1    = 3,
    FT_Q8_0    = 7,
    FT_Q5_0    = 8,
    FT_Q5_1    = 9,
    FT_Q2_K    = 10,
    FT_Q3_K_S  = 11,
    FT_Q3_K_M  = 12,
    FT_Q3_K_L  = 13,
    FT_Q4_K_S  = 14,
    FT_Q4_K_M  = 15,
    FT_Q5_K_S  = 16,
    FT_Q5_K_M  = 17,
    FT_Q6_K    = 18,
    FT_IQ4_NL  = 25,
    FT_IQ4_XS  = 30,
    FT_BF16    = 32,
};

struct ftype_row {
    const char * name;
    int32_t      file_type;
    ember_type   base;
};

const ftype_row k_llama_ftypes[] = {
    {"F32", FT_ALL_F32, EMBER_TYPE_F32},     {"F16", FT_F16, EMBER_TYPE_F16},        {"BF16", FT_BF16, EMBER_TYPE_BF16},
    {"Q4_0", FT_Q4_0, EMBER_TYPE_Q4_0},      {"Q4_1", FT_Q4_1, EMBER_TYPE_Q4_1},     {"Q5_0", FT_Q5_0, EMBER_TYPE_Q5_0},
    {"Q5_1", FT_Q5_1, EMBER_TYPE_Q5_1},      {"Q8_0", FT_Q8_0, EMBER_TYPE_Q8_0},     {"Q2_K", FT_Q2_K, EMBER_TYPE_Q2_K},
    {"Q3_K_S", FT_Q3_K_S, EMBER_TYPE_Q3_K},  {"Q3_K_M", FT_Q3_K_M, EMBER_TYPE_Q3_K}, {"Q3_K_L", FT_Q3_K_L, EMBER_TYPE_Q3_K},
    {"Q4_K_S", FT_Q4_K_S, EMBER_TYPE_Q4_K},  {"Q4_K_M", FT_Q4_K_M, EMBER_TYPE_Q4_K}, {"Q5_K_S", FT_Q5_K_S, EMBER_TYPE_Q5_K},
    {"Q5_K_M", FT_Q5_K_M, EMBER_TYPE_Q5_K},  {"Q6_K", FT_Q6_K, EMBER_TYPE_Q6_K},     {"IQ4_NL", FT_IQ4_NL, EMBER_TYPE_IQ4_NL},
    {"IQ4_XS", FT_IQ4_XS, EMBER_TYPE_IQ4_XS},
};

// llama-quantize's aliases: a bare K-quant name means its _M mix.
const std::pair<const char *, const char *> k_aliases[] = {{"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}};

std::string upper(const std::string & s) {
    std::string u = s;
    for (char & c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return u;
}

bool is_ember_type(int32_t type) { return type >= EMBER_TYPE_EMBER_FIRST; }

// Ember's own types that can be produced from floats.
std::vector<int32_t> ember_targets() {
    std::vector<int32_t> out;
    for (int32_t id = EMBER_TYPE_EMBER_FIRST; id < EMBER_TYPE_EMBER_FIRST + EMBER_TYPE_EMBER_COUNT; id++) {
        const ember_type_traits * tr = ember_type_get_traits(id);
        if (tr && tr->from_float && tr->vec_dot) out.push_back(id);
    }
    return out;
}

ember_quant_ftype ember_ftype_of(int32_t id) {
    ember_quant_ftype f;
    f.name      = upper(ember_type_get_name(id));
    f.file_type = EMBER_QUANT_FILE_TYPE_FIRST + (id - EMBER_TYPE_EMBER_FIRST);
    f.base      = static_cast<ember_type>(id);
    f.llama     = false;
    return f;
}

ember_quant_ftype llama_ftype_of(const ftype_row & r) {
    ember_quant_ftype f;
    f.name      = r.name;
    f.file_type = r.file_type;
    f.base      = r.base;
    f.llama     = true;
    return f;
}

}  // namespace

bool ember_quant_ftype_from_name(const std::string & name, ember_quant_ftype & out) {
    // llama-quantize also takes the general.file_type number ("15" for Q4_K_M).
    if (!name.empty() && name.size() <= 5 && name.find_first_not_of("0123456789") == std::string::npos) {
        return ember_quant_ftype_from_file_type(std::stoi(name), out);
    }
    std::string u = upper(name);
    for (const auto & a : k_aliases) {
        if (u == a.first) u = a.second;
    }
    for (const ftype_row & r : k_llama_ftypes) {
        if (u == r.name) {
            out = llama_ftype_of(r);
            return true;
        }
    }
    const int32_t id = ember_type_by_name(name.c_str());
    if (id >= 0 && is_ember_type(id)) {
        const ember_type_traits * tr = ember_type_get_traits(id);
        if (!tr || !tr->from_float || !tr->vec_dot) return false;
        out = ember_ftype_of(id);
        return true;
    }
    return false;
}

bool ember_quant_ftype_from_file_type(int32_t file_type, ember_quant_ftype & out) {
    for (const ftype_row & r : k_llama_ftypes) {
        if (r.file_type == file_type) {
            out = llama_ftype_of(r);
            return true;
        }
    }
    for (int32_t id : ember_targets()) {
        if (EMBER_QUANT_FILE_TYPE_FIRST + (id - EMBER_TYPE_EMBER_FIRST) == file_type) {
            out = ember_ftype_of(id);
            return true;
        }
    }
    return false;
}

std::string ember_quant_ftype_list() {
    std::string s;
    for (const ftype_row & r : k_llama_ftypes) s += std::string(s.empty() ? "" : ", ") + r.name;
    for (const auto & a : k_aliases) s += std::string(", ") + a.first;
    for (int32_t id : ember_targets()) s += ", " + upper(ember_type_get_name(id));
    return s;
}

//
// Model facts
//
namespace {

int64_t kv_int(const ember_model_source & src, const std::string & key, int64_t def) {
    const ember_gguf_value * v = src.find(key);
    if (!v) return def;
    // Some models store per-layer head counts as an array; the rules use the first layer's.
    if (v->type == EMBER_GGUF_ARRAY) {
        if (v->arr_n == 0 || v->arr_type == EMBER_GGUF_STRING || v->arr_type == EMBER_GGUF_ARRAY) return def;
        ember_gguf_value first;
        first.type = v->arr_type;
        const size_t sz = v->arr_data.size() / v->arr_n;
        if (sz == 0 || sz > 8) return def;
        std::memcpy(&first.num, v->arr_data.data(), sz);
        // Sign-extend the signed element types (the union holds the raw little-endian bytes).
        if (first.type == EMBER_GGUF_INT8) first.num.i64 = static_cast<int8_t>(first.num.u64);
        if (first.type == EMBER_GGUF_INT16) first.num.i64 = static_cast<int16_t>(first.num.u64);
        if (first.type == EMBER_GGUF_INT32) first.num.i64 = static_cast<int32_t>(first.num.u64);
        return first.is_integer() ? first.as_i64(key.c_str()) : def;
    }
    return v->is_integer() ? v->as_i64(key.c_str()) : def;
}

}  // namespace

ember_quant_hparams ember_quant_hparams_from(const ember_model_source & src) {
    ember_quant_hparams hp;
    const ember_gguf_value * a = src.find("general.architecture");
    if (a && a->type == EMBER_GGUF_STRING) hp.arch = a->str;
    const std::string p = hp.arch + ".";
    hp.n_layer   = static_cast<int32_t>(kv_int(src, p + "block_count", 0));
    hp.n_head    = static_cast<int32_t>(kv_int(src, p + "attention.head_count", 0));
    hp.n_head_kv = static_cast<int32_t>(kv_int(src, p + "attention.head_count_kv", hp.n_head));
    hp.n_expert  = static_cast<int32_t>(kv_int(src, p + "expert_count", 0));
    return hp;
}

//
// The rules
//
namespace {

enum class category { token_embd, attn_q, attn_k, attn_v, attn_qkv, attn_kv_b, attn_output, ffn_up, ffn_gate, ffn_down, output, other };

bool has(const std::string & s, const char * part) { return s.find(part) != std::string::npos; }

// In llama.cpp's order of tests: the first that matches decides.
category category_of(const std::string & name) {
    if (name == "output.weight") return category::output;
    if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return category::token_embd;
    if (has(name, "attn_qkv.weight")) return category::attn_qkv;
    if (has(name, "attn_kv_b.weight")) return category::attn_kv_b;
    if (has(name, "attn_v.weight")) return category::attn_v;
    if (has(name, "attn_k.weight")) return category::attn_k;
    if (has(name, "attn_q.weight")) return category::attn_q;
    if (has(name, "attn_output.weight")) return category::attn_output;
    if (has(name, "ffn_up")) return category::ffn_up;
    if (has(name, "ffn_gate")) return category::ffn_gate;
    if (has(name, "ffn_down")) return category::ffn_down;
    return category::other;
}

// Dimensions as ggml counts them: trailing dimensions of 1 do not count, so a [n, 1] matrix
// is a vector.
int ggml_n_dims(const ember_source_tensor & t) {
    for (int d = 3; d >= 1; d--) {
        if (t.ne[d] > 1) return d + 1;
    }
    return 1;
}

// Tensors llama.cpp never quantizes: vectors, norms, and small or special matrices.
bool allows_quantization(const ember_source_tensor & t) {
    if (ggml_n_dims(t) < 2) return false;
    const std::string & n = t.name;
    if (n.size() < 6 || n.compare(n.size() - 6, 6, "weight") != 0) return false;
    static const char * const k_never[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
        "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight", "time_mix_first.weight",
        "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight",
        "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
        "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight",
        "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd",
        ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
    };
    for (const char * part : k_never) {
        if (has(n, part)) return false;
    }
    return n != "position_embd.weight" && n != "token_types.weight";
}

bool fits(ember_type type, int64_t ne0) {
    const ember_type_traits * tr = ember_type_get_traits(type);
    return tr && ne0 % tr->block_size == 0;
}

// The replacement when a type's block does not divide the rows (llama.cpp's fallback table;
// current llama.cpp gives Q4_0 for Q2_K and Q3_K, older versions gave IQ4_NL). Ember's types:
// INT4 and NF4 go to INT4_G32 (blocks of 32). Anything still not fitting becomes F16.
ember_type shape_fallback(ember_type type, int64_t ne0) {
    if (fits(type, ne0)) return type;
    ember_type to = EMBER_TYPE_F16;
    switch (type) {
        case EMBER_TYPE_Q2_K:
        case EMBER_TYPE_Q3_K:   to = EMBER_TYPE_Q4_0; break;
        case EMBER_TYPE_IQ4_XS: to = EMBER_TYPE_IQ4_NL; break;
        case EMBER_TYPE_Q4_K:   to = EMBER_TYPE_Q5_0; break;
        case EMBER_TYPE_Q5_K:   to = EMBER_TYPE_Q5_1; break;
        case EMBER_TYPE_Q6_K:   to = EMBER_TYPE_Q8_0; break;
        case EMBER_TYPE_INT4:
        case EMBER_TYPE_NF4:    to = EMBER_TYPE_INT4_G32; break;
        default:                break;
    }
    const ember_type_traits * tr = ember_type_get_traits(to);
    if (!tr || !tr->from_float || !fits(to, ne0)) to = EMBER_TYPE_F16;
    return to;
}

// llama.cpp's "use more bits" layers: the first and last eighth, and every third in between.
bool use_more_bits(int i_layer, int n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

struct rule_state {
    const ember_quant_hparams & hp;
    const ember_quant_recipe &  r;
    int                         n_attention_wv = 0;
    int                         i_attention_wv = 0;
    int                         n_ffn          = 0;  // n_layer: the counters of ffn_down/gate/up run to it
    int                         i_ffn_down = 0, i_ffn_gate = 0, i_ffn_up = 0;
    bool                        tied           = true;  // no output.weight: token_embd is the output too

    int n_gqa() const { return hp.n_head_kv > 0 ? hp.n_head / hp.n_head_kv : 0; }
    bool falcon() const { return hp.arch == "falcon"; }
    // llama.cpp's LLM_TYPE_70B, the only model size its rules look at.
    bool is_70b() const { return hp.arch == "llama" && hp.n_layer == 80 && hp.n_head != hp.n_head_kv; }

    // The layer of an ffn tensor: its counter, or for mixture-of-experts models (whose expert
    // tensors need not come in layer order) the number in its name.
    int layer_of(int counter, const std::string & name) const {
        if (hp.n_expert <= 1) return counter;
        int i = -1;
        if (std::sscanf(name.c_str(), "blk.%d.", &i) != 1 || i < 0 || i >= n_ffn) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "tensor '%s': cannot tell its layer (0 to %d)", name.c_str(), n_ffn - 1);
        }
        return i;
    }
};

// llama.cpp's llama_tensor_get_type_impl for the ftypes of k_llama_ftypes.
ember_type llama_rule(rule_state & s, ember_type t, const ember_source_tensor & tensor, category cat) {
    const int32_t ft   = s.r.ftype.file_type;
    const auto    arch_falcon = s.falcon();
    if (cat == category::output || (s.tied && cat == category::token_embd)) {
        if (s.r.output_type >= 0) return static_cast<ember_type>(s.r.output_type);
        // An output matrix whose rows do not fit 256-blocks gets Q8_0 (older llama.cpp tested
        // 256 always, newer the block of the type; both give Q8_0 in the end for these ftypes).
        if (arch_falcon || tensor.ne[0] % ember_type_get_traits(t)->block_size != 0) return EMBER_TYPE_Q8_0;
        return t != EMBER_TYPE_Q8_0 ? EMBER_TYPE_Q6_K : t;
    }
    if (cat == category::token_embd) {
        return s.r.token_embd_type >= 0 ? static_cast<ember_type>(s.r.token_embd_type) : t;
    }
    // attn_kv_b (MLA models) takes the attn_v rules, as in current llama.cpp.
    if (cat == category::attn_v || cat == category::attn_kv_b) {
        if (ft == FT_Q2_K) {
            t = s.n_gqa() >= 4 ? EMBER_TYPE_Q4_K : EMBER_TYPE_Q3_K;
        } else if (ft == FT_Q3_K_M) {
            t = s.i_attention_wv < 2 ? EMBER_TYPE_Q5_K : EMBER_TYPE_Q4_K;
        } else if (ft == FT_Q3_K_L) {
            t = EMBER_TYPE_Q5_K;
        } else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && s.n_gqa() >= 4) {
            t = EMBER_TYPE_Q5_K;
        } else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(s.i_attention_wv, s.n_attention_wv)) {
            t = EMBER_TYPE_Q6_K;
        } else if (ft == FT_Q4_K_S && s.i_attention_wv < 4) {
            t = EMBER_TYPE_Q5_K;
        }
        // 70B: 8 heads share each attn_v, so it is 8x smaller than attn_q; more bits cost little.
        if (s.is_70b() && (t == EMBER_TYPE_Q3_K || t == EMBER_TYPE_Q4_K)) t = EMBER_TYPE_Q5_K;
        if (s.hp.n_expert == 8) t = EMBER_TYPE_Q8_0;
        s.i_attention_wv++;
        return t;
    }
    if (cat == category::attn_k) {
        return s.hp.n_expert == 8 ? EMBER_TYPE_Q8_0 : t;
    }
    if (cat == category::ffn_down) {
        const int i = s.layer_of(s.i_ffn_down, tensor.name), n = s.n_ffn;
        if (ft == FT_Q2_K) {
            t = EMBER_TYPE_Q3_K;
        } else if (ft == FT_Q3_K_M) {
            t = i < n / 16 ? EMBER_TYPE_Q5_K : !arch_falcon || use_more_bits(i, n) ? EMBER_TYPE_Q4_K : EMBER_TYPE_Q3_K;
        } else if (ft == FT_Q3_K_L) {
            t = arch_falcon ? EMBER_TYPE_Q4_K : EMBER_TYPE_Q5_K;
        } else if (ft == FT_Q4_K_M) {
            if (arch_falcon) {
                t = i < n / 16 ? EMBER_TYPE_Q6_K : use_more_bits(i, n) ? EMBER_TYPE_Q5_K : EMBER_TYPE_Q4_K;
            } else if (use_more_bits(i, n)) {
                t = EMBER_TYPE_Q6_K;
            }
        } else if (i < n / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS) && !s.r.has_imatrix) {
            t = EMBER_TYPE_Q5_K;
        } else if (ft == FT_Q5_K_M && use_more_bits(i, n)) {
            t = EMBER_TYPE_Q6_K;
        } else if (ft == FT_Q4_K_S && !arch_falcon && i < n / 8) {
            t = EMBER_TYPE_Q5_K;
        } else if ((ft == FT_Q4_0 || ft == FT_Q5_0) && s.r.has_imatrix && i < n / 8) {
            // Guards the first ffn_down layers, only with an imatrix so that a plain run gives
            // what it always gave.
            t = ft == FT_Q4_0 ? EMBER_TYPE_Q4_1 : EMBER_TYPE_Q5_1;
        }
        s.i_ffn_down++;
        return t;
    }
    if (cat == category::attn_output) {
        if (!arch_falcon) {
            if (s.hp.n_expert == 8) {
                if (ft == FT_Q2_K || ft == FT_Q3_K_S || ft == FT_Q3_K_M || ft == FT_IQ4_NL || ft == FT_Q4_K_S ||
                    ft == FT_Q4_K_M || ft == FT_IQ4_XS) {
                    t = EMBER_TYPE_Q5_K;
                }
            } else if (ft == FT_Q2_K) {
                t = EMBER_TYPE_Q3_K;
            } else if (ft == FT_Q3_K_M) {
                t = EMBER_TYPE_Q4_K;
            } else if (ft == FT_Q3_K_L) {
                t = EMBER_TYPE_Q5_K;
            }
        } else if (ft == FT_Q3_K_L) {
            t = EMBER_TYPE_Q4_K;
        }
        return t;
    }
    // attn_qkv keeps its own rule, as llama.cpp had it for years (the 2026 refactor folded it
    // into the attn_v branch, where it no longer applies).
    if (cat == category::attn_qkv) {
        if (ft == FT_Q3_K_M || ft == FT_Q3_K_L) {
            t = EMBER_TYPE_Q4_K;
        } else if (ft == FT_Q4_K_M) {
            t = EMBER_TYPE_Q5_K;
        } else if (ft == FT_Q5_K_M) {
            t = EMBER_TYPE_Q6_K;
        }
        return t;
    }
    if (cat == category::ffn_gate) {
        s.layer_of(s.i_ffn_gate, tensor.name);
        s.i_ffn_gate++;
    } else if (cat == category::ffn_up) {
        s.layer_of(s.i_ffn_up, tensor.name);
        s.i_ffn_up++;
    }
    return t;
}

// Ember's own types: every matrix gets the type, except the output matrix of the 4-bit types,
// which gets Q6_K as llama.cpp gives it for its single-type ftypes (the output is the most
// sensitive matrix); the 8-bit FP8 types keep FP8 there too, as Q8_0 does.
ember_type ember_rule(rule_state & s, ember_type t, const ember_source_tensor & tensor, category cat) {
    if (cat == category::output || (s.tied && cat == category::token_embd)) {
        if (s.r.output_type >= 0) return static_cast<ember_type>(s.r.output_type);
        const bool eight_bit = t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E5M2 || t == EMBER_TYPE_FP8_E4M3_ROW ||
                               t == EMBER_TYPE_FP8_E5M2_ROW;
        if (eight_bit) return t;
        return tensor.ne[0] % 256 == 0 ? EMBER_TYPE_Q6_K : EMBER_TYPE_Q8_0;
    }
    if (cat == category::token_embd && s.r.token_embd_type >= 0) return static_cast<ember_type>(s.r.token_embd_type);
    return t;
}

void check_asked(ember_type type, const ember_source_tensor & t, const char * option) {
    if (!fits(type, t.ne[0])) {
        ember_throw(EMBER_ERR_INVALID_ARG, "%s %s does not fit tensor '%s': its rows of %" PRId64 " are not a multiple of %" PRId64,
                    option, ember_type_get_name(type), t.name.c_str(), t.ne[0], ember_type_get_traits(type)->block_size);
    }
}

// llama.cpp's tensor order (its loader's weight map): tensors outside the blocks first, then
// block by block in layer order, by name within each. The layer counters of the rules run in
// this order, so it decides which attn_v is "the first".
std::vector<size_t> llama_order(const std::vector<ember_source_tensor> & tensors) {
    std::vector<int> layer(tensors.size(), -1);
    for (size_t i = 0; i < tensors.size(); i++) {
        if (std::sscanf(tensors[i].name.c_str(), "blk.%d.", &layer[i]) != 1) layer[i] = -1;
    }
    std::vector<size_t> order(tensors.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        if (layer[a] != layer[b]) return layer[a] < layer[b];
        return tensors[a].name < tensors[b].name;
    });
    return order;
}

}  // namespace

std::vector<ember_quant_choice> ember_quant_plan(const ember_quant_hparams & hp, const std::vector<ember_source_tensor> & tensors,
                                                 const ember_quant_recipe & recipe) {
    rule_state s{hp, recipe};
    s.n_ffn = hp.n_layer;
    for (const ember_source_tensor & t : tensors) {
        const category c = category_of(t.name);
        if (c == category::attn_v || c == category::attn_qkv || c == category::attn_kv_b) s.n_attention_wv++;
        if (c == category::output) s.tied = false;
    }

    const ember_type base      = recipe.ftype.base;
    const bool       quantized = ember_type_get_traits(base)->is_quantized;
    std::vector<ember_quant_choice> out(tensors.size());
    for (size_t i : llama_order(tensors)) {
        const ember_source_tensor & t = tensors[i];
        ember_quant_choice &        c = out[i];
        c.type = c.wanted = t.type;
        if (!allows_quantization(t)) {
            // llama.cpp's converter writes vectors (norms, biases) as F32.
            if (recipe.norms_to_f32 && ggml_n_dims(t) == 1 && (t.type == EMBER_TYPE_F16 || t.type == EMBER_TYPE_BF16)) {
                c.type = c.wanted = EMBER_TYPE_F32;
            }
            continue;
        }
        c.quantizable = true;
        const category cat = category_of(t.name);
        // Explicit types for the embeddings and the output are taken as asked.
        if (recipe.token_embd_type >= 0 && cat == category::token_embd) {
            c.type = c.wanted = static_cast<ember_type>(recipe.token_embd_type);
            check_asked(c.type, t, "--token-embedding-type");
            continue;
        }
        if (recipe.output_type >= 0 && cat == category::output) {
            c.type = c.wanted = static_cast<ember_type>(recipe.output_type);
            check_asked(c.type, t, "--output-tensor-type");
            continue;
        }
        ember_type type = base;
        if (quantized) {
            if (!recipe.pure) type = recipe.ftype.llama ? llama_rule(s, type, t, cat) : ember_rule(s, type, t, cat);
            c.wanted = type;
            type     = shape_fallback(type, t.ne[0]);
        } else {
            c.wanted = type;
        }
        c.type = type;
    }
    return out;
}
