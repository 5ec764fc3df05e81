// Private interface between the CUDA stream (cuda-backend.cpp) and the kernels (ops-*.cu).
// Host-only C++: no CUDA syntax, so g++ can compile the backend file.
//
// Every launcher enqueues its kernels on ctx.stream and returns EMBER_OK, or an error status
// when a launch fails or scratch memory cannot be had. Data errors found on the device (a row
// index out of range) are written to ctx.d_error and reported by the stream at its sync.
// Conventions as on the CPU (cpu-ops.h): nb[0] is the type size; dims 1..3 may be strided.
#ifndef EMBER_CUDA_OPS_H
#define EMBER_CUDA_OPS_H

#include <cstddef>
#include <cstdint>

#include "backend.h"

typedef struct CUstream_st *   cudaStream_t;
typedef struct cublasContext * cublasHandle_t;

// The scale a reader of a norm-in-product copy still applies to its rows' sums (the kernels'
// NS forms, ops-matvec-q.cu): 1 / sqrt(sum(nsq[0 .. n)) / k + eps), as the decode norm kernel's,
// from the n partial sums of squares the producing blocks wrote.
struct ember_cuda_norm_scale {
    const float * nsq = nullptr;
    int           n   = 0;
    float         k   = 1.0f;
    float         eps = 0.0f;
};

// Scratch slots of a stream (ember_cuda_ctx::scratch).
constexpr int EMBER_CUDA_SCRATCH_SLOTS = 3;
// Per-row arrival counts of the short decode attention's last-block merge (EMBER_CUDA_ATTN_LASTBLOCK):
// rows (tokens x query heads) a launch may have, at most.
constexpr int EMBER_CUDA_ATTN_COUNTS = 4096;
// Groups of 32 rows a decode-norm producer in two blocks a group (EMBER_CUDA_MVN_SPLIT) may have,
// at most: its d_mvn_part (64 floats a group) and d_mvn_count.
constexpr int EMBER_CUDA_MVN_SPLIT_GROUPS = 512;

struct ember_cuda_ctx {
    int            device  = 0;
    int            cc_major = 0;  // the device's compute capability (major), set with the stream
    cudaStream_t   stream  = nullptr;
    cublasHandle_t cublas  = nullptr;
    int *          d_error = nullptr;  // device int: first data error of the current graph_compute
    int *          d_count = nullptr;  // EMBER_CUDA_ATTN_COUNTS device ints, zero between launches (ops-attention-decode.cu)
    float *        d_mvn_part  = nullptr;  // 64 EMBER_CUDA_MVN_SPLIT_GROUPS floats (the norm producers' SPLIT, cuda-matvec-norm.cuh)
    int *          d_mvn_count = nullptr;  // EMBER_CUDA_MVN_SPLIT_GROUPS ints, zero between launches

    // Scratch device memory, independent slots (e.g. converted activations and a dequantized
    // weight slab; slot 2: the gate / up launch's copy of its SWIGLU); grown on demand, only after
    // the stream is idle.
    void * scratch[EMBER_CUDA_SCRATCH_SLOTS]      = {};
    size_t scratch_size[EMBER_CUDA_SCRATCH_SLOTS] = {};

    // The activations the last integer matvec quantized into scratch slot 0 (ops-matvec-q.cu):
    // reused by the next matvec over the same x; the stream clears qx_valid before any other node.
    bool         qx_valid = false;
    const void * qx_data  = nullptr;
    const void * qx_buf   = nullptr;
    int64_t      qx_ne[4] = {0, 0, 0, 0};
    int64_t      qx_nb[4] = {0, 0, 0, 0};
    // The 16-bit copy of a prefill MUL_MAT's activations in scratch slot 0 (ops-matmul.cu), made
    // by graph node xh_node of xh_graph from tensor xh_x at xh_buf: the next prefill MUL_MAT of
    // the same x (a layer's K and V after Q, up after gate) takes it when only views, RoPE and
    // cache writes not over x ran between (compute_at sets xh_valid: ember_cuda_xh_reusable).
    // node_now: the graph node compute_at is running.
    bool                 xh_valid = false;
    bool                 xh_bf16  = false;
    const ember_tensor * xh_x     = nullptr;
    const void *         xh_buf   = nullptr;
    const ember_graph *  xh_graph = nullptr;
    int32_t              xh_node  = -1;
    const ember_graph *  graph_now = nullptr;
    int32_t              node_now  = -1;
    // qx_placed: the copy is a kernel's at qx_buf / qx_ds outside slot 0, handed out as it is: a
    // norm-in-product kernel's in slot 1 (ember_cuda_mul_mat_vec_norm; qx_ns) or the gate / up
    // launch's in slot 2 (ember_cuda_mul_mat_vec_glu). qx_ns: the int8 copy of a decode norm's
    // w * x before the norm's scale, which its readers apply (qx_norm). Both cleared by
    // ember_cuda_qx_set_valid.
    // qx_f32: an FP8 producer's copy, floats at qx_buf (no 8-bit values, no qx_ds; only FP8
    // products read it).
    bool                  qx_placed = false;
    bool                  qx_ns     = false;
    bool                  qx_f32    = false;
    const void *          qx_ds     = nullptr;
    ember_cuda_norm_scale qx_norm;

