// ATTN, tiled: the CPU backend's attention op (same semantics as ops-attention.cpp, which stays
// as the reference the tests compare with):
//   q F32 [d, n_head, n_tokens]; k, v [d, n_head_kv, n_kv] of any type with to_float;
//   mask F32 [n_kv, n_tokens] (0 visible, -INF hidden) or null; query head h reads kv head
//   h / (n_head / n_head_kv); out[:, h, t] = sum_j softmax_j(scale q.k_j + mask[j, t]) v_j,
//   zeros if every key is hidden.
//
// Work: tasks of (kv head, block of bt query tokens, chunk of keys). A task's queries are the
// bt tokens x the G query heads that share the kv head (GQA packing: K/V are read once for all
// of them), stored transposed ("queries in lanes", see kernels.h) and pre-multiplied by scale.
// The task walks its keys in tiles of k_tile: each K/V tile is converted to F32 once (F32
// caches are read in place), then per group of up to 64 queries the table's attn kernels
// compute the scores, one online-softmax step and the V accumulation. Mask handling is per
// tile: from each token's first and last visible key (and whether everything between is 0),
// a tile is skipped when no token sees any of it (the upper half of a causal prefill), run
// without the mask when every token sees all of it with 0, and otherwise run with the mask
// tile copied into the lane layout.
//
// Prefill tasks are handed out dynamically (atomic counter in the work buffer's first cache
// line, reset before a barrier as in ops-matmul.cpp), the largest (latest) token blocks first.
// Decode (one token) uses a fixed round-robin of its equal tasks and no barrier. When there are
// fewer (kv head, block) pairs than the threads can share evenly, the keys are split into
// chunks: each chunk leaves its partial state (max, sum, unnormalized output) in the work
// buffer and, after a barrier, the chunks of each output row are merged (flash-decoding).
#include <atomic>
#include <cmath>
#include <cstring>
#include <new>

#include "cpu-ops.h"
#include "kernels.h"

namespace {

constexpr int64_t k_tile       = 64;   // keys per tile
constexpr int64_t k_group      = 64;   // queries per kernel call (score tile k_tile x k_group)
constexpr int64_t k_lanes      = 128;  // target queries per task (tokens x GQA group)
constexpr int64_t k_min_chunk  = 32;   // fewest keys worth a split chunk
constexpr size_t  k_header     = EMBER_CPU_CACHE_LINE;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Mask scans on the bit patterns (branch-free loops the compiler vectorizes); -0 counts as 0.
constexpr uint32_t k_neg_inf_bits = 0xff800000u;
constexpr int64_t  k_scan         = 32;

inline uint32_t bits_of(const float * p) {
    uint32_t b;
    std::memcpy(&b, p, sizeof b);
    return b;
}

bool all_neg_inf(const float * p, int64_t n) {
    uint32_t ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= bits_of(p + i) == k_neg_inf_bits;
    return ok != 0;
}

bool all_zero(const float * p, int64_t n) {
    uint32_t any = 0;
    for (int64_t i = 0; i < n; i++) any |= bits_of(p + i) & 0x7fffffffu;
    return any == 0;
}

// [*lo, *hi): the keys of [k0, k1) from the first to the last one that mask row mr does not
// hide; *zero: whether the mask is 0 on all of them.
void visible_range(const float * mr, int64_t k0, int64_t k1, int64_t * lo, int64_t * hi, int64_t * zero) {
    int64_t a = k0, b = k1;
    while (b - a >= k_scan && all_neg_inf(mr + a, k_scan)) a += k_scan;
    while (a < b && bits_of(mr + a) == k_neg_inf_bits) a++;
    while (b - a >= k_scan && all_neg_inf(mr + b - k_scan, k_scan)) b -= k_scan;
    while (b > a && bits_of(mr + b - 1) == k_neg_inf_bits) b--;
    *lo = a, *hi = b, *zero = all_zero(mr + a, b - a);
}

struct attn_plan {
    int64_t d, n_head, n_kvh, group, n_tokens, n_kv;
    int64_t bt;       // tokens per block
    int64_t n_qb;     // token blocks
    int64_t nl;       // queries per block, padded to 16 (lanes)
    int64_t dk;       // floats per converted K/V row (d padded to 16)
    int64_t chunk;    // keys per chunk
    int64_t n_split;  // chunks
    int64_t n_tasks;
    size_t  thread_bytes;   // scratch of one thread
    size_t  partial_bytes;  // partial state of one task (split only)

