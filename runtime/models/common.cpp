#include "runtime/models/common.h"

namespace {
int shape1(int64_t ne[4], int64_t a) {
    ne[0] = a;
    return 1;
}
int shape2(int64_t ne[4], int64_t a, int64_t b) {
    ne[0] = a;
    ne[1] = b;
    return 2;
}
}  // namespace

int ember_shape_embd(const ember_hparams & hp, int64_t ne[4]) { return shape1(ne, hp.n_embd); }
int ember_shape_tok_embd(const ember_hparams & hp, int64_t ne[4]) { return shape2(ne, hp.n_embd, hp.n_vocab); }
int ember_shape_rope_freqs(const ember_hparams & hp, int64_t ne[4]) { return shape1(ne, hp.n_rot / 2); }
int ember_shape_wq(const ember_hparams & hp, int64_t ne[4]) { return shape2(ne, hp.n_embd, hp.n_embd_q()); }
int ember_shape_wk(const ember_hparams & hp, int64_t ne[4]) { return shape2(ne, hp.n_embd, hp.n_embd_k_gqa()); }
int ember_shape_wv(const ember_hparams & hp, int64_t ne[4]) { return shape2(ne, hp.n_embd, hp.n_embd_v_gqa()); }
int ember_shape_wo(const ember_hparams & hp, int64_t ne[4]) { return shape2(ne, int64_t(hp.n_embd_head_v) * hp.n_head, hp.n_embd); }
int ember_shape_q_out(const ember_hparams & hp, int64_t ne[4]) { return shape1(ne, hp.n_embd_q()); }
int ember_shape_k_out(const ember_hparams & hp, int64_t ne[4]) { return shape1(ne, hp.n_embd_k_gqa()); }
int ember_shape_v_out(const ember_hparams & hp, int64_t ne[4]) { return shape1(ne, hp.n_embd_v_gqa()); }
int ember_shape_head_k(const ember_hparams & hp, int64_t ne[4]) { return shape1(ne, hp.n_embd_head_k); }
int ember_shape_ffn_up(const ember_hparams & hp, int64_t ne[4]) { return shape2(ne, hp.n_embd, hp.n_ff); }
int ember_shape_ffn_down(const ember_hparams & hp, int64_t ne[4]) { return shape2(ne, hp.n_ff, hp.n_embd); }
