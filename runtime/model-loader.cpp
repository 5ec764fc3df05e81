// Model loading: GGUF -> hyperparameters -> tensor table check -> weights placed on devices.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "runtime/arch.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/model.h"
#include "runtime/vocab.h"

ember_model::~ember_model() {
    for (ember_buffer * b : buffers) ember_buffer_free(b);
}

namespace {

// Upper bounds that keep every product of hyperparameters far from overflow.
constexpr uint32_t k_max_dim   = 1u << 20;
constexpr uint32_t k_max_layer = 4096;

uint32_t arch_u32(const ember_gguf_file & f, const std::string & arch, const char * key, bool required, uint32_t def) {
    const std::string full = arch + "." + key;
    if (required) return f.require_u32(full);
    return f.get_u32(full, def);
}

void check_range(const char * what, uint64_t v, uint64_t lo, uint64_t hi) {
    if (v < lo || v > hi) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "hyperparameter %s = %llu is out of range [%llu, %llu]", what,
                    static_cast<unsigned long long>(v), static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi));
    }
}

void load_hparams(const ember_gguf_file & f, const std::string & arch, ember_hparams & hp) {
    hp.n_ctx_train = arch_u32(f, arch, "context_length", true, 0);
    hp.n_embd      = arch_u32(f, arch, "embedding_length", true, 0);
    hp.n_layer     = arch_u32(f, arch, "block_count", true, 0);
    hp.n_ff        = arch_u32(f, arch, "feed_forward_length", true, 0);
    hp.n_head      = arch_u32(f, arch, "attention.head_count", true, 0);
    check_range("embedding_length", hp.n_embd, 1, k_max_dim);
    check_range("block_count", hp.n_layer, 1, k_max_layer);
    check_range("feed_forward_length", hp.n_ff, 1, k_max_dim);
    check_range("attention.head_count", hp.n_head, 1, hp.n_embd);
    check_range("context_length", hp.n_ctx_train, 1, 1u << 30);
    hp.n_head_kv = arch_u32(f, arch, "attention.head_count_kv", false, hp.n_head);
    check_range("attention.head_count_kv", hp.n_head_kv, 1, hp.n_head);
    if (hp.n_head % hp.n_head_kv != 0) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "attention.head_count (%u) is not a multiple of attention.head_count_kv (%u)",
                    hp.n_head, hp.n_head_kv);
    }
    hp.n_embd_head_k = arch_u32(f, arch, "attention.key_length", false, hp.n_embd / hp.n_head);
    hp.n_embd_head_v = arch_u32(f, arch, "attention.value_length", false, hp.n_embd_head_k);
    check_range("attention.key_length", hp.n_embd_head_k, 2, 4096);
    check_range("attention.value_length", hp.n_embd_head_v, 1, 4096);
    hp.n_rot = arch_u32(f, arch, "rope.dimension_count", false, hp.n_embd_head_k);
    check_range("rope.dimension_count", hp.n_rot, 2, hp.n_embd_head_k);
    if (hp.n_rot % 2 != 0) ember_throw(EMBER_ERR_BAD_FORMAT, "rope.dimension_count = %u is odd", hp.n_rot);

    hp.rms_eps        = f.get_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
    hp.rope_freq_base = f.get_f32(arch + ".rope.freq_base", 10000.0f);
    if (!(hp.rms_eps >= 0.0f && hp.rms_eps < 1.0f)) ember_throw(EMBER_ERR_BAD_FORMAT, "layer_norm_rms_epsilon = %g is out of range", hp.rms_eps);
    if (!(hp.rope_freq_base > 0.0f && std::isfinite(hp.rope_freq_base))) {
        ember_throw(EMBER_ERR_BAD_FORMAT, "rope.freq_base = %g is not a positive number", hp.rope_freq_base);
    }

    // RoPE scaling. llama3-style scaling arrives as the rope_freqs.weight tensor.
    const std::string scaling = f.get_str(arch + ".rope.scaling.type", "none");
    float             factor  = f.get_f32(arch + ".rope.scaling.factor", f.get_f32(arch + ".rope.scale_linear", 1.0f));
    if (scaling == "linear" || (scaling == "none" && factor != 1.0f && f.find(arch + ".rope.scale_linear"))) {
        if (!(factor > 0.0f && std::isfinite(factor))) ember_throw(EMBER_ERR_BAD_FORMAT, "rope.scaling.factor = %g is not positive", factor);
        hp.rope_freq_scale = 1.0f / factor;
    } else if (scaling != "none" && scaling != "llama3") {
        ember_throw(EMBER_ERR_UNSUPPORTED, "rope.scaling.type '%s' is not supported yet", scaling.c_str());
    }
}

