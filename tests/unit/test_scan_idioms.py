"""Modern Triton idioms through the scan (grader.scan.idioms and the policies' lists): tuple
and namedtuple arguments, host and device tensor descriptors (desc.load in kernels is not
file access), triton.set_allocator with a plain allocator only, the driver's device
queries and nothing else of it, @triton.constexpr_function, autotune reset/restore/hooks."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from grader.scan import Policy, ScanResult, load_policy, read_candidate, scan_source

LEGIT = Path(__file__).resolve().parents[1] / "legit"
IDIOMS = ["tuple_args", "namedtuple_typing", "namedtuple_collections", "tma_host_descriptor",
          "tma_device_descriptor", "sm_count_driver", "autotune_reset_to_zero",
          "autotune_pre_hook_zero", "constexpr_function_helpers"]
HEAD = "import torch\nimport triton\nimport triton.language as tl\n"


@pytest.fixture(scope="module", params=["default", "cuda-inline", "triton-only", "strict"])
def every_policy(request: pytest.FixtureRequest) -> Policy:
    return load_policy(request.param)


@pytest.fixture(scope="module", params=["triton-only", "strict"])
def allowlisted(request: pytest.FixtureRequest) -> Policy:
    return load_policy(request.param)


def scan(src: str, policy: Policy) -> ScanResult:
    return scan_source(HEAD + textwrap.dedent(src), policy)


def denied(result: ScanResult) -> dict[str, set[int]]:
    """Denials by rule -> lines of the snippet (a snippet without a kernel is not one)."""
    skip = HEAD.count("\n")
    out: dict[str, set[int]] = {}
    for f in result.findings:
        if f.severity == "deny" and f.rule != "require-triton-kernel":
            out.setdefault(f.rule, set()).add((f.line or 0) - skip)
    return out


@pytest.mark.parametrize("name", IDIOMS)
def test_each_idiom_passes_every_policy_without_a_finding(name: str, every_policy: Policy) -> None:
    path = LEGIT / f"{name}.py"
    r = scan_source(read_candidate(path), every_policy, filename=str(path))
    assert r.findings == [], [(f.rule, f.line, f.message) for f in r.findings]


# ---------------------------------------------------------------- desc.load in kernels

KERNEL = """
@triton.jit
def k(d, out_ptr, BLOCK: tl.constexpr):
    {body}

def launch(x, out):
    k[(1,)](x, out, BLOCK=16)
"""


def kernel(body: str) -> str:
    return KERNEL.format(body=body)


def test_descriptor_load_in_a_kernel_is_not_file_access(every_policy: Policy) -> None:
    for body in ("v = d.load([0])", "v = d.load((0, 16))", "v = d[0].load([tl.program_id(0)])"):
        assert denied(scan(kernel(body), every_policy)) == {}, body


@pytest.mark.parametrize("body", [
    "v = d.load('/kg/in/reference_outputs.pt')",   # a path
    "v = d.load([0], weights_only=False)",          # a keyword: no descriptor takes one
    "v = d.load([0], [1])",                         # two arguments
    "v = d.load(*[0])",                             # not a display
    "v = torch.load([0])",                          # a module path is never exempt
])
def test_other_load_calls_in_a_kernel_stay_file_access(every_policy: Policy, body: str) -> None:
    assert 4 in denied(scan(kernel(body), every_policy)).get("file-access-method", set())


def test_load_outside_kernels_stays_file_access(every_policy: Policy) -> None:
    src = "def launch(x, out, loader):\n    out.copy_(loader.load([0]))\n"
    assert 2 in denied(scan(src, every_policy)).get("file-access-method", set())


def test_only_triton_names_are_exempt_in_kernels(allowlisted: Policy) -> None:
    # open/save/from_file ... stay denied in kernels in any call shape
    for body in ("v = d.open([0])", "v = d.from_file([0])", "v = d.save([0])"):
        assert denied(scan(kernel(body), allowlisted)), body


# ---------------------------------------------------------------- namedtuple fields


@pytest.mark.parametrize("decl", [
    'P = namedtuple("P", ["x", "y"])', 'P = namedtuple("P", "x y")',
    'P = namedtuple("P", "x, y")', 'P = namedtuple("P", field_names=("x", "y"))',
    'P = NamedTuple("P", [("x", torch.Tensor), ("y", torch.Tensor)])',
])
def test_namedtuple_fields_are_the_files_own_names(allowlisted: Policy, decl: str) -> None:
    src = (f"from collections import namedtuple\nfrom typing import NamedTuple\n{decl}\n"
           "def launch(x, y, out):\n    p = P(x, y)\n    return p.x, p.y\n")
    assert denied(scan(src, allowlisted)) == {}


def test_a_field_named_like_a_tensor_method_unlocks_nothing(allowlisted: Policy) -> None:
    src = ('from collections import namedtuple\nP = namedtuple("P", ["tolist", "x"])\n'
           "def launch(x, out):\n    return x.tolist()\n")
    assert 4 in denied(scan(src, allowlisted)).get("attribute-not-allowed", set())


def test_only_namedtuple_is_listed_from_collections(allowlisted: Policy) -> None:
    r = denied(scan("from collections import OrderedDict, _sys\n", allowlisted))
    assert 1 in r.get("name-not-allowed", set())


# ---------------------------------------------------------------- set_allocator

ALLOC_KERNEL = """
@triton.jit
def k(p, n, BLOCK: tl.constexpr):
    d = tl.make_tensor_descriptor(p, shape=[n], strides=[1], block_shape=[BLOCK])
    d.store([0], d.load([0]))

