// Row conversion kernels: GET_ROWS (dequantize table rows), SET_ROWS (quantize rows into a
// cache), CPY (any type to any type). Type-specific work goes through the CPU kernel table
// (kernels.h: the active ISA's codecs, bit-identical to the traits' scalar ones).
// Every codec call converts exactly one row (n = ne[0]), never several rows at once: the
// types with row groups (NF4, FP8_*_ROW: ember_type_has_row_groups) keep headers inside each
// row, so their codecs only accept whole single rows. Keep it so when batching conversions.
#include <cstring>
#include <vector>

#include "cpu-ops.h"
#include "repack.h"
#include "kernels.h"  // the codecs: the active ISA's table (bit-identical to the traits' ones)

static inline int32_t read_i32(const ember_tensor * t, int64_t i0, int64_t i1, int64_t i2) {
    int32_t v;
    std::memcpy(&v, static_cast<const char *>(t->data) + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2], sizeof(v));
    return v;
}

//
// GET_ROWS: table [n_cols, n_rows] (any type with to_float), ids I32 [n, a, b] -> F32 [n_cols, n, a, b]
//
bool ember_cpu_supports_get_rows(const ember_tensor * dst) {
    const ember_type_traits * tr = ember_type_get_traits(dst->src[0]->type);
    return tr && tr->to_float && dst->src[1]->type == EMBER_TYPE_I32 && dst->type == EMBER_TYPE_F32;
}

void ember_cpu_get_rows(const ember_cpu_compute_params * p, ember_tensor * dst) {
    const ember_tensor *      table = dst->src[0];
    const ember_tensor *      ids   = dst->src[1];
    const ember_to_float_fn   to_float = ember_cpu_kernels()->of(table->type).to_float;
    const int64_t             n     = dst->ne[0];
    int64_t                   r0, r1;
    ember_cpu_split_rows(ember_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t ir = r0; ir < r1; ir++) {
        const int64_t i3 = ir / (dst->ne[1] * dst->ne[2]);
        const int64_t i2 = (ir / dst->ne[1]) % dst->ne[2];
        const int64_t i1 = ir % dst->ne[1];
        const int32_t id = read_i32(ids, i1, i2, i3);
        float *       y  = (float *) ember_cpu_row(dst, i1, i2, i3);
        if (id < 0 || id >= table->ne[1]) {
            std::memset(y, 0, n * sizeof(float));
            ember_cpu_set_error(p, EMBER_ERR_INTERNAL);
            continue;
        }
        if (table->flags & EMBER_TENSOR_FLAG_CPU_REPACKED) {  // a tied embedding table (repack.h)
            thread_local std::vector<uint8_t> row;
            row.resize(table->nb[1]);
            ember_cpu_unrepack_row(table->type, n, ember_cpu_row(table, id / EMBER_CPU_REPACK_ROWS * EMBER_CPU_REPACK_ROWS, 0, 0),
                                   id % EMBER_CPU_REPACK_ROWS, row.data());
            to_float(row.data(), y, n);
            continue;
        }
        to_float(ember_cpu_row(table, id, 0, 0), y, n);
    }
}

//
// SET_ROWS: dst [n, n_rows] (a view of src0), src1 F32 [n, m], src2 I32 [m]
//
bool ember_cpu_supports_set_rows(const ember_tensor * dst) {
    const ember_type_traits * tr = ember_type_get_traits(dst->type);
    return tr && tr->from_float && dst->src[0]->type == dst->type && dst->src[1]->type == EMBER_TYPE_F32 &&
           dst->src[2]->type == EMBER_TYPE_I32;
}

// Threads split the destination rows (row id % nth), not the source rows: each destination
// row has one writer, so repeated indices are race-free and the last one wins, as if serial.
void ember_cpu_set_rows(const ember_cpu_compute_params * p, ember_tensor * dst) {
    const ember_tensor *      rows = dst->src[1];
    const ember_tensor *      idx  = dst->src[2];
    const ember_from_float_fn from_float = ember_cpu_kernels()->of(dst->type).from_float;
    const int64_t             n    = dst->ne[0];
    for (int64_t i = 0; i < rows->ne[1]; i++) {
        const int32_t id = read_i32(idx, i, 0, 0);
        if (id < 0 || id >= dst->ne[1]) {  // never write outside the destination
            if (p->ith == 0) ember_cpu_set_error(p, EMBER_ERR_INTERNAL);
            continue;
        }
        if (id % p->nth != p->ith) continue;
        from_float((const float *) ember_cpu_row(rows, i, 0, 0), ember_cpu_row(dst, id, 0, 0), n);
    }
}

//
// CPY: src0 (to_float) -> dst type (from_float), same shape, row by row
//
bool ember_cpu_supports_cpy(const ember_tensor * dst) {
    const ember_type_traits * ts = ember_type_get_traits(dst->src[0]->type);
    const ember_type_traits * td = ember_type_get_traits(dst->type);
    return ts && td && ts->to_float && td->from_float;
}

// One row of floats per thread, unless one side is F32 (then rows convert in place).
size_t ember_cpu_cpy_work_size(const ember_tensor * dst, int n_threads) {
    if (dst->type == EMBER_TYPE_F32 || dst->src[0]->type == EMBER_TYPE_F32) return 0;
    return (size_t) n_threads * ember_cpu_pad(dst->ne[0] * sizeof(float));
}

void ember_cpu_cpy(const ember_cpu_compute_params * p, ember_tensor * dst) {
    const ember_tensor *      src = dst->src[0];
    const ember_cpu_type_kernels & ts = ember_cpu_kernels()->of(src->type);
    const ember_cpu_type_kernels & td = ember_cpu_kernels()->of(dst->type);
    const int64_t             n   = dst->ne[0];
    float * scratch = (float *) ((char *) p->wdata + (size_t) p->ith * ember_cpu_pad(n * sizeof(float)));
    int64_t r0, r1;
    ember_cpu_split_rows(ember_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t ir = r0; ir < r1; ir++) {
        const int64_t i3 = ir / (dst->ne[1] * dst->ne[2]);
        const int64_t i2 = (ir / dst->ne[1]) % dst->ne[2];
        const int64_t i1 = ir % dst->ne[1];
        const char *  x  = ember_cpu_row(src, i1, i2, i3);
        char *        y  = ember_cpu_row(dst, i1, i2, i3);
        if (src->type == EMBER_TYPE_F32) {
            td.from_float((const float *) x, y, n);
        } else if (dst->type == EMBER_TYPE_F32) {
            ts.to_float(x, (float *) y, n);
        } else {
            ts.to_float(x, scratch, n);
            td.from_float(scratch, y, n);
        }
    }
}
