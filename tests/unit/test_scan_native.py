"""Native source scanning: load_inline / RawKernel sources read as C/CUDA, not as text."""

from __future__ import annotations

import pytest

from grader.scan import Policy, load_policy, scan_source
from grader.scan.native import mnemonics, splice, strip_comments


@pytest.fixture(scope="module")
def cuda_inline() -> Policy:
    return load_policy("cuda-inline")


def inline(src: str, extra: str = "") -> str:
    return (
        "from torch.utils.cpp_extension import load_inline\n"
        f"CUDA = r'''\n{src}\n'''\n"
        f"ext = load_inline('e', 'int f();', CUDA, functions=['f']{extra})\n"
    )


def denied(policy: Policy, src: str) -> set[str]:
    return {f.rule for f in scan_source(src, policy).findings if f.severity == "deny"}


def test_benign_inline_source_is_allowed(cuda_inline: Policy) -> None:
    assert denied(cuda_inline, inline("__global__ void k(float* x) { x[0] = 1.0f; }")) == set()


def test_comment_mentions_are_not_native_findings(cuda_inline: Policy) -> None:
    src = "// system(\"id\"); cublasSgemm(...)\n/* #include <cublas_v2.h>\n popen() */\nint f() { return 0; }"
    assert denied(cuda_inline, inline(src)) == set()


def test_double_slash_inside_a_string_does_not_hide_the_rest_of_the_line(cuda_inline: Policy) -> None:
    src = 'void p() { const char* u = "http://x"; system("id"); }'
    assert "native-process" in denied(cuda_inline, inline(src))


def test_native_finding_points_at_the_python_line_of_the_call(cuda_inline: Policy) -> None:
    src = inline("int a;\nint b;\nvoid p() { popen(\"id\", \"r\"); }")
    (f,) = [f for f in scan_source(src, cuda_inline).findings if f.rule == "native-process"]
    assert f.line == 5 and "popen" in f.snippet


@pytest.mark.parametrize("code,rule", [
    ("#include <cublas_v2.h>", "native-vendor-library"),
    ("#include <cudnn.h>", "native-vendor-library"),
    ("#include <cutlass/gemm/device/gemm.h>", "native-vendor-library"),
    ("#include <cub/cub.cuh>", "native-vendor-library"),
    ("void f(cublasHandle_t h) { cublasSgemm(h); }", "native-vendor-library"),
    ("void f() { fork(); }", "native-process"),
    ("void f() { execve(0, 0, 0); }", "native-process"),
    ("void f() { dlopen(0, 0); }", "native-process"),
    ("void f() { ptrace(0, 0, 0, 0); }", "native-process"),
    ("void f() { mprotect(0, 0, 0); }", "native-process"),
    ("void f() { syscall(59); }", "native-process"),
    ('const char* p = "/proc/self/environ";', "native-file-access"),
    ("void f() { cudaDeviceReset(); }", "native-runtime-tamper"),
    ('__device__ void f() { asm volatile("exit;"); }', "native-asm"),
    ('__device__ void f() { asm("brkpt;"); }', "native-asm"),
    ("__device__ void f() { asm volatile(TEMPLATE); }", "native-asm"),
])
def test_native_patterns_are_denied(cuda_inline: Policy, code: str, rule: str) -> None:
    assert rule in denied(cuda_inline, inline(code))


def test_allow_listed_ptx_asm_is_allowed(cuda_inline: Policy) -> None:
    code = ('__device__ unsigned f(unsigned a) { unsigned r;\n'
            '  asm volatile("{\\n\\t.reg .pred p;\\n\\tsetp.ne.u32 p, %1, 0;\\n\\t'
            'selp.u32 %0, 1, 0, p;\\n\\t}" : "=r"(r) : "r"(a));\n'
            '  asm("mov.u32 %0, %%laneid;" : "=r"(r)); return r; }')
    assert denied(cuda_inline, inline(code)) == set()


def test_method_named_like_a_libc_call_is_not_a_finding(cuda_inline: Policy) -> None:
    assert denied(cuda_inline, inline("void f(torch::Tensor x) { auto y = x.clone(); }")) == set()


def test_source_through_variables_lists_and_concatenation_is_scanned(cuda_inline: Policy) -> None:
    src = ("from torch.utils.cpp_extension import load_inline\n"
           "A = '__global__ void k() {}'\nB = 'void p() { sys' + 'tem(\"id\"); }'\n"
           "SRCS = [A]\nSRCS2 = SRCS\nC = A\nC += B\n"
           "ext = load_inline(name='e', cpp_sources='', cuda_sources=[C])\n")
    assert "native-process" in denied(cuda_inline, src)


def test_source_built_at_run_time_is_opaque_and_denied(cuda_inline: Policy) -> None:
    src = ("from torch.utils.cpp_extension import load_inline\n"
           "def make():\n    return 'x'\n"
           "ext = load_inline(name='e', cpp_sources='', cuda_sources=make())\n")
    assert "native-opaque-source" in denied(cuda_inline, src)


def test_kwargs_splat_into_load_inline_is_opaque(cuda_inline: Policy) -> None:
    src = ("import torch.utils.cpp_extension as ce\nKW = {}\n"
           "ext = ce.load_inline('e', **KW)\n")
    assert "native-opaque-source" in denied(cuda_inline, src)


def test_linker_flags_are_scanned(cuda_inline: Policy) -> None:
    assert "native-vendor-library" in denied(cuda_inline, inline("int f();", ", extra_ldflags=['-lcublas']"))


def test_default_policy_denies_load_inline_altogether() -> None:
    assert "cpp-extension" in denied(load_policy("default"), inline("int f() { return 0; }"))


def test_cuda_inline_still_denies_file_based_extension_builds(cuda_inline: Policy) -> None:
    src = "from torch.utils.cpp_extension import load\next = load('e', sources=['a.cu'])\n"
    assert "cpp-extension-non-inline" in denied(cuda_inline, src)


def test_cupy_raw_kernel_source_is_scanned_under_default() -> None:
    src = "import cupy\nk = cupy.RawKernel(r'''\nvoid f() { system(\"id\"); }\n''', 'f')\n"
    assert "native-process" in denied(load_policy("default"), src)


def test_splice_joins_continuations_and_keeps_line_count() -> None:
    text = "a\nsys\\\ntem(1);\nb"
    out = splice(text)
    assert "system(1);" in out and out.count("\n") == text.count("\n")


def test_strip_comments_keeps_strings_and_line_count() -> None:
    text = 'a /* x\ny */ b // c\n"// not a comment"'
    out = strip_comments(text)
    assert out.count("\n") == text.count("\n") and '"// not a comment"' in out and "x" not in out


def test_mnemonics_skip_labels_predicates_and_braces() -> None:
    assert list(mnemonics("{ L1: @p bra L1;\\n\\tmov.u32 %0, 1; }")) == ["bra", "mov.u32"]
