// Whole-model quantizer: a model source (GGUF file here, Hugging Face folder in hf-import.cpp)
// in, a GGUF file out. Plans every tensor's type (quantize-recipe.cpp), checks everything it
// can before writing (types, requantization, same file, disk space), then streams the output:
// header first, then one tensor at a time, each converted by n_threads threads over its rows.
#include "runtime/quantize.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstring>
#include <exception>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "ember.h"
#include "runtime/calibrate.h"
#include "runtime/error.h"
#include "runtime/gguf.h"
#include "runtime/imatrix.h"
#include "runtime/log.h"
#include "runtime/model-source.h"
#include "runtime/quantize-recipe.h"
#include "runtime/quantize-writer.h"

//
// GGUF file as a model source
//

std::unique_ptr<ember_model_source> ember_source_from_gguf(const std::string & path) {
    std::shared_ptr<ember_gguf_file> f = ember_gguf_open(path);
    auto                             src = std::make_unique<ember_model_source>();
    src->what = "GGUF file " + path;
    src->kv   = f->kv;
    src->tensors.reserve(f->tensors.size());
    for (const ember_gguf_tensor_info & t : f->tensors) {
        ember_source_tensor st;
        st.name   = t.name;
        st.type   = t.type;
        st.n_dims = t.n_dims;
        for (int d = 0; d < 4; d++) st.ne[d] = t.ne[d];
        st.nbytes = t.nbytes;
        const uint8_t * data = f->tensor_data(t);
        if (!data) ember_throw(EMBER_ERR_BAD_FORMAT, "%s: tensor '%s' lies outside the file", path.c_str(), t.name.c_str());
        const size_t n = static_cast<size_t>(t.nbytes);
        st.read        = [data, n](void * dst) { std::memcpy(dst, data, n); };
        src->tensors.push_back(std::move(st));
    }
    src->keep_alive.push_back(f);
    return src;
}

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double mb(uint64_t bytes) { return double(bytes) / 1e6; }

int64_t n_rows(const ember_source_tensor & t) { return t.ne[1] * t.ne[2] * t.ne[3]; }

uint64_t n_elements(const ember_source_tensor & t) { return uint64_t(t.ne[0]) * uint64_t(n_rows(t)); }

std::string shape_str(const ember_source_tensor & t) {
    std::string s = std::to_string(t.ne[0]);
    for (int d = 1; d < t.n_dims; d++) s += " x " + std::to_string(t.ne[d]);
    return s;
}

const char * tname(ember_type t) {
    const char * n = ember_type_get_name(t);
    return n ? n : "?";
}

//
// Conversion of one tensor
//
struct convert_job {
    const ember_source_tensor & t;
    const uint8_t *             src;
    uint8_t *                   dst;
    ember_type                  to;
    const float *               imatrix;       // ne0 per matrix (ne1 rows), or nullptr
    bool                        use_quantize;  // the type's importance-guided quantizer
};

// Rows [r0, r1): source rows to floats (unless already F32), floats to the target type. Work
// goes in chunks of about 64K floats that never straddle a matrix (the importance differs).
void convert_rows(const convert_job & j, int64_t r0, int64_t r1) {
    const int64_t             ne0     = j.t.ne[0];
    const int64_t             per_mat = j.t.ne[1];
    const ember_type_traits * in      = ember_type_get_traits(j.t.type);
    const ember_type_traits * out     = ember_type_get_traits(j.to);
    const size_t              in_row  = ember_row_size(j.t.type, ne0);
    const size_t              out_row = ember_row_size(j.to, ne0);
    const int64_t             chunk   = std::max<int64_t>(1, 65536 / std::max<int64_t>(ne0, 1));
    std::vector<float>        tmp;
    if (j.t.type != EMBER_TYPE_F32) tmp.resize(static_cast<size_t>(std::min(chunk, r1 - r0) * ne0));
    for (int64_t r = r0; r < r1;) {
        const int64_t mat = r / per_mat;
        const int64_t nr  = std::min({chunk, r1 - r, (mat + 1) * per_mat - r});
        const float * f;
        if (j.t.type == EMBER_TYPE_F32) {
            f = reinterpret_cast<const float *>(j.src + size_t(r) * in_row);
        } else {
            for (int64_t k = 0; k < nr; k++) in->to_float(j.src + size_t(r + k) * in_row, tmp.data() + k * ne0, ne0);
            f = tmp.data();
        }
        uint8_t * d = j.dst + size_t(r) * out_row;
        if (j.use_quantize) {
            out->quantize(f, d, nr, ne0, j.imatrix ? j.imatrix + mat * ne0 : nullptr);
        } else {
            // Row by row: types with row groups need whole rows, and the others give the same
            // bytes either way.
            for (int64_t k = 0; k < nr; k++) out->from_float(f + k * ne0, d + size_t(k) * out_row, ne0);
        }
        r += nr;
    }
}