    size_t work_size(int nth) const {
        return k_header + (size_t) nth * thread_bytes + (n_split > 1 ? (size_t) n_tasks * partial_bytes : 0);
    }
};

attn_plan make_plan(const ember_tensor * dst, int nth) {
    attn_plan P;
    const ember_tensor * q = dst->src[0];
    const ember_tensor * k = dst->src[1];
    P.d        = q->ne[0];
    P.n_head   = q->ne[1];
    P.n_tokens = q->ne[2];
    P.n_kvh    = k->ne[1];
    P.n_kv     = k->ne[2];
    P.group    = P.n_head / P.n_kvh;
    P.bt       = P.group >= k_lanes ? 1 : k_lanes / P.group;
    if (P.bt > P.n_tokens) P.bt = P.n_tokens > 0 ? P.n_tokens : 1;
    // Smaller blocks while the threads would not all get work, down to one vector of queries.
    while (P.bt > 1 && P.bt * P.group > 16 && P.n_kvh * ceil_div(P.n_tokens, P.bt) < 2 * nth) P.bt = (P.bt + 1) / 2;
    P.n_qb = ceil_div(P.n_tokens, P.bt);
    P.nl   = ceil_div(P.bt * P.group, 16) * 16;
    P.dk   = ceil_div(P.d, 16) * 16;

    const int64_t base = P.n_kvh * P.n_qb;
    P.n_split          = 1;
    if (nth > 1 && base < 2 * nth && base % nth != 0) {
        P.n_split = nth;
        const int64_t most = P.n_kv / k_min_chunk;
        if (P.n_split > most) P.n_split = most < 1 ? 1 : most;
    }
    P.chunk   = ceil_div(P.n_kv > 0 ? P.n_kv : 1, P.n_split);
    P.n_split = ceil_div(P.n_kv > 0 ? P.n_kv : 1, P.chunk);
    P.n_tasks = base * P.n_split;

    const size_t f = sizeof(float);
    P.thread_bytes = 2 * ember_cpu_pad(P.d * P.nl * f)       // qt, acc
                     + 3 * ember_cpu_pad(P.nl * f)           // m, l_sum, alpha
                     + ember_cpu_pad(k_tile * k_group * f)   // scores
                     + ember_cpu_pad(k_tile * P.nl * f)      // mask tile
                     + 2 * ember_cpu_pad(k_tile * P.dk * f)  // K, V tiles
                     + ember_cpu_pad(3 * P.bt * sizeof(int64_t));  // per-token visible ranges
    P.partial_bytes = 2 * ember_cpu_pad(P.nl * f) + ember_cpu_pad(P.d * P.nl * f);
    return P;
}

//
// Portable kernels (tables without attn cells: scalar, NEON); loops over queries vectorize.
//
void qk_ref(int64_t nk, int64_t d, const float * k, size_t ldk, const float * qt, size_t ldq, int64_t nl, float * s,
            size_t lds) {
    for (int64_t j = 0; j < nk; j++) {
        float * sj = s + j * lds;
        for (int64_t l = 0; l < nl; l++) sj[l] = 0.0f;
        for (int64_t i = 0; i < d; i++) {
            const float   kv = k[j * ldk + i];
            const float * qi = qt + i * ldq;
            for (int64_t l = 0; l < nl; l++) sj[l] += kv * qi[l];
        }
    }
}

void softmax_ref(int64_t nk, int64_t nl, float * s, size_t lds, const float * mask, size_t ldm, float * m,
                 float * l_sum, float * alpha) {
    for (int64_t l = 0; l < nl; l++) {
        float mx = m[l];
        for (int64_t j = 0; j < nk; j++) {
            if (mask) s[j * lds + l] += mask[j * ldm + l];
            mx = std::fmax(mx, s[j * lds + l]);
        }
        const float ref = mx == -INFINITY ? 0.0f : mx;
        float       sum = 0.0f;
        for (int64_t j = 0; j < nk; j++) {
            const float p  = std::exp(s[j * lds + l] - ref);
            s[j * lds + l] = p;
            sum += p;
        }
        alpha[l] = std::exp(m[l] - ref);
        l_sum[l] = l_sum[l] * alpha[l] + sum;
        m[l]     = mx;
    }
}

void pv_ref(int64_t nk, int64_t d, const float * v, size_t ldv, const float * p, size_t ldp, const float * alpha,
            int64_t nl, float * acc, size_t lda) {
    for (int64_t i = 0; i < d; i++) {
        float * ai = acc + i * lda;
        for (int64_t l = 0; l < nl; l++) ai[l] *= alpha[l];
        for (int64_t j = 0; j < nk; j++) {
            const float   vv = v[j * ldv + i];
            const float * pj = p + j * ldp;
            for (int64_t l = 0; l < nl; l++) ai[l] += vv * pj[l];
        }
    }
}

struct attn_fns {
    decltype(ember_cpu_attn_kernels::qk)      qk;
    decltype(ember_cpu_attn_kernels::softmax) softmax;
    decltype(ember_cpu_attn_kernels::pv)      pv;
};

attn_fns fns_of(const ember_cpu_kernel_table * kt) {
    return {kt->attn.qk ? kt->attn.qk : qk_ref, kt->attn.softmax ? kt->attn.softmax : softmax_ref,
            kt->attn.pv ? kt->attn.pv : pv_ref};
}

// Per-thread scratch carved out of the work buffer.
struct attn_scratch {
    float *   qt, *acc, *m, *l_sum, *alpha, *s, *mt, *kt, *vt;
    int64_t * lo, *hi, *zero;

