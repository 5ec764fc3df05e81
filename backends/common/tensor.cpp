// Tensor descriptor helpers: op names, sizes, strides.
#include "tensor.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>

static const char * const k_op_names[EMBER_OP_COUNT] = {
#define X(NAME, NSRC) #NAME,
#include "ops.def"
#undef X
};

static const int k_op_n_src[EMBER_OP_COUNT] = {
#define X(NAME, NSRC) NSRC,
#include "ops.def"
#undef X
};

const char * ember_op_name(ember_op op) {
    if (op < 0 || op >= EMBER_OP_COUNT) return "UNKNOWN";
    return k_op_names[op];
}

int ember_op_n_src(ember_op op) {
    if (op < 0 || op >= EMBER_OP_COUNT) return 0;
    return k_op_n_src[op];
}

size_t ember_nbytes(const ember_tensor * t) {
    for (int i = 0; i < EMBER_MAX_DIMS; i++) {
        if (t->ne[i] <= 0) return 0;
    }
    const ember_type_traits * tr = ember_type_get_traits(t->type);
    if (!tr || tr->block_size <= 0) return 0;
    // Like ggml_nbytes: the first element's bytes plus the furthest stride reach, so strided
    // views report the span they touch.
    size_t nbytes;
    if (tr->block_size == 1) {
        nbytes = tr->type_size;
        for (int i = 0; i < EMBER_MAX_DIMS; i++) nbytes += (size_t) (t->ne[i] - 1) * t->nb[i];
    } else {
        // A row of a type with row groups (NF4, FP8_*_ROW) also holds its group headers.
        nbytes = tr->group_blocks > 0 ? ember_row_size(t->type, t->ne[0])
                                      : (size_t) (t->ne[0] / tr->block_size) * t->nb[0];
        for (int i = 1; i < EMBER_MAX_DIMS; i++) nbytes += (size_t) (t->ne[i] - 1) * t->nb[i];
    }
    return nbytes;
}

bool ember_is_contiguous(const ember_tensor * t) {
    const ember_type_traits * tr = ember_type_get_traits(t->type);
    if (!tr || tr->block_size <= 0) return false;
    if (t->nb[0] != tr->type_size) return false;
    // Dimensions of extent 1 have no meaningful stride.
    size_t expect = ember_row_size(t->type, t->ne[0]);  // headers included
    for (int i = 1; i < EMBER_MAX_DIMS; i++) {
        if (t->ne[i] != 1 && t->nb[i] != expect) return false;
        expect *= (size_t) t->ne[i];
    }
    return true;
}

namespace {
std::atomic<uint64_t> g_tensor_epoch{1};
}

uint64_t ember_tensor_epoch() { return g_tensor_epoch.load(std::memory_order_acquire); }
void     ember_tensor_epoch_bump() { g_tensor_epoch.fetch_add(1, std::memory_order_acq_rel); }

void ember_set_contiguous_strides(ember_tensor * t) {
    ember_tensor_epoch_bump();
    const ember_type_traits * tr = ember_type_get_traits(t->type);
    const int64_t blck = (tr && tr->block_size > 0) ? tr->block_size : 1;
    const size_t  size = tr ? tr->type_size : 0;
    t->nb[0] = size;
    t->nb[1] = tr && tr->group_blocks > 0 ? ember_row_size(t->type, t->ne[0]) : size * (size_t) (t->ne[0] / blck);
    for (int i = 2; i < EMBER_MAX_DIMS; i++) t->nb[i] = t->nb[i - 1] * (size_t) t->ne[i - 1];
}

void ember_set_name(ember_tensor * t, const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(t->name, sizeof(t->name), fmt, ap);
    va_end(ap);
}
