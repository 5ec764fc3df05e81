#include "runtime/graph-builder.h"

#include <cmath>

#include "runtime/kv-cache.h"
#include "runtime/model.h"

void ember_build_inputs(ember_build_ctx & ctx) {
    ember_graph & g = ctx.g;
    auto input      = [&](ember_type type, int64_t ne0, int64_t ne1, const char * name) {
        ember_tensor * t = g.new_tensor(type, ne0, ne1);
        t->flags |= EMBER_TENSOR_FLAG_INPUT;
        ember_set_name(t, "%s", name);
        return t;
    };
    ctx.in.tokens  = input(EMBER_TYPE_I32, ctx.n_tokens, 1, "inp_tokens");
    ctx.in.pos     = input(EMBER_TYPE_I32, ctx.n_tokens, 1, "inp_pos");
    ctx.in.kv_idx  = input(EMBER_TYPE_I32, ctx.n_tokens, 1, "inp_kv_idx");
    ctx.in.mask    = input(EMBER_TYPE_F32, ctx.n_kv, ctx.n_tokens, "inp_mask");
    // Only when some tokens want no logits; otherwise every row is an output.
    ctx.in.out_ids = ctx.n_outputs != ctx.n_tokens ? input(EMBER_TYPE_I32, ctx.n_outputs, 1, "inp_out_ids") : nullptr;
}

ember_tensor * ember_build_norm(ember_build_ctx & ctx, ember_tensor * x, ember_tensor * w) {
    ember_tensor * cur = ember_rms_norm(ctx.g, x, ctx.hp.rms_eps);
    return w ? ember_mul(ctx.g, cur, w) : cur;
}

ember_tensor * ember_build_attn(ember_build_ctx & ctx, uint32_t il, ember_tensor * x) {
    ember_graph &         g     = ctx.g;
    const ember_hparams & hp    = ctx.hp;
    const ember_layer &   layer = ctx.model.layers[il];
    const int64_t         T     = ctx.n_tokens;
    const int64_t         hd_k  = hp.n_embd_head_k;
    const int64_t         hd_v  = hp.n_embd_head_v;

    ember_tensor * q = ember_mul_mat(g, layer.wq, x);  // [hd_k * n_head, T]
    ember_tensor * k = ember_mul_mat(g, layer.wk, x);  // [hd_k * n_head_kv, T]
    ember_tensor * v = ember_mul_mat(g, layer.wv, x);  // [hd_v * n_head_kv, T]
    if (layer.bq) q = ember_add(g, q, layer.bq);
    if (layer.bk) k = ember_add(g, k, layer.bk);
    if (layer.bv) v = ember_add(g, v, layer.bv);

    q = ember_view(g, q, hd_k, hp.n_head, T);     // [hd_k, n_head, T]
    k = ember_view(g, k, hd_k, hp.n_head_kv, T);  // [hd_k, n_head_kv, T]
    if (layer.attn_q_norm) q = ember_build_norm(ctx, q, layer.attn_q_norm);
    if (layer.attn_k_norm) k = ember_build_norm(ctx, k, layer.attn_k_norm);

    const float freq_base  = hp.rope_freq_base;
    const float freq_scale = hp.rope_freq_scale;
    q = ember_rope(g, q, ctx.in.pos, ctx.model.rope_freqs, hp.n_rot, hp.rope_mode, freq_base, freq_scale);
    k = ember_rope(g, k, ctx.in.pos, ctx.model.rope_freqs, hp.n_rot, hp.rope_mode, freq_base, freq_scale);

    // Append this batch's K and V to the cache; attention then reads the cache (which now
    // holds them) through views that depend on the writes.
    ember_tensor * k_cache = &ctx.kv.k_l[il];
    ember_tensor * v_cache = &ctx.kv.v_l[il];
    ember_tensor * k_all   = ember_set_rows(g, k_cache, ember_view(g, k, hp.n_embd_k_gqa(), T), ctx.in.kv_idx);
    ember_tensor * v_all   = ember_set_rows(g, v_cache, v, ctx.in.kv_idx);

    const int64_t k_ne[4] = {hd_k, hp.n_head_kv, ctx.n_kv, 1};
    const size_t  k_nb[4] = {k_cache->nb[0], ember_row_size(k_cache->type, hd_k), k_cache->nb[1], k_cache->nb[1] * ctx.n_kv};
    const int64_t v_ne[4] = {hd_v, hp.n_head_kv, ctx.n_kv, 1};
    const size_t  v_nb[4] = {v_cache->nb[0], ember_row_size(v_cache->type, hd_v), v_cache->nb[1], v_cache->nb[1] * ctx.n_kv};
    ember_tensor * k_view = ember_view_strided(g, k_all, k_ne, k_nb, 0);  // [hd_k, n_head_kv, n_kv]
    ember_tensor * v_view = ember_view_strided(g, v_all, v_ne, v_nb, 0);  // [hd_v, n_head_kv, n_kv]

    ember_tensor * o = ember_attn(g, q, k_view, v_view, ctx.in.mask, 1.0f / std::sqrt(static_cast<float>(hd_k)));
    o = ember_view(g, o, hd_v * hp.n_head, T);  // [hd_v * n_head, T]
    return ember_mul_mat(g, layer.wo, o);       // [n_embd, T]
}

ember_tensor * ember_build_ffn_swiglu(ember_build_ctx & ctx, uint32_t il, ember_tensor * x) {
    const ember_layer & layer = ctx.model.layers[il];
    ember_tensor *      gate  = ember_mul_mat(ctx.g, layer.ffn_gate, x);  // [n_ff, T]
    ember_tensor *      up    = ember_mul_mat(ctx.g, layer.ffn_up, x);    // [n_ff, T]
    return ember_mul_mat(ctx.g, layer.ffn_down, ember_swiglu(ctx.g, gate, up));
}

ember_tensor * ember_build_output(ember_build_ctx & ctx, ember_tensor * x) {
    if (ctx.n_outputs != ctx.n_tokens) x = ember_get_rows(ctx.g, x, ctx.in.out_ids);  // [n_embd, n_outputs]
    x                     = ember_build_norm(ctx, x, ctx.model.output_norm);
    ember_tensor * logits = ember_mul_mat(ctx.g, ctx.model.output, x);  // [n_vocab, n_outputs]
    logits->flags |= EMBER_TENSOR_FLAG_OUTPUT;
    ember_set_name(logits, "logits");
    return logits;
}

ember_tensor * ember_build_decoder(ember_build_ctx & ctx) {
    ember_build_inputs(ctx);
    ember_tensor * x = ember_get_rows(ctx.g, ctx.model.tok_embd, ctx.in.tokens);  // [n_embd, T]
    for (uint32_t il = 0; il < ctx.hp.n_layer; il++) {
        const ember_layer & layer = ctx.model.layers[il];
        x = ember_add(ctx.g, x, ember_build_attn(ctx, il, ember_build_norm(ctx, x, layer.attn_norm)));
        x = ember_add(ctx.g, x, ember_build_ffn_swiglu(ctx, il, ember_build_norm(ctx, x, layer.ffn_norm)));
    }
    return ember_build_output(ctx, x);
}