// Vocabulary size and special tokens from the tokenizer metadata.
void load_vocab_meta(const ember_gguf_file & f, ember_model & m) {
    if (const ember_gguf_value * toks = f.find("tokenizer.ggml.tokens")) {
        if (toks->type != EMBER_GGUF_ARRAY || toks->arr_type != EMBER_GGUF_STRING) {
            ember_throw(EMBER_ERR_BAD_FORMAT, "tokenizer.ggml.tokens is not an array of strings");
        }
        m.hp.n_vocab = static_cast<uint32_t>(std::min<uint64_t>(toks->arr_n, UINT32_MAX));
    }
    auto special = [&](const char * key) -> int32_t {
        const ember_gguf_value * v = f.find(key);
        if (!v) return -1;
        const int64_t id = v->as_i64(key);
        return id >= 0 && id < static_cast<int64_t>(m.hp.n_vocab) ? static_cast<int32_t>(id) : -1;
    };
    m.token_bos = special("tokenizer.ggml.bos_token_id");
    m.token_eos = special("tokenizer.ggml.eos_token_id");
}

// Can the CPU reference path use a tensor of this type in this role?
void check_tensor_type(const ember_gguf_tensor_info & ti, int n_dims, bool is_table) {
    const ember_type_traits * tr = ember_type_get_traits(ti.type);
    if (n_dims == 1) {
        if (ti.type != EMBER_TYPE_F32) {
            ember_throw(EMBER_ERR_UNSUPPORTED, "tensor '%s': 1-D tensors must be f32, this one is %s", ti.name.c_str(), tr->name);
        }
        return;
    }
    if (!tr->to_float || (!is_table && !tr->vec_dot)) {
        ember_throw(EMBER_ERR_UNSUPPORTED, "tensor '%s' has type %s, which this build cannot compute with", ti.name.c_str(), tr->name);
    }
}

void bind_tensors(ember_model & m) {
    const ember_gguf_file & f = *m.gguf;
    const ember_arch_desc & a = *m.arch;
    m.layers.assign(m.hp.n_layer, ember_layer{});
    std::vector<bool> used(f.tensors.size(), false);
    char              name[128];

    auto bind = [&](const ember_tensor_spec & spec, uint32_t il) -> ember_tensor * {
        std::snprintf(name, sizeof(name), spec.name, static_cast<int>(il));
        const int64_t idx = f.find_tensor(name);
        if (idx < 0) {
            if (spec.required) ember_throw(EMBER_ERR_BAD_FORMAT, "missing tensor '%s' (architecture %s)", name, a.name);
            return nullptr;
        }
        const ember_gguf_tensor_info & ti = f.tensors[idx];
        int64_t                        ne[4] = {1, 1, 1, 1};
        const int                      nd    = spec.shape(m.hp, ne);
        for (int d = 0; d < 4; d++) {
            if (ti.ne[d] != ne[d] || (d >= nd && ti.n_dims > nd)) {
                ember_throw(EMBER_ERR_BAD_FORMAT, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, %lld]", name,
                            (long long) ti.ne[0], (long long) ti.ne[1], (long long) ti.ne[2], (long long) ti.ne[3],
                            (long long) ne[0], (long long) ne[1], (long long) ne[2], (long long) ne[3]);
            }
        }
        check_tensor_type(ti, nd, spec.global == &ember_model::tok_embd);
        used[idx]        = true;
        ember_tensor & t = m.tensors.emplace_back();
        t                = ember_tensor{};
        t.type           = ti.type;
        for (int d = 0; d < 4; d++) t.ne[d] = ti.ne[d];
        t.op = EMBER_OP_NONE;
        t.flags |= EMBER_TENSOR_FLAG_WEIGHT;
        ember_set_contiguous_strides(&t);
        ember_set_name(&t, "%s", name);
        m.by_name[name] = &t;
        return &t;
    };

    for (int i = 0; i < a.n_tensors; i++) {
        const ember_tensor_spec & spec = a.tensors[i];
        if (spec.scope == EMBER_TENSOR_GLOBAL) {
            m.*(spec.global) = bind(spec, 0);
        } else {
            for (uint32_t il = 0; il < m.hp.n_layer; il++) m.layers[il].*(spec.layer) = bind(spec, il);
        }
    }
    if (!m.output) {
        m.output = m.tok_embd;  // tied embeddings
        check_tensor_type(f.tensors[f.find_tensor("token_embd.weight")], 2, false);
    }
    for (size_t i = 0; i < used.size(); i++) {
        if (!used[i]) ember_log(EMBER_LOG_WARN, "tensor '%s' is not used by architecture %s", f.tensors[i].name.c_str(), a.name);
    }
}