    // Matvecs run early with another's launch (cuda-backend.cpp compute_at), to be skipped
    // when the graph walk reaches them; emptied at the start of every graph_compute.
    const ember_tensor * hoisted[8] = {};
    int                  n_hoisted  = 0;

    // A layer's K and V cache writes (a SET_ROWS pair into a block-quantized cache) left for the
    // decode attention that reads the caches next (cuda-backend.cpp, kv_defer): that launch
    // encodes the rows in its own blocks (attn_dec_mma_kernel) or, on any other path, launches
    // the pair first (ember_cuda_kv_flush). kv_attn is that ATTN node; cleared with n_hoisted.
    const ember_tensor * kv_attn   = nullptr;
    ember_tensor *       kv_set[2] = {nullptr, nullptr};

    // The SWIGLU result an F16 / BF16 gate / up launch put in scratch slot 2 instead of at its
    // tensor's memory (the allocator had placed that over x's, which the launch reads:
    // ember_cuda_mul_mat_vec_f16_glu): tensor h_t of graph h_graph, its floats at h_buf, read
    // there by the F16 / BF16 products over it (ops-matvec.cu, the only readers); cleared with
    // n_hoisted.
    const ember_tensor * h_t     = nullptr;
    const void *         h_buf   = nullptr;
    const ember_graph *  h_graph = nullptr;

    // True while the stream records a CUDA graph: scratch cannot grow then (no sync, no malloc).
    bool capturing = false;

    // Programmatic dependent launch (sm_90+, EMBER_CUDA_PDL=0 turns it off): kernels are
    // launched so that they start while the previous kernel runs; each waits for it
    // (cu_pdl_begin in cuda-common.cuh) before touching memory that kernel may write or read.
    bool pdl = false;

    // EMBER_CUDA_PROFILE=1: the stream's per-op GPU timer (cuda-backend.cpp), else nullptr.
    void * prof = nullptr;

    // EMBER_CUDA_SKIP (measuring only: results are wrong): kinds of op whose kernels are not
    // launched (ember_cuda_skip_kind bits, cuda-plan.h), to see what each costs on a token's critical path;
    // skip_now is set while such a node's launcher runs, and cu_launch then returns at once.
    unsigned     skip      = 0;
    const char * skip_list = nullptr;  // the variable's value when it has "w:NAME" entries
    bool         skip_now  = false;
    const char * carve     = nullptr;  // EMBER_CUDA_CARVE's value (measuring; ember_cuda_carve_apply), null when unset

    // Kernels launched on the stream (cu_launch), and the count right after the input scatter's
    // launch (ember_cuda_scatter): a kernel that reads inputs before its PDL wait must not be the
    // scatter's next launch (attn_dec_short_kernel's early rows).
    mutable uint64_t n_launch       = 0;
    // While recording: a hash of every cluster launch's place in the stream and cluster shape
    // (cu_launch_cluster). A recorded graph whose hash differs from the executable graph's is
    // instantiated anew: cudaGraphExecUpdate took a kernel node's new cluster shape as an update
    // and launched it without it (H200: the short attention's 1 -> 2 block rows, "unspecified
    // launch failure"). A place is the launch's count since the recording began (capture_launch0:
    // n_launch then), so the same graph recorded again hashes the same.
    mutable uint64_t cluster_sig     = 0;
    uint64_t         capture_launch0 = 0;
    uint64_t         scatter_launch = UINT64_MAX;
    bool             scatter_flat   = false;  // EMBER_CUDA_SCATTER_FLAT=0: off; ember_cuda_scatter's one-round-trip kernel where it may run
};



