// Hugging Face model folder -> ember_model_source: config.json to GGUF hyperparameters,
// safetensors (one file or shards named by model.safetensors.index.json) to GGUF tensors, and
// the tokenizer (runtime/hf-tokenizer.cpp). Names, metadata and tensor layout follow llama.cpp's
// convert_hf_to_gguf.py (LlamaModel, Qwen2Model, Qwen3Model), so the output loads wherever a
// converted file would: in particular llama's Q and K rows are permuted from Hugging Face's
// rotate-half layout to the interleaved pairs GGUF llama uses, and qwen2/qwen3 keep theirs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <sys/stat.h>

#include "runtime/error.h"
#include "runtime/hf-import.h"
#include "runtime/log.h"
#include "runtime/model-source.h"
#include "runtime/safetensors.h"

namespace {

constexpr uint64_t k_max_json_file = uint64_t(1) << 30;

//
// config.json
//

struct hf_config {
    std::string where;  // "DIR/config.json"
    ember_json  j;

    const ember_json * get(const char * key) const {
        const ember_json * v = j.find(key);
        return v && v->kind != EMBER_JSON_NULL ? v : nullptr;
    }
    bool has(const char * key) const { return get(key) != nullptr; }
    int64_t integer(const char * key, int64_t lo, int64_t hi) const {
        const ember_json * v = get(key);
        if (!v) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: missing '%s'", where.c_str(), key);
        if (v->kind != EMBER_JSON_INT || v->i < lo || v->i > hi) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "%s: '%s' must be an integer in [%lld, %lld]", where.c_str(), key, (long long) lo, (long long) hi);
        }
        return v->i;
    }
    int64_t integer_or(const char * key, int64_t def, int64_t lo, int64_t hi) const { return has(key) ? integer(key, lo, hi) : def; }
    double number(const ember_json & v, const char * key) const {
        if (v.kind == EMBER_JSON_INT) return static_cast<double>(v.i);
        if (v.kind == EMBER_JSON_FLOAT && std::isfinite(v.f)) return v.f;
        ember_throw(EMBER_ERR_BAD_FORMAT, "%s: '%s' must be a number", where.c_str(), key);
    }
    bool boolean_or(const char * key, bool def) const {
        const ember_json * v = get(key);
        if (!v) return def;
        if (v->kind != EMBER_JSON_BOOL) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: '%s' must be true or false", where.c_str(), key);
        return v->b;
    }
};

struct arch_entry {
    const char * hf;    // config.json architectures[0]
    const char * type;  // config.json model_type
    const char * gguf;  // general.architecture
};
const arch_entry k_archs[] = {
    {"LlamaForCausalLM", "llama", "llama"},
    {"MistralForCausalLM", "mistral", "llama"},  // as llama.cpp: the llama graph
    {"Qwen2ForCausalLM", "qwen2", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3", "qwen3"},
};

std::string choose_arch(const hf_config & c) {
    std::string name;
    if (const ember_json * a = c.get("architectures")) {
        if (a->kind != EMBER_JSON_ARRAY || a->arr.empty() || a->arr[0].kind != EMBER_JSON_STRING) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "%s: 'architectures' must be a list of names", c.where.c_str());
        }
        name = a->arr[0].str;
        for (const arch_entry & e : k_archs) {
            if (name == e.hf) return e.gguf;
        }
    } else if (const ember_json * t = c.get("model_type")) {
        name = t->kind == EMBER_JSON_STRING ? t->str : "";
        for (const arch_entry & e : k_archs) {
            if (name == e.type) return e.gguf;
        }
    }
    std::string known;
    for (const arch_entry & e : k_archs) known += (known.empty() ? "" : ", ") + std::string(e.hf);
    ember_throw(EMBER_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported (supported: %s)", c.where.c_str(),
                name.empty() ? "(none given)" : name.c_str(), known.c_str());
}

// Hyperparameters the tensor shapes depend on.
struct hf_hparams {
    std::string arch;
    int64_t     n_vocab = 0, n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0, n_ctx = 0;
    bool        head_dim_given = false;
    bool        tied           = false;
};

//
// Tensor names
//

enum tensor_role : int {
    ROLE_NONE,
    ROLE_Q,  // llama: rows permuted over n_head
    ROLE_K,  // llama: rows permuted over n_head_kv
};