// Decides which device holds each layer. Layers are offloaded from the last one backwards,
// as llama.cpp does, so the output head goes with the last layer.
void place_layers(ember_model & m, const ember_model_load_options & opt) {
    ember_device * cpu = ember_registry_cpu_device();
    ember_device * gpu = nullptr;
    if (!opt.device.empty()) {
        gpu = ember_registry_find_device(opt.device.c_str());
        if (!gpu) {
            std::string have;
            for (size_t i = 0; i < ember_registry_device_count(); i++) have += std::string(i ? ", " : "") + ember_device_get_name(ember_registry_device(i));
            // A backend family Ember knows but this build or machine lacks is "unsupported";
            // anything else is a wrong argument.
            const bool known = opt.device.rfind("cuda", 0) == 0 || opt.device.rfind("vulkan", 0) == 0;
            ember_throw(known ? EMBER_ERR_UNSUPPORTED : EMBER_ERR_INVALID_ARG, "device '%s' is not available (devices here: %s)",
                        opt.device.c_str(), have.c_str());
        }
    } else if (ember_registry_device_count() > 1) {
        gpu = ember_registry_device(0);  // the highest-priority accelerator
    }
    if (gpu == cpu) gpu = nullptr;
    const uint32_t n_layer = m.hp.n_layer;
    const uint32_t n_gpu   = !gpu ? 0 : opt.n_gpu_layers < 0 ? n_layer : std::min<uint32_t>(n_layer, static_cast<uint32_t>(opt.n_gpu_layers));
    m.layer_device.assign(n_layer, cpu);
    for (uint32_t il = n_layer - n_gpu; il < n_layer; il++) m.layer_device[il] = gpu;
    m.output_device = n_gpu == n_layer && gpu ? gpu : cpu;
}

void repack_cpu_weights(ember_model & m, ember_buffer * file_buf);

