// Which ops run on a Vulkan device, and how each is recorded: the shader variant, its
// bindings (tensor -> buffer range), push constants and dispatch size. The op semantics are
// those of the CPU reference kernels (backends/cpu_simd/ops-*.cpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "converted-weights.h"
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

// Whether t's memory holds weights in the backend's own layout (vk-repack.h: planar Q6_K).
bool planar(const ember_tensor * t) {
    return (ember_memory_owner(t)->flags & EMBER_TENSOR_FLAG_VK_REPACKED) != 0;
}

// The type part of the name of a shader reading weights w (shaders/dequant.glsl's types).
std::string wname(const ember_tensor * w) { return planar(w) ? "q6_kp" : tname(w->type); }

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

bool same_shape(const ember_tensor * a, const ember_tensor * b) {
    for (int d = 0; d < 4; d++) {
        if (a->ne[d] != b->ne[d]) return false;
    }
    return true;
}

// INT4, INT4_G32, the block-scaled FP8 types and NF4: decode products by the QX kernels only (mmv_qx()).
bool int4_type(ember_type t) { return t == EMBER_TYPE_INT4 || t == EMBER_TYPE_INT4_G32; }
bool qx_only(ember_type t) {
    return int4_type(t) || t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E5M2 || t == EMBER_TYPE_NF4;
}