struct layer_name {
    const char * hf;    // after "model.layers.N."
    const char * gguf;  // after "blk.N."
};
// In writing order.
const layer_name k_layer_names[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};
constexpr int k_n_layer_names = static_cast<int>(sizeof(k_layer_names) / sizeof(k_layer_names[0]));

// Does the architecture have this per-layer tensor, and must it be there?
void layer_tensor_use(const std::string & arch, const std::string & gguf, bool & allowed, bool & required) {
    const bool bias = gguf == "attn_q.bias" || gguf == "attn_k.bias" || gguf == "attn_v.bias";
    const bool qk_norm = gguf == "attn_q_norm.weight" || gguf == "attn_k_norm.weight";
    if (bias) {
        allowed = required = arch == "qwen2";
    } else if (qk_norm) {
        allowed = required = arch == "qwen3";
    } else {
        allowed = required = true;
    }
}

// Expected safetensors shape (outermost first) of a GGUF tensor.
std::vector<int64_t> expected_shape(const hf_hparams & hp, const std::string & gguf) {
    const int64_t q = hp.n_head * hp.head_dim, kv = hp.n_head_kv * hp.head_dim;
    if (gguf == "token_embd.weight" || gguf == "output.weight") return {hp.n_vocab, hp.n_embd};
    if (gguf == "output_norm.weight" || gguf == "attn_norm.weight" || gguf == "ffn_norm.weight") return {hp.n_embd};
    if (gguf == "attn_q.weight") return {q, hp.n_embd};
    if (gguf == "attn_k.weight" || gguf == "attn_v.weight") return {kv, hp.n_embd};
    if (gguf == "attn_q.bias") return {q};
    if (gguf == "attn_k.bias" || gguf == "attn_v.bias") return {kv};
    if (gguf == "attn_q_norm.weight" || gguf == "attn_k_norm.weight") return {hp.head_dim};
    if (gguf == "attn_output.weight") return {hp.n_embd, q};
    if (gguf == "ffn_gate.weight" || gguf == "ffn_up.weight") return {hp.n_ff, hp.n_embd};
    if (gguf == "ffn_down.weight") return {hp.n_embd, hp.n_ff};
    return {};
}

std::string shape_str(const std::vector<int64_t> & s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); i++) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

//
// Safetensors files
//

struct st_ref {
    std::shared_ptr<ember_st_file> file;
    const ember_st_tensor *        t = nullptr;
};

bool safe_file_name(const std::string & s) {
    return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos && s.find('\\') == std::string::npos;
}

// Every tensor of the folder's weights, by Hugging Face name.
std::map<std::string, st_ref> open_weights(const std::string & dir, std::vector<std::shared_ptr<void>> & keep) {
    namespace fs = std::filesystem;
    std::vector<std::string> files;
    const std::string        index_path = dir + "/model.safetensors.index.json";
    ember_json               index;
    const bool               sharded = ember_hf_read_json_if_present(index_path, index);
    const ember_json *       wmap    = nullptr;
    if (sharded) {
        wmap = index.kind == EMBER_JSON_OBJECT ? index.find("weight_map") : nullptr;
        if (!wmap || wmap->kind != EMBER_JSON_OBJECT) ember_throw(EMBER_ERR_BAD_FORMAT, "%s has no 'weight_map' object", index_path.c_str());
        for (const auto & e : wmap->obj) {
            if (e.second.kind != EMBER_JSON_STRING || !safe_file_name(e.second.str)) {
                ember_throw(EMBER_ERR_BAD_FORMAT, "%s: tensor '%s' names no file of the folder", index_path.c_str(), e.first.c_str());
            }
            if (std::find(files.begin(), files.end(), e.second.str) == files.end()) files.push_back(e.second.str);
        }
        if (files.empty()) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: 'weight_map' is empty", index_path.c_str());
    } else {
        // As llama.cpp: model*.safetensors, in name order.
        std::error_code ec;
        for (const auto & de : fs::directory_iterator(dir, ec)) {
            const std::string n = de.path().filename().string();
            if (n.rfind("model", 0) == 0 && n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0) files.push_back(n);
        }
        std::sort(files.begin(), files.end());
        if (files.empty()) {
            const bool bin = fs::exists(dir + "/pytorch_model.bin") || fs::exists(dir + "/pytorch_model.bin.index.json");
            ember_throw(bin ? EMBER_ERR_UNSUPPORTED : EMBER_ERR_BAD_FORMAT, "%s: no model.safetensors or model.safetensors.index.json%s",
                        dir.c_str(), bin ? " (PyTorch .bin weights are not supported: save the model as safetensors)" : "");
        }
    }

    std::map<std::string, st_ref> out;
    for (const std::string & name : files) {
        std::shared_ptr<ember_st_file> f = ember_safetensors_open(dir + "/" + name);
        keep.push_back(f);
        for (const ember_st_tensor & t : f->tensors) {
            auto it = out.find(t.name);
            if (it != out.end()) {
                ember_throw(EMBER_ERR_BAD_FORMAT, "tensor '%s' is in both %s and %s", t.name.c_str(), it->second.file->path.c_str(), f->path.c_str());
            }
            out[t.name] = {f, &t};
        }
    }
    if (wmap) {
        for (const auto & e : wmap->obj) {
            auto it = out.find(e.first);
            if (it == out.end() || it->second.file->path != dir + "/" + e.second.str) {
                ember_throw(EMBER_ERR_BAD_FORMAT, "%s: tensor '%s' is not in %s", index_path.c_str(), e.first.c_str(), e.second.str.c_str());
            }
        }
    }
    return out;
}