def launch(x, out):
    triton.set_allocator({alloc})
    k[(1,)](out, out.numel(), BLOCK=16)
"""


@pytest.mark.parametrize("defs,alloc", [
    ("", 'lambda size, align, stream: torch.empty(size, device="cuda", dtype=torch.int8)'),
    ("def a(size, alignment, stream):\n    return torch.empty(size, dtype=torch.int8, "
     "device='cuda')\n", "a"),
    ("def a(size: int, alignment: int, stream):\n    '''Workspace.'''\n"
     "    return torch.zeros(size, device='cuda', dtype=torch.uint8)\n", "a"),
])
def test_a_plain_allocator_is_allowed(allowlisted: Policy, defs: str, alloc: str) -> None:
    assert denied(scan(defs + ALLOC_KERNEL.format(alloc=alloc), allowlisted)) == {}


@pytest.mark.parametrize("defs,alloc", [
    ("G = []\n", "lambda s, a, st: torch.empty(s, device=G[0])"),          # reads a global
    ("", "lambda s, a, st: torch.empty_like(s)"),                          # not listed
    ("", "lambda s, a, st, g=print: torch.empty(s)"),                      # a default
    ("", "lambda *a: torch.empty(a[0])"),                                  # * parameters
    ("def a(s, al, st):\n    print(s)\n    return torch.empty(s)\n", "a"),  # does more
    ("def a(s, al, st):\n    return torch.empty(s)\na = print\n", "a"),    # rebound
    ("def a(s, al, st):\n    return torch.empty(s)\ndef a(s, al, st):\n    return 1\n", "a"),
    ("@staticmethod\ndef a(s, al, st):\n    return torch.empty(s)\n", "a"),  # decorated
    ("", "print"),                                                         # not the file's
    ("def a(s, al, st):\n    return torch.empty(s)\n", "a, 1"),            # two arguments
    ("def a(s, al, st):\n    return torch.empty(s + len(str(s)))\n", "a"),  # a computation
])
def test_any_other_allocator_is_denied(allowlisted: Policy, defs: str, alloc: str) -> None:
    r = denied(scan(defs + ALLOC_KERNEL.format(alloc=alloc), allowlisted))
    assert "allocator-not-plain" in r, r


@pytest.mark.parametrize("src", [
    "f = triton.set_allocator\n", "fs = [triton.set_allocator]\n",
    "from triton import set_allocator\ndef g(h=set_allocator):\n    pass\n",
])
def test_set_allocator_is_never_a_value(allowlisted: Policy, src: str) -> None:
    assert "allocator-not-plain" in denied(scan(src, allowlisted))


# ---------------------------------------------------------------- the driver


@pytest.mark.parametrize("src", [
    "n = triton.runtime.driver.active.utils.get_device_properties(0)['multiprocessor_count']",
    "from triton.runtime import driver\nd = driver.active.get_active_torch_device()",
    "from triton.runtime import driver as drv\ni = drv.active.get_current_device()",
    "def is_cuda():\n    return triton.runtime.driver.active.get_current_target().backend == 'cuda'",
])
def test_the_device_queries_are_allowed(every_policy: Policy, src: str) -> None:
    r = scan(src + "\n", every_policy)
    assert [f for f in r.findings if f.rule != "require-triton-kernel"] == []


@pytest.mark.parametrize("src", [
    "b = triton.runtime.driver.active.utils.load_binary",
    "triton.runtime.driver.set_active(None)",
    "from triton.runtime import driver\ndriver.reset_active()",
    "c = triton.runtime.driver.active.launcher_cls",
    "m = triton.runtime.driver.active.get_device_interface()",
    "t = triton.runtime.driver.active.get_benchmarker()",
    "u = triton.runtime.jit.driver.active.utils",
    "u = triton.runtime.driver.active.utils",
    "from triton.runtime.driver import driver",
    "def f(d):\n    d._active = None",
    "def f(d):\n    return d.load_binary",
])
def test_the_rest_of_the_driver_is_denied(every_policy: Policy, src: str) -> None:
    assert "triton-driver" in denied(scan(src + "\n", every_policy)), src


def test_the_driver_is_never_a_value_under_an_allow_list(allowlisted: Policy) -> None:
    src = "from triton.runtime import driver\ndef f(d):\n    return d\nf(driver)\n"
    assert 4 in denied(scan(src, allowlisted)).get("module-as-value", set())


def test_constexpr_function_bodies_are_host_code(allowlisted: Policy) -> None:
    src = "@triton.constexpr_function\ndef f(p):\n    return p.tolist()\n"
    assert 3 in denied(scan(src, allowlisted)).get("attribute-not-allowed", set())