// Records the 16-bit copy of x that the node compute_at is running just made at buf in scratch
// slot 0 (ember_cuda_ctx::xh_valid: a prefill product's conversion, or a SWIGLU writing it).
inline void ember_cuda_xh_made(ember_cuda_ctx & ctx, const ember_tensor * x, const void * buf, bool bf16) {
    ctx.xh_valid = true;
    ctx.xh_bf16  = bf16;
    ctx.xh_x     = x;
    ctx.xh_buf   = buf;
    ctx.xh_graph = ctx.graph_now;
    ctx.xh_node  = ctx.node_now;
}

// Whether the memory of a and b overlaps (false when either is null or has no memory): the
// hazard checks of the fusions (cuda-backend.cpp) and of the quantized-x reuse (ops-matvec-q.cu).
inline bool ember_cuda_overlaps(const ember_tensor * a, const ember_tensor * b) {
    if (!a || !b || !a->data || !b->data) return false;
    const char * a0 = static_cast<const char *>(a->data);
    const char * b0 = static_cast<const char *>(b->data);
    return a0 < b0 + ember_nbytes(b) && b0 < a0 + ember_nbytes(a);
}

// With the per-op timer on (and not recording a graph): the GPU time since the previous mark
// is counted under `label` (launchers mark their sub-steps, e.g. dequantize vs GEMM).
void ember_cuda_prof_mark(ember_cuda_ctx & ctx, const char * label);

// Device memory of at least `size` bytes in slot `slot` (0 or 1), valid until the next call
// for that slot; nullptr when it cannot be allocated (a message is printed).
void * ember_cuda_scratch(ember_cuda_ctx & ctx, int slot, size_t size);
// EMBER_OK, or EMBER_ERR_BACKEND with a message naming `what` when the last launch failed.
ember_status ember_cuda_check_launch(const char * what);

// EMBER_CUDA_CARVE (measuring): "NAME:PERCENT,..." (`list`) sets the preferred shared-memory
// carveout (cudaFuncAttributePreferredSharedMemoryCarveout, percent of the most shared memory; -1
// the driver's choice) of every kernel whose mangled name contains NAME (the first entry that
// matches), once per kernel at its first launch. An SM holds blocks of two kernels side by side
// only in one L1 / shared split, so the split decides which launches can start early beside the
// one before them.
void ember_cuda_carve_apply(const char * list, const void * kernel);

// ops-elementwise.cu
ember_status ember_cuda_rms_norm(ember_cuda_ctx & ctx, ember_tensor * dst);
// RMS_NORM `norm` in one kernel with, when not null, the residual ADD `add` that makes its
// input and the MUL `mul` = norm * w after it; with qx also the integer matvec's quantized
// copy of the result (mul, else norm), marked valid for the next matvec (when scratch allows).
// The decode kernel leaves out the norm's rows unless store_norm (only the MUL reads them) and
// the MUL's unless store_mul (only matvecs reading the quantized copy read them; kept when no
// copy is made).
bool         ember_cuda_can_fuse_rms_norm_mul(const ember_tensor * norm, const ember_tensor * mul);
bool         ember_cuda_can_fuse_add_rms_norm(const ember_tensor * add, const ember_tensor * norm);
ember_status ember_cuda_rms_norm_fused(ember_cuda_ctx & ctx, ember_tensor * add, ember_tensor * norm, ember_tensor * mul, bool qx,
                                       bool store_norm = true, bool store_mul = true);
ember_status ember_cuda_mul(ember_cuda_ctx & ctx, ember_tensor * dst);
ember_status ember_cuda_add(ember_cuda_ctx & ctx, ember_tensor * dst);
ember_status ember_cuda_swiglu(ember_cuda_ctx & ctx, ember_tensor * dst);
// SWIGLU that, with qx, also writes the integer matvec's quantized copy of its result.
ember_status ember_cuda_swiglu_fused(ember_cuda_ctx & ctx, ember_tensor * dst, bool qx);
// SWIGLU for the prefill product right after it (the FFN down product, its weight not BF16 / F32):
// the result also as F16 in scratch slot 0, that product's 16-bit x (ctx.xh_valid set for node
// i + 1 of g); its F32 rows only when `store` (something else reads them). Contiguous, rows of a
// multiple of 8 values. EMBER_ERR_UNSUPPORTED (nothing launched) when slot 0 cannot be had now.
ember_status ember_cuda_swiglu_xh(ember_cuda_ctx & ctx, ember_tensor * dst, bool store);
ember_status ember_cuda_scale(ember_cuda_ctx & ctx, ember_tensor * dst);

