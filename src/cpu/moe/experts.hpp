#pragma once
// The CPU backend's MoE expert phase (docs/MOE.md): for each local expert, its received rows through
// GEMM 1 (cpu/moe/grouped_gemm.hpp), SwiGLU (cpu/moe/swiglu.hpp) and GEMM 2, into the bf16 outputs
// that the symmetric combine reads. Runs on the calling rank's thread.
#include "core/moe_plan.hpp"

namespace switchyard::cpu {

class CpuMoeExperts final : public detail::MoeExperts {
 public:
  explicit CpuMoeExperts(const detail::MoeExpertsPlan& plan) : plan_(plan) {}
  // On the calling rank's thread; the call's stream, marks and expected rows are not used.
  void run(const detail::MoeExpertsCall& call) override;

 private:
  detail::MoeExpertsPlan plan_;
};

}  // namespace switchyard::cpu
