// Problem files: one experts call stored as safetensors (the input of `moex experts run --problem P.safetensors`).
// Tensors hidden_states, top_k_index, top_k_weights, gate_up_proj | up_proj, down_proj, optional biases and `out`;
// string metadata activation, is_transposed, is_concatenated, has_gate, gate, swiglu_alpha, swiglu_limit; quantized
// problems add metadata quant (fp8_block | mxfp4 | nvfp4), block (128x128 | none), scale_fmt, activation_scheme and
// the tensors {proj}_scale_inv, {proj}_global_scale (nvfp4), {proj}_activation_scale (static).
#pragma once

#include <map>
#include <string>

#include "moex/experts.h"
#include "moex/safetensors.h"

namespace moex {

struct ProblemFile {
    SafetensorsFile file;    // owns the bytes every view below points into (read-only)
    ExpertsProblem problem;  // host views, validated
    TensorView expected;     // optional tensor `out` (T, H): a reference result; undefined when absent
};

// Loads and validates a problem file. Errors (moex::Error) start with the path and name the tensor or metadata key:
// a missing or unexpected tensor, a metadata value outside its allowed set (listed), then problem.validate()'s
// shape/dtype errors.
ProblemFile load_problem_file(const std::string& path);
ProblemFile problem_from_safetensors(SafetensorsFile file);  // the same, for a file already opened

// Writes `problem` (host, contiguous) and, when defined, `expected` as `out`, with every flag spelled out.
void save_problem_file(const std::string& path, const ExpertsProblem& problem, const TensorView& expected = {});
// Writes one tensor `out` (host, contiguous), e.g. the result of `moex experts run`.
void save_output_file(const std::string& path, const TensorView& out,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace moex