// ops-rope.cu
ember_status ember_cuda_rope(ember_cuda_ctx & ctx, ember_tensor * dst);
ember_status ember_cuda_rope_pair(ember_cuda_ctx & ctx, ember_tensor * a, ember_tensor * b);

// ops-rows.cu
// Queued input copies merged (EMBER_CUDA_MERGE_COPIES, cuda-backend.cpp): after one copy of
// their ring span into device memory at `base`, piece k's `size` bytes at base + at go to dst,
// in order (a later piece may overwrite an earlier one); up to k_cuda_scatter_max pieces.
struct ember_cuda_piece {
    void *   dst;
    uint32_t at, size;
};
constexpr int k_cuda_scatter_max = 16;
ember_status  ember_cuda_scatter(ember_cuda_ctx & ctx, const char * base, const ember_cuda_piece * pieces, int n);
bool         ember_cuda_type_has_chunks(ember_type t);    // 32-weight dequantizer (weights, GET_ROWS)
bool         ember_cuda_type_has_encoder(ember_type t);   // SET_ROWS / CPY destinations
bool         ember_cuda_type_has_elem(ember_type t);      // element reader (ATTN's K and V)
ember_status ember_cuda_get_rows(ember_cuda_ctx & ctx, ember_tensor * dst);
ember_status ember_cuda_set_rows(ember_cuda_ctx & ctx, ember_tensor * dst);
// Two SET_ROWS (a layer's K and V cache writes) in one launch, when can_pair: one type, the
// same index tensor, 2-D.
bool         ember_cuda_set_rows_can_pair(const ember_tensor * a, const ember_tensor * b);
ember_status ember_cuda_set_rows_pair(ember_cuda_ctx & ctx, ember_tensor * a, ember_tensor * b);
// The cache writes left for the attention (ctx.kv_attn), launched now as a pair and cleared;
// EMBER_OK when there are none.
ember_status ember_cuda_kv_flush(ember_cuda_ctx & ctx);
ember_status ember_cuda_cpy(ember_cuda_ctx & ctx, ember_tensor * dst);
bool         ember_cuda_supports_cpy(const ember_tensor * dst);

// ops-attention.cu
constexpr int64_t EMBER_CUDA_ATTN_MAX_D = 256;
// qx_of: a contiguous 2-D view of dst that the next (integer) matvec reads; the decode kernel
// then also writes its quantized copy (ember_cuda_qx_buffer) and marks it valid. Other paths
// leave it to the matvec.
ember_status ember_cuda_attn(ember_cuda_ctx & ctx, ember_tensor * dst, const ember_tensor * qx_of = nullptr);
// ops-attention-decode.cu: the decode kernel (few query tokens; one block per KV head and
// split of the keys). EMBER_ERR_UNSUPPORTED when the shapes or types do not suit it.
ember_status ember_cuda_attn_decode(ember_cuda_ctx & ctx, ember_tensor * dst, const ember_tensor * qx_of = nullptr);
// Whether the decode attention `attn` can itself write the rows of the SET_ROWS pair (set_k,
// set_v) whose caches it reads through views (ctx.kv_attn); it still launches them first when
// its kernel at run time is not the one that does (attn_dec_mma_kernel).
bool ember_cuda_attn_kv_write_ok(const ember_cuda_ctx & ctx, const ember_tensor * attn, const ember_tensor * set_k, const ember_tensor * set_v);

// ops-matvec.cu: m (columns of x) <= EMBER_CUDA_MATVEC_MAX_COLS
constexpr int64_t EMBER_CUDA_MATVEC_MAX_COLS = 8;
ember_status ember_cuda_mul_mat_vec(ember_cuda_ctx & ctx, ember_tensor * dst);

