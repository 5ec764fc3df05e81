// C API: quantization and conversion (include/ember.h, "Quantization and conversion").
#include <cstring>

#include "ember.h"
#include "runtime/c-api-internal.h"
#include "runtime/quantize.h"

namespace {

// The caller's params over the defaults, honouring struct_size (an older, smaller struct keeps
// the newer fields at their defaults; a larger one is accepted when the unknown tail is zero).
ember_status read_quantize_params(const ember_quantize_params * in, ember_quantize_params & out) {
    out = ember_quantize_default_params();
    if (!in) return EMBER_OK;
    const uint32_t size = in->struct_size;
    if (size < sizeof(uint32_t) * 2 || size > 4096) {
        return ember_api_fail(EMBER_ERR_INVALID_ARG,
                              "ember_quantize_params.struct_size = %u is not valid; use ember_quantize_default_params()", size);
    }
    const size_t n = size < sizeof(out) ? size : sizeof(out);
    std::memcpy(static_cast<void *>(&out), in, n);
    for (size_t i = sizeof(out); i < size; i++) {
        if (reinterpret_cast<const uint8_t *>(in)[i] != 0) {
            return ember_api_fail(EMBER_ERR_UNSUPPORTED, "ember_quantize_params has fields this library version (%s) does not know",
                                  EMBER_VERSION_STRING);
        }
    }
    out.struct_size = sizeof(out);
    return EMBER_OK;
}

}  // namespace

extern "C" {

EMBER_API ember_quantize_params ember_quantize_default_params(void) {
    ember_quantize_params p;
    std::memset(&p, 0, sizeof(p));
    p.struct_size        = sizeof(p);
    p.ftype              = "Q4_K_M";
    p.n_threads          = 0;
    p.output_tensor_type = -1;
    p.token_embd_type    = -1;
    p.calibration_chunks = 16;
    return p;
}

EMBER_API ember_status ember_model_quantize(const char * input, const char * output, const ember_quantize_params * params) {
    return ember_api_guarded([&]() -> ember_status {
        ember_quantize_params p;
        const ember_status    st = read_quantize_params(params, p);
        if (st != EMBER_OK) return st;
        if (!input) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_model_quantize: input is NULL");
        if (!output && !p.dry_run) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_model_quantize: output is NULL");
        if (!p.ftype) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_model_quantize: params.ftype is NULL");
        if (p.n_threads < 0) return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_model_quantize: n_threads %d < 0", p.n_threads);

        ember_quantize_options o;
        o.ftype            = p.ftype;
        o.n_threads        = p.n_threads;
        o.output_type      = p.output_tensor_type;
        o.token_embd_type  = p.token_embd_type;
        o.imatrix_path     = p.imatrix_path ? p.imatrix_path : "";
        o.allow_requantize = p.allow_requantize != 0;
        o.pure             = p.pure != 0;
        o.dry_run          = p.dry_run != 0;
        o.calibration_path   = p.calibration_path ? p.calibration_path : "";
        o.calibration_chunks = p.calibration_chunks;
        o.imatrix_out_path   = p.imatrix_out_path ? p.imatrix_out_path : "";
        if (o.calibration_chunks < 1) {
            return ember_api_fail(EMBER_ERR_INVALID_ARG, "ember_model_quantize: calibration_chunks %d < 1", p.calibration_chunks);
        }
        if (p.progress_callback) {
            const ember_quantize_progress_callback cb = p.progress_callback;
            void * const                           ud = p.progress_user_data;
            o.progress = [cb, ud](int32_t i, int32_t n, const std::string & name, ember_type type, double mbps) {
                return cb(i, n, name.c_str(), int32_t(type), mbps, ud) != 0;
            };
        }
        ember_quantize_model(input, output ? output : "", o);
        return EMBER_OK;
    });
}

}  // extern "C"