// A source tensor reading one safetensors tensor, with llama's Q/K row permutation when asked:
// Hugging Face keeps each head's rotary pairs as halves (row h*d + s*d/2 + i for pair i,
// side s), GGUF llama as neighbours (row h*d + 2i + s). This is llama.cpp's permute().
ember_source_tensor make_tensor(const std::string & gguf, const st_ref & ref, ember_type type, int64_t permute_heads) {
    ember_source_tensor st;
    st.name   = gguf;
    st.type   = type;
    st.n_dims = std::max<int32_t>(1, static_cast<int32_t>(ref.t->shape.size()));
    for (size_t d = 0; d < ref.t->shape.size(); d++) st.ne[d] = ref.t->shape[ref.t->shape.size() - 1 - d];
    st.nbytes                          = ref.t->nbytes;
    std::shared_ptr<ember_st_file> f   = ref.file;
    const ember_st_tensor *        t   = ref.t;
    if (permute_heads <= 0) {
        st.read = [f, t](void * dst) { std::memcpy(dst, f->data(*t), t->nbytes); };
        return st;
    }
    const int64_t rows = t->shape[0];
    const size_t  row_bytes = static_cast<size_t>(t->nbytes / static_cast<uint64_t>(rows));
    const int64_t hd   = rows / permute_heads;
    st.read = [f, t, rows, row_bytes, hd](void * dst) {
        const uint8_t * src = f->data(*t);
        uint8_t *       out = static_cast<uint8_t *>(dst);
        for (int64_t r = 0; r < rows; r++) {
            const int64_t h = r / hd, j = r % hd, i = j / 2, side = j % 2;
            const int64_t from = h * hd + side * (hd / 2) + i;
            std::memcpy(out + static_cast<size_t>(r) * row_bytes, src + static_cast<size_t>(from) * row_bytes, row_bytes);
        }
    };
    return st;
}

std::string folder_name(const std::string & dir) {
    std::string d = dir;
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    const size_t slash = d.rfind('/');
    return slash == std::string::npos ? d : d.substr(slash + 1);
}

}  // namespace

//
// Files
//

bool ember_hf_read_text_if_present(const std::string & path, std::string & out) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return false;
    if (!S_ISREG(st.st_mode)) ember_throw(EMBER_ERR_IO, "%s: not a regular file", path.c_str());
    if (static_cast<uint64_t>(st.st_size) > k_max_json_file) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: file too large", path.c_str());
    std::ifstream in(path, std::ios::binary);
    if (!in) ember_throw(EMBER_ERR_IO, "%s: cannot open", path.c_str());
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) ember_throw(EMBER_ERR_IO, "%s: read error", path.c_str());
    out = ss.str();
    return true;
}