// ops-matvec-q.cu: the integer (dp4a) matvec for Q4_0, Q5_0, Q8_0, Q4_K, Q6_K weights
bool         ember_cuda_mul_mat_vec_q_supported(const ember_tensor * dst);
ember_status ember_cuda_mul_mat_vec_q(ember_cuda_ctx & ctx, ember_tensor * dst);
// Up to three consecutive matvecs over one x in one launch (Q, K, V; gate, up): can_group(a, b)
// says whether b may join a's launch.
bool         ember_cuda_mul_mat_vec_q_can_group(const ember_tensor * a, const ember_tensor * b);
bool         ember_cuda_mul_mat_vec_q_can_share(const ember_tensor * a, const ember_tensor * b);
// How many mvk_p6_kernel launches (Q4_K_M's Q / K / V in one, by default) this process
// has made or recorded: the tests' proof that the form ran.
long long    ember_cuda_mv_k4p6_launches();
// How many mvk_v6_kernel launches (the same units, V's rows on the Q4_K launch's places left: 8B).
long long    ember_cuda_mv_k4v6_launches();
// How many Q4_0 unit launches in the halves form (EMBER_CUDA_MV_Q4_HALVES=1: mvr_halves_kernel).
long long    ember_cuda_mv_halves_launches();
long long    ember_cuda_mv_f16_wide_launches();  // mvh_kernel launches (EMBER_CUDA_F16_WIDE; ops-matvec.cu)
// F16 / BF16 decode products over one x in one mvh_kernel launch (EMBER_CUDA_F16_GROUP, on by default; ops-matvec.cu):
// whether b can join a's, and the launch of dsts[0..nd), nd <= 3.
bool         ember_cuda_mul_mat_vec_f16_can_group(const ember_tensor * a, const ember_tensor * b);
ember_status ember_cuda_mul_mat_vec_f16_group(ember_cuda_ctx & ctx, ember_tensor * const * dsts, int nd);
// EMBER_CUDA_F16_FUSE (on by default; ops-matvec.cu): F16 / BF16 decode units (ember_cuda_mv_unit below:
// a layer's Q / K / V with their RoPE and cache writes, in one launch with EMBER_CUDA_F16_GROUP)
// and the FFN's gate / up products with their SWIGLU in one launch. fuse_on: mm is such a product
// and the switch is on; unit_ok / can_share: the unit planner's hooks (cuda-plan.h); glu_ok: the
// GLU planner's (ember_cuda_plan_glu), which keeps gate's and up's floats off x's memory (the
// kernel reads x's floats as it writes them). EMBER_ERR_UNSUPPORTED: not done.
struct ember_cuda_mv_unit;
bool         ember_cuda_mv_f16_fuse_on(const ember_tensor * mm);
bool         ember_cuda_mv_f16_unit_ok(const ember_cuda_mv_unit & u);
bool         ember_cuda_mul_mat_vec_f16_can_share(const ember_tensor * a, const ember_tensor * b);
ember_status ember_cuda_mul_mat_vec_f16_units(ember_cuda_ctx & ctx, const ember_cuda_mv_unit * units, int nd);
// h_scratch_ok: only such products read glu (ember_cuda_only_matvecs_read), so where glu's memory is
// over x's its floats may go to scratch slot 2 instead (ctx.h_t); else that case is not done.
bool         ember_cuda_mv_f16_glu_ok(const ember_tensor * gate, const ember_tensor * up, const ember_tensor * glu);
ember_status ember_cuda_mul_mat_vec_f16_glu(ember_cuda_ctx & ctx, ember_tensor * gate, ember_tensor * up, ember_tensor * glu, bool store_gu,
                                            bool h_scratch_ok);
