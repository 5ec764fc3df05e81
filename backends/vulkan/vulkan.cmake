# The Vulkan backend (included from the top-level CMakeLists.txt when EMBER_VULKAN is ON).
# Every shader variant is compiled by glslc to SPIR-V at build time and embedded in the
# library as a byte array (vk-shaders.cpp in the build tree): no shader file is shipped.
find_package(Vulkan REQUIRED)
if(NOT EMBER_GLSLC)
    message(FATAL_ERROR "EMBER_VULKAN needs glslc (Debian: apt-get install glslc)")
endif()

set(EMBER_VK_SHADER_DIR ${CMAKE_CURRENT_SOURCE_DIR}/backends/vulkan/shaders)
set(EMBER_VK_SPV_DIR ${CMAKE_BINARY_DIR}/vk-shaders)
file(MAKE_DIRECTORY ${EMBER_VK_SPV_DIR})
file(GLOB EMBER_VK_SHADER_INCLUDES ${EMBER_VK_SHADER_DIR}/*.glsl)
set(EMBER_VK_SPV_FILES "")
set(EMBER_VK_SPV_NAMES "")

# ember_vk_shader(NAME SOURCE DEFINES...): one variant of one shader.
function(ember_vk_shader name source)
    set(defs "")
    foreach(d ${ARGN})
        list(APPEND defs "-D${d}")
    endforeach()
    set(out ${EMBER_VK_SPV_DIR}/${name}.spv)
    add_custom_command(OUTPUT ${out}
        COMMAND ${EMBER_GLSLC} --target-env=vulkan1.1 -fshader-stage=compute -O -Werror ${defs}
                ${EMBER_VK_SHADER_DIR}/${source} -o ${out}
        DEPENDS ${EMBER_VK_SHADER_DIR}/${source} ${EMBER_VK_SHADER_INCLUDES}
        COMMENT "glslc ${name}" VERBATIM)
    set(EMBER_VK_SPV_FILES ${EMBER_VK_SPV_FILES} ${out} PARENT_SCOPE)
    set(EMBER_VK_SPV_NAMES ${EMBER_VK_SPV_NAMES} ${name} PARENT_SCOPE)
endfunction()

# The variants (names are looked up by vk-ops.cpp).
ember_vk_shader(add eltwise.comp OP=0)
ember_vk_shader(mul eltwise.comp OP=1)
ember_vk_shader(swiglu eltwise.comp OP=2)
ember_vk_shader(scale eltwise.comp OP=3)
ember_vk_shader(rms_norm rms_norm.comp)
ember_vk_shader(rms_norm_mul rms_norm.comp HAS_MUL=1)
ember_vk_shader(add_rms_norm rms_norm.comp HAS_ADD=1)
ember_vk_shader(add_rms_norm_mul rms_norm.comp HAS_ADD=1 HAS_MUL=1)
ember_vk_shader(rms_norm_sg rms_norm.comp SUBGROUP=1)
ember_vk_shader(rms_norm_mul_sg rms_norm.comp HAS_MUL=1 SUBGROUP=1)
ember_vk_shader(add_rms_norm_sg rms_norm.comp HAS_ADD=1 SUBGROUP=1)
ember_vk_shader(add_rms_norm_mul_sg rms_norm.comp HAS_ADD=1 HAS_MUL=1 SUBGROUP=1)
# the norm that also writes its result's quantized copy (EMBER_VULKAN_MMV_QX_OUT)
ember_vk_shader(rms_norm_mul_xq rms_norm.comp HAS_MUL=1 XQ_OUT=1)
ember_vk_shader(add_rms_norm_mul_xq rms_norm.comp HAS_ADD=1 HAS_MUL=1 XQ_OUT=1)
ember_vk_shader(rms_norm_mul_sg_xq rms_norm.comp HAS_MUL=1 SUBGROUP=1 XQ_OUT=1)
ember_vk_shader(add_rms_norm_mul_sg_xq rms_norm.comp HAS_ADD=1 HAS_MUL=1 SUBGROUP=1 XQ_OUT=1)
# The decode norms with their quantized copy, 8 consecutive values per invocation.
ember_vk_shader(rms_norm_mul_c8_xq rms_norm_c8.comp)
ember_vk_shader(add_rms_norm_mul_c8_xq rms_norm_c8.comp HAS_ADD=1)
ember_vk_shader(rope rope.comp)
# Cooperative matrices (the prefill kernel on tensor cores, shaders/mul_mm_coop.comp): built
# when this glslc compiles GL_NV_cooperative_matrix (Debian 12's does; it predates
# GL_KHR_cooperative_matrix, which is only reported); the backend then uses them on devices
# with VK_NV_cooperative_matrix (vk-backend.cpp).
function(ember_vk_glslc_accepts out ext body)
    set(src ${CMAKE_BINARY_DIR}/vk-probe-${out}.comp)
    file(WRITE ${src} "#version 450\n#extension ${ext} : require\n#extension GL_KHR_memory_scope_semantics : require\n"
                      "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n"
                      "layout(local_size_x = 32) in;\nlayout(binding = 0) buffer B { float b[]; };\n"
                      "shared uvec4 s[64];\nvoid main() {\n${body}\n}\n")
    execute_process(COMMAND ${EMBER_GLSLC} --target-env=vulkan1.1 -fshader-stage=compute ${src} -o ${src}.spv
                    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
    if(rc EQUAL 0)
        set(${out} ON PARENT_SCOPE)
    else()
        set(${out} OFF PARENT_SCOPE)
    endif()
endfunction()
ember_vk_glslc_accepts(EMBER_VK_GLSLC_COOPMAT_NV GL_NV_cooperative_matrix
    "fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a; fcoopmatNV<16, gl_ScopeSubgroup, 16, 8> x; fcoopmatNV<32, gl_ScopeSubgroup, 16, 8> c = fcoopmatNV<32, gl_ScopeSubgroup, 16, 8>(0.0); coopMatLoadNV(a, s, 0, 5, false); coopMatLoadNV(x, s, 0, 5, true); c = coopMatMulAddNV(a, x, c); coopMatStoreNV(c, b, 0, 16, true);")
ember_vk_glslc_accepts(EMBER_VK_GLSLC_COOPMAT_KHR GL_KHR_cooperative_matrix
    "coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a; coopMatLoad(a, s, 0, 5, gl_CooperativeMatrixLayoutRowMajor);")
# Types the dequantizing kernels read (shaders/dequant.glsl).
set(EMBER_VK_DQ_TYPES F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS
    INT4 INT4_G32 NF4 FP8_E4M3 FP8_E5M2 FP8_E4M3_ROW FP8_E5M2_ROW Q6_KP)
# (Q6_KP: Q6_K weights in the backend's planar layout, vk-repack.h; shader names "..._q6_kp".)
# Types the converting kernels write (shaders/convert.comp) and the KV cache types of ATTN.
set(EMBER_VK_CVT_TYPES F32 F16 Q8_0 Q4_0)
foreach(t ${EMBER_VK_DQ_TYPES})
    string(TOLOWER ${t} lt)
    ember_vk_shader(get_rows_${lt} get_rows.comp TYPE=T_${t})
    ember_vk_shader(mul_mat_vec_${lt} mul_mat_vec.comp TYPE=T_${t} SUBGROUP=1)
    ember_vk_shader(mul_mat_vec_${lt}_nosg mul_mat_vec.comp TYPE=T_${t} SUBGROUP=0)
    ember_vk_shader(mul_mm_${lt} mul_mm.comp TYPE=T_${t})
    ember_vk_shader(mul_mm_big_${lt} mul_mm.comp TYPE=T_${t} TM=8)
    if(EMBER_VK_GLSLC_COOPMAT_NV AND NOT t STREQUAL "F32")  # F32 weights stay in F32 (mul_mm)
        # Steps of 64 k-values (H100, 1B pp512: 32 -> 64 made the FFN up product 302 -> 256 us).
        ember_vk_shader(mul_mm_coop_${lt} mul_mm_coop.comp TYPE=T_${t} BM=128u BN=128u BK=64u)
        ember_vk_shader(mul_mm_coop_s_${lt} mul_mm_coop.comp TYPE=T_${t} BM=64u BN=64u BK=64u)
    endif()
endforeach()
# The fused forms of a decode product (mul_mat_vec_q.comp) and their defines: plain, SwiGLU of
# its input (the FFN down), RoPE and/or the KV cache write of its rows (Q, K, V), gate + up with
# the GLU, the residual ADD + next RMS norm (O, down). Shader names: <prefix><form>_<type>,
# the plain form without "<form>_".
set(EMBER_VK_MMV_FORMS plain swiglu rope glu kv rope_kv norm)
function(ember_vk_mmv_form form out_prefix out_defs)
    set(defs "")
    if(form STREQUAL "swiglu")
        set(defs SWIGLU_X=1)
    elseif(form STREQUAL "rope")
        set(defs ROPE_OUT=1)
    elseif(form STREQUAL "glu")
        set(defs GLU_OUT=1)
    elseif(form STREQUAL "kv")
        set(defs KV_OUT=1)
    elseif(form STREQUAL "rope_kv")
        set(defs ROPE_OUT=1 KV_OUT=1)
    elseif(form STREQUAL "norm")
        set(defs NORM_OUT=1)
    endif()
    if(form STREQUAL "plain")
        set(${out_prefix} "" PARENT_SCOPE)
    else()
        set(${out_prefix} "${form}_" PARENT_SCOPE)
    endif()
    set(${out_defs} ${defs} PARENT_SCOPE)
endfunction()
# ember_vk_mmv_shader(NAME FORM DEFINES...): one decode product variant, and for the forms that
# can write their result's quantized copy themselves (glu, norm; EMBER_VULKAN_MMV_QX_OUT) also
# NAME_xq with XQ_OUT=1, so that the default variants stay free of that code.
function(ember_vk_mmv_shader name form)
    ember_vk_shader(${name} mul_mat_vec_q.comp ${ARGN})
    if(form STREQUAL "glu" OR form STREQUAL "norm")
        ember_vk_shader(${name}_xq mul_mat_vec_q.comp ${ARGN} XQ_OUT=1)
    endif()
    set(EMBER_VK_SPV_FILES ${EMBER_VK_SPV_FILES} PARENT_SCOPE)
    set(EMBER_VK_SPV_NAMES ${EMBER_VK_SPV_NAMES} PARENT_SCOPE)
endfunction()
# The decode fast path (16-byte loads, several rows per workgroup).
foreach(t Q4_0 Q8_0 Q4_K Q6_K)
    string(TOLOWER ${t} lt)
    foreach(f ${EMBER_VK_MMV_FORMS})
        ember_vk_mmv_form(${f} v defs)
        ember_vk_mmv_shader(mul_mat_vec_q_${v}${lt} ${f} TYPE=T_${t} ${defs})
    endforeach()
endforeach()
# Small units (QQ: coalesced word loads, few registers): Q4_0 and Q8_0 by quarter blocks,
# Q6_K by 16 weights; the default for these types. "_sg": the same with subgroup reductions
# (SG_RED), where the device has subgroup arithmetic.
foreach(t Q4_0 Q8_0 Q6_K)
    string(TOLOWER ${t} lt)
    foreach(f ${EMBER_VK_MMV_FORMS})
        ember_vk_mmv_form(${f} v defs)
        ember_vk_mmv_shader(mul_mat_vec_qq_${v}${lt} ${f} TYPE=T_${t} QQ=1 ${defs})
        ember_vk_mmv_shader(mul_mat_vec_qq_${v}${lt}_sg ${f} TYPE=T_${t} QQ=1 SG_RED=1 ${defs})
    endforeach()
endforeach()
# x quantized to 8 bits in shared memory and integer products (QX): Q4_0, Q8_0, Q4_K, the
# default for them where the device has subgroup arithmetic; "_dp" with the byte dot products
# as SPV_KHR_integer_dot_product instructions (glslang's GL_EXT_spirv_intrinsics: Debian 12's
# glslc has no GL_EXT_integer_dot_product), for devices with that feature. Q6_K too.
# "qxp": x quantized beforehand, once per product input (quantize_x.comp, QX_PRE); not for the
# SwiGLU form, whose input is made inside the workgroup. INT4, INT4_G32, the block-scaled FP8
# types and NF4 have only these kernels among the decode fast paths (QX).
foreach(t Q4_0 Q8_0 Q4_K Q6_K INT4 INT4_G32 FP8_E4M3 FP8_E5M2 NF4)
    string(TOLOWER ${t} lt)
    foreach(f ${EMBER_VK_MMV_FORMS})
        ember_vk_mmv_form(${f} v defs)
        ember_vk_mmv_shader(mul_mat_vec_qx_${v}${lt} ${f} TYPE=T_${t} QX=1 SG_RED=1 ${defs})
        ember_vk_mmv_shader(mul_mat_vec_qx_${v}${lt}_dp ${f} TYPE=T_${t} QX=1 SG_RED=1 ${defs} QX_DOT=1)
        if(NOT f STREQUAL "swiglu")
            ember_vk_mmv_shader(mul_mat_vec_qxp_${v}${lt} ${f} TYPE=T_${t} QX=1 SG_RED=1 ${defs} QX_PRE=1)
            ember_vk_mmv_shader(mul_mat_vec_qxp_${v}${lt}_dp ${f} TYPE=T_${t} QX=1 SG_RED=1 ${defs} QX_PRE=1 QX_DOT=1)
        endif()
    endforeach()
endforeach()
# Q6_K products of one quantized column with the rows staged through shared memory (the
# output matrix); "_dp" with the integer dot product instructions.
ember_vk_shader(mul_mat_vec_q6s mul_mat_vec_q6s.comp)
ember_vk_shader(mul_mat_vec_q6s_dp mul_mat_vec_q6s.comp QX_DOT=1)
# The same products over the planar Q6_K layout (q6p.glsl), no staging.
ember_vk_shader(mul_mat_vec_q6p mul_mat_vec_q6p.comp)
ember_vk_shader(mul_mat_vec_q6p_dp mul_mat_vec_q6p.comp QX_DOT=1)
ember_vk_shader(quantize_x quantize_x.comp)
ember_vk_shader(copy copy.comp VEC4=0)
ember_vk_shader(copy_x4 copy.comp VEC4=1)
foreach(d ${EMBER_VK_CVT_TYPES})
    string(TOLOWER ${d} ld)
    ember_vk_shader(set_rows_${ld} convert.comp MODE=1 SRC_TYPE=T_F32 DST_TYPE=T_${d})
    foreach(s ${EMBER_VK_CVT_TYPES})
        string(TOLOWER ${s} ls)
        ember_vk_shader(cpy_${ls}_${ld} convert.comp MODE=0 SRC_TYPE=T_${s} DST_TYPE=T_${d})
        ember_vk_shader(attn_${ls}_${ld} attn.comp K_TYPE=T_${s} V_TYPE=T_${d})
        ember_vk_shader(attn_sg_${ls}_${ld} attn.comp K_TYPE=T_${s} V_TYPE=T_${d} SUBGROUP=1)
        # "_xq": the output's quantized copy too (EMBER_VULKAN_MMV_QX_OUT).
        ember_vk_shader(attn_${ls}_${ld}_xq attn.comp K_TYPE=T_${s} V_TYPE=T_${d} XQ_OUT=1)
        ember_vk_shader(attn_sg_${ls}_${ld}_xq attn.comp K_TYPE=T_${s} V_TYPE=T_${d} SUBGROUP=1 XQ_OUT=1)
    endforeach()
endforeach()

set(EMBER_VK_SHADERS_CPP ${CMAKE_BINARY_DIR}/vk-shaders.cpp)
add_custom_command(OUTPUT ${EMBER_VK_SHADERS_CPP}
    COMMAND ${CMAKE_COMMAND} -DOUT=${EMBER_VK_SHADERS_CPP} -DDIR=${EMBER_VK_SPV_DIR} "-DNAMES=${EMBER_VK_SPV_NAMES}"
            -P ${CMAKE_CURRENT_SOURCE_DIR}/backends/vulkan/embed-spirv.cmake
    DEPENDS ${EMBER_VK_SPV_FILES} ${CMAKE_CURRENT_SOURCE_DIR}/backends/vulkan/embed-spirv.cmake
    COMMENT "Embedding the Vulkan shaders" VERBATIM)

file(GLOB EMBER_VK_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/backends/vulkan/*.cpp)
target_sources(ember_objs PRIVATE ${EMBER_VK_SOURCES} ${EMBER_VK_SHADERS_CPP})
target_compile_definitions(ember_objs PRIVATE EMBER_HAVE_VULKAN)
if(EMBER_VK_GLSLC_COOPMAT_NV)
    target_compile_definitions(ember_objs PRIVATE EMBER_VK_COOPMAT_NV)  # mul_mm_coop_* shaders exist
endif()
target_compile_definitions(ember_static INTERFACE $<BUILD_INTERFACE:EMBER_HAVE_VULKAN>)  # the tests
target_include_directories(ember_objs PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/backends/vulkan)
target_link_libraries(ember_objs PUBLIC Vulkan::Vulkan)
target_link_libraries(ember PRIVATE Vulkan::Vulkan)
# Installed static consumers link the system loader by name (no Vulkan package needed).
target_link_libraries(ember_static PUBLIC $<BUILD_INTERFACE:Vulkan::Vulkan> $<INSTALL_INTERFACE:vulkan>)
# ... and so do pkg-config users of the static library (ember.pc: Libs.private).
string(APPEND EMBER_PC_LIBS_PRIVATE " -lvulkan")
message(STATUS "ember: Vulkan backend ON (headers ${Vulkan_VERSION}, ${EMBER_GLSLC}; glslc cooperative matrices: "
               "NV ${EMBER_VK_GLSLC_COOPMAT_NV}, KHR ${EMBER_VK_GLSLC_COOPMAT_KHR})")
