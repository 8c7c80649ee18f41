// Rotary embedding on the CPU, as transformers' rotary module + apply_rotary_pos_emb: angle = float(pos) * inv_freq
// (f32), cos/sin of it times attention_scaling in f32, cast to the activation dtype; then per head, rotate-half over
// the first rotary_dim elements: out = q * cos + rotate_half(q) * sin, each product and the sum rounded to the dtype.
#include <cmath>
#include <string>

#include "moex/error.h"
#include "src/model/ops/cpu_ops.h"

namespace moex::model::cpu_ops {
namespace {

// cos/sin of the f32 angle are evaluated in double and rounded once (torch's vectorised cosf/sinf: within 1 ulp).
void fill_cache(const RopeTable& table, DType dtype, int64_t pos0, int64_t T, RopeCache& c) {
    const int64_t half = int64_t(table.inv_freq.size());
    c.inv_freq = table.inv_freq;
    c.attention_scaling = table.attention_scaling;
    c.dtype = dtype, c.pos0 = pos0, c.T = T;
    c.cos.resize(size_t(T * half));
    c.sin.resize(size_t(T * half));
    for (int64_t t = 0; t < T; ++t) {
        const float pos = float(pos0 + t);
        for (int64_t i = 0; i < half; ++i) {
            const double angle = double(pos * table.inv_freq[size_t(i)]);
            const float cs = float(std::cos(angle)) * table.attention_scaling;
            const float sn = float(std::sin(angle)) * table.attention_scaling;
            c.cos[size_t(t * half + i)] = round_to_dtype(cs, dtype);
            c.sin[size_t(t * half + i)] = round_to_dtype(sn, dtype);
        }
    }
}

bool cache_matches(const RopeCache& c, const RopeTable& table, DType dtype, int64_t pos0, int64_t T) {
    return c.pos0 == pos0 && c.T >= T && c.dtype == dtype && c.attention_scaling == table.attention_scaling &&
           c.inv_freq == table.inv_freq;
}

}  // namespace

void rope(const TensorView& x, int64_t head_dim, int64_t pos0, const RopeTable& table, RopeCache& cache, int threads) {
    require_matrix(x, "rope", "x");
    const int64_t T = x.shape[0], C = x.shape[1], rot = table.rotary_dim, half = rot / 2;
    MOEX_REQUIRE(
        head_dim > 0 && C % head_dim == 0, ErrorCode::kInvalidArgument,
        "ops.rope: the width of x " + x.shape_string() + " is not a multiple of head_dim " + std::to_string(head_dim));
    MOEX_REQUIRE(rot >= 2 && rot % 2 == 0 && rot <= head_dim && int64_t(table.inv_freq.size()) == half,
                 ErrorCode::kInvalidArgument,
                 "ops.rope: the table's rotary_dim " + std::to_string(rot) + " and its " +
                     std::to_string(table.inv_freq.size()) + " frequencies do not fit head_dim " +
                     std::to_string(head_dim));
    MOEX_REQUIRE(pos0 >= 0 && pos0 + T <= (int64_t(1) << 24), ErrorCode::kInvalidArgument,
                 "ops.rope: positions must lie in [0, 2^24) (exact in float32), got pos0 " + std::to_string(pos0));
    if (T == 0) return;
    if (!cache_matches(cache, table, x.dtype, pos0, T)) fill_cache(table, x.dtype, pos0, T, cache);
    const DType dt = x.dtype;
    for_row_blocks(T, C, threads, [&](int64_t t0, int64_t t1) {
        float* row = scratch(Slot::kTaskA, C);
        for (int64_t t = t0; t < t1; ++t) {
            const float* cs = cache.cos.data() + t * half;
            const float* sn = cache.sin.data() + t * half;
            load_row(x, t, 0, C, row);
            for (int64_t h = 0; h < C; h += head_dim) {
                float* v = row + h;
                for (int64_t i = 0; i < half; ++i) {
                    const float x1 = v[i], x2 = v[half + i];
                    v[i] = round_to_dtype(x1 * cs[i], dt) + round_to_dtype(-x2 * sn[i], dt);
                    v[half + i] = round_to_dtype(x2 * cs[i], dt) + round_to_dtype(x1 * sn[i], dt);
                }
            }
            store_row(row, x, t, 0, C);
        }
    });
}

}  // namespace moex::model::cpu_ops