long long    ember_cuda_mv_f16_fused_launches();  // (tests: the fused F16 / BF16 launches ran)
long long    ember_cuda_mv_f16_glu_moved();       // (tests: of those, gate / up launches whose SWIGLU went to slot 2)
long long    ember_cuda_int4_halves_launches();  // (tests: INT4 units in mvx_int4_halves_kernel's form ran, ops-matvec-ext.cu)
long long    ember_cuda_nf4_norm_dec_launches();  // (tests: NF4 producers in mvx_norm_kernel's DEC form ran)
long long    ember_cuda_nf4_glu_form_launches();  // (tests: NF4 gate / up launches in another form, EMBER_CUDA_NF4_GLU_FORM, ran)
long long    ember_cuda_mvn_split_launches();  // (tests: decode-norm producers in two blocks a group ran, ops-matvec-ext.cu)
long long    ember_cuda_fp8_mma_w4_launches();  // (tests: FP8 units in 4-warp blocks ran, ops-matvec-ext.cu)
long long    ember_cuda_fp8_norm_pipe_launches();  // (tests: the FP8 producer's PIPE form ran)
long long    ember_cuda_attn_lastblock_launches();  // (tests: short decode attentions merged by their last block ran, the default over F16 caches)
long long    ember_cuda_fa_mma_launches();  // (tests: the tensor-core prefill attention ran, the default over F16 caches, ops-attention.cu)
long long    ember_cuda_mmq_q6p_launches();  // (tests: the tensor-core GEMM read planar Q6_K, ops-matmul-q.cu)
int          ember_cuda_mmq_wg_tile_tokens(int64_t n, int64_t m, int64_t nc, int sms);  // (tests: the wgmma tile's tokens for a product's shape, ops-matmul-wgmma.cu)
// The 8-bit copy of x (int8 values, then (d, d sum q) per 32) the integer matvecs read, made
// now unless the one in scratch slot 0 is still x's.
// ns_ok: the caller's kernel applies a norm's scale (mvr_kernel NS), so mvr_norm_kernel's copy
// will do; without it that copy is an error (EMBER_ERR_INTERNAL: x's floats were never written).
struct float2;
ember_status ember_cuda_quantized_x(ember_cuda_ctx & ctx, const ember_tensor * x, int8_t ** xq, float2 ** xds, bool ns_ok = false);
// Whether the copy of x the next matvec finds is a norm-in-product kernel's (ctx.qx_ns): its
// kernel must apply ctx.qx_norm.
bool         ember_cuda_qx_is_ns(const ember_cuda_ctx & ctx, const ember_tensor * x);
ember_status ember_cuda_mul_mat_vec_q_group(ember_cuda_ctx & ctx, ember_tensor * const * dsts, int nd);
// A decode matvec and the nodes after it that its store does (cuda-backend.cpp finds them,
// ops-matvec-q.cu runs them): RoPE over a reshape of its result (Q, K: the warp's two rows are
// a rotated pair) and/or SET_ROWS of the (rotated) rows into an F32/F16/BF16 KV cache (K, V).
// A layer's Q, K and V units go in one launch: one grid drain instead of up to seven kernels.
struct ember_cuda_mv_unit {
    ember_tensor * mm       = nullptr;
    ember_tensor * rope     = nullptr;  // ROPE over a view of mm, or nullptr
    ember_tensor * set_rows = nullptr;  // SET_ROWS of the rope's (or mm's) rows, or nullptr
    bool           write_mm   = true;   // mm's own result is stored (false: only the rope or SET_ROWS reads it)
    bool           write_rope = true;   // the rope's result is stored (false: only the SET_ROWS reads it)
};
bool         ember_cuda_mv_unit_ok(const ember_cuda_mv_unit & u);
bool         ember_cuda_mv_unit_shape_ok(const ember_cuda_mv_unit & u);  // (its shape conditions, any weight type)
ember_status ember_cuda_mul_mat_vec_q_units(ember_cuda_ctx & ctx, const ember_cuda_mv_unit * units, int nd);
ember_status ember_cuda_mul_mat_vec_q_run(ember_cuda_ctx & ctx, ember_tensor * const * dsts, int nd, const ember_cuda_mv_unit * units);
// Its quantized activations (scratch slot 0; nullptr when it cannot grow): ne[0] / 32 blocks
// of 32 int8 per vector of x, each with a float2 (d, d * sum q), d = max|x| / 127 rounded to
// half. Kernels that produce x may write them and mark them valid for the next matvec.
void ember_cuda_qx_buffer(ember_cuda_ctx & ctx, const ember_tensor * x, int8_t ** xq, void ** xds);
void ember_cuda_qx_set_valid(ember_cuda_ctx & ctx, const ember_tensor * x, const int8_t * xq);
// After a launch of the matvecs dsts[0 .. nd) over x (with their units' RoPE and cache writes,
// when units is not null): the quantized copy is no longer x's when any of them wrote over x.
void ember_cuda_qx_after_matvecs(ember_cuda_ctx & ctx, const ember_tensor * x, ember_tensor * const * dsts, int nd,
                                 const ember_cuda_mv_unit * units);

