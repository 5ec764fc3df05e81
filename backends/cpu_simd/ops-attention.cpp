// ATTN: attention with an online (flash-style) softmax, one (token, head) pair at a time.
//   q F32 [d, n_head, n_tokens]; k, v [d, n_head_kv, n_kv] of any type with to_float (each row
//   of d elements is whole blocks); mask F32 [n_kv, n_tokens] (0 visible, -INF hidden) or null.
//   Query head h reads kv head h / (n_head / n_head_kv).
//   out[:, h, t] = sum_j softmax_j(scale * q.k_j + mask[j, t]) v_j; zeros if every key is hidden.
#include <cmath>
#include <cstring>

#include "cpu-ops.h"
#include "kernels.h"  // K/V rows are read through the active ISA's to_float

bool ember_cpu_supports_attn(const ember_tensor * dst) {
    const ember_type_traits * tk = ember_type_get_traits(dst->src[1]->type);
    const ember_type_traits * tv = ember_type_get_traits(dst->src[2]->type);
    return dst->type == EMBER_TYPE_F32 && dst->src[0]->type == EMBER_TYPE_F32 && tk && tk->to_float && tv &&
           tv->to_float && (!dst->src[3] || dst->src[3]->type == EMBER_TYPE_F32);
}

// Per thread: the current k row and v row in F32, and the output accumulator.
size_t ember_cpu_attn_work_size(const ember_tensor * dst, int n_threads) {
    return (size_t) n_threads * 3 * ember_cpu_pad(dst->ne[0] * sizeof(float));
}

void ember_cpu_attn(const ember_cpu_compute_params * p, ember_tensor * dst) {
    const ember_tensor *      q     = dst->src[0];
    const ember_tensor *      k     = dst->src[1];
    const ember_tensor *      v     = dst->src[2];
    const ember_tensor *      mask  = dst->src[3];
    const ember_to_float_fn   k_to_float = ember_cpu_kernels()->of(k->type).to_float;
    const ember_to_float_fn   v_to_float = ember_cpu_kernels()->of(v->type).to_float;
    const float               scale = ember_get_op_param_f32(dst, 0);
    const int64_t             d     = q->ne[0];
    const int64_t             n_head = q->ne[1];
    const int64_t             n_kv  = k->ne[2];
    const int64_t             group = n_head / k->ne[1];  // query heads per kv head

    const size_t slice = ember_cpu_pad(d * sizeof(float));
    float *      kf    = (float *) ((char *) p->wdata + (size_t) p->ith * 3 * slice);
    float *      vf    = (float *) ((char *) kf + slice);
    float *      acc   = (float *) ((char *) vf + slice);

    int64_t r0, r1;
    ember_cpu_split_rows(n_head * q->ne[2], p->ith, p->nth, &r0, &r1);
    for (int64_t ir = r0; ir < r1; ir++) {
        const int64_t it = ir / n_head;
        const int64_t ih = ir % n_head;
        const int64_t ik = ih / group;
        const float * qr = (const float *) ember_cpu_row(q, ih, it, 0);
        const float * mr = mask ? (const float *) ember_cpu_row(mask, it, 0, 0) : nullptr;

        float M = -INFINITY;  // running max of the scores
        float S = 0.0f;       // running sum of exp(score - M)
        std::memset(acc, 0, d * sizeof(float));
        for (int64_t j = 0; j < n_kv; j++) {
            const float mv = mr ? mr[j] : 0.0f;
            if (mv == -INFINITY) continue;

            k_to_float(ember_cpu_row(k, ik, j, 0), kf, d);
            float s = 0.0f;
            for (int64_t i = 0; i < d; i++) s += qr[i] * kf[i];
            s = s * scale + mv;

            float ms = 1.0f;  // rescale of what was accumulated so far
            float vs = 1.0f;  // weight of v_j
            if (s > M) {
                ms = std::exp(M - s);
                M  = s;
                for (int64_t i = 0; i < d; i++) acc[i] *= ms;
            } else {
                vs = std::exp(s - M);
            }
            v_to_float(ember_cpu_row(v, ik, j, 0), vf, d);
            for (int64_t i = 0; i < d; i++) acc[i] += vs * vf[i];
            S = S * ms + vs;
        }

        float *     y   = (float *) ember_cpu_row(dst, ih, it, 0);
        const float inv = S > 0.0f ? 1.0f / S : 0.0f;  // all keys hidden: zeros
        for (int64_t i = 0; i < d; i++) y[i] = acc[i] * inv;
    }
}