bool ember_hf_read_json_if_present(const std::string & path, ember_json & out) {
    std::string text;
    if (!ember_hf_read_text_if_present(path, text)) return false;
    try {
        out = ember_json_parse(text);
    } catch (const ember_error & e) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "%s: %s", path.c_str(), e.what());
    }
    return true;
}

ember_json ember_hf_read_json(const std::string & path) {
    ember_json j;
    if (!ember_hf_read_json_if_present(path, j)) ember_throw(EMBER_ERR_IO, "%s: no such file", path.c_str());
    return j;
}

bool ember_path_is_hf_folder(const std::string & path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
    return ::stat((path + "/config.json").c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::unique_ptr<ember_model_source> ember_source_from_hf(const std::string & dir) {
    auto src  = std::make_unique<ember_model_source>();
    src->what = "Hugging Face folder " + dir;
    if (!ember_path_is_hf_folder(dir)) ember_throw(EMBER_ERR_IO, "%s: not a folder with a config.json", dir.c_str());

    hf_config c;
    c.where = dir + "/config.json";
    c.j     = ember_hf_read_json(c.where);
    if (c.j.kind != EMBER_JSON_OBJECT) ember_throw(EMBER_ERR_BAD_FORMAT, "%s is not a JSON object", c.where.c_str());

    // Hyperparameters. Bounds keep every product far from overflow; the loader checks more.
    constexpr int64_t k_dim = int64_t(1) << 24;
    hf_hparams        hp;
    hp.arch      = choose_arch(c);
    hp.n_embd    = c.integer("hidden_size", 1, k_dim);
    hp.n_layer   = c.integer("num_hidden_layers", 1, 4096);
    hp.n_head    = c.integer("num_attention_heads", 1, hp.n_embd);
    hp.n_head_kv = c.integer_or("num_key_value_heads", hp.n_head, 1, hp.n_head);
    hp.n_ff      = c.integer("intermediate_size", 1, k_dim);
    hp.n_ctx     = c.integer("max_position_embeddings", 1, int64_t(1) << 30);
    hp.n_vocab   = c.integer("vocab_size", 1, int64_t(1) << 23);
    hp.head_dim_given = c.has("head_dim");
    hp.head_dim       = hp.head_dim_given ? c.integer("head_dim", 2, 65536) : hp.n_embd / hp.n_head;
    hp.tied           = c.boolean_or("tie_word_embeddings", false);
    if (hp.n_head % hp.n_head_kv != 0) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "%s: num_attention_heads (%lld) is not a multiple of num_key_value_heads (%lld)", c.where.c_str(),
                    (long long) hp.n_head, (long long) hp.n_head_kv);
    }
    if (hp.head_dim < 2 || hp.head_dim % 2 != 0) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: the head size %lld is not even", c.where.c_str(), (long long) hp.head_dim);
    for (const char * key : {"attention_bias", "mlp_bias"}) {
        if (c.boolean_or(key, false) && hp.arch != "qwen2") {
            ember_throw(EMBER_ERR_UNSUPPORTED, "%s: %s = true is not supported for %s", c.where.c_str(), key, hp.arch.c_str());
        }
    }
    if (hp.arch == "qwen2" && c.boolean_or("mlp_bias", false)) ember_throw(EMBER_ERR_UNSUPPORTED, "%s: mlp_bias = true is not supported", c.where.c_str());
    // Newer configs keep rope_theta and the scaling in rope_parameters.
    const ember_json * rope_params = c.get("rope_parameters");
    if (rope_params && rope_params->kind != EMBER_JSON_OBJECT) rope_params = nullptr;
    const ember_json * theta = c.get("rope_theta");
    if (!theta && rope_params) theta = rope_params->find("rope_theta");
    const double rope_theta = theta ? c.number(*theta, "rope_theta") : 10000.0;
    if (!(rope_theta > 0)) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: rope_theta must be positive", c.where.c_str());

    ember_gguf_writer w;  // collects the keys in writing order
    const std::string A = hp.arch + ".";
    w.set_str("general.architecture", hp.arch);
    w.set_str("general.type", "model");
    w.set_str("general.name", folder_name(dir));
    w.set_u32(A + "block_count", static_cast<uint32_t>(hp.n_layer));
    w.set_u32(A + "context_length", static_cast<uint32_t>(hp.n_ctx));
    w.set_u32(A + "embedding_length", static_cast<uint32_t>(hp.n_embd));
    w.set_u32(A + "feed_forward_length", static_cast<uint32_t>(hp.n_ff));
    w.set_u32(A + "attention.head_count", static_cast<uint32_t>(hp.n_head));
    if (c.has("num_key_value_heads")) w.set_u32(A + "attention.head_count_kv", static_cast<uint32_t>(hp.n_head_kv));
    if (theta) w.set_f32(A + "rope.freq_base", static_cast<float>(rope_theta));
    if (const ember_json * eps = c.get("rms_norm_eps")) w.set_f32(A + "attention.layer_norm_rms_epsilon", static_cast<float>(c.number(*eps, "rms_norm_eps")));
    if (hp.head_dim_given) {
        w.set_u32(A + "attention.key_length", static_cast<uint32_t>(hp.head_dim));
        w.set_u32(A + "attention.value_length", static_cast<uint32_t>(hp.head_dim));
    }
    w.set_u32("general.file_type", 0);  // set below from the tensor types
    if (hp.arch == "llama") {
        w.set_u32(A + "vocab_size", static_cast<uint32_t>(hp.n_vocab));
        w.set_u32(A + "rope.dimension_count", static_cast<uint32_t>(hp.head_dim));
    }

    // RoPE scaling.
    const ember_json * scaling = c.get("rope_scaling");
    if (!scaling && rope_params) scaling = rope_params;
    std::vector<float> rope_factors;
    if (scaling) {
        const std::string where = c.where + ": rope_scaling";
        if (scaling->kind != EMBER_JSON_OBJECT) ember_throw(EMBER_ERR_BAD_FORMAT, "%s must be an object", where.c_str());
        const ember_json * t    = scaling->find("rope_type");
        if (!t || t->kind != EMBER_JSON_STRING) t = scaling->find("type");
        const std::string  type = t && t->kind == EMBER_JSON_STRING ? t->str : "default";
        auto num = [&](const char * key, double def, bool required) {
            const ember_json * v = scaling->find(key);
            if (!v || v->kind == EMBER_JSON_NULL) {
                if (required) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: '%s' scaling needs '%s'", where.c_str(), type.c_str(), key);
                return def;
            }
            return c.number(*v, key);
        };
        if (type == "default") {
            // no scaling
        } else if (type == "linear" || type == "yarn") {
            const double factor = num("factor", 1.0, true);
            if (!(factor > 0)) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: factor must be positive", where.c_str());
            w.set_str(A + "rope.scaling.type", type);
            w.set_f32(A + "rope.scaling.factor", static_cast<float>(factor));
            if (type == "yarn" && scaling->find("original_max_position_embeddings")) {
                w.set_u32(A + "rope.scaling.original_context_length",
                          static_cast<uint32_t>(num("original_max_position_embeddings", 0, true)));
            }
        } else if (type == "llama3" && hp.arch == "llama") {
            const double low = num("low_freq_factor", 1.0, false), high = num("high_freq_factor", 4.0, false);
            const double old = num("original_max_position_embeddings", 8192, false);
            if (!(low > 0) || !(high > low) || !(old > 0)) {
                ember_throw(EMBER_ERR_BAD_FORMAT, "%s: llama3 scaling needs 0 < low_freq_factor < high_freq_factor", where.c_str());
            }
            rope_factors = ember_hf_llama3_rope_factors(rope_theta, hp.head_dim, num("factor", 8.0, false), low, high, old);
        } else {
            ember_throw(EMBER_ERR_UNSUPPORTED, "%s: type '%s' is not supported for %s", where.c_str(), type.c_str(), hp.arch.c_str());
        }
    }
    w.set_u32("general.quantization_version", 2);
    ember_hf_tokenizer_kv(dir, hp.n_vocab, w.kv);

    // Tensors.
    std::map<std::string, st_ref> weights = open_weights(dir, src->keep_alive);
    std::set<std::string>         used;
    auto take = [&](const std::string & hf, const std::string & gguf, bool required, int64_t permute_heads) {
        auto it = weights.find(hf);
        if (it == weights.end()) {
            if (required) {
                ember_throw(EMBER_ERR_BAD_FORMAT, "%s: missing tensor '%s' (GGUF '%s')%s", dir.c_str(), hf.c_str(), gguf.c_str(),
                            hf == "lm_head.weight" ? "; config.json tie_word_embeddings is false" : "");
            }
            return;
        }
        used.insert(hf);
        const ember_st_tensor & t = *it->second.t;
        ember_type              type;
        if (!ember_safetensors_type(t.dtype, type)) {
            ember_throw(EMBER_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (supported: F32, F16, BF16)", it->second.file->path.c_str(),
                        hf.c_str(), t.dtype.c_str());
        }
        const std::string          base   = gguf.rfind("blk.", 0) == 0 ? gguf.substr(gguf.find('.', 4) + 1) : gguf;
        const std::vector<int64_t> expect = expected_shape(hp, base);
        if (t.shape != expect) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "%s: tensor '%s' has shape %s, expected %s from config.json", it->second.file->path.c_str(), hf.c_str(),
                        shape_str(t.shape).c_str(), shape_str(expect).c_str());
        }
        src->tensors.push_back(make_tensor(gguf, it->second, type, permute_heads));
    };

    if (!rope_factors.empty()) {
        ember_source_tensor rf;
        rf.name   = "rope_freqs.weight";
        rf.type   = EMBER_TYPE_F32;
        rf.n_dims = 1;
        rf.ne[0]  = static_cast<int64_t>(rope_factors.size());
        rf.nbytes = rope_factors.size() * sizeof(float);
        rf.read   = [rope_factors](void * dst) { std::memcpy(dst, rope_factors.data(), rope_factors.size() * sizeof(float)); };
        src->tensors.push_back(std::move(rf));
    }
    take("model.embed_tokens.weight", "token_embd.weight", true, 0);
    const bool llama = hp.arch == "llama";
    for (int64_t il = 0; il < hp.n_layer; il++) {
        const std::string hf_pre = "model.layers." + std::to_string(il) + ".";
        const std::string gg_pre = "blk." + std::to_string(il) + ".";
        for (int k = 0; k < k_n_layer_names; k++) {
            const std::string gguf = k_layer_names[k].gguf;
            bool              allowed = false, required = false;
            layer_tensor_use(hp.arch, gguf, allowed, required);
            const std::string hf = hf_pre + k_layer_names[k].hf;
            if (!allowed) {
                if (weights.count(hf)) {
                    ember_throw(EMBER_ERR_UNSUPPORTED, "%s: tensor '%s' has no place in architecture %s", dir.c_str(), hf.c_str(), hp.arch.c_str());
                }
                continue;
            }
            int64_t permute = 0;
            if (llama && gguf.rfind("attn_q.", 0) == 0) permute = hp.n_head;
            if (llama && gguf.rfind("attn_k.", 0) == 0) permute = hp.n_head_kv;
            take(hf, gg_pre + gguf, required, permute);
        }
    }
    take("model.norm.weight", "output_norm.weight", true, 0);
    if (hp.tied) {
        used.insert("lm_head.weight");  // the same values as the embedding table
    } else {
        take("lm_head.weight", "output.weight", true, 0);
    }

    // What is left is not part of the model llama.cpp converts (rotary inv_freq buffers, ...).
    size_t n_skipped = 0;
    for (const auto & e : weights) {
        if (used.count(e.first)) continue;
        // Rotary frequency buffers of older checkpoints: recomputed from config.json, as llama.cpp does.
        const std::string inv = "rotary_emb.inv_freq";
        if (e.first.size() > inv.size() && e.first.compare(e.first.size() - inv.size(), inv.size(), inv) == 0) continue;
        if (n_skipped++ < 8) ember_log(EMBER_LOG_WARN, "hf import: tensor '%s' is not used; skipped", e.first.c_str());
    }
    if (n_skipped > 8) ember_log(EMBER_LOG_WARN, "hf import: %zu unused tensors skipped in all", n_skipped);

    // general.file_type as the converter would name the 2-D tensors' type.
    uint32_t file_type = 0;
    for (const ember_source_tensor & t : src->tensors) {
        if (t.n_dims < 2) continue;
        if (t.type == EMBER_TYPE_BF16) file_type = 32;
        if (t.type == EMBER_TYPE_F16 && file_type == 0) file_type = 1;
    }
    w.set_u32("general.file_type", file_type);
    src->kv = std::move(w.kv);
    return src;
}