// The gate and up matvecs of a decode FFN and their SWIGLU glu = silu(gate) up in one launch
// (mvr_glu_kernel): Q4_0 / Q8_0 weights in the CUDA layout, INT4 / NF4 in the ext layout
// (mvx_glu_kernel; EMBER_CUDA_MV_GLU_EXT=0: not), Q4_K (mvk_glu_kernel), one x column, rows a multiple of 32;
// glu's floats and its int8 copy for the down product (slot 2); gate's and up's floats only with
// store_gu. EMBER_ERR_UNSUPPORTED: not done (run the nodes as usual; by default where its grid
// would take more than one wave). EMBER_CUDA_MV_GLU=0: never, 2: at every size; the planner
// (ember_cuda_plan_glu) finds the nodes.
bool         ember_cuda_mv_glu_on();
bool         ember_cuda_mv_glu_ok(const ember_tensor * gate, const ember_tensor * up, const ember_tensor * glu);
ember_status ember_cuda_mul_mat_vec_glu(ember_cuda_ctx & ctx, ember_tensor * gate, ember_tensor * up, ember_tensor * glu, bool store_gu);

// The decode norm in the product before it: the matvec mm (Q4_0 / Q8_0 weights in the CUDA
// layout, Q4_K, planar Q6_K, INT4 / NF4 in the ext layout; block-scaled FP8 with
// EMBER_CUDA_MV_NORM_FP8=1; one column, rows a multiple of 32) whose result only `add` reads,
// add's RMS_NORM `norm` and its MUL `mul` in one launch: add's floats, the sums of squares, and a
// copy of mul before the norm's scale (int8; FP8: floats) for the next matvecs (which must all
// pass ember_cuda_mv_norm_reader_ok: they apply the norm's scale; and pair_ok with mm: FP8
// products read FP8 producers' copies, the others the others'); neither norm's nor mul's floats
// are written. Without any_size only where its grid (a block per 32
// rows) fills at least 3/4 of the GPU's SMs. EMBER_ERR_UNSUPPORTED: not done (run the nodes as
// usual).
bool         ember_cuda_mv_norm_ok(const ember_tensor * mm, const ember_tensor * add, const ember_tensor * norm, const ember_tensor * mul);
bool         ember_cuda_mv_norm_reader_ok(const ember_tensor * mm);
bool         ember_cuda_mv_norm_pair_ok(const ember_tensor * producer, const ember_tensor * reader);
ember_status ember_cuda_mul_mat_vec_norm(ember_cuda_ctx & ctx, ember_tensor * mm, ember_tensor * add, ember_tensor * norm, ember_tensor * mul,
                                         bool any_size = false);

// ops-matmul.cu: any m, through cuBLAS (weights dequantized to F16 by row slabs)
ember_status ember_cuda_mul_mat_blas(ember_cuda_ctx & ctx, ember_tensor * dst);
// Converts rows [r0, r1) of a weight matrix (type with chunks) to F16, rows of k elements.
ember_status ember_cuda_dequant_f16(ember_cuda_ctx & ctx, const ember_tensor * w, const char * wdata, int64_t r0,
                                    int64_t r1, void * out);

// ops-matmul-q.cu: y = w x on tensor cores for a quantized weight matrix (wm: its first row,
// a matrix of w), x as m rows of w->ne[0] F16 values, y rows ldy floats apart (sm_80+);
// EMBER_ERR_UNSUPPORTED when the type, layout or GPU is not covered (the caller falls back).
ember_status ember_cuda_mul_mat_q(ember_cuda_ctx & ctx, const ember_tensor * w, const char * wm, const void * xh, int64_t m, void * y,
                                  int64_t ldy);

// ops-topk.cu: TOP_K for k <= EMBER_CUDA_TOPK_MAX_K (larger k runs on the CPU); scratch slot 1
constexpr int32_t EMBER_CUDA_TOPK_MAX_K = 64;
bool         ember_cuda_supports_top_k(const ember_tensor * dst);
ember_status ember_cuda_top_k(ember_cuda_ctx & ctx, ember_tensor * dst);

#endif  // EMBER_CUDA_OPS_H