    attn_scratch(const attn_plan & P, char * w) {
        const size_t f = sizeof(float);
        auto take      = [&](size_t bytes) {
            char * p = w;
            w += ember_cpu_pad(bytes);
            return p;
        };
        qt    = (float *) take(P.d * P.nl * f);
        acc   = (float *) take(P.d * P.nl * f);
        m     = (float *) take(P.nl * f);
        l_sum = (float *) take(P.nl * f);
        alpha = (float *) take(P.nl * f);
        s     = (float *) take(k_tile * k_group * f);
        mt    = (float *) take(k_tile * P.nl * f);
        kt    = (float *) take(k_tile * P.dk * f);
        vt    = (float *) take(k_tile * P.dk * f);
        lo    = (int64_t *) take(3 * P.bt * sizeof(int64_t));
        hi    = lo + P.bt;
        zero  = hi + P.bt;
    }
};

// One task: kv head hk, tokens [t0, t0 + nt), keys [k0, k1). Leaves m, l_sum and the
// unnormalized output (acc, queries in lanes) in the scratch.
void run_task(const attn_plan & P, const attn_fns & F, const ember_cpu_kernel_table * kt, const ember_tensor * dst,
              const attn_scratch & W, int64_t hk, int64_t t0, int64_t nt, int64_t k0, int64_t k1) {
    const ember_tensor * q     = dst->src[0];
    const ember_tensor * k     = dst->src[1];
    const ember_tensor * v     = dst->src[2];
    const ember_tensor * mask  = dst->src[3];
    const float          scale = ember_get_op_param_f32(dst, 0);
    const int64_t        G     = P.group;
    const int64_t        nl    = P.nl;
    const int64_t        d     = P.d;

    // queries, transposed and scaled; padding lanes are zero queries (their output is dropped)
    if (nt * G < nl) std::memset(W.qt, 0, (size_t) (d * nl) * sizeof(float));
    for (int64_t tt = 0; tt < nt; tt++) {
        for (int64_t g = 0; g < G; g++) {
            const float * qr = (const float *) ember_cpu_row(q, hk * G + g, t0 + tt, 0);
            const int64_t r  = tt * G + g;
            for (int64_t i = 0; i < d; i++) W.qt[i * nl + r] = scale * qr[i];
        }
    }
    std::memset(W.acc, 0, (size_t) (d * nl) * sizeof(float));
    for (int64_t l = 0; l < nl; l++) W.m[l] = -INFINITY, W.l_sum[l] = 0.0f;

    // each token's visible keys [lo, hi) within [k0, k1), and whether all of them are 0
    int64_t jlo = k1, jhi = k0;
    for (int64_t tt = 0; tt < nt; tt++) {
        int64_t lo = k0, hi = k1, zero = 1;
        if (mask) visible_range((const float *) ember_cpu_row(mask, t0 + tt, 0, 0), k0, k1, &lo, &hi, &zero);
        W.lo[tt] = lo, W.hi[tt] = hi, W.zero[tt] = zero;
        if (lo < hi) {
            if (lo < jlo) jlo = lo;
            if (hi > jhi) jhi = hi;
        }
    }

    const ember_to_float_fn k_to_float = kt->of(k->type).to_float;
    const ember_to_float_fn v_to_float = kt->of(v->type).to_float;
    const bool              k_direct   = k->type == EMBER_TYPE_F32 && k->nb[2] % sizeof(float) == 0;
    const bool              v_direct   = v->type == EMBER_TYPE_F32 && v->nb[2] % sizeof(float) == 0;
    for (int64_t j0 = jlo; j0 < jhi; j0 += k_tile) {
        const int64_t j1 = j0 + k_tile < jhi ? j0 + k_tile : jhi;
        const int64_t nk = j1 - j0;
        bool          any = false, all = true;
        for (int64_t tt = 0; tt < nt; tt++) {
            if (W.lo[tt] < j1 && W.hi[tt] > j0) any = true;
            if (!(W.lo[tt] <= j0 && W.hi[tt] >= j1 && W.zero[tt])) all = false;
        }
        if (!any) continue;

        const float * kf = W.kt;
        const float * vf = W.vt;
        size_t        ldk = (size_t) P.dk, ldv = (size_t) P.dk;
        if (k_direct) {
            kf = (const float *) ember_cpu_row(k, hk, j0, 0), ldk = k->nb[2] / sizeof(float);
        } else {
            for (int64_t j = j0; j < j1; j++) k_to_float(ember_cpu_row(k, hk, j, 0), W.kt + (j - j0) * P.dk, d);
        }
        if (v_direct) {
            vf = (const float *) ember_cpu_row(v, hk, j0, 0), ldv = v->nb[2] / sizeof(float);
        } else {
            for (int64_t j = j0; j < j1; j++) v_to_float(ember_cpu_row(v, hk, j, 0), W.vt + (j - j0) * P.dk, d);
        }
        const float * mt = nullptr;
        if (!all) {
            for (int64_t tt = 0; tt < nt; tt++) {
                const float * mr = (const float *) ember_cpu_row(mask, t0 + tt, 0, 0) + j0;
                for (int64_t j = 0; j < nk; j++) {
                    for (int64_t g = 0; g < G; g++) W.mt[j * nl + tt * G + g] = mr[j];
                }
            }
            for (int64_t j = 0; j < nk; j++) {
                for (int64_t r = nt * G; r < nl; r++) W.mt[j * nl + r] = 0.0f;
            }
            mt = W.mt;
        }
        for (int64_t g0 = 0; g0 < nl; g0 += k_group) {
            const int64_t ng = nl - g0 < k_group ? nl - g0 : k_group;
            F.qk(nk, d, kf, ldk, W.qt + g0, (size_t) nl, ng, W.s, (size_t) k_group);
            F.softmax(nk, ng, W.s, (size_t) k_group, mt ? mt + g0 : nullptr, (size_t) nl, W.m + g0, W.l_sum + g0,
                      W.alpha + g0);
            F.pv(nk, d, vf, ldv, W.s, (size_t) k_group, W.alpha + g0, ng, W.acc + g0, (size_t) nl);
        }
    }
}

}  // namespace