// Points every weight at its bytes: directly into the mapped file for host devices, or
// into a device buffer filled from the file. Reports progress per tensor.
void place_weights(ember_model & m, const ember_model_load_options & opt) {
    const ember_gguf_file & f = *m.gguf;
    ember_buffer *          file_buf =
        ember_buffer_from_host_ptr(const_cast<uint8_t *>(f.file_data()), static_cast<size_t>(f.file_size));
    if (!file_buf) ember_throw(EMBER_ERR_OOM, "cannot wrap the model file in a buffer");
    file_buf->usage = EMBER_BUFFER_USAGE_WEIGHTS;
    m.buffers.push_back(file_buf);

    // Device of each weight tensor.
    std::map<ember_tensor *, ember_device *> dev_of;
    auto                                     assign = [&](ember_tensor * t, ember_device * d) {
        if (t && !dev_of.count(t)) dev_of[t] = d;
    };
    assign(m.output, m.output_device);
    assign(m.output_norm, m.output_device);
    assign(m.tok_embd, ember_registry_cpu_device());  // the lookup runs on the CPU
    assign(m.rope_freqs, m.layer_device.empty() ? m.output_device : m.layer_device.back());
    for (uint32_t il = 0; il < m.hp.n_layer; il++) {
        for (auto & kv : m.by_name) {
            char prefix[32];
            std::snprintf(prefix, sizeof(prefix), "blk.%u.", il);
            if (kv.first.rfind(prefix, 0) == 0) assign(kv.second, m.layer_device[il]);
        }
    }

    // Host-readable devices use the mapping; others get one buffer each, filled below.
    std::map<ember_device *, size_t> dev_bytes;
    for (auto & kv : dev_of) {
        ember_buffer_type * buft = ember_device_buffer_type(kv.second);
        if (ember_device_supports_buft(kv.second, file_buf->buft)) continue;
        const size_t align = ember_buffer_type_alignment(buft);
        dev_bytes[kv.second] += (ember_buffer_type_alloc_size(buft, kv.first) + align - 1) / align * align;
    }
    std::map<ember_device *, std::pair<ember_buffer *, size_t>> dev_buf;
    for (auto & kv : dev_bytes) {
        ember_buffer * buf = nullptr;
        ember_status   st  = ember_buffer_type_alloc(ember_device_buffer_type(kv.first), kv.second, &buf);
        if (st != EMBER_OK) {
            ember_throw(st, "cannot allocate %zu bytes of weights on %s", kv.second, ember_device_get_name(kv.first));
        }
        buf->usage = EMBER_BUFFER_USAGE_WEIGHTS;
        m.buffers.push_back(buf);
        dev_buf[kv.first] = {buf, 0};
    }

    size_t done = 0;
    for (ember_tensor & t : m.tensors) {
        const ember_gguf_tensor_info & ti   = *f.tensor(t.name);
        const uint8_t *                src  = f.tensor_data(ti);
        ember_device *                 dev  = dev_of.count(&t) ? dev_of[&t] : ember_registry_cpu_device();
        auto                           it   = dev_buf.find(dev);
        if (it == dev_buf.end()) {
            ember_buffer_place_tensor(file_buf, &t, static_cast<size_t>(src - f.file_data()));
        } else {
            ember_buffer * buf   = it->second.first;
            const size_t   align = ember_buffer_type_alignment(buf->buft);
            ember_buffer_place_tensor(buf, &t, it->second.second);
            ember_tensor_set(&t, src, 0, ti.nbytes);
            it->second.second += (ember_buffer_type_alloc_size(buf->buft, &t) + align - 1) / align * align;
        }
        done++;
        if (opt.progress && opt.progress(static_cast<float>(done) / static_cast<float>(m.tensors.size()), opt.progress_ud)) {
            ember_throw(EMBER_ERR_CANCELLED, "model load cancelled by the progress callback");
        }
    }
    repack_cpu_weights(m, file_buf);
}

// Weights the CPU backend keeps in its own interleaved layout (backends/cpu_simd/repack.h:
// faster decode). A file read into memory is repacked in place; a mapped file's pages stay
// untouched (the page cache can drop them) and the repacked copy lives in one CPU buffer.
// The token embeddings are repacked only when they are also the output projection (tied):
// GET_ROWS reads them either way, but only the matmul gains.
void repack_cpu_weights(ember_model & m, ember_buffer * file_buf) {
    ember_backend_reg * reg = ember_cpu_backend_reg();
    if (!reg->iface.get_proc_address) return;
    const auto repack = reinterpret_cast<ember_cpu_repack_proc>(reg->iface.get_proc_address(reg, "ember_cpu_repack"));
    if (!repack) return;
    const bool                  in_place = !m.gguf->is_mmapped();
    ember_buffer_type *         buft     = ember_device_buffer_type(ember_registry_cpu_device());
    const size_t                align    = ember_buffer_type_alignment(buft);
    std::vector<ember_tensor *> todo;
    size_t                      bytes = 0;
    for (ember_tensor & t : m.tensors) {
        if (t.buffer != file_buf || (&t == m.tok_embd && m.output != m.tok_embd) || !ember_is_contiguous(&t)) continue;
        if (!repack(t.type, t.ne, nullptr, nullptr)) continue;
        todo.push_back(&t);
        bytes += (ember_nbytes(&t) + align - 1) / align * align;
    }
    if (todo.empty()) return;
    ember_buffer * buf = nullptr;
    if (!in_place) {
        if (ember_buffer_type_alloc(buft, bytes, &buf) != EMBER_OK) {
            ember_log(EMBER_LOG_WARN, "not enough memory to repack %.1f MiB of weights for the CPU; decoding from the file layout",
                      bytes / 1048576.0);
            return;
        }
        buf->usage = EMBER_BUFFER_USAGE_WEIGHTS;
        m.buffers.push_back(buf);
    }
    size_t off = 0;
    for (ember_tensor * t : todo) {
        const void * src = t->data;
        if (buf) {
            ember_buffer_place_tensor(buf, t, off);
            off += (ember_nbytes(t) + align - 1) / align * align;
        }
        repack(t->type, t->ne, src, t->data);
        t->flags |= EMBER_TENSOR_FLAG_CPU_REPACKED;
    }
    ember_log(EMBER_LOG_INFO, "repacked %zu weight matrices (%.1f MiB) for the CPU decode kernels%s", todo.size(),
              bytes / 1048576.0, in_place ? " (in place)" : "");
}

}  // namespace