// Splits the rows over up to n_threads threads (the caller's thread is one of them).
void convert_tensor(const convert_job & j, int n_threads) {
    const int64_t rows = n_rows(j.t);
    // At least ~64K elements per thread: a smaller share costs less than starting a thread.
    const int64_t by_size = std::max<int64_t>(1, int64_t(n_elements(j.t) / (1u << 16)));
    const int     n       = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({int64_t(n_threads), rows, by_size})));
    std::vector<std::thread>        workers;
    std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
    auto run = [&](int k) {
        try {
            convert_rows(j, rows * k / n, rows * (k + 1) / n);
        } catch (...) {
            errors[size_t(k)] = std::current_exception();
        }
    };
    for (int k = 1; k < n; k++) workers.emplace_back(run, k);
    run(0);
    for (std::thread & w : workers) w.join();
    for (const std::exception_ptr & e : errors) {
        if (e) std::rethrow_exception(e);
    }
}

//
// Metadata
//
void set_kv(std::vector<ember_gguf_kv> & kv, const std::string & key, const ember_gguf_value & v) {
    for (ember_gguf_kv & e : kv) {
        if (e.key == key) {
            e.value = v;
            return;
        }
    }
    kv.push_back({key, v});
}

//
// Checks before anything is written
//
bool same_file(const struct stat & a, const struct stat & b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

std::string dir_of(const std::string & path) {
    const size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

void check_paths(const std::string & input, const struct stat & in_st, const std::string & output) {
    if (output.empty()) ember_throw(EMBER_ERR_INVALID_ARG, "no output path");
    struct stat out_st;
    if (::stat(output.c_str(), &out_st) == 0) {
        if (S_ISDIR(out_st.st_mode)) ember_throw(EMBER_ERR_INVALID_ARG, "output %s is a directory", output.c_str());
        if (same_file(in_st, out_st)) {
            ember_throw(EMBER_ERR_INVALID_ARG, "output %s is the input file %s; choose another output path", output.c_str(), input.c_str());
        }
    }
    struct stat dir_st;
    const std::string dir = dir_of(output);
    if (::stat(dir.c_str(), &dir_st) != 0 || !S_ISDIR(dir_st.st_mode)) {
        ember_throw(EMBER_ERR_IO, "output directory %s does not exist", dir.c_str());
    }
}

void check_disk_space(const std::string & output, uint64_t need) {
    const std::string dir = dir_of(output);
    struct statvfs    vs;
    if (::statvfs(dir.c_str(), &vs) != 0) {
        ember_throw(EMBER_ERR_IO, "%s: cannot tell the free disk space: %s", dir.c_str(), std::strerror(errno));
    }
    const uint64_t avail = uint64_t(vs.f_bavail) * uint64_t(vs.f_frsize);
    if (avail < need) {
        ember_throw(EMBER_ERR_IO, "not enough free disk space in %s: the output needs %.1f MB, %.1f MB are free", dir.c_str(), mb(need),
                    mb(avail));
    }
}

ember_type checked_user_type(int32_t type, const char * what) {
    // Weight types only: Q8_1 and Q8_K hold activations and have no dot product of their own.
    const ember_type_traits * tr = ember_type_get_traits(type);
    if (!tr || !tr->from_float || !tr->vec_dot) {
        ember_throw(EMBER_ERR_INVALID_ARG, "%s: %s cannot be a weight type", what, tr ? tr->name : std::to_string(type).c_str());
    }
    return static_cast<ember_type>(type);
}

struct planned {
    ember_type type;
    uint64_t   nbytes;
    bool       fallback;
};

}  // namespace

namespace {

// The conversion proper: plan every tensor, then stream the output. `from_hf`: the source is a
// Hugging Face folder (its norms become F32 as llama.cpp's converter makes them).
ember_quantize_result quantize_source(const ember_model_source * src, bool from_hf, const std::string & output,
                                      const ember_quantize_options & o, double t_start, ember_imatrix * calibrated = nullptr) {
    ember_quant_recipe recipe;
    if (!ember_quant_ftype_from_name(o.ftype, recipe.ftype)) {
        ember_throw(EMBER_ERR_INVALID_ARG, "unknown quantization type '%s' (one of: %s)", o.ftype.c_str(), ember_quant_ftype_list().c_str());
    }
    recipe.pure            = o.pure;
    recipe.output_type     = o.output_type >= 0 ? checked_user_type(o.output_type, "output tensor type") : -1;
    recipe.token_embd_type = o.token_embd_type >= 0 ? checked_user_type(o.token_embd_type, "token embedding type") : -1;
    const int n_threads    = o.n_threads > 0 ? o.n_threads : std::max(1, int(std::thread::hardware_concurrency()));

    ember_imatrix                       imatrix;
    if (!o.imatrix_path.empty()) {
        imatrix            = ember_imatrix_load(o.imatrix_path);
        recipe.has_imatrix = true;
    } else if (calibrated) {
        imatrix            = std::move(*calibrated);
        recipe.has_imatrix = true;
    }
    recipe.norms_to_f32 = from_hf;

    //
    // Plan: every tensor's type and size, and every reason to refuse, before a byte is written.
    //
    const std::vector<ember_quant_choice> choice = ember_quant_plan(ember_quant_hparams_from(*src), src->tensors, recipe);
    std::vector<planned>                  plan;
    std::set<std::string>                 custom;  // Ember's own types in the output
    ember_quantize_result                 res;
    res.n_tensors = int32_t(src->tensors.size());
    for (size_t i = 0; i < src->tensors.size(); i++) {
        const ember_source_tensor & t  = src->tensors[i];
        const ember_type            to = choice[i].type;
        const ember_type_traits *   ti = ember_type_get_traits(t.type);
        const ember_type_traits *   tt = ember_type_get_traits(to);
        if (!ti || !tt) ember_throw(EMBER_ERR_UNSUPPORTED, "tensor '%s': type %d is not supported", t.name.c_str(), int(t.type));
        if (to != t.type) {
            if (ti->is_quantized && !o.allow_requantize) {
                ember_throw(EMBER_ERR_INVALID_ARG,
                            "tensor '%s' is already quantized (%s); requantizing it to %s loses quality: allow it with --allow-requantize",
                            t.name.c_str(), tname(t.type), tname(to));
            }
            if (!ti->to_float) ember_throw(EMBER_ERR_UNSUPPORTED, "tensor '%s': %s cannot be converted", t.name.c_str(), tname(t.type));
            if (!tt->from_float) ember_throw(EMBER_ERR_UNSUPPORTED, "tensor '%s': %s cannot be produced", t.name.c_str(), tname(to));
            if (t.ne[0] % tt->block_size != 0) {
                ember_throw(EMBER_ERR_INTERNAL, "tensor '%s': %s does not fit %" PRId64 " columns", t.name.c_str(), tname(to), t.ne[0]);
            }
        }
        if (to >= EMBER_TYPE_EMBER_FIRST) custom.insert(tname(to));
        const uint64_t out_bytes = uint64_t(ember_row_size(to, t.ne[0])) * uint64_t(n_rows(t));
        plan.push_back({to, out_bytes, choice[i].type != choice[i].wanted});
        res.n_fallback += choice[i].type != choice[i].wanted;
        res.n_elements += n_elements(t);
        res.input_bytes += t.nbytes;
        res.output_bytes += out_bytes;
    }
    // Importance entries must match the matrices they are for (llama-quantize's rule; the token
    // embedding is exempt, its imatrix entry never fits).
    for (size_t i = 0; recipe.has_imatrix && i < src->tensors.size(); i++) {
        const ember_source_tensor & t = src->tensors[i];
        const std::vector<float> *  e = imatrix.find(t.name);
        if (!choice[i].quantizable || !e || plan[i].type == t.type) continue;
        const uint64_t want = uint64_t(t.ne[0]) * uint64_t(t.ne[2]) * uint64_t(t.ne[3]);
        if (e->size() != want && t.name != "token_embd.weight") {
            ember_throw(EMBER_ERR_INVALID_ARG, "imatrix %s: entry '%s' has %zu values, the tensor needs %" PRIu64, o.imatrix_path.c_str(),
                        t.name.c_str(), e->size(), want);
        }
    }

    //
    // Output metadata: the input's, with the file type and Ember's notes.
    //
    std::vector<ember_gguf_kv> kv = src->kv;
    kv.erase(std::remove_if(kv.begin(), kv.end(),
                            [](const ember_gguf_kv & e) { return e.key == "split.no" || e.key == "split.count" || e.key == "split.tensors.count"; }),
             kv.end());
    set_kv(kv, "general.quantization_version", ember_gguf_uint(EMBER_GGUF_UINT32, 2));
    set_kv(kv, "general.file_type", ember_gguf_uint(EMBER_GGUF_UINT32, uint32_t(recipe.ftype.file_type)));
    set_kv(kv, "ember.quantization.ftype", ember_gguf_string(recipe.ftype.name));
    set_kv(kv, "ember.quantization.tool_version", ember_gguf_string(std::string("ember ") + EMBER_VERSION_STRING));
    if (!custom.empty()) {
        set_kv(kv, ember_gguf_custom_types_key, ember_gguf_string(ember_gguf_custom_types_text));
        set_kv(kv, "ember.quantization.custom_type_names", ember_gguf_strings(std::vector<std::string>(custom.begin(), custom.end())));
    }
    if (recipe.has_imatrix) {
        if (calibrated) {
            set_kv(kv, "ember.quantization.imatrix.calibration", ember_gguf_string(o.calibration_path));
            set_kv(kv, "ember.quantization.imatrix.calibration_chunks", ember_gguf_uint(EMBER_GGUF_UINT32, uint32_t(std::max(0, imatrix.chunk_count))));
        } else {
            set_kv(kv, "ember.quantization.imatrix.file", ember_gguf_string(o.imatrix_path));
        }
        // The keys llama-quantize writes, so llama.cpp's tools show them too.
        set_kv(kv, "quantize.imatrix.file", ember_gguf_string(calibrated ? o.calibration_path : o.imatrix_path));
        if (!imatrix.datasets.empty()) set_kv(kv, "quantize.imatrix.dataset", ember_gguf_string(imatrix.datasets[0]));
        set_kv(kv, "quantize.imatrix.entries_count", ember_gguf_uint(EMBER_GGUF_UINT32, uint32_t(imatrix.entries.size())));
        set_kv(kv, "quantize.imatrix.chunks_count", ember_gguf_uint(EMBER_GGUF_UINT32, uint32_t(std::max(0, imatrix.chunk_count))));
    }
    uint64_t alignment = 32;
    for (const ember_gguf_kv & e : kv) {
        if (e.key == "general.alignment" && e.value.type == EMBER_GGUF_UINT32) alignment = e.value.num.u64;
    }

    std::vector<ember_gguf_tensor_info> infos(src->tensors.size());
    for (size_t i = 0; i < infos.size(); i++) {
        const ember_source_tensor & t = src->tensors[i];
        infos[i].name   = t.name;
        infos[i].n_dims = t.n_dims;
        for (int d = 0; d < 4; d++) infos[i].ne[d] = t.ne[d];
        infos[i].type   = plan[i].type;
        infos[i].nbytes = plan[i].nbytes;
    }
    const std::vector<uint8_t> header = ember_gguf_header_bytes(3, kv, infos, alignment);
    res.file_bytes = header.size();
    for (const ember_gguf_tensor_info & t : infos) res.file_bytes = (res.file_bytes + t.nbytes + alignment - 1) / alignment * alignment;

    ember_log(EMBER_LOG_INFO, "%s -> %s: %s, %d tensors, %d threads%s%s", src->what.c_str(), o.dry_run ? "(dry run)" : output.c_str(),
              recipe.ftype.name.c_str(), res.n_tensors, n_threads, o.pure ? ", pure" : "",
              recipe.has_imatrix ? (calibrated ? ", calibrated on " + o.calibration_path : ", imatrix " + o.imatrix_path).c_str() : "");

    const int32_t n = res.n_tensors;
    auto line = [&](size_t i, double mbps) {
        const ember_source_tensor & t = src->tensors[i];
        std::string                 note;
        if (plan[i].fallback) {
            note = ember_format("  (fallback: %s needs a multiple of %" PRId64 " columns)", tname(choice[i].wanted),
                                ember_type_get_traits(choice[i].wanted)->block_size);
        }
        const std::string shape = "[" + shape_str(t) + "]";
        const std::string speed = o.dry_run ? "" : ember_format("  %7.1f MB/s", mbps);
        ember_log(EMBER_LOG_INFO, "[%3d/%3d] %-28s %6s -> %-12s %-14s %8.2f MB -> %7.2f MB%s%s", int(i + 1), n, t.name.c_str(),
                  tname(t.type), tname(plan[i].type), shape.c_str(), mb(t.nbytes), mb(plan[i].nbytes), speed.c_str(), note.c_str());
    };

    if (o.dry_run) {
        for (size_t i = 0; i < plan.size(); i++) line(i, 0.0);
    } else {
        check_disk_space(output, res.file_bytes);
        ember_atomic_file out(output);
        out.write(header.data(), header.size());
        std::vector<uint8_t> in_buf, out_buf;
        for (size_t i = 0; i < src->tensors.size(); i++) {
            const ember_source_tensor & t  = src->tensors[i];
            const double                t0 = now_s();
            in_buf.resize(static_cast<size_t>(t.nbytes));
            t.read(in_buf.data());
            if (plan[i].type == t.type) {
                out.write(in_buf.data(), in_buf.size());
            } else {
                out_buf.resize(static_cast<size_t>(plan[i].nbytes));
                const std::vector<float> * imp = recipe.has_imatrix ? imatrix.find(t.name) : nullptr;
                if (imp && imp->size() != uint64_t(t.ne[0]) * uint64_t(t.ne[2]) * uint64_t(t.ne[3])) imp = nullptr;
                const ember_type_traits * tt = ember_type_get_traits(plan[i].type);
                // llama.cpp's types quantize exactly as llama-quantize without an imatrix; the
                // importance-guided quantizer is used with one, and always for Ember's types
                // that have one (their codecs define how they quantize).
                const bool use_q = tt->quantize && (imp || plan[i].type >= EMBER_TYPE_EMBER_FIRST);
                convert_tensor({t, in_buf.data(), out_buf.data(), plan[i].type, imp ? imp->data() : nullptr, use_q}, n_threads);
                out.write(out_buf.data(), out_buf.size());
            }
            out.pad_to(alignment);
            const double dt   = std::max(now_s() - t0, 1e-9);
            const double mbps = mb(t.nbytes) / dt;
            line(i, mbps);
            if (o.progress && o.progress(int32_t(i + 1), n, t.name, plan[i].type, mbps)) {
                ember_throw(EMBER_ERR_CANCELLED, "quantization cancelled after tensor %d of %d; %s was not written", int(i + 1), n,
                            output.c_str());
            }
        }
        if (out.size() != res.file_bytes) {
            ember_throw(EMBER_ERR_INTERNAL, "wrote %" PRIu64 " bytes, planned %" PRIu64, out.size(), res.file_bytes);
        }
        out.commit();
    }

    res.seconds = now_s() - t_start;
    const double bpw_in  = res.n_elements ? double(res.input_bytes) * 8 / double(res.n_elements) : 0;
    const double bpw_out = res.n_elements ? double(res.output_bytes) * 8 / double(res.n_elements) : 0;
    ember_log(EMBER_LOG_INFO, "%s: %.2f MB (%.2f bits per weight) -> %.2f MB (%.2f bits per weight), file %.2f MB, %.2f s, %.1f MB/s",
              o.dry_run ? "dry run" : "done", mb(res.input_bytes), bpw_in, mb(res.output_bytes), bpw_out, mb(res.file_bytes), res.seconds,
              mb(res.input_bytes) / std::max(res.seconds, 1e-9));
    if (res.n_fallback > 0) {
        ember_log(EMBER_LOG_INFO, "%d of %d tensors got a fallback type: their rows are not a multiple of the chosen type's block",
                  res.n_fallback, res.n_tensors);
    }
    return res;
}

}  // namespace

ember_quantize_result ember_quantize_model(const std::string & input, const std::string & output, const ember_quantize_options & o) {
    const double t_start = now_s();
    ember_quant_recipe probe;  // check the type name before touching any file
    if (!ember_quant_ftype_from_name(o.ftype, probe.ftype)) {
        ember_throw(EMBER_ERR_INVALID_ARG, "unknown quantization type '%s' (one of: %s)", o.ftype.c_str(), ember_quant_ftype_list().c_str());
    }
    struct stat in_st;
    if (::stat(input.c_str(), &in_st) != 0) ember_throw(EMBER_ERR_IO, "%s: cannot open: %s", input.c_str(), std::strerror(errno));
    const bool hf = S_ISDIR(in_st.st_mode);
    if (hf && !ember_path_is_hf_folder(input)) {
        ember_throw(EMBER_ERR_INVALID_ARG, "%s is a directory without config.json (not a Hugging Face model folder)", input.c_str());
    }
    if (!o.dry_run) check_paths(input, in_st, output);

    // Calibration: measure the importance matrix on the text first (the model runs from the
    // GGUF file, so a Hugging Face folder must be converted first).
    ember_imatrix calibrated;
    const bool    calibrate = !o.calibration_path.empty();
    if (calibrate) {
        if (!o.imatrix_path.empty()) {
            ember_throw(EMBER_ERR_INVALID_ARG, "give either an imatrix file (%s) or a calibration text (%s), not both", o.imatrix_path.c_str(),
                        o.calibration_path.c_str());
        }
        if (hf) {
            ember_throw(EMBER_ERR_UNSUPPORTED, "%s is a Hugging Face folder: convert it to GGUF first (ember-quantize IN OUT.gguf F16), then calibrate",
                        input.c_str());
        }
        ember_calibration_options co;
        co.text_path = o.calibration_path;
        co.n_chunks  = o.calibration_chunks;
        co.n_threads = o.n_threads;
        calibrated   = ember_calibrate(input, co);
        if (!o.imatrix_out_path.empty()) {
            ember_imatrix_save_legacy(calibrated, o.imatrix_out_path);
            ember_log(EMBER_LOG_INFO, "calibration: importance matrix (%zu entries) written to %s", calibrated.entries.size(),
                      o.imatrix_out_path.c_str());
        }
    } else if (!o.imatrix_out_path.empty()) {
        ember_throw(EMBER_ERR_INVALID_ARG, "an imatrix output path (%s) needs a calibration text", o.imatrix_out_path.c_str());
    }

    std::unique_ptr<ember_model_source> src = hf ? ember_source_from_hf(input) : ember_source_from_gguf(input);
    return quantize_source(src.get(), hf, output, o, t_start, calibrate ? &calibrated : nullptr);
}

ember_quantize_result ember_quantize_source(const ember_model_source & src, const std::string & output, const ember_quantize_options & o) {
    if (!o.calibration_path.empty()) {
        ember_throw(EMBER_ERR_UNSUPPORTED, "calibration needs a GGUF model file; %s is not one", src.what.c_str());
    }
    return quantize_source(&src, false, output, o, now_s());
}
