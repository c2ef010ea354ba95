"""vector_add_small as a C++ extension built by load_inline (CPU): the inline resubmission row
of bench/speed.py (its second grade loads the kept build, grader/builds.py)."""

from torch.utils.cpp_extension import load_inline

_SRC = """
#include <torch/extension.h>
void add(torch::Tensor x, torch::Tensor y, torch::Tensor out) {
  auto n = out.numel();
  auto* a = x.data_ptr<at::Half>(); auto* b = y.data_ptr<at::Half>();
  auto* o = out.data_ptr<at::Half>();
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<at::Half>(float(a[i]) + float(b[i]));
}
"""
_mod = load_inline("kg_bench_inline_add", cpp_sources=[_SRC], functions=["add"])


def launch(x, y, out):
    _mod.add(x, y, out)
