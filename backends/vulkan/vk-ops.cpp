// Which ops run on a Vulkan device, and how each is recorded: the shader variant, its
// bindings (tensor -> buffer range), push constants and dispatch size. The op semantics are
// those of the CPU reference kernels (backends/cpu_simd/ops-*.cpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "graph.h"
#include "vk-internal.h"

namespace {

// Types the dequantizing shaders read (shaders/dequant.glsl; shader names use the type name).
bool is_dq_type(ember_type t) {
    switch (t) {
        case EMBER_TYPE_F32: case EMBER_TYPE_F16: case EMBER_TYPE_BF16: case EMBER_TYPE_Q4_0: case EMBER_TYPE_Q4_1:
        case EMBER_TYPE_Q5_0: case EMBER_TYPE_Q5_1: case EMBER_TYPE_Q8_0: case EMBER_TYPE_Q2_K: case EMBER_TYPE_Q3_K:
        case EMBER_TYPE_Q4_K: case EMBER_TYPE_Q5_K: case EMBER_TYPE_Q6_K: case EMBER_TYPE_IQ4_NL: case EMBER_TYPE_IQ4_XS:
        case EMBER_TYPE_INT4: case EMBER_TYPE_INT4_G32: case EMBER_TYPE_NF4: case EMBER_TYPE_FP8_E4M3:
        case EMBER_TYPE_FP8_E5M2: case EMBER_TYPE_FP8_E4M3_ROW: case EMBER_TYPE_FP8_E5M2_ROW:
            return true;
        default:
            return false;
    }
}

// Types shaders/convert.comp writes (and the KV cache types ATTN reads).
bool is_cvt_type(ember_type t) {
    return t == EMBER_TYPE_F32 || t == EMBER_TYPE_F16 || t == EMBER_TYPE_Q8_0 || t == EMBER_TYPE_Q4_0;
}

std::string tname(ember_type t) { return ember_type_get_name(t); }

bool all_f32(const ember_tensor * op) {
    if (op->type != EMBER_TYPE_F32) return false;
    for (const ember_tensor * s : op->src) {
        if (s && s->type != EMBER_TYPE_F32) return false;
    }
    return true;
}

// Shaders index with 32-bit byte offsets inside one binding.
bool fits(const vk_device_ctx * dc, const ember_tensor * t) {
    const uint64_t limit = std::min<uint64_t>(dc->props.limits.maxStorageBufferRange, UINT32_MAX) - 1024;
    return ember_nbytes(t) <= limit && (uint64_t) ember_nelements(t) <= limit;
}

// Rows written word by word (convert.comp): whole words, starting on a word.
bool word_rows(const ember_tensor * t) {
    return ember_row_size(t->type, t->ne[0]) % 4 == 0 && t->nb[1] % 4 == 0 && t->nb[2] % 4 == 0 && t->nb[3] % 4 == 0 &&
           t->view_offs % 4 == 0;
}

constexpr uint32_t k_max_groups = 65535;

// mul_mat_vec_q.comp: rows of whole 256-weight units, starting on 16 bytes (Q6_K: any even
// byte), x rows on 16 bytes. EMBER_VULKAN_MMV_GENERIC=1 keeps every product on the generic
// kernel (to compare the two).
bool mmv_fast_ok(const ember_tensor * w, const ember_tensor * x, uint32_t w_resid, uint32_t x_off) {
    static const bool off = [] {
        const char * v = std::getenv("EMBER_VULKAN_MMV_GENERIC");
        return v && *v && std::strcmp(v, "0") != 0;
    }();
    if (off) return false;
    const ember_type t = w->type;
    if (t != EMBER_TYPE_Q4_0 && t != EMBER_TYPE_Q8_0 && t != EMBER_TYPE_Q4_K && t != EMBER_TYPE_Q6_K) return false;
    if (w->ne[0] % 256 != 0) return false;
    const size_t a = t == EMBER_TYPE_Q6_K ? 2 : 16;
    if (w_resid % a != 0 || w->nb[1] % a != 0 || w->nb[2] % a != 0 || w->nb[3] % a != 0) return false;
    return x_off % 4 == 0 && x->nb[1] % 16 == 0 && x->nb[2] % 16 == 0 && x->nb[3] % 16 == 0;
}

}  // namespace