std::unique_ptr<ember_model> ember_model_load_file(const std::string & path, const ember_model_load_options & opt) {
    auto m  = std::make_unique<ember_model>();
    m->path = path;
    ember_gguf_open_params gp;
    gp.use_mmap = opt.use_mmap;
    gp.no_data  = opt.vocab_only;
    m->gguf     = ember_gguf_open(path, gp);
    if (opt.progress && opt.progress(0.0f, opt.progress_ud)) ember_throw(EMBER_ERR_CANCELLED, "model load cancelled by the progress callback");
    const ember_gguf_file & f = *m->gguf;

    const ember_gguf_value * arch = f.find("general.architecture");
    if (!arch || arch->type != EMBER_GGUF_STRING) ember_throw(EMBER_ERR_BAD_FORMAT, "missing string key 'general.architecture'");
    m->arch_name = arch->str;
    load_vocab_meta(f, *m);
    if (f.find("tokenizer.ggml.tokens")) {
        m->vocab     = ember_vocab_load(f);
        m->token_bos = m->vocab->token_bos;
        m->token_eos = m->vocab->token_eos;
    }
    for (const ember_gguf_tensor_info & ti : f.tensors) {
        m->n_params += static_cast<uint64_t>(ti.ne[0] * ti.ne[1] * ti.ne[2] * ti.ne[3]);
        m->n_bytes += ti.nbytes;
    }

    if (opt.vocab_only) {
        m->vocab_only = true;
        m->arch       = ember_arch_find(m->arch_name.c_str());
        if (m->hp.n_vocab == 0) ember_throw(EMBER_ERR_BAD_FORMAT, "vocab-only load: the file has no tokenizer.ggml.tokens");
        if (opt.progress && opt.progress(1.0f, opt.progress_ud)) ember_throw(EMBER_ERR_CANCELLED, "model load cancelled by the progress callback");
        return m;
    }

    m->arch = ember_arch_find(m->arch_name.c_str());
    if (!m->arch) {
        int         n     = 0;
        auto        list  = ember_arch_list(&n);
        std::string names;
        for (int i = 0; i < n; i++) names += std::string(i ? ", " : "") + list[i]->name;
        ember_throw(EMBER_ERR_UNSUPPORTED, "architecture '%s' is not supported (supported: %s)", m->arch_name.c_str(), names.c_str());
    }
    load_hparams(f, m->arch_name, m->hp);
    m->hp.rope_mode = m->arch->rope_mode;
    if (m->arch->load_hparams) m->arch->load_hparams(f, m->hp);

    // The embedding table decides the vocabulary size the graph works with.
    const ember_gguf_tensor_info * te = f.tensor("token_embd.weight");
    if (!te) ember_throw(EMBER_ERR_BAD_FORMAT, "missing tensor 'token_embd.weight'");
    if (te->n_dims != 2 || te->ne[1] < 1 || te->ne[1] > INT32_MAX) ember_throw(EMBER_ERR_BAD_FORMAT, "tensor 'token_embd.weight' has a bad shape");
    if (m->hp.n_vocab != 0 && m->hp.n_vocab != te->ne[1]) {
        ember_log(EMBER_LOG_WARN, "tokenizer has %u tokens but token_embd.weight has %lld rows; using the tensor", m->hp.n_vocab,
                  (long long) te->ne[1]);
    }
    m->hp.n_vocab = static_cast<uint32_t>(te->ne[1]);
    if (m->token_bos >= static_cast<int32_t>(m->hp.n_vocab)) m->token_bos = -1;
    if (m->token_eos >= static_cast<int32_t>(m->hp.n_vocab)) m->token_eos = -1;

    bind_tensors(*m);
    place_layers(*m, opt);
    place_weights(*m, opt);
    ember_log(EMBER_LOG_INFO, "loaded %s: %s, %u layers, n_embd %u, n_vocab %u, %.2f M parameters, %.2f MiB of weights (%s)",
              path.c_str(), m->arch_name.c_str(), m->hp.n_layer, m->hp.n_embd, m->hp.n_vocab, m->n_params / 1e6,
              m->n_bytes / 1048576.0, f.is_mmapped() ? "mmap" : "read");
    return m;
}
