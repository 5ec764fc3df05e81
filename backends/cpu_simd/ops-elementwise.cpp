// Row-wise F32 kernels: RMS_NORM, MUL, ADD, SWIGLU, SCALE. Threads split the rows evenly.
#include <cmath>

#include "cpu-ops.h"

// Row index ir of t (flattened over dims 1..3) -> (i1, i2, i3).
static inline void unflatten_row(const ember_tensor * t, int64_t ir, int64_t * i1, int64_t * i2, int64_t * i3) {
    *i3 = ir / (t->ne[1] * t->ne[2]);
    *i2 = (ir / t->ne[1]) % t->ne[2];
    *i1 = ir % t->ne[1];
}

bool ember_cpu_supports_f32(const ember_tensor * dst) {
    if (dst->type != EMBER_TYPE_F32) return false;
    for (int i = 0; i < EMBER_MAX_SRC; i++) {
        if (dst->src[i] && dst->src[i]->type != EMBER_TYPE_F32) return false;
    }
    return true;
}

void ember_cpu_rms_norm(const ember_cpu_compute_params * p, ember_tensor * dst) {
    const ember_tensor * src = dst->src[0];
    const float          eps = ember_get_op_param_f32(dst, 0);
    const int64_t        n   = dst->ne[0];
    int64_t              r0, r1;
    ember_cpu_split_rows(ember_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t ir = r0; ir < r1; ir++) {
        int64_t i1, i2, i3;
        unflatten_row(dst, ir, &i1, &i2, &i3);
        const float * x = (const float *) ember_cpu_row(src, i1, i2, i3);
        float *       y = (float *) ember_cpu_row(dst, i1, i2, i3);
        double        ss = 0.0;  // as ggml: the sum of squares in double
        for (int64_t i = 0; i < n; i++) ss += (double) x[i] * x[i];
        const float mean  = (float) (ss / n);
        const float scale = 1.0f / std::sqrt(mean + eps);
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
    }
}

// dst = a (op) b with b broadcast: b.ne[i] divides a.ne[i].
template <bool IS_MUL>
static void binary_broadcast(const ember_cpu_compute_params * p, ember_tensor * dst) {
    const ember_tensor * a  = dst->src[0];
    const ember_tensor * b  = dst->src[1];
    const int64_t        n  = dst->ne[0];
    const int64_t        nb0 = b->ne[0];
    int64_t              r0, r1;
    ember_cpu_split_rows(ember_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t ir = r0; ir < r1; ir++) {
        int64_t i1, i2, i3;
        unflatten_row(dst, ir, &i1, &i2, &i3);
        const float * x = (const float *) ember_cpu_row(a, i1, i2, i3);
        const float * y = (const float *) ember_cpu_row(b, i1 % b->ne[1], i2 % b->ne[2], i3 % b->ne[3]);
        float *       z = (float *) ember_cpu_row(dst, i1, i2, i3);
        for (int64_t r = 0; r < n; r += nb0) {
            for (int64_t j = 0; j < nb0; j++) z[r + j] = IS_MUL ? x[r + j] * y[j] : x[r + j] + y[j];
        }
    }
}

void ember_cpu_mul(const ember_cpu_compute_params * p, ember_tensor * dst) {
    binary_broadcast<true>(p, dst);
}

void ember_cpu_add(const ember_cpu_compute_params * p, ember_tensor * dst) {
    binary_broadcast<false>(p, dst);
}

void ember_cpu_swiglu(const ember_cpu_compute_params * p, ember_tensor * dst) {
    const ember_tensor * gate = dst->src[0];
    const ember_tensor * up   = dst->src[1];
    const int64_t        n    = dst->ne[0];
    int64_t              r0, r1;
    ember_cpu_split_rows(ember_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t ir = r0; ir < r1; ir++) {
        int64_t i1, i2, i3;
        unflatten_row(dst, ir, &i1, &i2, &i3);
        const float * g = (const float *) ember_cpu_row(gate, i1, i2, i3);
        const float * u = (const float *) ember_cpu_row(up, i1, i2, i3);
        float *       y = (float *) ember_cpu_row(dst, i1, i2, i3);
        for (int64_t i = 0; i < n; i++) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    }
}

void ember_cpu_scale(const ember_cpu_compute_params * p, ember_tensor * dst) {
    const ember_tensor * src = dst->src[0];
    const float          s   = ember_get_op_param_f32(dst, 0);
    const int64_t        n   = dst->ne[0];
    int64_t              r0, r1;
    ember_cpu_split_rows(ember_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t ir = r0; ir < r1; ir++) {
        int64_t i1, i2, i3;
        unflatten_row(dst, ir, &i1, &i2, &i3);
        const float * x = (const float *) ember_cpu_row(src, i1, i2, i3);
        float *       y = (float *) ember_cpu_row(dst, i1, i2, i3);
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * s;
    }
}