bool ember_vk_supports_op(vk_device_ctx * dc, const ember_tensor * op) {
    if (op->op == EMBER_OP_VIEW) return true;
    if (!fits(dc, op)) return false;
    for (const ember_tensor * s : op->src) {
        if (s && !fits(dc, s)) return false;
    }
    switch (op->op) {
        case EMBER_OP_ADD:
        case EMBER_OP_MUL:
        case EMBER_OP_SWIGLU:
        case EMBER_OP_SCALE:
        case EMBER_OP_RMS_NORM:
            return all_f32(op);
        case EMBER_OP_ROPE:
            return op->type == EMBER_TYPE_F32 && op->src[0]->type == EMBER_TYPE_F32 && op->src[1]->type == EMBER_TYPE_I32 &&
                   (!op->src[2] || op->src[2]->type == EMBER_TYPE_F32);
        case EMBER_OP_GET_ROWS:
            return is_dq_type(op->src[0]->type) && op->src[1]->type == EMBER_TYPE_I32 && op->type == EMBER_TYPE_F32;
        case EMBER_OP_MUL_MAT:
            return is_dq_type(op->src[0]->type) && op->src[1]->type == EMBER_TYPE_F32 && op->type == EMBER_TYPE_F32;
        case EMBER_OP_SET_ROWS:
            return is_cvt_type(op->type) && op->src[0]->type == op->type && op->src[1]->type == EMBER_TYPE_F32 &&
                   op->src[2]->type == EMBER_TYPE_I32 && word_rows(op);
        case EMBER_OP_CPY:
            return is_cvt_type(op->src[0]->type) && is_cvt_type(op->type) && word_rows(op);
        case EMBER_OP_ATTN:
            return op->type == EMBER_TYPE_F32 && op->src[0]->type == EMBER_TYPE_F32 && is_cvt_type(op->src[1]->type) &&
                   is_cvt_type(op->src[2]->type) && (!op->src[3] || op->src[3]->type == EMBER_TYPE_F32) && op->src[0]->ne[0] <= 256;
        default:
            return false;
    }
}