size_t ember_cpu_attn_tiled_work_size(const ember_tensor * dst, int n_threads) {
    return make_plan(dst, n_threads).work_size(n_threads);
}

void ember_cpu_attn_tiled_with(const ember_cpu_compute_params * p, ember_tensor * dst,
                               const ember_cpu_kernel_table * kt) {
    attn_plan P = make_plan(dst, p->nth);
    if (P.work_size(p->nth) > p->wsize) {  // a buffer sized for another thread count: no split
        P.n_split = 1, P.chunk = P.n_kv > 0 ? P.n_kv : 1, P.n_tasks = P.n_kvh * P.n_qb;
        if (P.work_size(p->nth) > p->wsize) {
            ember_cpu_set_error(p, EMBER_ERR_INTERNAL);
            return;
        }
    }
    const attn_fns       F = fns_of(kt);
    char *               wbase   = (char *) p->wdata;
    const attn_scratch   W(P, wbase + k_header + (size_t) p->ith * P.thread_bytes);
    char *               partial = wbase + k_header + (size_t) p->nth * P.thread_bytes;
    std::atomic<int64_t> * counter = (std::atomic<int64_t> *) p->wdata;
    const int64_t        G = P.group, nl = P.nl, d = P.d;

    const bool dynamic = P.n_tokens > 1 && p->nth > 1;
    if (dynamic) {
        if (p->ith == 0) new (p->wdata) std::atomic<int64_t>(p->nth);
        ember_cpu_barrier(p);
    }
    const int64_t per_qb = P.n_kvh * P.n_split;
    for (int64_t t = p->ith; t < P.n_tasks;
         t = dynamic ? counter->fetch_add(1, std::memory_order_relaxed) : t + p->nth) {
        const int64_t qb = P.n_qb - 1 - t / per_qb;  // latest blocks (most keys under a causal mask) first
        const int64_t hk = (t % per_qb) / P.n_split;
        const int64_t kc = t % P.n_split;
        const int64_t t0 = qb * P.bt;
        const int64_t nt = P.n_tokens - t0 < P.bt ? P.n_tokens - t0 : P.bt;
        const int64_t k0 = kc * P.chunk;
        const int64_t k1 = k0 + P.chunk < P.n_kv ? k0 + P.chunk : P.n_kv;
        run_task(P, F, kt, dst, W, hk, t0, nt, k0, k1);

        if (P.n_split > 1) {  // partial state, merged below
            const int64_t slot = (qb * P.n_kvh + hk) * P.n_split + kc;
            float *       pm   = (float *) (partial + (size_t) slot * P.partial_bytes);
            float *       pl   = (float *) ((char *) pm + ember_cpu_pad(nl * sizeof(float)));
            float *       pa   = (float *) ((char *) pl + ember_cpu_pad(nl * sizeof(float)));
            std::memcpy(pm, W.m, nl * sizeof(float));
            std::memcpy(pl, W.l_sum, nl * sizeof(float));
            std::memcpy(pa, W.acc, (size_t) (d * nl) * sizeof(float));
            continue;
        }
        for (int64_t tt = 0; tt < nt; tt++) {
            for (int64_t g = 0; g < G; g++) {
                const int64_t r   = tt * G + g;
                float *       y   = (float *) ember_cpu_row(dst, hk * G + g, t0 + tt, 0);
                const float   inv = W.l_sum[r] > 0.0f ? 1.0f / W.l_sum[r] : 0.0f;  // all keys hidden: zeros
                for (int64_t i = 0; i < d; i++) y[i] = W.acc[i * nl + r] * inv;
            }
        }
    }
    if (P.n_split == 1) return;

    // Merge the chunks of each output row (token, head), rows split evenly across threads.
    ember_cpu_barrier(p);
    int64_t r0, r1;
    ember_cpu_split_rows(P.n_tokens * P.n_head, p->ith, p->nth, &r0, &r1);
    for (int64_t row = r0; row < r1; row++) {
        const int64_t t  = row / P.n_head;
        const int64_t h  = row % P.n_head;
        const int64_t qb = t / P.bt;
        const int64_t hk = h / G;
        const int64_t r  = (t % P.bt) * G + h % G;
        auto          part = [&](int64_t kc) {
            return (const float *) (partial + (size_t) ((qb * P.n_kvh + hk) * P.n_split + kc) * P.partial_bytes);
        };
        const size_t lstep = ember_cpu_pad(nl * sizeof(float)) / sizeof(float);
        float        mx    = -INFINITY;
        for (int64_t kc = 0; kc < P.n_split; kc++) mx = std::fmax(mx, part(kc)[r]);
        float * y = (float *) ember_cpu_row(dst, h, t, 0);
        for (int64_t i = 0; i < d; i++) y[i] = 0.0f;
        if (mx == -INFINITY) continue;  // all keys hidden: zeros
        float sum = 0.0f;
        for (int64_t kc = 0; kc < P.n_split; kc++) {
            const float * pm = part(kc);
            if (pm[r] == -INFINITY) continue;
            const float   w  = std::exp(pm[r] - mx);
            const float * pa = pm + 2 * lstep;
            sum += w * pm[lstep + r];
            for (int64_t i = 0; i < d; i++) y[i] += w * pa[i * nl + r];
        }
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        for (int64_t i = 0; i < d; i++) y[i] *= inv;
    }
}

void ember_cpu_attn_tiled(const ember_cpu_compute_params * p, ember_tensor * dst) {
    ember_cpu_attn_tiled_with(p, dst, ember_cpu_kernels());
}
