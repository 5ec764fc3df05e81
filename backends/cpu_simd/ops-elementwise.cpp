// Row-wise F32 kernels: RMS_NORM, MUL, ADD, SWIGLU, SCALE. Threads split the rows evenly;
// when there are fewer rows than threads (decode: one token, one row) each row is also cut
// into column slices, so no thread idles at the node's barrier. RMS_NORM then has every
// thread of a row sum the whole row (the same arithmetic, so the same scale) and write only
// its slice: no extra barrier. Inner loops come from the kernel table (kernels.h, vec).
#include <cmath>

#include "cpu-ops.h"
#include "kernels.h"

// Row index ir of t (flattened over dims 1..3) -> (i1, i2, i3).
static inline void unflatten_row(const ember_tensor * t, int64_t ir, int64_t * i1, int64_t * i2, int64_t * i3) {
    *i3 = ir / (t->ne[1] * t->ne[2]);
    *i2 = (ir / t->ne[1]) % t->ne[2];
    *i1 = ir % t->ne[1];
}

// This thread's work: rows [r0, r1), columns [c0, c1) of each (n columns per row).
struct ew_part {
    int64_t r0, r1, c0, c1;
};

static ew_part ew_split(const ember_cpu_compute_params * p, int64_t nrows, int64_t n) {
    ew_part w{0, 0, 0, n};
    if (nrows >= p->nth || nrows == 0) {
        ember_cpu_split_rows(nrows, p->ith, p->nth, &w.r0, &w.r1);
        return w;
    }
    // Fewer rows than threads: row ith % nrows, cut into the slices of the threads that share
    // it; slices are whole cache lines (16 floats) so no two threads write one line.
    const int64_t row    = p->ith % nrows;
    const int64_t shares = p->nth / nrows + (row < p->nth % nrows ? 1 : 0);
    const int64_t part   = p->ith / nrows;
    const int64_t lines  = (n + 15) / 16;
    int64_t       l0, l1;
    ember_cpu_split_rows(lines, (int) part, (int) shares, &l0, &l1);
    w.r0 = row;
    w.r1 = row + 1;
    w.c0 = l0 * 16 < n ? l0 * 16 : n;
    w.c1 = l1 * 16 < n ? l1 * 16 : n;
    return w;
}

bool ember_cpu_supports_f32(const ember_tensor * dst) {
    if (dst->type != EMBER_TYPE_F32) return false;
    for (int i = 0; i < EMBER_MAX_SRC; i++) {
        if (dst->src[i] && dst->src[i]->type != EMBER_TYPE_F32) return false;
    }
    return true;
}

void ember_cpu_rms_norm(const ember_cpu_compute_params * p, ember_tensor * dst) {
    const ember_tensor *          src = dst->src[0];
    const float                   eps = ember_get_op_param_f32(dst, 0);
    const int64_t                 n   = dst->ne[0];
    const ember_cpu_vec_kernels & vk  = ember_cpu_kernels()->vec;
    const ew_part                 w   = ew_split(p, ember_nrows(dst), n);
    for (int64_t ir = w.r0; ir < w.r1; ir++) {
        int64_t i1, i2, i3;
        unflatten_row(dst, ir, &i1, &i2, &i3);
        const float * x     = (const float *) ember_cpu_row(src, i1, i2, i3);
        float *       y     = (float *) ember_cpu_row(dst, i1, i2, i3);
        const float   mean  = (float) (vk.sum_sq(n, x) / n);  // as ggml: the sum of squares in double
        const float   scale = 1.0f / std::sqrt(mean + eps);
        vk.scale(w.c1 - w.c0, x + w.c0, scale, y + w.c0);
    }
}

// dst = a (op) b with b broadcast: b.ne[i] divides a.ne[i].
template <bool IS_MUL>
static void binary_broadcast(const ember_cpu_compute_params * p, ember_tensor * dst) {
    const ember_tensor * a   = dst->src[0];
    const ember_tensor * b   = dst->src[1];
    const int64_t        n   = dst->ne[0];
    const int64_t        nb0 = b->ne[0];
    const ew_part        w   = ew_split(p, ember_nrows(dst), n);
    for (int64_t ir = w.r0; ir < w.r1; ir++) {
        int64_t i1, i2, i3;
        unflatten_row(dst, ir, &i1, &i2, &i3);
        const float * x = (const float *) ember_cpu_row(a, i1, i2, i3);
        const float * y = (const float *) ember_cpu_row(b, i1 % b->ne[1], i2 % b->ne[2], i3 % b->ne[3]);
        float *       z = (float *) ember_cpu_row(dst, i1, i2, i3);
        if (nb0 == n) {  // the common case: a plain loop the compiler vectorizes
            for (int64_t j = w.c0; j < w.c1; j++) z[j] = IS_MUL ? x[j] * y[j] : x[j] + y[j];
            continue;
        }
        for (int64_t j = w.c0; j < w.c1; j++) z[j] = IS_MUL ? x[j] * y[j % nb0] : x[j] + y[j % nb0];
    }
}

void ember_cpu_mul(const ember_cpu_compute_params * p, ember_tensor * dst) {
    binary_broadcast<true>(p, dst);
}

void ember_cpu_add(const ember_cpu_compute_params * p, ember_tensor * dst) {
    binary_broadcast<false>(p, dst);
}

void ember_cpu_swiglu(const ember_cpu_compute_params * p, ember_tensor * dst) {
    const ember_tensor *          gate = dst->src[0];
    const ember_tensor *          up   = dst->src[1];
    const ember_cpu_vec_kernels & vk   = ember_cpu_kernels()->vec;
    const ew_part                 w    = ew_split(p, ember_nrows(dst), dst->ne[0]);
    for (int64_t ir = w.r0; ir < w.r1; ir++) {
        int64_t i1, i2, i3;
        unflatten_row(dst, ir, &i1, &i2, &i3);
        const float * g = (const float *) ember_cpu_row(gate, i1, i2, i3);
        const float * u = (const float *) ember_cpu_row(up, i1, i2, i3);
        float *       y = (float *) ember_cpu_row(dst, i1, i2, i3);
        vk.swiglu(w.c1 - w.c0, g + w.c0, u + w.c0, y + w.c0);
    }
}

void ember_cpu_scale(const ember_cpu_compute_params * p, ember_tensor * dst) {
    const ember_tensor *          src = dst->src[0];
    const float                   s   = ember_get_op_param_f32(dst, 0);
    const ember_cpu_vec_kernels & vk  = ember_cpu_kernels()->vec;
    const ew_part                 w   = ew_split(p, ember_nrows(dst), dst->ne[0]);
    for (int64_t ir = w.r0; ir < w.r1; ir++) {
        int64_t i1, i2, i3;
        unflatten_row(dst, ir, &i1, &i2, &i3);
        const float * x = (const float *) ember_cpu_row(src, i1, i2, i3);
        float *       y = (float *) ember_cpu_row(dst, i1, i2, i3);
        vk.scale(w.c1 - w.c0, x + w.c0, s, y + w.c0);
    }
}
