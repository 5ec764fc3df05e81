// The core traits table: one cell per type id, filled from quant/types.def.
#include "types.h"

#include <cctype>
#include <cstring>

#include "ref/ref.h"

namespace {

struct traits_table {
    ember_type_traits cells[EMBER_TYPE_CELLS] = {};

    traits_table() {
#define X(NAME, ID, STR, BLCK, SIZE, QUANT, VDT)                                           \
    static_assert(ember_type_cell(ID) >= 0, "type id outside the table");                  \
    static_assert(EMBER_TYPE_##NAME == (ID), "types.def and include/ember.h disagree");    \
    cells[ember_type_cell(ID)] = {STR, BLCK, SIZE, QUANT != 0, EMBER_TYPE_##VDT,           \
                                  ember_ref_to_float_##NAME, ember_ref_from_float_##NAME,   \
                                  ember_ref_vec_dot_##NAME, ember_ref_quantize_##NAME,      \
                                  EMBER_REF_GROUP_BLOCKS_##NAME, EMBER_REF_GROUP_HEADER_##NAME};
#include "types.def"
#undef X
    }
};

const traits_table & table() {
    static const traits_table t;
    return t;
}

}  // namespace

const ember_type_traits * ember_type_get_traits(int32_t type) {
    const int32_t cell = ember_type_cell(type);
    if (cell < 0) return nullptr;
    const ember_type_traits * tr = &table().cells[cell];
    return tr->name ? tr : nullptr;
}

bool ember_type_is_valid(int32_t type) { return ember_type_get_traits(type) != nullptr; }

const char * ember_type_get_name(int32_t type) {
    const ember_type_traits * tr = ember_type_get_traits(type);
    return tr ? tr->name : nullptr;
}

int32_t ember_type_by_name(const char * name) {
    if (!name) return -1;
    for (int32_t c = 0; c < EMBER_TYPE_CELLS; c++) {
        const int32_t             i  = ember_type_of_cell(c);
        const ember_type_traits * tr = ember_type_get_traits(i);
        if (!tr) continue;
        size_t n = std::strlen(tr->name);
        if (std::strlen(name) != n) continue;
        bool same = true;
        for (size_t j = 0; j < n && same; j++) {
            same = std::tolower(static_cast<unsigned char>(name[j])) == tr->name[j];
        }
        if (same) return i;
    }
    return -1;
}

size_t ember_row_size(ember_type type, int64_t ne0) {
    const ember_type_traits * tr = ember_type_get_traits(type);
    if (!tr || ne0 < 0) return 0;
    const int64_t nb    = ne0 / tr->block_size;
    size_t        bytes = static_cast<size_t>(nb) * tr->type_size;
    if (tr->group_blocks > 0) bytes += static_cast<size_t>((nb + tr->group_blocks - 1) / tr->group_blocks) * tr->group_header;
    return bytes;
}

bool ember_row_size_checked(int32_t type, int64_t ne0, uint64_t * bytes) {
    const ember_type_traits * tr = ember_type_get_traits(type);
    if (!tr || ne0 < 0 || ne0 % tr->block_size != 0) return false;
    const uint64_t nb = static_cast<uint64_t>(ne0 / tr->block_size);
    uint64_t       b;
    if (__builtin_mul_overflow(nb, static_cast<uint64_t>(tr->type_size), &b)) return false;
    if (tr->group_blocks > 0) {
        const uint64_t groups = (nb + static_cast<uint64_t>(tr->group_blocks) - 1) / static_cast<uint64_t>(tr->group_blocks);
        uint64_t       h;
        if (__builtin_mul_overflow(groups, static_cast<uint64_t>(tr->group_header), &h) || __builtin_add_overflow(b, h, &b)) {
            return false;
        }
    }
    *bytes = b;
    return true;
}

bool ember_type_has_row_groups(int32_t type) {
    const ember_type_traits * tr = ember_type_get_traits(type);
    return tr && tr->group_blocks > 0;
}

//
// Half and bfloat16 conversions
//
float ember_half_to_float(ember_half h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp  = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do {
                e++;
                mant <<= 1;
            } while ((mant & 0x400u) == 0);
            bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | mant << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | mant << 13;
    }
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

ember_half ember_float_to_half(float f) {
    uint32_t x;
    std::memcpy(&x, &f, sizeof(x));
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) {  // inf or nan
        return static_cast<ember_half>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
    }
    if (absx >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
        return static_cast<ember_half>(sign | 0x7c00u);
    }
    if (absx < 0x38800000u) {  // below the smallest normal half: subnormal or zero
        if (absx < 0x33000000u) return static_cast<ember_half>(sign);  // < 2^-25 rounds to 0
        uint32_t e     = absx >> 23;
        uint32_t m     = (absx & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;  // 14 - (e - 127) + 13 - 1 ... brings m to a 10-bit field
        uint32_t r     = m >> shift;
        uint32_t rem   = m & ((1u << shift) - 1);
        uint32_t half  = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return static_cast<ember_half>(sign | r);
    }
    uint32_t r   = absx + 0xc8000000u;  // rebias exponent: -(127-15) << 23
    uint32_t rem = r & 0x1fffu;
    r >>= 13;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
    return static_cast<ember_half>(sign | r);
}

float ember_bf16_to_float(ember_bf16 h) {
    uint32_t bits = static_cast<uint32_t>(h) << 16;
    float    f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

ember_bf16 ember_float_to_bf16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, sizeof(x));
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<ember_bf16>((x >> 16) | 0x40u);  // quiet nan
    x += 0x7fffu + ((x >> 16) & 1u);
    return static_cast<ember_bf16>(x >> 16);
}
