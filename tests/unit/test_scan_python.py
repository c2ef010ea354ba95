"""The Python scanner: names resolved through the AST, never matched as text."""

from __future__ import annotations

import textwrap

import pytest

from grader.scan import Policy, ScanResult, load_policy, scan_source

KERNEL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, x.sum(axis=0) + tl.exp(x), mask=offs < n)

'''


@pytest.fixture(scope="module")
def default() -> Policy:
    return load_policy("default")


@pytest.fixture(scope="module")
def triton_only() -> Policy:
    return load_policy("triton-only")


def scan(src: str, policy: Policy) -> ScanResult:
    return scan_source(textwrap.dedent(src), policy)


def rules(result: ScanResult) -> set[str]:
    return {f.rule for f in result.findings}


def denied_rules(result: ScanResult) -> set[str]:
    return {f.rule for f in result.findings if f.severity == "deny"}


def test_import_alias_is_resolved(default: Policy) -> None:
    r = scan("import subprocess as sp\nsp.run(['id'])\n", default)
    assert "process-spawn" in denied_rules(r)
    assert {f.line for f in r.findings if f.rule == "process-spawn"} == {1, 2}


def test_from_import_with_alias_is_resolved(default: Policy) -> None:
    r = scan("from os import system as s\n\n\ns('id')\n", default)
    assert 4 in {f.line for f in r.findings if f.rule == "process-spawn"}


def test_dotted_import_binds_the_top_package(default: Policy) -> None:
    r = scan("import os.path\nos.system('id')\n", default)
    assert 2 in {f.line for f in r.findings if f.rule == "process-spawn"}


def test_assignment_of_a_dangerous_callable_is_followed(default: Policy) -> None:
    r = scan("import os\ns = os.system\ns('x')\n", default)
    assert {2, 3} <= {f.line for f in r.findings if f.rule == "process-spawn"}


def test_assignment_chain_and_tuple_unpacking_are_followed(default: Policy) -> None:
    r = scan("a, b = eval, 1\nc = a\nc('1')\n", default)
    assert 3 in {f.line for f in r.findings if f.rule == "dynamic-code"}


def test_rebinding_a_name_to_data_drops_a_harmless_alias(triton_only: Policy) -> None:
    r = scan(_launch("d = torch.float16\nd = torch.empty(4, dtype=d)\nn = d.numel()"), triton_only)
    assert r.findings == []


def test_rebinding_in_another_scope_cannot_erase_a_dangerous_alias(default: Policy) -> None:
    src = "import torch\nf = getattr\ndef g():\n    f = 1\n\nf(torch, 'all' + 'close')\n"
    r = scan(src, default)
    assert any(f.rule == "dynamic-attribute" and f.line == 6 for f in r.findings)


def test_getattr_bound_to_a_name_is_still_getattr(default: Policy) -> None:
    r = scan("import math\nf = getattr\nname = 'p' + 'i'\nf(math, name)\n", default)
    assert any(f.rule == "dynamic-attribute" and f.line == 4 for f in r.findings)


def test_getattr_with_literal_on_a_module_resolves_the_name(default: Policy) -> None:
    r = scan("import math\ngetattr(math, 'pi')\ngetattr(__import__('os'), 'system')('id')\n", default)
    assert "process-spawn" in rules(r) and "dynamic-import" in rules(r)


def test_getattr_with_literal_on_a_plain_object_is_fine(default: Policy) -> None:
    r = scan("class C:\n    block = 4\n\ncfg = C()\nb = getattr(cfg, 'block', 8)\n", default)
    assert not r.findings


def test_getattr_of_a_dunder_literal_is_a_dunder_walk(default: Policy) -> None:
    r = scan("x = getattr(object, '__subclasses__')\n", default)
    assert "dunder-walk" in rules(r)


def test_import_later_in_the_file_still_resolves_inside_functions(default: Policy) -> None:
    r = scan("def f():\n    return sp.run(['id'])\n\nimport subprocess as sp\n", default)
    assert 2 in {f.line for f in r.findings if f.rule == "process-spawn"}


def test_local_rebinding_cannot_shadow_a_builtin(default: Policy) -> None:
    r = scan("def f():\n    exec = print\n    import math as eval\n\nexec('x')\neval('1')\n", default)
    assert {5, 6} <= {f.line for f in r.findings if f.rule == "dynamic-code"}


def test_comments_docstrings_and_strings_are_not_findings(default: Policy) -> None:
    src = '''
    """Calls os.system('x') and subprocess.run and eval(1) -- in prose only."""
    # import os; os.system("rm -rf /")
    CODE = "exec(compile('1', 'x', 'eval'))"
    MSG = f"no eval({CODE!r}) here"
    exec_time = 0.5
    evaluate = lambda: exec_time
    '''
    assert scan(src, default).findings == []


def test_attribute_named_like_a_module_on_a_local_object_is_fine(default: Policy) -> None:
    r = scan("class Cfg:\n    os = 1\n\nc = Cfg()\nprint(c.os, c.system)\n", default)
    assert r.findings == []


def test_finding_carries_line_col_and_stripped_snippet(default: Policy) -> None:
    r = scan("x = 1\nif x:\n    y = eval('1')   \n", default)
    (f,) = r.findings
    assert (f.rule, f.line, f.col, f.snippet) == ("dynamic-code", 3, 8, "y = eval('1')")


def test_snippet_is_capped_at_200_characters(default: Policy) -> None:
    r = scan("eval('" + "a" * 500 + "')\n", default)
    assert len(r.findings[0].snippet) == 200


def test_one_finding_per_rule_and_line(default: Policy) -> None:
    r = scan("import os\nos.system(os.getcwd()); os.kill(1, 9)\n", default)
    keys = [(f.rule, f.line) for f in r.findings]
    assert len(keys) == len(set(keys))


def test_syntax_error_is_a_deny_finding_with_its_line(default: Policy) -> None:
    r = scan("x = 1\ny = (\ndef f(:\n", default)
    (f,) = r.findings
    assert f.rule == "syntax-error" and f.severity == "deny" and f.line == 3 and r.denied


def test_deeply_nested_expression_is_too_complex_not_a_crash(default: Policy) -> None:
    r = scan_source("x = " + "-" * 200_000 + "1\n", default)
    assert r.denied and r.findings[0].rule in {"too-complex", "syntax-error"}


def test_deep_parentheses_are_a_syntax_error_finding(default: Policy) -> None:
    r = scan_source("x = " + "(" * 1000 + ")" * 1000 + "\n", default)
    assert r.findings[0].rule == "syntax-error"


def test_long_attribute_chain_is_walked_without_recursion(default: Policy) -> None:
    # 2000 levels parse fine but would overflow a recursive ast.NodeVisitor
    r = scan_source("import os\nx = os" + ".a" * 2_000 + "\n", default)
    assert "os-module" in rules(r)


def test_attribute_chain_too_deep_to_parse_is_too_complex(default: Policy) -> None:
    r = scan_source("import os\nx = os" + ".a" * 50_000 + "\n", default)
    assert [f.rule for f in r.findings] == ["too-complex"] and r.denied


def test_dunder_dict_reads_and_writes_are_denied(default: Policy) -> None:
    r = scan("import torch\nd = torch.__dict__\nclass A: pass\nA().__dict__['x'] = 1\n", default)
    assert {(f.rule, f.severity, f.line) for f in r.findings} >= {
        ("dunder-dict", "deny", 2), ("dunder-dict", "deny", 4), ("namespace-write", "deny", 4)}


@pytest.mark.parametrize("target", [
    "time.perf_counter", "time.time", "torch.cuda.synchronize", "torch.cuda.Event.elapsed_time",
])
def test_assignment_to_clock_attributes_is_denied(default: Policy, target: str) -> None:
    r = scan(f"import time\nimport torch\n{target} = lambda *a: 0\n", default)
    assert "clock-tamper" in denied_rules(r)


def test_assignment_to_any_imported_module_attribute_is_denied(default: Policy) -> None:
    r = scan("import triton\ntriton.cdiv = lambda a, b: 1\n", default)
    assert "module-patching" in denied_rules(r)


def test_assignment_to_the_harness_module_is_denied(default: Policy) -> None:
    r = scan("import sandbox.judge.main as j\nj.check = lambda *a: True\n", default)
    assert {"harness-access", "module-patching"} <= denied_rules(r)


def test_tf32_flag_write_is_denied(default: Policy) -> None:
    r = scan("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n", default)
    assert "tf32-toggle" in denied_rules(r)


def test_streams_graphs_and_compile_warn_under_default(default: Policy) -> None:
    src = """
    import torch
    s = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph()
    f = torch.compile(print)
    e = torch.cuda.Event(enable_timing=True)
    """
    r = scan(src, default)
    assert not r.denied
    assert rules(r) == {"side-stream", "cuda-graph", "torch-compile", "cuda-event"}


def test_streams_graphs_and_compile_are_denied_under_triton_only(triton_only: Policy) -> None:
    src = KERNEL + "s = torch.cuda.Stream()\ng = torch.cuda.graph\nf = torch.compile\n"
    src += "def launch(x, out):\n    k[(1,)](x, out, 1, BLOCK=16)\n"
    assert {"side-stream", "cuda-graph", "torch-compile"} <= denied_rules(scan(src, triton_only))


def test_system_exit_raise_is_only_a_warning_under_default(default: Policy) -> None:
    r = scan("raise SystemExit(0)\n", default)
    assert rules(r) == {"raise-system-exit"} and not r.denied


def test_broad_except_around_launch_is_a_warning(default: Policy) -> None:
    src = KERNEL + "def launch(x, out):\n    try:\n        k[(1,)](x, out, 1, BLOCK=16)\n    except:\n        pass\n"
    r = scan(src, default)
    assert rules(r) == {"broad-except-fallback"} and not r.denied


def test_narrow_except_around_launch_is_not_reported(default: Policy) -> None:
    src = KERNEL + "def launch(x, out):\n    try:\n        k[(1,)](x, out, 1, BLOCK=16)\n    except ValueError:\n        pass\n"
    assert scan(src, default).findings == []


# ---- triton-only


def _launch(body: str) -> str:
    return KERNEL + "def launch(x, y, out):\n    k[(1,)](x, out, 1, BLOCK=16)\n" + textwrap.indent(body, "    ") + "\n"


def test_legit_kernel_with_methods_inside_jit_is_allowed(triton_only: Policy) -> None:
    assert scan(_launch(""), triton_only).findings == []


@pytest.mark.parametrize("body,rule", [
    ("torch.add(x, y, out=out)", "name-not-allowed"),
    ("torch.matmul(x, y)", "name-not-allowed"),
    ("torch.nn.functional.relu(x)", "name-not-allowed"),
    ("torch.ops.aten.mm(x, y)", "name-not-allowed"),
    ("out[:] = x @ y", "matmul-operator"),
    ("out[:] = x.softmax(-1)", "tensor-compute-method"),
    ("out[:] = torch.empty_like(x).exp()", "tensor-compute-method"),
    ("out.add_(y)", "tensor-compute-method"),
])
def test_torch_compute_outside_the_kernel_is_denied(triton_only: Policy, body: str, rule: str) -> None:
    assert rule in denied_rules(scan(_launch(body), triton_only))


def test_functional_alias_is_denied(triton_only: Policy) -> None:
    src = "import torch.nn.functional as F\n" + _launch("out[:] = F.gelu(x)")
    r = scan(src, triton_only)
    assert any(f.rule == "name-not-allowed" and "F.gelu" in f.snippet for f in r.findings)


@pytest.mark.parametrize("body", [
    "buf = torch.empty(4, device=x.device, dtype=torch.float16)",
    "buf = torch.zeros_like(x); other = torch.full((2,), 1.0)",
    "v = x.view(-1).reshape(2, -1).contiguous()",
    "n = x.numel() + x.stride(0) + x.size(0) + x.shape[0] + x.data_ptr()",
    "ok = x.is_contiguous() and x.dtype == torch.float32 and x.device.type == 'cuda'",
    "g = triton.cdiv(x.numel(), 128)",
])
def test_allocation_views_and_metadata_are_allowed(triton_only: Policy, body: str) -> None:
    assert scan(_launch(body), triton_only).findings == []


def test_missing_kernel_is_denied(triton_only: Policy) -> None:
    r = scan("import torch\ndef launch(x, out):\n    out.copy_(x)\n", triton_only)
    assert "require-triton-kernel" in denied_rules(r)


def test_kernel_defined_but_not_launched_is_denied(triton_only: Policy) -> None:
    r = scan(KERNEL + "def launch(x, out):\n    k(x, out)\n", triton_only)
    def_line = (KERNEL + "x").splitlines().index("def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):") + 1
    assert any(f.rule == "require-triton-kernel" and f.line == def_line for f in r.findings)


def test_autotune_wrapped_kernel_counts_as_a_kernel(triton_only: Policy) -> None:
    src = KERNEL.replace("@triton.jit", "@triton.autotune(configs=[], key=['n'])\n@triton.jit")
    src += "def launch(x, out):\n    k[lambda m: (1,)](x, out, 1)\n"
    assert scan(src, triton_only).findings == []


def test_jit_imported_under_another_name_counts(triton_only: Policy) -> None:
    src = "from triton import jit as J\nimport triton.language as tl\n\n@J\ndef k(p):\n    tl.store(p, 1)\n\n"
    src += "def launch(x):\n    k[(1,)](x)\n"
    assert scan(src, triton_only).findings == []
