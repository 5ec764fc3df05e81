#version 450
// CPY between contiguous tensors of one type and size: a flat grid-stride copy of 16-byte
// units (VEC4: both ends and the size multiples of 16) or 4-byte ones, with as many
// workgroups as the device takes, where convert.comp gives one workgroup to each row (a 1-D
// tensor, as ember_device_copy_bandwidth's, was one workgroup for all of it).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

#if VEC4
#define UNIT uvec4
#else
#define UNIT uint
#endif
layout(binding = 0) readonly buffer S { UNIT s[]; };
layout(binding = 1) writeonly buffer D { UNIT d[]; };

layout(push_constant) uniform PC {
    uint n;             // units to copy
    uint s_off, d_off;  // units from the bindings
} pc;

void main() {
    const uint stride = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_WorkGroupSize.x;
    for (uint i = flat_group() * gl_WorkGroupSize.x + gl_LocalInvocationID.x; i < pc.n; i += stride) {
        d[pc.d_off + i] = s[pc.s_off + i];
    }
}