namespace {

struct binding {
    VkBuffer     buffer = VK_NULL_HANDLE;
    VkDeviceSize offset = 0;
    VkDeviceSize range  = 0;
    uint32_t     resid  = 0;  // bytes from the bound offset to the tensor
};

binding bind_of(const vk_device_ctx * dc, const ember_tensor * t) {
    const vk_buffer_ctx * bc    = static_cast<const vk_buffer_ctx *>(t->buffer->context);
    const VkDeviceSize    off   = static_cast<VkDeviceSize>(reinterpret_cast<uintptr_t>(t->data) - k_vk_base);
    const VkDeviceSize    align = std::max<VkDeviceSize>(dc->props.limits.minStorageBufferOffsetAlignment, 4);
    binding               b;
    b.buffer = bc->buffer;
    b.offset = off / align * align;
    b.resid  = static_cast<uint32_t>(off - b.offset);
    const VkDeviceSize size = std::max<VkDeviceSize>(bc->size, 4);
    b.range  = std::min<VkDeviceSize>(size - std::min(b.offset, size - 4), dc->props.limits.maxStorageBufferRange / 4 * 4);
    return b;
}

// Push constants, 32-bit words.
struct push {
    uint32_t w[k_vk_push_words] = {};
    uint32_t n                  = 0;
    push &   u(uint64_t v) {
        w[n++] = static_cast<uint32_t>(v);
        return *this;
    }
    push & f(float v) {
        std::memcpy(&w[n++], &v, sizeof(v));
        return *this;
    }
};

// Binds `ts` (nullptr: the last tensor given), pushes `pc` and dispatches; then a barrier so
// the next dispatch sees the writes. err_flag: binding 4 is the stream's error word.
ember_status dispatch(vk_stream_ctx * sc, const std::string & shader, uint32_t wg, std::initializer_list<const ember_tensor *> ts,
                      const push & pc, uint32_t gx, uint32_t gy = 1, uint32_t gz = 1, bool err_flag = false,
                      uint32_t spec1 = 0, uint32_t spec2 = 0) {
    vk_device_ctx * dc = sc->dc;
    VkPipeline      pipeline;
    ember_status    st = ember_vk_pipeline(dc, shader, wg, &pipeline, spec1, spec2);
    if (st != EMBER_OK) return st;
    VkDescriptorSet set;
    st = ember_vk_alloc_desc_set(sc, &set);
    if (st != EMBER_OK) return st;

    std::vector<const ember_tensor *> list(ts);
    VkDescriptorBufferInfo            infos[k_vk_bindings];
    VkWriteDescriptorSet              writes[k_vk_bindings];
    for (uint32_t i = 0; i < k_vk_bindings; i++) {
        const ember_tensor * t = i < list.size() && list[i] ? list[i] : list.back();
        const binding        b = bind_of(dc, t);
        infos[i]               = {b.buffer, b.offset, b.range};
        if (err_flag && i == 4) infos[i] = {sc->err_buf, 0, VK_WHOLE_SIZE};
        writes[i]              = {};
        writes[i].sType        = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
        writes[i].dstSet       = set;
        writes[i].dstBinding   = i;
        writes[i].descriptorCount = 1;
        writes[i].descriptorType  = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        writes[i].pBufferInfo     = &infos[i];
    }
    vkUpdateDescriptorSets(dc->dev, k_vk_bindings, writes, 0, nullptr);
    vkCmdBindPipeline(sc->cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
    vkCmdBindDescriptorSets(sc->cb, VK_PIPELINE_BIND_POINT_COMPUTE, dc->layout, 0, 1, &set, 0, nullptr);
    vkCmdPushConstants(sc->cb, dc->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, k_vk_push_words * 4, pc.w);
    vkCmdDispatch(sc->cb, gx, gy, gz);
    VkMemoryBarrier mb{};
    mb.sType         = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    vkCmdPipelineBarrier(sc->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, nullptr,
                         0, nullptr);
    return EMBER_OK;
}

// One workgroup per item, folded into x and y (shaders read flat_group()).
ember_status dispatch_items(vk_stream_ctx * sc, const std::string & shader, uint32_t wg,
                            std::initializer_list<const ember_tensor *> ts, const push & pc, uint64_t items, uint32_t gz = 1,
                            bool err_flag = false, uint32_t spec1 = 0, uint32_t spec2 = 0) {
    const uint32_t gx = static_cast<uint32_t>(std::min<uint64_t>(items, k_max_groups));
    const uint32_t gy = static_cast<uint32_t>((items + gx - 1) / gx);
    return dispatch(sc, shader, wg, ts, pc, gx, gy, gz, err_flag, spec1, spec2);
}

// Grid-stride kernels: enough groups of `wg` for n items, at most 65535.
uint32_t stride_groups(uint64_t n, uint32_t wg) {
    return static_cast<uint32_t>(std::max<uint64_t>(1, std::min<uint64_t>((n + wg - 1) / wg, k_max_groups)));
}

uint32_t f32_off(const binding & b) { return b.resid / 4; }

ember_status record_eltwise(vk_stream_ctx * sc, ember_tensor * node) {
    const ember_tensor * a  = node->src[0];
    const ember_tensor * b  = node->src[1] ? node->src[1] : a;
    const char *         sh = node->op == EMBER_OP_ADD ? "add" : node->op == EMBER_OP_MUL ? "mul" : node->op == EMBER_OP_SWIGLU ? "swiglu" : "scale";
    push pc;
    pc.u(node->ne[0]).u(node->ne[1]).u(node->ne[2]).u(node->ne[3]);
    pc.u(f32_off(bind_of(sc->dc, a))).u(a->nb[1] / 4).u(a->nb[2] / 4).u(a->nb[3] / 4);
    pc.u(f32_off(bind_of(sc->dc, b))).u(b->nb[1] / 4).u(b->nb[2] / 4).u(b->nb[3] / 4);
    pc.u(b->ne[0]).u(b->ne[1]).u(b->ne[2]).u(b->ne[3]);
    pc.u(f32_off(bind_of(sc->dc, node))).u(node->nb[1] / 4).u(node->nb[2] / 4).u(node->nb[3] / 4);
    pc.f(node->op == EMBER_OP_SCALE ? ember_get_op_param_f32(node, 0) : 0.0f);
    return dispatch(sc, sh, 256, {a, b, node}, pc, stride_groups(ember_nelements(node), 256));
}

ember_status record_rms_norm(vk_stream_ctx * sc, ember_tensor * node) {
    const ember_tensor * a = node->src[0];
    push                 pc;
    pc.u(node->ne[0]).u(node->ne[1]).u(node->ne[2]).u(node->ne[3]);
    pc.u(f32_off(bind_of(sc->dc, a))).u(a->nb[1] / 4).u(a->nb[2] / 4).u(a->nb[3] / 4);
    pc.u(f32_off(bind_of(sc->dc, node))).u(node->nb[1] / 4).u(node->nb[2] / 4).u(node->nb[3] / 4);
    pc.f(ember_get_op_param_f32(node, 0));
    return dispatch_items(sc, "rms_norm", 128, {a, node}, pc, ember_nrows(node));
}

ember_status record_rope(vk_stream_ctx * sc, ember_tensor * node) {
    const ember_tensor * a     = node->src[0];
    const ember_tensor * pos   = node->src[1];
    const ember_tensor * ff    = node->src[2];
    const int32_t        n_rot = node->op_params[0];
    push                 pc;
    pc.u(node->ne[0]).u(node->ne[1]).u(node->ne[2]);
    pc.u(f32_off(bind_of(sc->dc, a))).u(a->nb[1] / 4).u(a->nb[2] / 4);
    pc.u(f32_off(bind_of(sc->dc, node))).u(node->nb[1] / 4).u(node->nb[2] / 4);
    pc.u(f32_off(bind_of(sc->dc, pos))).u(pos->nb[0] / 4);
    pc.u(ff ? f32_off(bind_of(sc->dc, ff)) : 0);
    pc.u(n_rot).u(node->op_params[1]).u(ff ? 1 : 0);
    pc.f(std::pow(ember_get_op_param_f32(node, 2), -2.0f / (float) n_rot)).f(ember_get_op_param_f32(node, 3));
    return dispatch(sc, "rope", 256, {a, pos, ff ? ff : a, node}, pc, stride_groups(ember_nelements(node), 256));
}

ember_status record_get_rows(vk_stream_ctx * sc, ember_tensor * node) {
    const ember_tensor * t   = node->src[0];
    const ember_tensor * ids = node->src[1];
    push                 pc;
    pc.u(node->ne[0]).u(node->ne[1]).u(node->ne[2]).u(node->ne[3]);
    pc.u(bind_of(sc->dc, t).resid).u(t->nb[1]).u(t->ne[1]);
    pc.u(f32_off(bind_of(sc->dc, ids))).u(ids->nb[0] / 4).u(ids->nb[1] / 4).u(ids->nb[2] / 4);
    pc.u(f32_off(bind_of(sc->dc, node))).u(node->nb[1] / 4).u(node->nb[2] / 4).u(node->nb[3] / 4);
    return dispatch_items(sc, "get_rows_" + tname(t->type), 64, {t, ids, node}, pc, ember_nrows(node), 1, true);
}

ember_status record_mul_mat(vk_stream_ctx * sc, ember_tensor * node) {
    vk_device_ctx *      dc = sc->dc;
    const ember_tensor * w  = node->src[0];
    const ember_tensor * x  = node->src[1];
    const int64_t        m  = x->ne[1];
    const int64_t        nbatch = x->ne[2] * x->ne[3];
    push                 pc;
    pc.u(w->ne[0]).u(w->ne[1]).u(m).u(x->ne[2]);
    pc.u(bind_of(dc, w).resid).u(w->nb[1]).u(w->nb[2]).u(w->nb[3]);
    pc.u(f32_off(bind_of(dc, x))).u(x->nb[1] / 4).u(x->nb[2] / 4).u(x->nb[3] / 4);
    pc.u(f32_off(bind_of(dc, node))).u(node->nb[1] / 4).u(node->nb[2] / 4).u(node->nb[3] / 4);
    pc.u(x->ne[2] / w->ne[2]).u(x->ne[3] / w->ne[3]);
    const std::string t = tname(w->type);
    if (m <= 4 && m * nbatch <= k_max_groups && mmv_fast_ok(w, x, bind_of(dc, w).resid, f32_off(bind_of(dc, x)))) {
        // Invocations per row (the shader's LPR): the largest power of two up to 32 with a
        // 256-weight unit for each, so that short rows (n_embd 2048: 8 units) idle no lanes.
        uint32_t lpr = 1;
        while (lpr < 32 && 2 * lpr * 256 <= (uint64_t) w->ne[0]) lpr *= 2;
        // Rows per invocation: 2 (each activation load serves both) except for Q8_0, whose
        // two 272-byte units would not fit the registers; EMBER_VULKAN_MMV_ROWS=1|2 overrides.
        static const uint32_t nr_env = [] {
            const char * v = std::getenv("EMBER_VULKAN_MMV_ROWS");
            return v && (v[0] == '1' || v[0] == '2') && v[1] == '\0' ? (uint32_t) (v[0] - '0') : 0u;
        }();
        const uint32_t     nr = nr_env ? nr_env : w->type == EMBER_TYPE_Q8_0 ? 1 : 2;
        constexpr uint32_t wg = 128;
        const uint32_t     rows_per_group = wg / lpr * nr;
        return dispatch_items(sc, "mul_mat_vec_q_" + t, wg, {w, x, node}, pc, (w->ne[1] + rows_per_group - 1) / rows_per_group,
                              static_cast<uint32_t>(m * nbatch), false, lpr, nr);
    }
    if (m <= 4 && m * nbatch <= k_max_groups) {
        const bool     sg = dc->subgroup_arith;
        const uint32_t wg = sg ? std::max<uint32_t>(64, dc->subgroup_size) : 64;
        return dispatch_items(sc, "mul_mat_vec_" + t + (sg ? "" : "_nosg"), wg, {w, x, node}, pc, w->ne[1],
                              static_cast<uint32_t>(m * nbatch));
    }
    if (nbatch > k_max_groups || (m + 63) / 64 > k_max_groups) return EMBER_ERR_UNSUPPORTED;
    return dispatch(sc, "mul_mm_" + t, 256, {w, x, node}, pc, static_cast<uint32_t>((w->ne[1] + 63) / 64),
                    static_cast<uint32_t>((m + 63) / 64), static_cast<uint32_t>(nbatch));
}

ember_status record_convert(vk_stream_ctx * sc, ember_tensor * node) {
    vk_device_ctx *      dc      = sc->dc;
    const bool           set     = node->op == EMBER_OP_SET_ROWS;
    const ember_tensor * src     = set ? node->src[1] : node->src[0];
    const ember_tensor * idx     = set ? node->src[2] : src;
    const binding        bd      = bind_of(dc, node);
    if (bd.resid % 4 != 0) return EMBER_ERR_INTERNAL;  // supports() checked the view offset
    push pc;
    pc.u(src->ne[0]).u(src->ne[1]).u(src->ne[2]).u(src->ne[3]);
    pc.u(bind_of(dc, src).resid).u(src->nb[1]).u(src->nb[2]).u(src->nb[3]);
    pc.u(bd.resid).u(node->nb[1]).u(node->nb[2]).u(node->nb[3]);
    pc.u(set ? f32_off(bind_of(dc, idx)) : 0).u(set ? idx->nb[0] / 4 : 0).u(node->ne[1]);
    const std::string shader = set ? "set_rows_" + tname(node->type) : "cpy_" + tname(src->type) + "_" + tname(node->type);
    return dispatch_items(sc, shader, 64, {src, idx, node}, pc, ember_nrows(src), 1, set);
}

ember_status record_attn(vk_stream_ctx * sc, ember_tensor * node) {
    vk_device_ctx *      dc   = sc->dc;
    const ember_tensor * q    = node->src[0];
    const ember_tensor * k    = node->src[1];
    const ember_tensor * v    = node->src[2];
    const ember_tensor * mask = node->src[3];
    push                 pc;
    pc.u(q->ne[0]).u(q->ne[1]).u(q->ne[2]).u(k->ne[2]).u(q->ne[1] / k->ne[1]);
    pc.u(f32_off(bind_of(dc, q))).u(q->nb[1] / 4).u(q->nb[2] / 4);
    pc.u(bind_of(dc, k).resid).u(k->nb[1]).u(k->nb[2]);
    pc.u(bind_of(dc, v).resid).u(v->nb[1]).u(v->nb[2]);
    pc.u(mask ? f32_off(bind_of(dc, mask)) : 0).u(mask ? mask->nb[1] / 4 : 0).u(mask ? 1 : 0);
    pc.u(f32_off(bind_of(dc, node))).u(node->nb[1] / 4).u(node->nb[2] / 4);
    pc.f(ember_get_op_param_f32(node, 0));
    return dispatch_items(sc, "attn_" + tname(k->type) + "_" + tname(v->type), 64, {q, k, v, mask ? mask : q, node}, pc,
                          q->ne[1] * q->ne[2]);
}

}  // namespace

ember_status ember_vk_record_node(vk_stream_ctx * sc, ember_tensor * node) {
    if (node->op == EMBER_OP_VIEW || ember_nelements(node) == 0) return EMBER_OK;
    switch (node->op) {
        case EMBER_OP_ADD:
        case EMBER_OP_MUL:
        case EMBER_OP_SWIGLU:
        case EMBER_OP_SCALE:
            return record_eltwise(sc, node);
        case EMBER_OP_RMS_NORM: return record_rms_norm(sc, node);
        case EMBER_OP_ROPE: return record_rope(sc, node);
        case EMBER_OP_GET_ROWS: return record_get_rows(sc, node);
        case EMBER_OP_MUL_MAT: return record_mul_mat(sc, node);
        case EMBER_OP_SET_ROWS:
        case EMBER_OP_CPY:
            return record_convert(sc, node);
        case EMBER_OP_ATTN: return record_attn(sc, node);
        default:
            std::fprintf(stderr, "ember: vulkan: no kernel for %s\n", ember_op_name(node->op));
            return EMBER_ERR_UNSUPPORTED;
    }
}
