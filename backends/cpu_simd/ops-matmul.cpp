// MUL_MAT: y[n, m] = sum_k W[k, n] * x[k, m], with llama.cpp arithmetic: each column of x is
// first converted to the weight type's vec_dot_type (F32 stays F32, F16 rounds to F16,
// Q4_0/Q8_0 quantize to Q8_0), then traits.vec_dot gives each output element.
//
// W [k, n, w2, w3] (any type with vec_dot), x F32 [k, m, x2, x3] -> y F32 [n, m, x2, x3];
// W's batch dims broadcast over x's (x2 % w2 == 0, x3 % w3 == 0).
#include "cpu-ops.h"

// Output rows a thread handles together, so that a few weight rows stay in cache while every
// column passes over them.
static constexpr int64_t k_rows_per_chunk = 16;

bool ember_cpu_supports_mul_mat(const ember_tensor * dst) {
    const ember_type_traits * tw = ember_type_get_traits(dst->src[0]->type);
    if (!tw || !tw->vec_dot) return false;
    const ember_type_traits * tv = ember_type_get_traits(tw->vec_dot_type);
    return tv && tv->from_float && dst->src[1]->type == EMBER_TYPE_F32 && dst->type == EMBER_TYPE_F32;
}

// Converted activations: one vec_dot_type row per column of x.
size_t ember_cpu_mul_mat_work_size(const ember_tensor * dst, int) {
    const ember_tensor * w  = dst->src[0];
    const ember_tensor * x  = dst->src[1];
    const ember_type     vt = ember_type_get_traits(w->type)->vec_dot_type;
    if (vt == EMBER_TYPE_F32) return 0;  // x rows are used as they are
    return ember_cpu_pad(ember_row_size(vt, x->ne[0]) * (size_t) ember_nrows(x));
}

void ember_cpu_mul_mat(const ember_cpu_compute_params * p, ember_tensor * dst) {
    const ember_tensor *      w  = dst->src[0];
    const ember_tensor *      x  = dst->src[1];
    const ember_type_traits * tw = ember_type_get_traits(w->type);
    const ember_type          vt = tw->vec_dot_type;
    const int64_t             k  = w->ne[0];
    const int64_t             n  = w->ne[1];
    const int64_t             m  = x->ne[1];
    const size_t              rs = ember_row_size(vt, k);  // bytes of one converted column
    const bool                convert = vt != EMBER_TYPE_F32;

    // Phase 1: convert the columns of x, split across threads.
    if (convert) {
        const ember_from_float_fn from_float = ember_type_get_traits(vt)->from_float;
        int64_t                   c0, c1;
        ember_cpu_split_rows(ember_nrows(x), p->ith, p->nth, &c0, &c1);
        for (int64_t ic = c0; ic < c1; ic++) {
            const int64_t i3 = ic / (m * x->ne[2]);
            const int64_t i2 = (ic / m) % x->ne[2];
            const int64_t i1 = ic % m;
            from_float((const float *) ember_cpu_row(x, i1, i2, i3), (char *) p->wdata + ic * rs, k);
        }
        ember_cpu_barrier(p);
    }

    // Phase 2: output rows split across threads; every thread covers all columns.
    int64_t r0, r1;
    ember_cpu_split_rows(n, p->ith, p->nth, &r0, &r1);
    const int64_t bcast2 = x->ne[2] / w->ne[2];
    const int64_t bcast3 = x->ne[3] / w->ne[3];
    for (int64_t i3 = 0; i3 < x->ne[3]; i3++) {
        for (int64_t i2 = 0; i2 < x->ne[2]; i2++) {
            const int64_t w2 = i2 / bcast2;
            const int64_t w3 = i3 / bcast3;
            for (int64_t c0 = r0; c0 < r1; c0 += k_rows_per_chunk) {
                const int64_t c1 = c0 + k_rows_per_chunk < r1 ? c0 + k_rows_per_chunk : r1;
                for (int64_t i1 = 0; i1 < m; i1++) {
                    const void * xcol = convert ? (const void *) ((const char *) p->wdata + ((i3 * x->ne[2] + i2) * m + i1) * rs)
                                                : (const void *) ember_cpu_row(x, i1, i2, i3);
                    float * y = (float *) ember_cpu_row(dst, i1, i2, i3);
                    for (int64_t r = c0; r < c1; r++) tw->vec_dot(k, &y[r], ember_cpu_row(w, r, w2, w3), xcol);
                }
            }
        }
    }
}