// mul_mat_vec_q.comp: rows of whole 256-weight units, starting on 16 bytes (Q6_K: any even
// byte; INT4: 4 bytes, its 68-byte groups; NF4: 4 bytes, its group headers; FP8: any byte,
// 33-byte blocks), x rows on 16 bytes. EMBER_VULKAN_MMV_GENERIC=1
// keeps every product on the generic kernel (to compare the two).
bool mmv_fast_ok(const ember_tensor * w, const ember_tensor * x, uint32_t w_resid, uint32_t x_off) {
    static const bool off = env_flag("EMBER_VULKAN_MMV_GENERIC");
    if (off) return false;
    const ember_type t = w->type;
    if (planar(w)) return false;  // (mul_mat_vec_q6p.comp, mmv_q6p())
    if (t != EMBER_TYPE_Q4_0 && t != EMBER_TYPE_Q8_0 && t != EMBER_TYPE_Q4_K && t != EMBER_TYPE_Q6_K && !qx_only(t)) return false;
    if (w->ne[0] % 256 != 0) return false;
    const size_t a = t == EMBER_TYPE_Q6_K                            ? 2
                     : int4_type(t) || t == EMBER_TYPE_NF4            ? 4
                     : t == EMBER_TYPE_FP8_E4M3 || t == EMBER_TYPE_FP8_E5M2 ? 1
                                                                      : 16;
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
    // Weights in the backend's layout (vk-repack.h): read only by MUL_MAT and GET_ROWS, as
    // whole rows (a view of some of its rows is still that layout).
    for (int i = 0; i < EMBER_MAX_SRC; i++) {
        const ember_tensor * s = op->src[i];
        if (!s || !planar(s)) continue;
        const ember_tensor * o = ember_memory_owner(s);
        if (i != 0 || (op->op != EMBER_OP_MUL_MAT && op->op != EMBER_OP_GET_ROWS)) return false;
        if (s->ne[0] != o->ne[0] || s->nb[1] != o->nb[1] || (s->data != o->data && (size_t) ((const char *) s->data - (const char *) o->data) % o->nb[1] != 0)) return false;
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

// The binding of tensor t: from its offset rounded down to a legal binding offset to its last
// byte rounded up to 16 (vec4 loads), within the buffer. Bound ranges are exactly what the
// barrier planning (ember_vk_record_range) tracks, and what synchronization validation checks.
binding bind_of(const vk_device_ctx * dc, const ember_tensor * t) {
    const vk_buffer_ctx * bc    = static_cast<const vk_buffer_ctx *>(t->buffer->context);
    const VkDeviceSize    off   = static_cast<VkDeviceSize>(reinterpret_cast<uintptr_t>(t->data) - k_vk_base);
    const VkDeviceSize    align = std::max<VkDeviceSize>(dc->props.limits.minStorageBufferOffsetAlignment, 4);
    binding               b;
    b.buffer = bc->buffer;
    b.offset = off / align * align;
    b.resid  = static_cast<uint32_t>(off - b.offset);
    const VkDeviceSize size = std::max<VkDeviceSize>(bc->size, 4) / 4 * 4;
    b.offset = std::min(b.offset, size - 4);
    const VkDeviceSize want = (b.resid + std::max<VkDeviceSize>(ember_nbytes(t), 4) + 15) / 16 * 16;
    b.range  = std::min({want, size - b.offset, (VkDeviceSize) dc->props.limits.maxStorageBufferRange / 4 * 4});
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

// Binds `ts` (nullptr: the last tensor given), pushes `pc` and dispatches; the barriers
// between dispatches are planned by ember_vk_record_range. err_flag: binding err_binding (4
// unless told) is the dispatch's slot of the stream's error words. xq_slot >= 0: binding 1 is
// that slot of quantized x (vk_stream_ctx::xq_base).
ember_status dispatch(vk_stream_ctx * sc, const std::string & shader, uint32_t wg, std::initializer_list<const ember_tensor *> ts,
                      const push & pc, uint32_t gx, uint32_t gy = 1, uint32_t gz = 1, bool err_flag = false,
                      uint32_t spec1 = 0, uint32_t spec2 = 0, uint32_t err_binding = 4, int32_t cnt_slot = -1,
                      int32_t xq_slot = -1, uint32_t spec3 = 0) {
    vk_device_ctx * dc = sc->dc;
    VkPipeline      pipeline;
    // sc->xq_out >= 0: the "_xq" variant of the shader (vulkan.cmake: XQ_OUT), which also writes
    // the quantized copy; the default variants have none of that code (sc->xq_code: the "_xq"
    // variant with its copy off, EMBER_VULKAN_MMV_QX_OUT=code).
    const bool      xq = sc->xq_out >= 0 || sc->xq_code;
    ember_status    st = ember_vk_pipeline(dc, xq ? shader + "_xq" : shader, wg, &pipeline, spec1, spec2, spec3);
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
        if (err_flag && i == err_binding) infos[i] = {sc->err_buf, sc->err_slot * sc->err_stride, 4};
        // cnt_slot >= 0 (mul_mat_vec_q.comp NORM_OUT): binding 7 is that counter word, binding 2
        // the scratch rows.
        if (cnt_slot >= 0 && i == 7) infos[i] = {sc->cnt_buf, (VkDeviceSize) cnt_slot * sc->err_stride, 4};
        if (cnt_slot >= 0 && i == 2) infos[i] = {sc->cnt_buf, sc->cnt_scratch, k_vk_norm_max * 4};
        if (xq_slot >= 0 && i == 1) infos[i] = {sc->cnt_buf, sc->xq_base + (VkDeviceSize) xq_slot * k_vk_xq_slot, k_vk_xq_slot};
        // sc->xq_out >= 0 (the dispatch writes its result's quantized copy into that slot): with
        // cnt_slot (the fused product + norm) binding 2 runs on over slot 0 after the scratch
        // rows; else binding 5 is the slot and binding 6 the block counters (fused gate + up,
        // ATTN).
        if (sc->xq_out >= 0 && cnt_slot >= 0 && i == 2) {
            infos[i] = {sc->cnt_buf, sc->cnt_scratch, sc->xq_base + k_vk_xq_slot - sc->cnt_scratch};
        }
        if (sc->xq_out >= 0 && cnt_slot < 0 && i == 5) {
            infos[i] = {sc->cnt_buf, sc->xq_base + (VkDeviceSize) sc->xq_out * k_vk_xq_slot, k_vk_xq_slot};
        }
        if (sc->xq_out >= 0 && cnt_slot < 0 && i == 6) infos[i] = {sc->cnt_buf, sc->xq_bcnt, k_vk_xq_bcnt};
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
    sc->n_dispatches++;
    sc->shaders.push_back(xq ? shader + "_xq" : shader);
    return EMBER_OK;
}

// One workgroup per item, folded into x and y (shaders read flat_group()).
ember_status dispatch_items(vk_stream_ctx * sc, const std::string & shader, uint32_t wg,
                            std::initializer_list<const ember_tensor *> ts, const push & pc, uint64_t items, uint32_t gz = 1,
                            bool err_flag = false, uint32_t spec1 = 0, uint32_t spec2 = 0, uint32_t err_binding = 4,
                            int32_t cnt_slot = -1, int32_t xq_slot = -1, uint32_t spec3 = 0) {
    const uint32_t gx = static_cast<uint32_t>(std::min<uint64_t>(items, k_max_groups));
    const uint32_t gy = static_cast<uint32_t>((items + gx - 1) / gx);
    return dispatch(sc, shader, wg, ts, pc, gx, gy, gz, err_flag, spec1, spec2, err_binding, cnt_slot, xq_slot, spec3);
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

// RMS_NORM `norm`, with (when not null) the residual ADD `add` that makes its input (written
// too: the residual stream reads it later) and the MUL `mul` by the norm weight that reads its
// result (the only reader: the norm itself is then not written). One workgroup per row.
ember_status record_rms_norm(vk_stream_ctx * sc, ember_tensor * add, ember_tensor * norm, ember_tensor * mul) {
    vk_device_ctx *      dc  = sc->dc;
    const ember_tensor * a   = add ? add->src[0] : norm->src[0];
    const ember_tensor * b   = add ? add->src[1] : a;
    const ember_tensor * w   = mul ? mul->src[1] : a;
    const ember_tensor * s   = add ? add : a;
    const ember_tensor * out = mul ? mul : norm;
    push                 pc;
    pc.u(norm->ne[0]).u(norm->ne[1]).u(norm->ne[2]).u(norm->ne[3]);
    pc.u(f32_off(bind_of(dc, a))).u(a->nb[1] / 4).u(a->nb[2] / 4).u(a->nb[3] / 4);
    pc.u(f32_off(bind_of(dc, b))).u(b->nb[1] / 4).u(b->nb[2] / 4).u(b->nb[3] / 4);
    pc.u(f32_off(bind_of(dc, w))).u(w->nb[1] / 4).u(w->nb[2] / 4).u(w->nb[3] / 4);
    pc.u(w->ne[1]).u(w->ne[2]).u(w->ne[3]);
    pc.u(f32_off(bind_of(dc, s))).u(s->nb[1] / 4).u(s->nb[2] / 4).u(s->nb[3] / 4);
    pc.u(f32_off(bind_of(dc, out))).u(out->nb[1] / 4).u(out->nb[2] / 4).u(out->nb[3] / 4);
    pc.f(ember_get_op_param_f32(norm, 0));
    // Subgroup reduction, weights loaded early (rms_norm.comp SUBGROUP) where the device has
    // subgroup arithmetic, unless EMBER_VULKAN_NORM_SG=0 (read at each recording, to compare).
    const bool        sg     = dc->subgroup_arith && !env_is("EMBER_VULKAN_NORM_SG", "0");
    // A decode norm (one row) writing its quantized copy: rms_norm_c8.comp, 8 consecutive values
    // per invocation, where the row is a multiple of 256 up to 8192 values and every row starts
    // on 16 bytes, unless EMBER_VULKAN_NORM_C8=0 (read at each recording). H200, 1B Q4_0 tg128
    // median of 3: 1102.6 -> 1158.5 t/s (its blocks' exchanges through shared memory where
    // the strided layout of rms_norm.comp took 3 barriers per 256 vec4).
    const int64_t ne0 = norm->ne[0];
    if (sc->xq_out >= 0 && mul && sg && ember_nrows(norm) == 1 && ne0 % 256 == 0 && ne0 <= 8192 &&
        (uint64_t) ne0 / 8 <= dc->props.limits.maxComputeWorkGroupInvocations && (uint64_t) ne0 / 8 <= dc->props.limits.maxComputeWorkGroupSize[0] &&
        w->ne[0] == ne0 && w->nb[0] == 4 && a->nb[0] == 4 && b->nb[0] == 4 && s->nb[0] == 4 && out->nb[0] == 4 &&
        f32_off(bind_of(dc, a)) % 4 == 0 && f32_off(bind_of(dc, b)) % 4 == 0 && f32_off(bind_of(dc, w)) % 4 == 0 &&
        f32_off(bind_of(dc, s)) % 4 == 0 && f32_off(bind_of(dc, out)) % 4 == 0 && !env_is("EMBER_VULKAN_NORM_C8", "0")) {
        return dispatch(sc, std::string(add ? "add_" : "") + "rms_norm_mul_c8", static_cast<uint32_t>(ne0 / 8), {a, b, w, s, out}, pc, 1);
    }
    const std::string shader = std::string(add ? "add_" : "") + "rms_norm" + (mul ? "_mul" : "") + (sg ? "_sg" : "");
    return dispatch_items(sc, shader, 256, {a, b, w, s, out}, pc, ember_nrows(norm));
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
    return dispatch_items(sc, "get_rows_" + wname(t), 64, {t, ids, node}, pc, ember_nrows(node), 1, true);
}

bool mmv_qx(const vk_device_ctx * dc, const ember_tensor * w);

// Whether MUL_MAT `node` (of x, or of SWIGLU `glu`'s gate and up) takes the decode fast path.
bool mmv_fast(const vk_device_ctx * dc, const ember_tensor * node, const ember_tensor * glu) {
    const ember_tensor * w = node->src[0];
    const ember_tensor * x = glu ? glu->src[0] : node->src[1];
    if (x->ne[1] > 4 || x->ne[1] * x->ne[2] * x->ne[3] > k_max_groups) return false;
    if (!mmv_fast_ok(w, x, bind_of(dc, w).resid, f32_off(bind_of(dc, x)))) return false;
    if (qx_only(w->type) && !mmv_qx(dc, w)) return false;
    if (!glu) return true;
    const ember_tensor * u = glu->src[1];
    for (int d = 0; d < 4; d++) {
        if (x->ne[d] != glu->ne[d] || u->ne[d] != glu->ne[d] || u->nb[d] != x->nb[d]) return false;
    }
    return f32_off(bind_of(dc, u)) % 4 == 0;
}

// Whether ROPE `rope` of VIEW `view` of MUL_MAT `mm` (decode fast path) can be done by the
// product as it writes (mul_mat_vec_q.comp with ROPE_OUT): mode 0, the view a reshape of the
// product's columns into heads, one column per token, no batch.
bool can_fuse_rope(const vk_device_ctx * dc, const ember_tensor * mm, const ember_tensor * view, const ember_tensor * rope) {
    if (mm->op != EMBER_OP_MUL_MAT || view->op != EMBER_OP_VIEW || rope->op != EMBER_OP_ROPE) return false;
    if (view->view_src != mm || view->view_offs != 0 || rope->src[0] != view || ember_nelements(rope) == 0) return false;
    if (rope->op_params[1] != EMBER_ROPE_NORMAL || rope->op_params[0] <= 0 || rope->op_params[0] % 2 != 0) return false;
    if (!mmv_fast(dc, mm, nullptr) || mm->ne[2] != 1 || mm->ne[3] != 1 || mm->src[1]->ne[2] != 1 || mm->src[1]->ne[3] != 1) return false;
    const int64_t hd = view->ne[0];
    if (hd % 2 != 0 || view->ne[0] * view->ne[1] != mm->ne[0] || view->ne[2] != mm->ne[1] || view->ne[3] != 1) return false;
    if (view->nb[1] != (size_t) hd * 4 || view->nb[2] != mm->nb[1] || !same_shape(rope, view)) return false;
    if (rope->nb[0] != 4 || rope->nb[1] % 4 != 0 || rope->nb[2] % 4 != 0) return false;
    const ember_tensor * pos = rope->src[1];
    return pos->ne[0] == mm->ne[1] && pos->nb[0] % 4 == 0;
}

// Whether SET_ROWS `set` stores `vals` (the result of decode MUL_MAT `mm`, or the ROPE of a
// view of it) as they are, whole columns into whole rows of an F16 cache, so that the product
// can write the cache itself (mul_mat_vec_q.comp with KV_OUT): the K and V projections of a
// decode step. `vals` is `mm`, or a VIEW of ROPE `rope` flattening its heads back into columns.
// EMBER_VULKAN_FUSE_KV=0 keeps the SET_ROWS apart (to compare; read at each recording).
bool can_fuse_kv(const vk_device_ctx * dc, const ember_tensor * mm, const ember_tensor * rope, const ember_tensor * vals,
                 const ember_tensor * set) {
    if (env_is("EMBER_VULKAN_FUSE_KV", "0")) return false;
    if (set->op != EMBER_OP_SET_ROWS || set->type != EMBER_TYPE_F16 || set->src[1] != vals || ember_nelements(set) == 0) return false;
    if (!mmv_fast(dc, mm, nullptr) || mm->ne[0] % 2 != 0 || mm->ne[2] != 1 || mm->ne[3] != 1) return false;
    const ember_tensor * x = mm->src[1];
    if (x->ne[2] != 1 || x->ne[3] != 1) return false;
    if (rope) {
        if (vals->op != EMBER_OP_VIEW || vals->view_src != rope || vals->view_offs != 0) return false;
        if (rope->nb[1] != (size_t) rope->ne[0] * 4 || rope->nb[2] != rope->nb[1] * (size_t) rope->ne[1]) return false;
        if (vals->ne[0] != mm->ne[0] || vals->ne[1] != mm->ne[1] || vals->nb[1] != rope->nb[2]) return false;
    } else if (vals != mm) {
        return false;
    }
    // Whole columns into whole cache rows, rows and the cache on 4 bytes (F16 pairs as words).
    if (set->ne[0] != mm->ne[0] || set->ne[2] != 1 || set->ne[3] != 1 || set->nb[0] != 2) return false;
    if (set->nb[1] % 4 != 0 || bind_of(dc, set).resid % 4 != 0) return false;
    const ember_tensor * idx = set->src[2];
    return idx->ne[0] == mm->ne[1] && idx->nb[0] % 4 == 0 && vals->ne[2] == 1 && vals->ne[3] == 1;
}

// The decode kernels' variant part of a shader name (vulkan.cmake).
std::string name_variant(const ember_tensor * glu, const ember_tensor * rope, const ember_tensor * glu_out, const ember_tensor * kv,
                         const ember_tensor * nadd) {
    return std::string(glu ? "swiglu_" : rope ? "rope_" : glu_out ? "glu_" : nadd ? "norm_" : "") + (kv ? "kv_" : "");
}

// mul_mat_vec_q.comp QX: the longest x row (QX_MAXK) and the shared memory it takes, rounded up.
constexpr uint64_t k_qx_maxk   = k_vk_xq_maxk;
constexpr uint32_t k_qx_shared = 32768;

// Whether a decode product (mmv_fast() holds) of weights w goes to the QX kernels: x quantized
// to 8 bits per workgroup and integer products (mul_mat_vec_q.comp), the default for Q4_0 and
// Q4_K and Q8_0 where the device has subgroup arithmetic (the shaders' reductions) and the shared
// memory, with the byte dot products in single instructions where it has integer dot products
// (H200 tg128: 8B Q4_0 149 -> 167 t/s, Q4_K_M 121 -> 137..149, 1B Q4_K_M 428 -> 562, Q4_0 571
// -> 587; Q8_0, since the kernel takes one unit per step: 8B 211.8 -> 263.8). Q6_K too, for
// the products that mul_mat_vec_q6s.comp does not take (record_mul_mat asks mmv_q6s() first):
// the fused ones (Q4_K_M's V product with its cache write), several columns (H200, 1B Q4_K_M
// tg128: 853.0 -> 885.6 t/s against the small-unit kernel; for the output matrix, before
// q6s, QX measured slower: 8B Q4_0 208.9 -> 203.8 t/s). EMBER_VULKAN_MMV_Q6_K=qq|units: Q6_K
// on those float kernels instead.
// EMBER_VULKAN_MMV_QX=0: the float kernels for all; =all: QX for Q6_K whatever
// EMBER_VULKAN_MMV_Q6_K says; =nodot: as all, the dot products unpacked (read at each recording).
bool mmv_qx(const vk_device_ctx * dc, const ember_tensor * w) {
    if (planar(w)) return false;
    const bool all = env_is("EMBER_VULKAN_MMV_QX", "all") || env_is("EMBER_VULKAN_MMV_QX", "nodot");
    const bool q6  = all || (!env_is("EMBER_VULKAN_MMV_Q6_K", "qq") && !env_is("EMBER_VULKAN_MMV_Q6_K", "units"));
    return (w->type == EMBER_TYPE_Q4_0 || w->type == EMBER_TYPE_Q4_K || w->type == EMBER_TYPE_Q8_0 || qx_only(w->type) ||
            (q6 && w->type == EMBER_TYPE_Q6_K)) &&
           dc->subgroup_arith &&
           (uint64_t) w->ne[0] <= k_qx_maxk && dc->props.limits.maxComputeSharedMemorySize >= k_qx_shared &&
           !env_is("EMBER_VULKAN_MMV_QX", "0");
}

// Whether the QX product `node` (x one column, not made by a fused SWIGLU) reads x quantized
// beforehand (quantize_x.comp: once per x for every product that reads it, the QX_PRE
// kernels) rather than quantizing it in each workgroup. EMBER_VULKAN_MMV_QX_PRE=0: never
// (read at each recording).
// Whether decode MUL_MAT `node`, unfused (no ROPE, cache write, GLU or norm with it), takes the
// Q6_K kernel that stages rows through shared memory (mul_mat_vec_q6s.comp): Q6_K rows of a
// multiple of 8 super-blocks on 16 bytes, one column of x, quantized beforehand (a QX_PRE
// slot), on a device with subgroup arithmetic: Q6_K weights left in the GGUF layout (not
// converted at upload, vk-repack.h: EMBER_VULKAN_REPACK=0, tensors not flagged as weights, no
// host memory for the conversion). The output matrix: H200 1B decode 143 us per token by the QQ
// kernel (1.5 TB/s), 87.5 by this one, 59.1 by the planar layout's (mmv_q6p()).
// EMBER_VULKAN_MMV_Q6_K=qq|units: the QQ | 256-weight-unit kernels instead (read at each recording).
bool mmv_q6s(const vk_device_ctx * dc, const ember_tensor * node) {
    if (node->op != EMBER_OP_MUL_MAT) return false;
    const ember_tensor * w = node->src[0];
    const ember_tensor * x = node->src[1];
    return w->type == EMBER_TYPE_Q6_K && w->ne[0] % 2048 == 0 && (uint64_t) w->ne[0] <= k_vk_xq_maxk && w->nb[1] % 16 == 0 &&
           w->ne[2] == 1 && w->ne[3] == 1 && bind_of(dc, w).resid % 16 == 0 && ember_nrows(x) == 1 && x->nb[0] == 4 &&
           dc->subgroup_arith && mmv_fast(dc, node, nullptr) && !env_is("EMBER_VULKAN_MMV_Q6_K", "qq") &&
           !env_is("EMBER_VULKAN_MMV_Q6_K", "units");
}

// Whether decode MUL_MAT `node` takes mul_mat_vec_q6p.comp: weights in the planar Q6_K layout
// (vk-repack.h; rows on 16 bytes), one column of x on 16 bytes, quantized beforehand (a QX_PRE
// slot), on a device with subgroup arithmetic. Other products of such weights (several
// columns, prefill) take the dequantizing kernels' "q6_kp" variants; none is fused.
bool mmv_q6p(const vk_device_ctx * dc, const ember_tensor * node) {
    if (node->op != EMBER_OP_MUL_MAT) return false;
    const ember_tensor * w = node->src[0];
    const ember_tensor * x = node->src[1];
    return planar(w) && (uint64_t) w->ne[0] <= k_vk_xq_maxk && w->nb[1] % 16 == 0 && w->ne[2] == 1 && w->ne[3] == 1 &&
           bind_of(dc, w).resid % 16 == 0 && ember_nrows(x) == 1 && x->nb[0] == 4 && f32_off(bind_of(dc, x)) % 4 == 0 &&
           dc->subgroup_arith && !env_flag("EMBER_VULKAN_MMV_GENERIC");
}

bool mmv_qx_pre(const vk_device_ctx * dc, const ember_tensor * node) {
    if (node->op != EMBER_OP_MUL_MAT || env_is("EMBER_VULKAN_MMV_QX_PRE", "0")) return false;
    const ember_tensor * x = node->src[1];
    return ember_nrows(x) == 1 && x->nb[0] == 4 &&
           (mmv_q6p(dc, node) || (mmv_fast(dc, node, nullptr) && (mmv_qx(dc, node->src[0]) || mmv_q6s(dc, node))));
}

// quantize_x.comp: x (one row of k floats) into slot `slot` of the stream's quantized rows.
ember_status record_quantize_x(vk_stream_ctx * sc, const ember_tensor * x, int32_t slot) {
    push pc;
    pc.u(x->ne[0]).u(f32_off(bind_of(sc->dc, x)));
    sc->n_xq++;
    return dispatch(sc, "quantize_x", 256, {x}, pc, static_cast<uint32_t>((x->ne[0] / 4 + 255) / 256), 1, 1, false, 0, 0, 4, -1,
                    slot);
}

// The QX decode product (record_mul_mat decided it; its arguments as there, the push
// constants made). Invocations per row: 32 (a subgroup on NVIDIA: rows summed by subgroupAdd);
// 2 rows each for Q4_0 and Q8_0, 1 for Q4_K (every x load from shared memory serves the rows;
// GLU: row r of gate and of up; ROPE, KV: 2); workgroups of 128 (the x quantization of each
// workgroup is shared by its rows), smaller while there would be fewer than 256 of them (small
// matrices: K, V). Switches (read at each recording, to compare in one process):
// EMBER_VULKAN_MMV_QX_ROWS=1|2 (rows per invocation), EMBER_VULKAN_MMV_QX_WG=64|128|256 (that
// workgroup size), EMBER_VULKAN_MMV_QX_LPR=16..256 (invocations per row).
ember_status record_mul_mat_qx(vk_stream_ctx * sc, const std::string & variant, const ember_tensor * w,
                               const ember_tensor * x, const ember_tensor * out, const push & pc, const ember_tensor * glu,
                               const ember_tensor * wu, const ember_tensor * pos, const ember_tensor * ff, const ember_tensor * idx,
                               const ember_tensor * res, const ember_tensor * nw, const ember_tensor * nadd, const ember_tensor * nmul,
                               int32_t cnt_slot, int64_t cols) {
    vk_device_ctx * dc  = sc->dc;
    const long      lpe = env_long("EMBER_VULKAN_MMV_QX_LPR", 0);
    // Q4_0: 64 (two subgroups per row on NVIDIA), the others 32 (H200, 8B tg128 with the norm
    // unfused: Q4_0 252.1 -> 259.6 t/s with 64 for every product, Q4_K_M 201.8 -> 197.1).
    // INT4: as Q4_0 (5 words per unit); FP8 and NF4 as Q8_0 (9, 11).
    const bool      q4  = w->type == EMBER_TYPE_Q4_0 || int4_type(w->type);
    uint32_t        lpr = lpe == 16 || lpe == 32 || lpe == 64 || lpe == 128 || lpe == 256 ? (uint32_t) lpe : q4 ? 64 : 32;
    // Long rows (the FFN down product: 256 units of 8192 in the 1B shape, 448 of 14336 in
    // the 8B) take more invocations, up to 256 (the workgroup), until each has at most 2 units:
    // with one unit per step each invocation has about one load in flight, and 4 or 7 of them
    // one after another left the down product latency-bound (H200, 8B Q4_0: 15.2 us per layer,
    // 2.2 TB/s). EMBER_VULKAN_MMV_QX_LPR=16..256 fixes it instead.
    const uint64_t  nu_row = (uint64_t) w->ne[0] / (w->type == EMBER_TYPE_NF4 ? 64 : 32);  // the shader's units (QX_UW)
    // Not Q4_K, whose units share their super-block's header (H200, 8B Q4_K_M tg128: 278.3
    // t/s this way, 289.4 with 32 per row; growing only its FFN down rows, of 256 units or
    // more, to at most 2 or 4 units per invocation: 291.5, 295.5 against 296.1).
    while (lpe == 0 && w->type != EMBER_TYPE_Q4_K && lpr < 256 && nu_row > 2ull * lpr) lpr *= 2;
    const long      wge = env_long("EMBER_VULKAN_MMV_QX_WG", 0);
    // Q4_K (12 words per unit in registers) 1 row, the others 2 (H200, 8B tg128 with 256-wide
    // workgroups: Q4_0 164 vs 159 t/s with 1 row, Q4_K_M 137 vs 145).
    // Q6_K (18 words per unit) 1 row too.
    const bool      r1  = env_is("EMBER_VULKAN_MMV_QX_ROWS", "1") ||
                    ((w->type == EMBER_TYPE_Q4_K || w->type == EMBER_TYPE_Q6_K) && !env_is("EMBER_VULKAN_MMV_QX_ROWS", "2"));
    uint32_t        nr  = r1 && variant != "glu_" ? 1 : 2;
    if (variant.find("rope_") != std::string::npos || variant.find("kv_") != std::string::npos) nr = 2;  // (even, odd) row pairs
    const uint32_t rows_per_inv = variant == "glu_" ? 1 : nr;  // output rows
    const auto     groups       = [&](uint32_t g) { return (w->ne[1] + g / lpr * rows_per_inv - 1) / (g / lpr * rows_per_inv); };
    // 128 (H200, 8B tg128: Q4_0 172 vs 164 t/s with 256, Q4_K_M 149 vs 137); 256 for Q4_0 since
    // the kernel takes one unit per step (8B: 322.5 -> 331.3).
    const uint32_t wg0          = q4 ? 256 : 128;
    uint32_t       wg           = (wge == 64 || wge == 128 || wge == 256) ? std::max<uint32_t>((uint32_t) wge, lpr) : std::max(wg0, lpr);
    while (wge == 0 && wg / 2 >= std::max<uint32_t>(lpr, 64) && (uint64_t) groups(wg) * (uint64_t) cols < 256) wg /= 2;
    // NORM_OUT: the last workgroup holds the whole row, at most 8 vec4 per invocation.
    while (nadd && wg < 256 && (uint64_t) w->ne[1] > 32ull * wg) wg *= 2;
    if (nadd && (uint64_t) w->ne[1] > 32ull * wg) return EMBER_ERR_INTERNAL;  // the planner checked it
    const bool        dp   = dc->idot && !env_is("EMBER_VULKAN_MMV_QX", "nodot");
    // x quantized beforehand into the stream's slot (the planner's quantize_x dispatch).
    const int32_t     xs   = glu || cols != 1 ? -1 : sc->xq_slot;
    const std::string name = (xs >= 0 ? "mul_mat_vec_qxp_" : "mul_mat_vec_qx_") + variant + tname(w->type) + (dp ? "_dp" : "");
    const uint64_t    ng   = groups(wg);
    // Units per invocation and step (QX_U): 1, so that the kernel takes few registers and the
    // multiprocessors hold many workgroups, whose loads are then in flight together (H200,
    // 8B tg128: Q4_0 280.2 -> 320.5 t/s, Q4_K_M 219.7 -> 271.3 with 1 instead of 4; 2: 305.9,
    // 253.5; the gate + up product 55 -> 38 registers). EMBER_VULKAN_MMV_QX_U=2|4|8 (read at
    // each recording).
    const long        ue   = env_long("EMBER_VULKAN_MMV_QX_U", 0);
    const uint32_t    qxu  = ue == 2 || ue == 4 || ue == 8 ? (uint32_t) ue : 1;
    if (nadd) {
        return dispatch_items(sc, name, wg, {w, x, out, res, nw, nadd, nmul}, pc, ng, 1, false, lpr, nr, 4, cnt_slot, xs, qxu);
    }
    if (idx) {
        return dispatch_items(sc, name, wg, {w, x, out, pos ? pos : idx, ff ? ff : pos ? pos : idx, idx, idx}, pc, ng,
                              static_cast<uint32_t>(cols), true, lpr, nr, 6, -1, xs, qxu);
    }
    const ember_tensor * b3 = glu ? glu->src[1] : wu ? wu : pos ? pos : out;
    return dispatch_items(sc, name, wg, {w, x, out, b3, ff ? ff : pos ? pos : out}, pc, ng, static_cast<uint32_t>(cols), false, lpr, nr,
                          4, -1, xs, qxu);
}

// The Q6_K product `node` by mul_mat_vec_q6p.comp (the planar layout; x in the stream's slot
// xq_slot): KS row groups of 32 invocations per row (one per segment, at most 8), ROWS
// consecutive rows per row group (EMBER_VULKAN_MMV_Q6P_ROWS, default 4: H200, output matrix per
// token with 2 / 4 / 8: 1B 59.9 / 59.1 / 63.6 us, 8B 117.3 / 107.6 / 115.2).
ember_status record_mul_mat_q6p(vk_stream_ctx * sc, const ember_tensor * node) {
    vk_device_ctx *      dc = sc->dc;
    const ember_tensor * w  = node->src[0];
    push                 pc;
    pc.u(w->ne[0]).u(w->ne[1]).u(bind_of(dc, w).resid).u(w->nb[1]).u(f32_off(bind_of(dc, node)));
    const uint64_t nseg  = (uint64_t) w->ne[0] / 2048;
    const uint32_t ks    = (uint32_t) std::min<uint64_t>(nseg, 8);
    const long     re    = env_long("EMBER_VULKAN_MMV_Q6P_ROWS", 0);
    const uint32_t rw    = re >= 1 && re <= 8 ? (uint32_t) re : 4;
    const uint32_t slots = ks >= 4 ? 1 : 4 / ks;
    const uint32_t wg = 32 * ks * slots, rows = slots * rw;
    const bool     dp = dc->idot && !env_is("EMBER_VULKAN_MMV_QX", "nodot");
    return dispatch_items(sc, dp ? "mul_mat_vec_q6p_dp" : "mul_mat_vec_q6p", wg, {w, node->src[1], node}, pc,
                          (w->ne[1] + rows - 1) / rows, 1, false, rw, ks, 4, -1, sc->xq_slot);
}

// The Q6_K product `node` by mul_mat_vec_q6s.comp (mmv_q6s() holds; x in the stream's slot
// xq_slot): row groups of 32 invocations, 4 per workgroup. Rows of one 8-super-block segment
// (the 1B output matrix): 4 consecutive rows per row group (H200, 1B Q4_0 tg128: 950.4 / 978.7
// / 994.9 t/s with 2 / 1 / 4, 16-block segments); 2 or 3 segments (8B output): 2 rows; longer
// rows (FFN down, 4 or 7 segments) dealt among the 4 row groups of a workgroup (KS), where one
// row group taking every segment in turn measured 13.9 us per 1B Q4_K_M down product (1 TB/s).
// EMBER_VULKAN_MMV_Q6_K_ROWS=1|2|4|8 and EMBER_VULKAN_MMV_Q6_K_SPLIT=1|2|4 instead (read at
// each recording; a split of 2 or 4 takes 1 row per row group unless both are set; 8 rows measured slower: 1B
// output 107.6 against 104.5 us, 8B 199.2 against 192.0). A row group of rows of its own (no
// split) waits at each step for its own subgroup only, not for the workgroup's other row
// groups, where subgroups are 32 wide (H200, EMBER_VULKAN_PROFILE=1: 1B output 100.7 us
// instead of 104.5, 8B 185.0 instead of 192.0); EMBER_VULKAN_MMV_Q6_K_SYNC=workgroup: the
// workgroup barrier always.
ember_status record_mul_mat_q6s(vk_stream_ctx * sc, const ember_tensor * node) {
    vk_device_ctx *      dc = sc->dc;
    const ember_tensor * w  = node->src[0];
    push                 pc;
    pc.u(w->ne[0]).u(w->ne[1]).u(bind_of(dc, w).resid).u(w->nb[1]).u(f32_off(bind_of(dc, node)));
    pc.u(env_is("EMBER_VULKAN_MMV_Q6_K_SYNC", "workgroup") ? 0 : 1);  // sg_sync (the shader checks KS and the subgroup size)
    const uint64_t nseg = (uint64_t) w->ne[0] / 2048;  // the shader's 8-super-block segments
    const long     re   = env_long("EMBER_VULKAN_MMV_Q6_K_ROWS", 0);
    const long     se   = env_long("EMBER_VULKAN_MMV_Q6_K_SPLIT", 0);
    const uint32_t ks   = se == 1 || se == 2 || se == 4 ? (uint32_t) se : nseg >= 4 ? 4 : 1;
    uint32_t       rw   = re == 1 || re == 2 || re == 4 || re == 8 ? (uint32_t) re : nseg >= 2 ? 2 : 4;
    if (ks > 1 && re == 0) rw = 1;  // (both set: a split of rows of RW per row group)
    const uint32_t wg = 128, rows = wg / 32 / ks * rw;
    const bool     dp = dc->idot && !env_is("EMBER_VULKAN_MMV_QX", "nodot");
    // XH: x loaded once per row group where each one's steps read one x (a row group's share of
    // a row is one segment); EMBER_VULKAN_MMV_Q6_K_XH=0: at every step.
    const uint32_t xh = (nseg + ks - 1) / ks == 1 && !env_is("EMBER_VULKAN_MMV_Q6_K_XH", "0") ? 1 : 0;
    return dispatch_items(sc, dp ? "mul_mat_vec_q6s_dp" : "mul_mat_vec_q6s", wg, {w, node->src[1], node}, pc,
                          (w->ne[1] + rows - 1) / rows, 1, false, rw, ks, 4, -1, sc->xq_slot, xh);
}

// glu: the SWIGLU whose result is x, computed as the product reads it (mmv_fast() holds).
// rope: the ROPE of (a view of) the result, done as it is written (can_fuse_rope() holds).
// glu_out: the SWIGLU of `node` (the gate product) and another product of the same x (up),
// written by one dispatch that computes both (can_fuse_glu() holds).
// kv: the SET_ROWS that stores the result (rope's, when given) into an F16 cache, done by the
// product itself (can_fuse_kv() holds).
// nadd, nnorm, nmul: the residual ADD of the result, its RMS_NORM and the MUL by the norm
// weight, done by the product (can_fuse_mm_norm() holds; the counter word cnt_slot).
ember_status record_mul_mat(vk_stream_ctx * sc, ember_tensor * node, const ember_tensor * glu = nullptr,
                            const ember_tensor * rope = nullptr, const ember_tensor * glu_out = nullptr,
                            const ember_tensor * kv = nullptr, const ember_tensor * nadd = nullptr,
                            const ember_tensor * nnorm = nullptr, const ember_tensor * nmul = nullptr, int32_t cnt_slot = -1) {
    vk_device_ctx *      dc = sc->dc;
    const ember_tensor * w  = node->src[0];
    const ember_tensor * wu = glu_out ? glu_out->src[1]->src[0] : nullptr;  // the up weights
    const ember_tensor * x  = glu ? glu->src[0] : node->src[1];
    const int64_t        m  = x->ne[1];
    const int64_t        nbatch = x->ne[2] * x->ne[3];
    push                 pc;
    pc.u(w->ne[0]).u(w->ne[1]).u(m).u(x->ne[2]);
    pc.u(bind_of(dc, w).resid).u(w->nb[1]).u(w->nb[2]).u(w->nb[3]);
    pc.u(f32_off(bind_of(dc, x))).u(x->nb[1] / 4).u(x->nb[2] / 4).u(x->nb[3] / 4);
    const ember_tensor * out = kv ? kv : rope ? rope : glu_out ? glu_out : node;
    if (kv) pc.u(bind_of(dc, kv).resid).u(kv->nb[1]).u(0).u(0);  // bytes; the row is idx[column]
    else if (nadd) pc.u(0).u(0).u(0).u(0);  // the stream's scratch rows, one column
    else if (rope) pc.u(f32_off(bind_of(dc, rope))).u(rope->nb[2] / 4).u(0).u(0);  // column = token
    else if (glu_out) pc.u(f32_off(bind_of(dc, glu_out))).u(glu_out->nb[1] / 4).u(glu_out->nb[2] / 4).u(glu_out->nb[3] / 4);
    else pc.u(f32_off(bind_of(dc, node))).u(node->nb[1] / 4).u(node->nb[2] / 4).u(node->nb[3] / 4);
    pc.u(x->ne[2] / w->ne[2]).u(x->ne[3] / w->ne[3]);
    pc.u(glu ? f32_off(bind_of(dc, glu->src[1])) : wu ? bind_of(dc, wu).resid : 0);
    if (glu_out) pc.u(sc->xq_out >= 0 ? 1 : 0);  // the result's quantized copy into slot xq_out (binding 5)
    const ember_tensor * pos = rope ? rope->src[1] : nullptr;
    const ember_tensor * ff  = rope ? rope->src[2] : nullptr;
    if (rope) {
        const int32_t n_rot = rope->op_params[0];
        pc.u(rope->ne[0]).u(rope->nb[1] / 4).u(n_rot);
        pc.u(f32_off(bind_of(dc, pos))).u(pos->nb[0] / 4);
        pc.u(ff ? f32_off(bind_of(dc, ff)) : 0).u(ff ? 1 : 0);
        pc.f(std::pow(ember_get_op_param_f32(rope, 2), -2.0f / (float) n_rot)).f(ember_get_op_param_f32(rope, 3));
    }
    const ember_tensor * res = nadd ? (nadd->src[0] == node ? nadd->src[1] : nadd->src[0]) : nullptr;  // the residual
    const ember_tensor * nw  = nmul ? nmul->src[1] : nullptr;
    if (nadd) {
        if (!nnorm || !nmul || cnt_slot < 0) return EMBER_ERR_INTERNAL;
        pc.u(f32_off(bind_of(dc, res))).u(f32_off(bind_of(dc, nw))).u(f32_off(bind_of(dc, nmul))).f(ember_get_op_param_f32(nnorm, 0));
        pc.u(f32_off(bind_of(dc, nadd)));
        // The normalized result's quantized copy into slot 0, which binding 2 runs on over.
        if (sc->xq_out > 0) return EMBER_ERR_INTERNAL;  // the planner gives these slot 0
        pc.u(sc->xq_out == 0 ? 1 : 0).u((sc->xq_base - sc->cnt_scratch) / 4);
    }
    const ember_tensor * idx = kv ? kv->src[2] : nullptr;
    if (kv) {
        pc.n = 28;  // after the ROPE words (unused without rope)
        pc.u(f32_off(bind_of(dc, idx))).u(idx->nb[0] / 4).u(kv->ne[1]);
    }
    const std::string t = wname(w);
    if (glu && !mmv_fast(dc, node, glu)) return EMBER_ERR_INTERNAL;  // the planner checked these
    if ((rope || glu_out || kv || nadd) && !mmv_fast(dc, node, nullptr)) return EMBER_ERR_INTERNAL;
    if (!glu && !rope && !glu_out && !kv && !nadd && sc->xq_slot >= 0 && mmv_q6p(dc, node)) return record_mul_mat_q6p(sc, node);
    if (!glu && !rope && !glu_out && !kv && !nadd && sc->xq_slot >= 0 && mmv_q6s(dc, node)) return record_mul_mat_q6s(sc, node);
    if (mmv_fast(dc, node, nullptr) || glu) {
        // Invocations per row (the shader's LPR): the largest power of two up to 32 with a
        // 256-weight unit for each, so that short rows (n_embd 2048: 8 units) idle no lanes.
        // Q4_0 by quarter blocks (8 weights, the unit of the QQ shaders): a subgroup of 32
        // per row. EMBER_VULKAN_MMV_Q4_0=units: the 256-weight units in registers instead.
        static const bool q4_units = env_is("EMBER_VULKAN_MMV_Q4_0", "units");
        // Q8_0 by quarter blocks and Q6_K by 16 weights likewise, unless
        // EMBER_VULKAN_MMV_Q8_0=units | EMBER_VULKAN_MMV_Q6_K=units (read at each recording,
        // so that one process can compare the two: the tests do).
        const bool qq = (w->type == EMBER_TYPE_Q4_0 && !q4_units) ||
                        (w->type == EMBER_TYPE_Q8_0 && !env_is("EMBER_VULKAN_MMV_Q8_0", "units")) ||
                        (w->type == EMBER_TYPE_Q6_K && !env_is("EMBER_VULKAN_MMV_Q6_K", "units"));
        // x quantized to 8 bits and integer products (QX, mmv_qx()).
        if (mmv_qx(dc, w)) return record_mul_mat_qx(sc, name_variant(glu, rope, glu_out, kv, nadd), w, x, out, pc, glu, wu, pos, ff,
                                         idx, res, nw, nadd, nmul, cnt_slot, m * nbatch);
        uint32_t lpr = 1;
        while (lpr < 32 && 2 * lpr * 256 <= (uint64_t) w->ne[0]) lpr *= 2;
        if (qq) lpr = 32;
        // Rows per invocation: 2 (each activation load serves both) except for Q8_0, whose
        // two 272-byte units would not fit the registers; EMBER_VULKAN_MMV_ROWS=1|2 overrides.
        static const uint32_t nr_env = [] {
            const char * v = std::getenv("EMBER_VULKAN_MMV_ROWS");
            return v && (v[0] == '1' || v[0] == '2') && v[1] == '\0' ? (uint32_t) (v[0] - '0') : 0u;
        }();
        // Q4_0 by quarter blocks: 1 (H100 profile, 1B decode: FFN down 40 -> 30 us, Q
        // projection 14 -> 11 us; the 256-weight-unit kernels keep 2: Q6_K output 236 -> 331 us with 1).
        // GLU: 1 output row per invocation while sizing the workgroups (then its 2 rows).
        uint32_t nr = glu_out ? 1 : nr_env ? nr_env : w->type == EMBER_TYPE_Q8_0 || qq ? 1 : 2;
        // The small-unit kernels of Q8_0 and Q6_K: 2 rows per invocation (each x load then
        // serves both) for matrices of many rows (the output: H200, 1B decode: Q6_K 166 ->
        // 146 us, Q8_0 136 -> 110 us), 1 for the others (enough invocations in flight).
        // EMBER_VULKAN_MMV_QQ_ROWS=1|2: always 1 | 2 (read at each recording).
        const uint64_t lanes32 = (uint64_t) w->ne[1] * (uint64_t) m * (uint64_t) nbatch * 32;
        if (qq && !glu_out && !nr_env && w->type != EMBER_TYPE_Q4_0 && !env_is("EMBER_VULKAN_MMV_QQ_ROWS", "1") &&
            (env_is("EMBER_VULKAN_MMV_QQ_ROWS", "2") || lanes32 >= 1024 * 1024)) {
            nr = 2;
        }
        // Small units, few long rows (FFN down: 2048 rows of 8192): more invocations per
        // row (64, 128: the row then spans subgroups, summed in shared memory), towards about
        // as many in flight as a large GPU holds (132 multiprocessors x 2048), as long as
        // each keeps 4 units or more. EMBER_VULKAN_MMV_LPR=32|64|128: the most per row
        // (read at each recording; 32: the kernel before). 64 by default (H200, 1B decode
        // tg128: Q4_0 470 / 543 / 512 t/s, Q8_0 500 / 561 / 546 with 32 / 64 / 128).
        if (qq) {
            const long     lmax   = env_long("EMBER_VULKAN_MMV_LPR", 64);
            const uint64_t units  = (uint64_t) w->ne[0] / (w->type == EMBER_TYPE_Q6_K ? 16 : 8);
            const uint64_t lanes  = (uint64_t) w->ne[1] * (uint64_t) m * (uint64_t) nbatch;
            while ((lmax == 64 || lmax == 128) && lpr < (uint32_t) lmax && lanes * lpr < 256 * 1024 && units >= 8ull * lpr) lpr *= 2;
        }
        // Workgroups enough to fill a large GPU (a few per multiprocessor of an H100's 132)
        // also for the small matrices of a decode step (K and V projections: 512 rows of
        // 2048): smaller workgroups (down to a subgroup, at least LPR), then 1 row per
        // invocation. EMBER_VULKAN_MMV_WG=32..128 fixes the workgroup size instead.
        static const uint32_t wg_env = [] {
            const long n = env_long("EMBER_VULKAN_MMV_WG", 0);
            return n == 32 || n == 64 || n == 128 ? (uint32_t) n : 0u;
        }();
        constexpr uint64_t target = 512;
        const uint64_t     cols   = (uint64_t) m * (uint64_t) nbatch;  // z groups
        auto               groups = [&](uint32_t g, uint32_t r) { return (w->ne[1] + g / lpr * r - 1) / (g / lpr * r) * cols; };
        uint32_t           wg     = wg_env ? std::max(wg_env, lpr) : 128;
        const uint32_t     wg_min = std::max<uint32_t>({lpr, 32, std::min<uint32_t>(dc->subgroup_size, 128)});
        while (!wg_env && wg / 2 >= wg_min && groups(wg, nr) < target) wg /= 2;
        if (!wg_env && !nr_env && nr == 2 && groups(wg, nr) < target) nr = 1;
        // NORM_OUT: the last workgroup holds the whole row, at most 8 vec4 per invocation.
        while (nadd && wg < 256 && (uint64_t) w->ne[1] > 32ull * wg) wg *= 2;
        if (nadd && (uint64_t) w->ne[1] > 32ull * wg) return EMBER_ERR_INTERNAL;  // the planner checked it
        if ((rope || kv) && wg == lpr) nr = 2;  // rows of a workgroup come in (even, odd) pairs
        if (glu_out) nr = 2;            // row r of gate and of up
        const uint32_t    rows_per_group = glu_out ? wg / lpr : wg / lpr * nr;
        // Subgroup reductions (SG_RED) in the small-unit kernels where the device has
        // subgroup arithmetic, unless EMBER_VULKAN_MMV_SG=0 (read at each recording).
        const bool        sg   = qq && dc->subgroup_arith && !env_is("EMBER_VULKAN_MMV_SG", "0");
        const std::string name = std::string(qq ? "mul_mat_vec_qq_" : "mul_mat_vec_q_") + name_variant(glu, rope, glu_out, kv, nadd) + t +
                                 (sg ? "_sg" : "");
        const ember_tensor * b3 = glu ? glu->src[1] : wu ? wu : pos ? pos : out;
        // Quarters per invocation and step (QQ): EMBER_VULKAN_MMV_QQ_U=1|2|4|8, else the shader's 4.
        const long     qe  = env_long("EMBER_VULKAN_MMV_QQ_U", 0);
        const uint32_t qqu = qq && (qe == 1 || qe == 2 || qe == 4 || qe == 8) ? (uint32_t) qe : 0;
        if (nadd) {
            // Bindings 3..7: the residual, the norm weight, the sum, the normalized result, the counter.
            return dispatch_items(sc, name, wg, {w, x, out, res, nw, nadd, nmul}, pc, (w->ne[1] + rows_per_group - 1) / rows_per_group, 1,
                                  false, lpr, nr, 4, cnt_slot, -1, qqu);
        }
        if (kv) {
            // Bindings 5 and 6: the row indices and this dispatch's error slot.
            return dispatch_items(sc, name, wg, {w, x, out, pos ? pos : idx, ff ? ff : pos ? pos : idx, idx, idx}, pc,
                                  (w->ne[1] + rows_per_group - 1) / rows_per_group, static_cast<uint32_t>(m * nbatch), true, lpr,
                                  nr, 6, -1, -1, qqu);
        }
        return dispatch_items(sc, name, wg, {w, x, out, b3, ff ? ff : pos ? pos : out}, pc,
                              (w->ne[1] + rows_per_group - 1) / rows_per_group, static_cast<uint32_t>(m * nbatch), false, lpr,
                              nr, 4, -1, -1, qqu);
    }
    if (m <= 4 && m * nbatch <= k_max_groups) {
        const bool     sg = dc->subgroup_arith;
        const uint32_t wg = sg ? std::max<uint32_t>(64, dc->subgroup_size) : 64;
        return dispatch_items(sc, "mul_mat_vec_" + t + (sg ? "" : "_nosg"), wg, {w, x, node}, pc, w->ne[1],
                              static_cast<uint32_t>(m * nbatch));
    }
    if (nbatch > k_max_groups || (m + 63) / 64 > k_max_groups) return EMBER_ERR_UNSUPPORTED;
    // 128 x 128 tiles where they are enough to fill a large GPU (two waves of an H100's 132
    // multiprocessors), else 64 x 64. EMBER_VULKAN_MM_BIG=0|1: always the small | big ones.
    static const int big_env = [] {
        const char * v = std::getenv("EMBER_VULKAN_MM_BIG");
        return v && (v[0] == '0' || v[0] == '1') && v[1] == '\0' ? v[0] - '0' : -1;
    }();
    const uint64_t big_tiles = (uint64_t) ((w->ne[1] + 127) / 128) * (uint64_t) ((m + 127) / 128) * (uint64_t) nbatch;
    if (dc->coopmat && w->type != EMBER_TYPE_F32) {
        // On the tensor cores (mul_mm_coop.comp, f16 products into f32; F32 weights stay on
        // mul_mm): 128 x 128 tiles where there are about as many as an H100 has
        // multiprocessors (132), else 64 x 64; EMBER_VULKAN_MM_BIG=0|1 as above.
        const bool     cbig = big_env >= 0 ? big_env == 1 : big_tiles >= 128;
        const uint32_t ct   = cbig ? 128 : 64;
        return dispatch(sc, (cbig ? "mul_mm_coop_" : "mul_mm_coop_s_") + t, 256, {w, x, node}, pc,
                        static_cast<uint32_t>((w->ne[1] + ct - 1) / ct), static_cast<uint32_t>((m + ct - 1) / ct),
                        static_cast<uint32_t>(nbatch));
    }
    const bool     big       = big_env >= 0 ? big_env == 1 : big_tiles >= 256;
    const uint32_t bt        = big ? 128 : 64;
    return dispatch(sc, (big ? "mul_mm_big_" : "mul_mm_") + t, 256, {w, x, node}, pc, static_cast<uint32_t>((w->ne[1] + bt - 1) / bt),
                    static_cast<uint32_t>((m + bt - 1) / bt), static_cast<uint32_t>(nbatch));
}

ember_status record_convert(vk_stream_ctx * sc, ember_tensor * node) {
    vk_device_ctx *      dc      = sc->dc;
    const bool           set     = node->op == EMBER_OP_SET_ROWS;
    const ember_tensor * src     = set ? node->src[1] : node->src[0];
    const ember_tensor * idx     = set ? node->src[2] : src;
    const binding        bd      = bind_of(dc, node);
    if (bd.resid % 4 != 0) return EMBER_ERR_INTERNAL;  // supports() checked the view offset
    if (!set && src->type == node->type && ember_is_contiguous(src) && ember_is_contiguous(node) &&
        ember_nbytes(src) == ember_nbytes(node)) {
        // The same bytes: a flat copy (copy.comp) of 16-byte units where it can, else words.
        const uint64_t bytes = ember_nbytes(node), soff = bind_of(dc, src).resid, doff = bd.resid;
        if (bytes % 4 == 0 && soff % 4 == 0 && bytes / 4 <= UINT32_MAX) {
            const uint32_t unit = bytes % 16 == 0 && soff % 16 == 0 && doff % 16 == 0 ? 16 : 4;
            push           cp;
            cp.u(static_cast<uint32_t>(bytes / unit)).u(static_cast<uint32_t>(soff / unit)).u(static_cast<uint32_t>(doff / unit));
            return dispatch(sc, unit == 16 ? "copy_x4" : "copy", 256, {src, node}, cp, stride_groups(bytes / unit, 256));
        }
    }
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
    // Keys past the last one the mask shows skipped (the shader scans the mask row first),
    // unless EMBER_VULKAN_ATTN_RANGE=0 (read at each recording, to compare).
    pc.u(env_is("EMBER_VULKAN_ATTN_RANGE", "0") ? 0 : 1);
    pc.u(sc->xq_out >= 0 ? 1 : 0);  // the output's quantized copy into slot xq_out (binding 5)
    // 256 invocations: 64 keys per tile scored by 4 invocations each (attn.comp), unless
    // EMBER_VULKAN_ATTN_KP=2|8 (128 | 32 keys per tile, to compare). Subgroup reductions where
    // the device has them, unless EMBER_VULKAN_ATTN_SG=0 (both read at each recording).
    const bool     sg  = dc->subgroup_arith && !env_is("EMBER_VULKAN_ATTN_SG", "0");
    const long     kpe = env_long("EMBER_VULKAN_ATTN_KP", 0);
    const uint32_t kp  = kpe == 2 || kpe == 8 ? (uint32_t) kpe : 4;
    return dispatch_items(sc, std::string(sg ? "attn_sg_" : "attn_") + tname(k->type) + "_" + tname(v->type), 256,
                          {q, k, v, mask ? mask : q, node}, pc, q->ne[1] * q->ne[2], 1, false, kp);
}

ember_status record_node(vk_stream_ctx * sc, ember_tensor * node) {
    if (node->op == EMBER_OP_VIEW || ember_nelements(node) == 0) return EMBER_OK;
    switch (node->op) {
        case EMBER_OP_ADD:
        case EMBER_OP_MUL:
        case EMBER_OP_SWIGLU:
        case EMBER_OP_SCALE:
            return record_eltwise(sc, node);
        case EMBER_OP_RMS_NORM: return record_rms_norm(sc, nullptr, node, nullptr);
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

//
// Planning a recording: fusion, dependency levels, barriers
//

// A byte range of a VkBuffer that a dispatch binds.
struct range {
    VkBuffer     buf;
    VkDeviceSize b, e;
};

bool overlap(const std::vector<range> & x, const std::vector<range> & y) {
    for (const range & p : x) {
        for (const range & q : y) {
            if (p.buf == q.buf && p.b < q.e && q.b < p.e) return true;
        }
    }
    return false;
}

// One dispatch of a recording: a node, or [ADD] RMS_NORM [MUL] fused.
struct unit {
    ember_tensor *     node = nullptr;  // not fused
    ember_tensor *     add = nullptr, *norm = nullptr, *mul = nullptr;
    ember_tensor *     glu = nullptr;   // SWIGLU fused into MUL_MAT `node`
    ember_tensor *     rope = nullptr;  // ROPE (of a view of) MUL_MAT `node` fused into it
    ember_tensor *     glu_out = nullptr;  // SWIGLU of MUL_MAT `node` (gate) and another (up), one dispatch
    ember_tensor *     kv = nullptr;       // SET_ROWS of MUL_MAT `node` (or of `rope`) into an F16 cache, fused
    bool               mm_norm = false;    // MUL_MAT `node`, then ADD `add`, RMS_NORM `norm`, MUL `mul`: one dispatch
    int32_t            cnt_slot = -1;      // its counter word (vk_stream_ctx::cnt_buf)
    const ember_tensor * xq_src = nullptr;  // quantize_x of this x into slot xq_slot (no node)
    int32_t            xq_slot = -1;        // that slot; for a QX_PRE product: the slot it reads
    int32_t            xq_out  = -1;        // the slot it writes its result's quantized copy to (qx_out_of())
    std::vector<range> rd, wr;          // what its bindings cover
    uint32_t           level    = 0;
    uint32_t           err_slot = 0;
    bool               err      = false;  // writes an error slot
};

range range_of(const vk_device_ctx * dc, const ember_tensor * t) {
    const binding b = bind_of(dc, t);
    return {b.buffer, b.offset, b.offset + b.range};
}

// Reads and writes of unit u (its bindings), err slot included.
void accesses(vk_stream_ctx * sc, unit & u) {
    const vk_device_ctx * dc = sc->dc;
    u.rd.clear();
    u.wr.clear();
    if (u.xq_src) {
        const VkDeviceSize o = sc->xq_base + (VkDeviceSize) u.xq_slot * k_vk_xq_slot;
        u.rd = {range_of(dc, u.xq_src)};
        u.wr = {{sc->cnt_buf, o, o + k_vk_xq_slot}};
        return;
    }
    if (u.mm_norm) {
        const ember_tensor * res = u.add->src[0] == u.node ? u.add->src[1] : u.add->src[0];
        u.rd = {range_of(dc, u.node->src[0]), range_of(dc, u.node->src[1]), range_of(dc, res), range_of(dc, u.mul->src[1])};
        const VkDeviceSize c = (VkDeviceSize) u.cnt_slot * sc->err_stride;
        u.wr = {range_of(dc, u.add), range_of(dc, u.mul), {sc->cnt_buf, c, c + 4},
                {sc->cnt_buf, sc->cnt_scratch, sc->cnt_scratch + k_vk_norm_max * 4}};
        return;
    }
    if (u.norm) {
        const ember_tensor * x = u.add ? u.add : u.norm;
        if (u.add) {
            u.rd.push_back(range_of(dc, u.add->src[0]));
            u.rd.push_back(range_of(dc, u.add->src[1]));
            u.wr.push_back(range_of(dc, u.add));
        } else {
            u.rd.push_back(range_of(dc, x->src[0]));
        }
        if (u.mul) u.rd.push_back(range_of(dc, u.mul->src[1]));
        u.wr.push_back(range_of(dc, u.mul ? u.mul : u.norm));
        return;
    }
    const ember_tensor * n = u.node;
    if (u.glu) {
        u.rd = {range_of(dc, n->src[0]), range_of(dc, u.glu->src[0]), range_of(dc, u.glu->src[1])};
        u.wr = {range_of(dc, n)};
        return;
    }
    if (u.glu_out) {
        u.rd = {range_of(dc, n->src[0]), range_of(dc, n->src[1]), range_of(dc, u.glu_out->src[1]->src[0])};
        u.wr = {range_of(dc, u.glu_out)};
        return;
    }
    if (u.kv) {
        u.rd = {range_of(dc, n->src[0]), range_of(dc, n->src[1]), range_of(dc, u.kv->src[2])};
        if (u.rope) u.rd.push_back(range_of(dc, u.rope->src[1]));
        if (u.rope && u.rope->src[2]) u.rd.push_back(range_of(dc, u.rope->src[2]));
        u.wr = {range_of(dc, u.kv), {sc->err_buf, u.err_slot * sc->err_stride, u.err_slot * sc->err_stride + 4}};
        return;
    }
    if (u.rope) {
        u.rd = {range_of(dc, n->src[0]), range_of(dc, n->src[1]), range_of(dc, u.rope->src[1])};
        if (u.rope->src[2]) u.rd.push_back(range_of(dc, u.rope->src[2]));
        u.wr = {range_of(dc, u.rope)};
        return;
    }
    if (n->op == EMBER_OP_VIEW || ember_nelements(n) == 0) return;  // records nothing
    for (const ember_tensor * s : n->src) {
        if (s) u.rd.push_back(range_of(dc, s));
    }
    u.wr.push_back(range_of(dc, n));
    if (u.err) u.wr.push_back({sc->err_buf, u.err_slot * sc->err_stride, u.err_slot * sc->err_stride + 4});
}

// SWIGLU `glu` of MUL_MAT `gate` and MUL_MAT `up` (the FFN's gate and up projections of one
// x, both on the decode fast path, weights of one type and layout), neither product read by
// anything else: one dispatch computes both and writes the SWIGLU (mul_mat_vec_q.comp with
// GLU_OUT). EMBER_VULKAN_FUSE_GLU=0 keeps them apart (to compare; read at each recording).
bool can_fuse_glu(const vk_device_ctx * dc, const ember_graph * g, const ember_tensor * gate, const ember_tensor * up,
                  const ember_tensor * glu) {
    if (env_is("EMBER_VULKAN_FUSE_GLU", "0")) return false;
    if (gate->op != EMBER_OP_MUL_MAT || up->op != EMBER_OP_MUL_MAT || glu->op != EMBER_OP_SWIGLU) return false;
    if (glu->src[0] != gate || glu->src[1] != up || gate->src[1] != up->src[1] || ember_nelements(glu) == 0) return false;
    const ember_tensor * wg = gate->src[0];
    const ember_tensor * wu = up->src[0];
    if (wg->type != wu->type || !same_shape(wg, wu) || !same_shape(gate, glu) || !same_shape(up, glu)) return false;
    for (int d = 1; d < 4; d++) {
        if (wg->nb[d] != wu->nb[d]) return false;
    }
    if (glu->nb[0] != 4 || !mmv_fast(dc, gate, nullptr) || !mmv_fast(dc, up, nullptr)) return false;
    return !ember_graph_read_elsewhere(g, gate, glu) && !ember_graph_read_elsewhere(g, up, glu);
}

// ADD (no broadcast) whose result feeds RMS_NORM: one pass writes the sum and normalizes it.
bool can_fuse_add_norm(const ember_tensor * add, const ember_tensor * norm) {
    return add->op == EMBER_OP_ADD && norm->op == EMBER_OP_RMS_NORM && norm->src[0] == add && ember_nelements(add) > 0 &&
           same_shape(add, add->src[0]) && same_shape(add, add->src[1]) && same_shape(add, norm);
}

// MUL of the norm's result by a weight row (broadcast over rows), the norm read by nothing else.
bool can_fuse_norm_mul(const ember_graph * g, const ember_tensor * norm, const ember_tensor * mul) {
    if (mul->op != EMBER_OP_MUL || mul->src[0] != norm || mul->src[1] == norm || !same_shape(mul, norm)) return false;
    const ember_tensor * w = mul->src[1];
    if (w->ne[0] != norm->ne[0]) return false;
    for (int d = 1; d < 4; d++) {
        if (w->ne[d] <= 0 || norm->ne[d] % w->ne[d] != 0) return false;
    }
    return !ember_graph_read_elsewhere(g, norm, mul);
}

// Whether the fused [ADD] RMS_NORM [MUL] `u` may write where it reads (the graph allocator
// gives a result the memory of operands that die at the node before it). Each workgroup does
// one row: pass 1 reads a and b and writes the sum s, pass 2 (after a workgroup barrier) reads
// s (or a) and w and writes d, each invocation the same elements in both passes. So a result
// may share memory with an operand laid out alike from the same address (an invocation then
// overwrites only what it has read), and d may lie anywhere over a and b with an ADD and one
// row (they are read only before the barrier); any other overlap is refused.
bool norm_alias_safe(const vk_device_ctx * dc, const unit & u) {
    if (!overlap(u.rd, u.wr)) return true;
    const ember_tensor * a = u.add ? u.add->src[0] : u.norm->src[0];
    const ember_tensor * b = u.add ? u.add->src[1] : nullptr;
    const ember_tensor * w = u.mul ? u.mul->src[1] : nullptr;
    const ember_tensor * d = u.mul ? u.mul : u.norm;
    auto alike = [](const ember_tensor * x, const ember_tensor * y) {
        if (x->buffer != y->buffer || x->data != y->data || !same_shape(x, y)) return false;
        for (int i = 0; i < 4; i++) {
            if (x->nb[i] != y->nb[i]) return false;
        }
        return true;
    };
    auto ok = [&](const ember_tensor * o, const ember_tensor * in, bool loose) {
        return !in || !overlap({range_of(dc, o)}, {range_of(dc, in)}) || alike(o, in) || loose;
    };
    const bool one_row = ember_nrows(u.norm) == 1 && u.add;
    if (u.add && !(ok(u.add, a, false) && ok(u.add, b, false) && ok(u.add, w, false))) return false;
    return ok(d, a, one_row) && ok(d, b, one_row) && ok(d, w, false) && (!u.add || ok(d, u.add, false));
}

// Whether MUL_MAT `mm` (decode fast path, one column), the residual ADD `add` of its result,
// that sum's RMS_NORM `norm` and the MUL `mul` by a norm weight row (the O or FFN down
// projection and the norm after it) can be one dispatch (mul_mat_vec_q.comp NORM_OUT): the
// product and the norm read by nothing else (the sum may be: it is written), every tensor
// one contiguous row. Opt-in, EMBER_VULKAN_FUSE_NORM=1 (read at each recording): the one
// workgroup that does the norm after the others is a serial tail on every O and down product,
// and apart they measured faster (H200, 8B tg128: Q4_0 245.0 -> 252.1 t/s; the CUDA backend
// found the same, PERF-NOTES.md session 6).
bool can_fuse_mm_norm(const vk_device_ctx * dc, const ember_graph * g, const ember_tensor * mm, const ember_tensor * add,
                      const ember_tensor * norm, const ember_tensor * mul) {
    if (!env_is("EMBER_VULKAN_FUSE_NORM", "1")) return false;
    if (mm->op != EMBER_OP_MUL_MAT || add->op != EMBER_OP_ADD || (add->src[0] == mm) == (add->src[1] == mm)) return false;
    if (!can_fuse_add_norm(add, norm) || !can_fuse_norm_mul(g, norm, mul)) return false;
    if (!mmv_fast(dc, mm, nullptr) || ember_nrows(mm) != 1 || ember_nrows(mm->src[1]) != 1 || ember_nrows(mm->src[0]) != mm->ne[0])
        return false;
    const ember_tensor * res = add->src[0] == mm ? add->src[1] : add->src[0];
    const ember_tensor * nw  = mul->src[1];
    // The last workgroup (256 invocations at most) holds the row as vec4, 8 per invocation.
    if (ember_nrows(nw) != 1 || ember_nrows(add) != 1 || mm->ne[0] % 4 != 0 || mm->ne[0] > k_vk_norm_max) return false;
    for (const ember_tensor * t : {res, nw, add, mul}) {
        if (t->nb[0] != 4 || bind_of(dc, t).resid % 16 != 0) return false;
    }
    return !ember_graph_read_elsewhere(g, mm, add);
}

// Whether the fused product + norm `u` may write where it reads. Every workgroup reads x and
// its rows of the weights, then writes its rows of the product into the stream's scratch rows
// (the MUL_MAT's own memory may lie over x: the graph allocator reuses operands that die at a
// node), then counts itself done; the last one reads the product, the residual and the norm
// weight, and writes the sum and the result only after all its loads. So the sum and the
// result may lie over anything read, except the norm weight, but not over each other.
bool mm_norm_alias_safe(const vk_device_ctx * dc, const unit & u) {
    const ember_tensor * w  = u.node->src[0];
    const ember_tensor * nw = u.mul->src[1];
    auto ov = [&](const ember_tensor * a, const ember_tensor * b) { return overlap({range_of(dc, a)}, {range_of(dc, b)}); };
    return !ov(u.add, nw) && !ov(u.add, w) && !ov(u.mul, nw) && !ov(u.mul, w) && !ov(u.add, u.mul);
}

// The tensor whose memory t reads as it is: t, or what t views from its start with the same
// elements, contiguous both (the attention output that the O projection reads as one row).
const ember_tensor * xq_root(const ember_tensor * t) {
    while (t->op == EMBER_OP_VIEW && t->view_src && t->view_offs == 0 && ember_is_contiguous(t) &&
           ember_is_contiguous(t->view_src) && ember_nelements(t) == ember_nelements(t->view_src)) {
        t = t->view_src;
    }
    return t;
}

// The result that unit u can write a quantized copy of itself (quantize_x.comp's layout, into
// a slot of the stream) as it makes it, or null: a standalone norm (its MUL's row; rms_norm.comp
// XQ_OUT), the fused product + norm (its normalized result; mul_mat_vec_q.comp NORM_OUT), ATTN
// (attn.comp) and, with EMBER_VULKAN_MMV_QX_OUT=1 only, the fused gate + up + SWIGLU (GLU_OUT),
// for one contiguous row of whole 32-value blocks. Read at each recording: unset or =noglu all
// but gate + up, =1 all, =0 none (every copy made by a quantize_x dispatch). The copy's code
// lives in "_xq" shader variants only (dispatch()).
// H200, 8B tg128 (3 reps, one call): unset (norms, ATTN) Q4_0 276.7 t/s, Q4_K_M 211.5; =1 268.1
// / 201.7 (gate + up's copy costs a memory barrier and an atomic at the end of every workgroup);
// =0 259.7 / 205.6. (Before the standalone norms wrote copies, =noglu lost to =0: 171 vs 211-216
// with the product + norm fusion on.)
const ember_tensor * qx_out_of(const vk_device_ctx * dc, const unit & u, bool glu) {
    if (u.norm && !u.mm_norm) {  // rms_norm.comp XQ_OUT: its MUL's one row in ys, in shared memory
        const ember_tensor * t = u.mul;
        if (!t || ember_nrows(t) != 1 || !ember_is_contiguous(t) || t->ne[0] % 32 != 0 || t->ne[0] > (int64_t) k_vk_norm_xq_maxk ||
            dc->props.limits.maxComputeSharedMemorySize < (k_vk_norm_xq_maxk + 768) * 4) {
            return nullptr;
        }
        return t;
    }
    const ember_tensor * t = u.mm_norm ? u.mul : u.glu_out ? (glu ? u.glu_out : nullptr)
                             : u.node && u.node->op == EMBER_OP_ATTN && !u.norm && !u.glu && !u.rope && !u.kv ? u.node : nullptr;
    if (!t || ember_nelements(t) == 0 || !ember_is_contiguous(t) || ember_nelements(t) % 32 != 0 ||
        ember_nelements(t) > (int64_t) k_vk_xq_maxk) {
        return nullptr;
    }
    if (t->op == EMBER_OP_ATTN) {  // one token, heads of whole blocks
        const ember_tensor * q = t->src[0];
        if (q->ne[2] != 1 || q->ne[3] != 1 || t->ne[0] % 32 != 0 || t->ne[0] != q->ne[0] || t->ne[1] != q->ne[1]) return nullptr;
        return t;
    }
    return ember_nrows(t) == 1 ? t : nullptr;
}

// A unit's kernel and, for products, the weight shape (profile and plan lines).
std::string unit_name(const unit & u) {
    if (u.xq_src) return "QUANTIZE_X " + std::to_string(u.xq_src->ne[0]);
    const ember_tensor * n    = u.norm && !u.mm_norm ? u.norm : u.node;
    std::string          name = std::string(ember_op_name(n->op));
    if (u.mm_norm) name += "+ADD+RMS_NORM+MUL";
    if (u.add && !u.mm_norm) name = "ADD+" + name;
    if (u.mul && !u.mm_norm) name += "+MUL";
    if (u.glu) name = "SWIGLU+" + name;
    if (u.rope) name += "+ROPE";
    if (u.glu_out) name += "+MUL_MAT+SWIGLU";
    if (u.kv) name += "+SET_ROWS";
    if (u.xq_out >= 0) name += "+QX";
    if (n->op == EMBER_OP_MUL_MAT) {
        name += " " + std::string(ember_type_get_name(n->src[0]->type)) + " " + std::to_string(n->src[0]->ne[0]) + "x" +
                std::to_string(n->src[0]->ne[1]) + (n->src[1]->ne[1] > 1 ? " m=" + std::to_string(n->src[1]->ne[1]) : "");
    }
    return name;
}

}  // namespace

ember_status ember_vk_record_range(vk_stream_ctx * sc, ember_graph * g, int32_t begin, int32_t end) {
    const bool        all_barriers = (sc->profile && !sc->profile_graph) || env_is("EMBER_VULKAN_BARRIERS", "all");
    static const bool no_fuse      = env_is("EMBER_VULKAN_FUSE", "0");
    // EMBER_VULKAN_PLAN=1: every dispatch of each recording, in order, with its dependency level.
    static const bool plan         = env_is("EMBER_VULKAN_PLAN", "1");
    sc->n_dispatches = sc->n_barriers = sc->n_fused = 0;
    sc->shaders.clear();

    // Units: nodes, fused where the fused kernel does the same work in one dispatch.
    std::vector<unit> units;
    units.reserve(static_cast<size_t>(end - begin));
    uint32_t next_slot = 0, next_cnt = 0;
    for (int32_t i = begin; i < end; i++) {
        unit           u;
        ember_tensor * n = g->nodes[i];
        // Keeps the fused unit u (nodes i .. last) when its memory check passed, else starts u
        // over for the next candidate.
        const auto keep = [&](bool ok, int32_t last) {
            if (!ok) {
                u = unit();
                return false;
            }
            sc->n_fused++;
            units.push_back(std::move(u));
            i = last;
            return true;
        };
        // MUL_MAT, the residual ADD of it, RMS_NORM, MUL (O or FFN down projection and the
        // next norm): one dispatch, whose last workgroup does the norm.
        if (!no_fuse && i + 3 < end &&
            can_fuse_mm_norm(sc->dc, g, n, g->nodes[i + 1], g->nodes[i + 2], g->nodes[i + 3])) {
            u.node     = n;
            u.add      = g->nodes[i + 1];
            u.norm     = g->nodes[i + 2];
            u.mul      = g->nodes[i + 3];
            u.mm_norm  = true;
            u.cnt_slot = static_cast<int32_t>(next_cnt++ % k_vk_cnt_slots);
            accesses(sc, u);
            if (keep(mm_norm_alias_safe(sc->dc, u), i + 3)) continue;
        }
        if (!no_fuse) {
            int32_t j = i;
            if (i + 1 < end && can_fuse_add_norm(n, g->nodes[i + 1])) {
                u.add = n;
                j     = i + 1;
            }
            ember_tensor * norm = g->nodes[j];
            if (norm->op == EMBER_OP_RMS_NORM && ember_nelements(norm) > 0) {
                ember_tensor * mul = j + 1 < end && can_fuse_norm_mul(g, norm, g->nodes[j + 1]) ? g->nodes[j + 1] : nullptr;
                if (u.add || mul) {
                    u.norm = norm;
                    u.mul  = mul;
                    accesses(sc, u);
                    if (keep(norm_alias_safe(sc->dc, u), j + (mul ? 1 : 0))) continue;
                }
            }
        }
        // MUL_MAT gate, MUL_MAT up, their SWIGLU (FFN gate and up): one dispatch.
        if (!no_fuse && i + 2 < end && can_fuse_glu(sc->dc, g, n, g->nodes[i + 1], g->nodes[i + 2])) {
            u.node    = n;
            u.glu_out = g->nodes[i + 2];
            accesses(sc, u);
            // Every workgroup reads all of x: the result may not be written over it.
            if (keep(!overlap(u.rd, u.wr), i + 2)) continue;
        }
        // SWIGLU read only by the matrix-vector product after it (FFN down): made as read.
        if (!no_fuse && n->op == EMBER_OP_SWIGLU && i + 1 < end && ember_nelements(n) > 0) {
            ember_tensor * mm = g->nodes[i + 1];
            if (mm->op == EMBER_OP_MUL_MAT && mm->src[1] == n && ember_nelements(mm) > 0 && mmv_fast(sc->dc, mm, n) &&
                !ember_graph_read_elsewhere(g, n, mm)) {
                u.node = mm;
                u.glu  = n;
                accesses(sc, u);
                // Every workgroup reads all of gate and up: the product may not be written
                // over them (the graph allocator may give it their memory once SWIGLU read them).
                if (keep(!overlap(u.rd, u.wr), i + 1)) continue;
            }
        }
        // MUL_MAT, its VIEW as heads, their ROPE, the VIEW of that as columns, its SET_ROWS into
        // an F16 cache (K projection); MUL_MAT and its SET_ROWS (V projection): written into
        // the cache by the product.
        if (!no_fuse && n->op == EMBER_OP_MUL_MAT) {
            int32_t        last = -1;
            ember_tensor * rope = nullptr;
            if (i + 4 < end && can_fuse_rope(sc->dc, n, g->nodes[i + 1], g->nodes[i + 2]) &&
                can_fuse_kv(sc->dc, n, g->nodes[i + 2], g->nodes[i + 3], g->nodes[i + 4]) && !ember_graph_read_elsewhere(g, n, g->nodes[i + 1]) &&
                !ember_graph_read_elsewhere(g, g->nodes[i + 1], g->nodes[i + 2]) && !ember_graph_read_elsewhere(g, g->nodes[i + 2], g->nodes[i + 3]) &&
                !ember_graph_read_elsewhere(g, g->nodes[i + 3], g->nodes[i + 4])) {
                last = i + 4;
                rope = g->nodes[i + 2];
            } else if (i + 1 < end && can_fuse_kv(sc->dc, n, nullptr, n, g->nodes[i + 1]) && !ember_graph_read_elsewhere(g, n, g->nodes[i + 1])) {
                last = i + 1;
            }
            if (last >= 0) {
                u.node     = n;
                u.rope     = rope;
                u.kv       = g->nodes[last];
                u.err      = true;
                u.err_slot = next_slot++ % k_vk_err_slots;
                accesses(sc, u);
                // Every workgroup reads all of x: the cache may not lie over it.
                if (keep(!overlap(u.rd, u.wr), last)) continue;
            }
        }
        // MUL_MAT, its VIEW as heads, their ROPE (Q and K projections): rotated as written.
        if (!no_fuse && n->op == EMBER_OP_MUL_MAT && i + 2 < end && can_fuse_rope(sc->dc, n, g->nodes[i + 1], g->nodes[i + 2]) &&
            !ember_graph_read_elsewhere(g, n, g->nodes[i + 1]) && !ember_graph_read_elsewhere(g, g->nodes[i + 1], g->nodes[i + 2])) {
            u.node = n;
            u.rope = g->nodes[i + 2];
            accesses(sc, u);
            // Every workgroup reads all of x: the result may not be written over it.
            if (keep(!overlap(u.rd, u.wr), i + 2)) continue;
        }
        u.node = n;
        if ((n->op == EMBER_OP_GET_ROWS || n->op == EMBER_OP_SET_ROWS) && ember_nelements(n) > 0) {
            u.err      = true;
            u.err_slot = next_slot++ % k_vk_err_slots;
        }
        accesses(sc, u);
        units.push_back(std::move(u));
    }

    // x quantized once for the QX_PRE products (mmv_qx_pre()): a quantize_x unit before the
    // first product of each x, into the next of the stream's slots in turn, and the slot read
    // by every product of that x (Q, K and V share one). The slot's range orders a unit that
    // takes it again after the readers of what it held before.
    // Where the unit that makes x can write that copy itself as it makes x (qx_out_of()), it
    // does, and no quantize_x unit is needed: the fused product + norm into slot 0 (bound with
    // its scratch rows), the others into the next slot in turn (then slots 1 ..).
    // EMBER_VULKAN_MMV_QX_OUT=0 (qx_out_of()): quantize_x units only, slots 0 .. in turn.
    sc->n_xq = 0;
    {
        const bool                        qx_glu = env_is("EMBER_VULKAN_MMV_QX_OUT", "1");
        const bool                        qx_out = !env_is("EMBER_VULKAN_MMV_QX_OUT", "0") && !env_is("EMBER_VULKAN_MMV_QX_OUT", "code");
        const uint32_t                    first  = qx_out ? 1 : 0;  // slots taken in turn
        std::vector<unit>                 with;
        std::vector<const ember_tensor *> held(k_vk_xq_slots, nullptr);  // the x each slot holds (xq_root())
        std::vector<const ember_tensor *> wanted;                          // the x of every QX_PRE product
        uint32_t                          next = 0;
        // (The FFN down product quantizing the SWIGLU's x in each of its workgroups, with no
        // quantize_x level before it, measured far slower on an H200: 1B Q4_0 tg128 893 against
        // 987 t/s, 8B 245 against 353; every workgroup reads and quantizes the whole x.)
        const auto is_pre = [&](const unit & u) {
            return u.node && u.node->op == EMBER_OP_MUL_MAT && !u.glu && mmv_qx_pre(sc->dc, u.node) &&
               (mmv_qx(sc->dc, u.node->src[0]) || (!u.rope && !u.kv && !u.glu_out && !u.mm_norm));  // (Q6_K: unfused only)
        };
        for (const unit & u : units) {
            if (qx_out && is_pre(u)) wanted.push_back(xq_root(u.node->src[1]));
        }
        const auto slot_range = [&](int32_t s) {
            const VkDeviceSize o = sc->xq_base + (VkDeviceSize) s * k_vk_xq_slot;
            return range{sc->cnt_buf, o, o + k_vk_xq_slot};
        };
        with.reserve(units.size() + 16);
        for (unit & u : units) {
            if (is_pre(u)) {
                const ember_tensor * x = u.node->src[1];
                int32_t              s = -1;
                for (uint32_t j = 0; j < k_vk_xq_slots; j++) {
                    if (held[j] == xq_root(x)) s = static_cast<int32_t>(j);
                }
                if (s < 0) {
                    s       = static_cast<int32_t>(first + next++ % (k_vk_xq_slots - first));
                    held[s] = xq_root(x);
                    unit q;
                    q.xq_src  = x;
                    q.xq_slot = s;
                    accesses(sc, q);
                    with.push_back(std::move(q));
                }
                u.xq_slot = s;
                u.rd.push_back(slot_range(s));
            }
            const ember_tensor * t = qx_out ? qx_out_of(sc->dc, u, qx_glu) : nullptr;
            // (A product + norm that reads slot 0 does not write it too.)
            if (t && std::find(wanted.begin(), wanted.end(), t) != wanted.end() && !(u.mm_norm && u.xq_slot == 0)) {
                const int32_t s = u.mm_norm ? 0 : static_cast<int32_t>(first + next++ % (k_vk_xq_slots - first));
                held[s]         = t;
                u.xq_out        = s;
                u.wr.push_back(slot_range(s));
                if (u.glu_out) u.wr.push_back({sc->cnt_buf, sc->xq_bcnt, sc->xq_bcnt + k_vk_xq_bcnt});
            }
            with.push_back(std::move(u));
        }
        units.swap(with);
    }

    // Levels: a unit runs after every earlier one it conflicts with (read after write, write
    // after write, write after read); units of one level run with no barrier between them.
    for (size_t j = 0; j < units.size(); j++) {
        unit & uj = units[j];
        if (all_barriers) {
            uj.level = static_cast<uint32_t>(j);
            continue;
        }
        for (size_t i = 0; i < j; i++) {
            const unit & ui = units[i];
            if (ui.level + 1 <= uj.level || ui.wr.empty()) continue;
            if (overlap(ui.wr, uj.rd) || overlap(ui.wr, uj.wr) || overlap(ui.rd, uj.wr)) uj.level = ui.level + 1;
        }
    }
    std::vector<uint32_t> order(units.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = static_cast<uint32_t>(i);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return units[a].level < units[b].level; });

    vk_recording * rc = sc->rec;
    rc->qnames.clear();
    if (sc->profile) {
        // (+ 1: the readback copies' end, EMBER_VULKAN_PROFILE=graph)
        const uint32_t need = static_cast<uint32_t>(units.size()) + 2;
        if (rc->qcap < need) {
            if (rc->qpool) vkDestroyQueryPool(sc->dc->dev, rc->qpool, nullptr);
            rc->qpool = VK_NULL_HANDLE;
            rc->qcap  = 0;
            VkQueryPoolCreateInfo qi{};
            qi.sType      = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
            qi.queryType  = VK_QUERY_TYPE_TIMESTAMP;
            qi.queryCount = need;
            EMBER_VK_CHECK(vkCreateQueryPool(sc->dc->dev, &qi, nullptr, &rc->qpool), "vkCreateQueryPool");
            rc->qcap = need;
        }
        vkCmdResetQueryPool(sc->cb, rc->qpool, 0, rc->qcap);
        vkCmdWriteTimestamp(sc->cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, rc->qpool, 0);
    }
    bool     pending = false;  // dispatches since the last barrier
    uint32_t level   = 0;
    // EMBER_VULKAN_MMV_QX_OUT=code: the units that could write a quantized copy of their result
    // (product + norm, gate + up, ATTN) on their "_xq" shader variants with the copy off, as
    // every decode step ran them before those variants were split off (commit b03c119): to
    // measure what that code costs the default path (read at each recording).
    const bool xq_code = env_is("EMBER_VULKAN_MMV_QX_OUT", "code");
    for (uint32_t k : order) {
        const unit & u = units[k];
        if (u.wr.empty()) continue;  // VIEW, empty
        if (pending && u.level != level) {
            VkMemoryBarrier mb{};
            mb.sType         = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
            mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
            mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
            vkCmdPipelineBarrier(sc->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0,
                                 nullptr, 0, nullptr);
            sc->n_barriers++;
        }
        level        = u.level;
        pending      = true;
        sc->err_slot = u.err_slot;
        sc->xq_slot  = u.xq_slot;
        sc->xq_out   = u.xq_out;
        sc->xq_code  = xq_code && !u.xq_src && (u.mm_norm || u.glu_out || (u.node && u.node->op == EMBER_OP_ATTN));
        const ember_status st = u.xq_src ? record_quantize_x(sc, u.xq_src, u.xq_slot)
                                : u.mm_norm ? record_mul_mat(sc, u.node, nullptr, nullptr, nullptr, nullptr, u.add, u.norm, u.mul, u.cnt_slot)
                                : u.norm  ? record_rms_norm(sc, u.add, u.norm, u.mul)
                                : u.glu || u.rope || u.glu_out || u.kv ? record_mul_mat(sc, u.node, u.glu, u.rope, u.glu_out, u.kv)
                                        : record_node(sc, u.node);
        sc->xq_slot = -1;
        sc->xq_out  = -1;
        sc->xq_code = false;
        if (st != EMBER_OK) return st;
        if (sc->profile && !sc->profile_graph) {
            vkCmdWriteTimestamp(sc->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, rc->qpool, static_cast<uint32_t>(rc->qnames.size()) + 1);
            rc->qnames.push_back(unit_name(u));
        }
        if (plan) std::fprintf(stderr, "ember: vulkan: plan: level %3u  %s\n", u.level, unit_name(u).c_str());
    }
    if (sc->profile_graph) {
        vkCmdWriteTimestamp(sc->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, rc->qpool, 1);
        rc->qnames.push_back("graph (" + std::to_string(sc->n_dispatches) + " dispatches, " + std::to_string(sc->n_barriers) +
                             " barriers)");
    }
    return EMBER_OK;
}
