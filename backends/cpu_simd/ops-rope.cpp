// ROPE: rotary position embedding, with llama.cpp's float arithmetic.
//   src0 F32 [head_dim, n_head, n_tokens], src1 I32 positions [n_tokens],
//   src2 F32 frequency factors [n_rot/2] or null (theta_i is divided by factor i, llama3).
//   theta_i = freq_scale * pos * freq_base^(-2i/n_rot) / factor_i, i in [0, n_rot/2)
//   mode 0 (normal) rotates pairs (2i, 2i+1); mode 2 (neox) rotates (i, i + n_rot/2).
//   Dimensions from n_rot on are copied unchanged.
#include <cmath>
#include <cstring>

#include "cpu-ops.h"

bool ember_cpu_supports_rope(const ember_tensor * dst) {
    return dst->type == EMBER_TYPE_F32 && dst->src[0]->type == EMBER_TYPE_F32 && dst->src[1]->type == EMBER_TYPE_I32 &&
           (!dst->src[2] || dst->src[2]->type == EMBER_TYPE_F32);
}

// A (cos, sin) table of n_rot/2 pairs per thread, rebuilt when the token changes; in thread
// slots, so ropes and decode matmuls may share a barrier-free group (cpu-backend.cpp).
size_t ember_cpu_rope_work_size(const ember_tensor * dst, int n_threads) {
    const int32_t n_rot = dst->op_params[0];
    return ember_cpu_slots_size((size_t) n_rot * sizeof(float), n_threads);
}

static void rope_cache(float * cache, float pos, int32_t n_rot, float theta_scale, float freq_scale, const ember_tensor * ff) {
    float theta = pos;  // pos * theta_scale^i, built up as llama.cpp does
    for (int32_t i = 0; i < n_rot / 2; i++) {
        const float factor = ff ? ((const float *) ff->data)[i] : 1.0f;
        const float th     = freq_scale * (theta / factor);
        cache[2 * i + 0]   = std::cos(th);
        cache[2 * i + 1]   = std::sin(th);
        theta *= theta_scale;
    }
}

void ember_cpu_rope(const ember_cpu_compute_params * p, ember_tensor * dst) {
    const ember_tensor * src        = dst->src[0];
    const ember_tensor * pos        = dst->src[1];
    const ember_tensor * ff         = dst->src[2];
    const int32_t        n_rot      = dst->op_params[0];
    const int32_t        mode       = dst->op_params[1];
    const float          freq_base  = ember_get_op_param_f32(dst, 2);
    const float          freq_scale = ember_get_op_param_f32(dst, 3);
    const float          theta_scale = std::pow(freq_base, -2.0f / (float) n_rot);
    const int64_t        head_dim   = dst->ne[0];
    const int64_t        n_head     = dst->ne[1];
    const int32_t        half       = n_rot / 2;

    float * cache = (float *) ember_cpu_thread_slot(p->wdata, p->wsize, p->ith, p->nth);
    int64_t cached_token = -1;

    // Rows are (head, token) pairs, split evenly; a thread's rows are mostly of one token.
    int64_t r0, r1;
    ember_cpu_split_rows(n_head * dst->ne[2], p->ith, p->nth, &r0, &r1);
    for (int64_t ir = r0; ir < r1; ir++) {
        const int64_t it = ir / n_head;
        const int64_t ih = ir % n_head;
        if (it != cached_token) {
            int32_t ps;
            std::memcpy(&ps, (const char *) pos->data + it * pos->nb[0], sizeof(ps));
            rope_cache(cache, (float) ps, n_rot, theta_scale, freq_scale, ff);
            cached_token = it;
        }
        const float * x = (const float *) ember_cpu_row(src, ih, it, 0);
        float *       y = (float *) ember_cpu_row(dst, ih, it, 0);
        // Pair i is (x[i*stride_i], x[i*stride_i + offset]).
        const int64_t stride_i = mode == EMBER_ROPE_NEOX ? 1 : 2;
        const int64_t offset   = mode == EMBER_ROPE_NEOX ? half : 1;
        for (int32_t i = 0; i < half; i++) {
            const float c  = cache[2 * i + 0];
            const float s  = cache[2 * i + 1];
            const float x0 = x[i * stride_i];
            const float x1 = x[i * stride_i + offset];
            y[i * stride_i]          = x0 * c - x1 * s;
            y[i * stride_i + offset] = x0 * s + x1 * c;
        }
        for (int64_t i = n_rot; i < head_dim; i++) y[i] = x[i];
    }
}
