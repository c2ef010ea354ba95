"""Attributes on values outside kernels (the kernel-only allow-list) and file access as a method.

Under `triton-only` and `strict`, an attribute of anything that is not a module or builtin
name the scan resolves must be on the policy's `[allowlist] attributes` list or be a name
the file defines itself (never one that tensors, storages or frames also have). Under every
policy, file-opening names (`from_file`, `open`, `load` ...) are denied on any receiver
except Triton's own `tl.load`.
"""

from __future__ import annotations

import textwrap
import types
from pathlib import Path

import pytest

from grader.errors import PolicyError
from grader.scan import Policy, ScanResult, load_policy, scan_source
from grader.scan.allowlist import describe
from grader.scan.foreign import FOREIGN_ATTRIBUTES

HEAD = "import torch\nimport triton\nimport triton.language as tl\n"
RULE = "attribute-not-allowed"
KERNEL = """
@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n).to(tl.float32), mask=offs < n)
"""


@pytest.fixture(scope="module", params=["triton-only", "strict"])
def allowlisted(request: pytest.FixtureRequest) -> Policy:
    return load_policy(request.param)


@pytest.fixture(scope="module", params=["default", "cuda-inline", "triton-only", "strict"])
def every_policy(request: pytest.FixtureRequest) -> Policy:
    return load_policy(request.param)


def scan(src: str, policy: Policy) -> ScanResult:
    return scan_source(HEAD + textwrap.dedent(src), policy)


def hits(result: ScanResult, rule: str = RULE) -> list[tuple[int, int, str]]:
    """(line in the snippet, column, message) of each denial by ``rule``."""
    skip = HEAD.count("\n")
    return [(f.line - skip, f.col or 0, f.message) for f in result.findings
            if f.rule == rule and f.severity == "deny" and f.line is not None]


# ---------------------------------------------------------------- what is denied, and where

DENIED = [
    # (snippet, line, attribute): the finding points at the attribute's name
    ("def launch(x, y, out):\n    out.numpy()[...] = 1\n", 2, "numpy"),
    ("def launch(x, out):\n    s = sum(x.tolist())\n", 2, "tolist"),
    ("def launch(x, out):\n    v = x[0].item()\n", 2, "item"),
    ("def launch(x, out):\n    h = x.cpu()\n", 2, "cpu"),
    ("def launch(x, out):\n    h = x.to('cpu')\n", 2, "to"),
    ("def launch(x, out):\n    h = x.cuda()\n", 2, "cuda"),
    ("def launch(x, out):\n    s = x.untyped_storage()\n", 2, "untyped_storage"),
    ("def launch(x, out):\n    s = x.storage()\n", 2, "storage"),
    ("def launch(x, out):\n    out.data = x\n", 2, "data"),
    ("def launch(x, out):\n    g = x.grad\n", 2, "grad"),
    ("def launch(x, out):\n    out.apply_(abs)\n", 2, "apply_"),
    ("def launch(x, out):\n    out.map_(x, max)\n", 2, "map_"),
    ("def launch(x, out):\n    h = x.half()\n", 2, "half"),
    ("def launch(x, out):\n    out.index_put_((x,), x)\n", 2, "index_put_"),
    ("def launch(x, out):\n    a = x.__array__()\n", 2, "__array__"),
    ("def launch(x, out):\n    c = x.__dlpack__()\n", 2, "__dlpack__"),
    ("def launch(x, out):\n    c = x.__cuda_array_interface__\n", 2, "__cuda_array_interface__"),
    ("def launch(x, out):\n    n = x._C\n", 2, "_C"),
    # a receiver the scan cannot resolve is a value, whatever it came from
    ("def launch(x, out):\n    a = torch.empty(4).numpy()\n", 2, "numpy"),
    ("def launch(x, out):\n    a = [x][0].tolist()\n", 2, "tolist"),
    ("def launch(x, out):\n    f = x.view(-1).tolist\n", 2, "tolist"),
    ("def launch(x, out):\n    a = (x.view(-1)\n         .tolist())\n", 3, "tolist"),
    ("def launch(x, out):\n    g = (v for v in ()).gi_frame\n", 2, "gi_frame"),
    # a parameter named like a builtin is a local value, not the builtin
    ("def launch(input, out):\n    a = input.numpy()\n", 2, "numpy"),
    # a name bound to a value anywhere is no module alias (the alias table has no scopes)
    ("import math as out\ndef launch(x, out):\n    a = out.numpy()\n", 3, "numpy"),
    ("import math as m\nm = torch.empty(3)\nv = m.tolist()\n", 3, "tolist"),
    ("import math as m\nfor m in [torch.empty(3)]:\n    v = m.tolist()\n", 3, "tolist"),
    # decorators and defaults of a kernel run on the host, with the launch's tensors
    ("@triton.heuristics({'B': lambda args: args['x'].sum()})\n@triton.jit\n"
     "def k2(x, B: tl.constexpr):\n    pass\n", 1, "sum"),
    ("@triton.jit\ndef k3(x, N=torch.empty(1).item()):\n    pass\n", 2, "item"),
    # inside a kernel body (plain Python under TRITON_INTERPRET): only Triton's tensor API
    ("S = {}\n@triton.jit\ndef k4(x_ptr):\n    S['o'].numpy()[...] = 1\n", 4, "numpy"),
    ("@triton.jit\ndef k5(x_ptr):\n    v = tl.load(x_ptr).handle\n", 3, "handle"),
    ("@triton.jit\ndef k6(x_ptr):\n    v = tl.load(x_ptr).item()\n", 3, "item"),
]


@pytest.mark.parametrize(("src", "line", "attr"), DENIED)
def test_attribute_outside_the_list_is_denied_at_its_line_and_column(
        allowlisted: Policy, src: str, line: int, attr: str) -> None:
    col = src.splitlines()[line - 1].index(f".{attr}") + 1
    found = hits(scan(src, allowlisted))
    assert (line, col) in [(ln, c) for ln, c, _ in found], found
    message = next(m for ln, c, m in found if (ln, c) == (line, col))
    assert f".{attr} " in message and allowlisted.name in message


def test_class_patterns_read_attributes_and_are_checked_as_such(allowlisted: Policy) -> None:
    src = """
    class Box:
        pass

    def launch(x, out):
        match x:
            case object(numpy=f, shape=s):
                pass
            case Box(a, b):
                pass
            case object(from_file=g):
                pass
    """
    found = hits(scan(src, allowlisted))
    # keyword sub-patterns point at their pattern, positional ones at the class pattern
    assert [(ln, c) for ln, c, _ in found] == [(7, 26), (9, 13), (11, 30)]
    assert ".numpy " in found[0][2] and "__match_args__" in found[1][2]
    assert [(ln, c) for ln, c, _ in hits(scan(src, allowlisted), "file-access-method")] == [
        (11, 30)]


def test_a_definition_in_the_file_does_not_unlock_a_tensor_method(allowlisted: Policy) -> None:
    src = """
    class Rows:
        tolist = None

        def item(self):
            return 0

    def launch(x, out):
        a = x.tolist()
        b = x.item()
    """
    found = hits(scan(src, allowlisted))
    assert [ln for ln, _, _ in found] == [9, 10]
    assert all("a definition in the file does not count" in m for _, _, m in found)


def test_denied_even_with_every_other_rule_off(tmp_path: Path) -> None:
    # Only the allow-list mechanism: a policy with no rules at all still denies .numpy().
    (tmp_path / "bare.toml").write_text(textwrap.dedent("""
        [allowlist]
        rationale = "only the mechanism"
        builtins = []
        attributes = ["shape"]
        [allowlist.modules.torch]
        why = "t"
    """))
    policy = load_policy(str(tmp_path / "bare.toml"))
    result = scan_source("import torch\ndef f(x):\n    return x.shape, x.numpy()\n", policy)
    assert [(f.rule, f.line, f.col) for f in result.findings] == [(RULE, 3, 22)]


# ---------------------------------------------------------------- what a launcher may still do

ALLOWED = [
    # metadata, views, allocation like a tensor, fills and copies
    "def launch(x, out):\n    n = x.numel(); s = x.shape; st = x.stride(0); d = x.dtype\n"
    "    p = x.data_ptr(); e = x.element_size(); nd = x.ndim; dm = x.dim(); sz = x.size(0)\n"
    "    ok = x.is_contiguous() and x.device.type == 'cuda' and x.device.index == 0\n",
    "def launch(x, out):\n    v = x.view(-1); r = x.reshape(2, -1).contiguous(); t = x.T\n"
    "    p = x.permute(1, 0).transpose(0, 1).unsqueeze(0).squeeze(0).flatten()\n"
    "    e = x.expand_as(out); w = x.new_empty(4); out.zero_(); out.fill_(0)\n",
    # Python values a launcher builds
    "def launch(x, out):\n    n = x.numel().bit_length()\n    cfg = {'B': 4}\n"
    "    b = cfg.get('B', 8); ks = list(cfg.keys()); its = cfg.items()\n"
    "    names = []\n    names.append('a')\n    s = ','.join(names).upper()\n",
    "def launch(x, out):\n    p = torch.cuda.get_device_properties(x.device)\n"
    "    sms = p.multi_processor_count\n",
    # the file's own classes, dataclasses and enums
    "import enum\nfrom dataclasses import dataclass\n\nclass Act(enum.Enum):\n    RELU = 0\n\n"
    "@dataclass\nclass Cfg:\n    block: int = 128\n    act: Act = Act.RELU\n\n"
    "    @property\n    def grid(self):\n        return (self.block,)\n\n"
    "class Op:\n    def __init__(self, cfg):\n        self.cfg = cfg\n\n"
    "    def __call__(self, x, out):\n        c = self.cfg\n"
    "        return c.grid, c.act.value, Act.RELU.name, self.cfg.block\n",
    # inside a kernel body, methods are Triton's
    "@triton.jit\ndef k(x_ptr, o_ptr, n, B: tl.constexpr):\n"
    "    v = tl.load(x_ptr).to(o_ptr.dtype.element_ty)\n"
    "    w = v.sum(axis=0) + v.max(axis=0) + v.reshape(B).T.cast(tl.float32).shape[0]\n"
    "    o_ptr.atomic_add(w) if o_ptr.dtype.element_ty.is_fp32() else tl.store(o_ptr, w)\n",
    # module-rooted names are the module allow-list's business, aliases included
    "def launch(x, out):\n    e = torch.empty(4, device=x.device).view(2, 2)\n"
    "    f = torch.float32\n",
    "t = torch\ndef launch(x, out):\n    e = t.empty(4)\n    g = t.cuda.is_available()\n",
    # patterns that read no attribute
    "def launch(x, out):\n    match x.shape:\n        case (int(n), m) if n > 0:\n            pass\n"
    "        case {'k': v}:\n            pass\n        case [*rest]:\n            pass\n",
]


@pytest.mark.parametrize("src", ALLOWED)
def test_metadata_views_and_own_names_stay_allowed(allowlisted: Policy, src: str) -> None:
    assert hits(scan(src, allowlisted)) == []


def test_default_and_cuda_inline_do_not_check_attributes_on_values() -> None:
    src = "def launch(x, out):\n    out.numpy()[...] = x.tolist()\n"
    for name in ("default", "cuda-inline"):
        assert hits(scan(src, load_policy(name))) == []


def test_own_names_count_wherever_they_are_defined_but_never_foreign_ones(
        allowlisted: Policy) -> None:
    src = """
    def use(c, obj):
        return c.block, c.lo, c.run_me, obj.hi, c.numpy, c.data

    class C:
        block = 1
        numpy = 2

        def __init__(self):
            self.lo = 0
            self.data = 1

        def run_me(self):
            pass

    def later(obj):
        obj.hi = 3
    """
    found = hits(scan(src, allowlisted))
    assert sorted(m.split(" ", 1)[0] for _, _, m in found) == [".data", ".numpy"]


# ---------------------------------------------------------------- file access as a method

FILE_METHODS = [
    ("def launch(x, out):\n    s = x.untyped_storage().from_file('/kg/in/current.py', False, 9)\n",
     2, 8),
    ("def launch(x, out):\n    s = torch.UntypedStorage.from_file('/kg/in/current.py', False, 9)\n",
     2, 8),
    ("def launch(x, out, lib=None):\n    r = lib.load('/kg/in/ref.pt')\n", 2, 8),
    ("def launch(x, out, p=None):\n    t = p.read_text()\n", 2, 8),
    ("def launch(x, out, s=None):\n    f = s.from_file\n", 2, 8),
]


@pytest.mark.parametrize(("src", "line", "col"), FILE_METHODS)
def test_file_access_as_a_method_is_denied_by_every_policy(every_policy: Policy, src: str,
                                                           line: int, col: int) -> None:
    found = hits(scan(src, every_policy), "file-access-method")
    assert [(ln, c) for ln, c, _ in found] == [(line, col)]


def test_class_pattern_keywords_meet_every_policys_attribute_rules(every_policy: Policy) -> None:
    src = "def launch(x, out):\n    match x:\n        case object(from_file=f):\n            pass\n"
    assert [(ln, c) for ln, c, _ in hits(scan(src, every_policy), "file-access-method")] == [
        (3, 30)]


def test_getattr_literal_file_method_is_denied_by_default() -> None:
    src = "def launch(x, out):\n    f = getattr(x.untyped_storage(), 'from_file')\n"
    assert hits(scan(src, load_policy("default")), "file-access-method")


def test_tritons_own_load_is_not_file_access(every_policy: Policy) -> None:
    src = KERNEL + "\ndef launch(x, out):\n    k[(1,)](x, out, x.numel(), BLOCK=16)\n" \
        "    f = triton.language.load\n"
    assert hits(scan(src, every_policy), "file-access-method") == []


# ---------------------------------------------------------------- the lists themselves

def test_policy_attributes_are_inherited_by_strict_and_shown() -> None:
    triton_only, strict = load_policy("triton-only"), load_policy("strict")
    assert triton_only.allowlist is not None and strict.allowlist is not None
    assert strict.allowlist.attributes == triton_only.allowlist.attributes
    assert strict.allowlist.kernel_attributes == triton_only.allowlist.kernel_attributes
    text = "\n".join(describe(strict.allowlist))
    assert "attributes on values outside kernels" in text and RULE in text
    assert "attributes on values inside kernels" in text


def test_kernel_attributes_are_tritons_own_api() -> None:
    # Every name the policy allows inside kernels is an attribute of a Triton tensor, pointer,
    # block, tensor descriptor or dtype object, or of a constexpr; none is the IR handle.
    tl = pytest.importorskip("triton.language")
    objects = [tl.tensor(None, tl.block_type(tl.float32, [4])), tl.pointer_type(tl.float32),
               tl.block_type(tl.float32, [4]), tl.float32, tl.int8, tl.constexpr(1),
               tl.tensor_descriptor]
    api = {n for o in objects for n in (*dir(o), *vars(o)) if not n.startswith("_")}
    allow = load_policy("triton-only").allowlist
    assert allow is not None and allow.kernel_attributes is not None
    assert set(allow.kernel_attributes) <= api - {"handle", "to_ir", "codegen_name", "mangle"}


def test_attribute_names_in_a_policy_must_be_identifiers(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text(
        '[allowlist]\nrationale = "r"\nattributes = ["sha*"]\n')
    with pytest.raises(PolicyError, match="bad attribute name"):
        load_policy(str(tmp_path / "bad.toml"))


# The policy's names that torch.Tensor also has, reviewed one by one: metadata, views
# (contiguous/reshape copy only when they must), allocation like a tensor, fills and
# copies (tensor-data-movement still reports copies), `type` (torch.device.type; on a
# tensor a cast, which dispatches), `index`/`name` (torch.device's, a tensor's are metadata).
# Adding a tensor name to the policy means adding it here, on purpose.
REVIEWED_TENSOR_NAMES = {
    "shape", "stride", "dtype", "device", "numel", "dim", "size", "ndim", "is_contiguous",
    "data_ptr", "element_size", "nbytes", "itemsize", "storage_offset", "layout", "is_cuda",
    "is_floating_point", "get_device", "requires_grad", "view", "view_as", "reshape",
    "flatten", "unflatten", "permute", "transpose", "T", "mT", "unsqueeze", "squeeze",
    "expand", "expand_as", "narrow", "contiguous", "new_empty", "new_zeros", "new_ones",
    "new_full", "zero_", "fill_", "copy_", "clone", "type", "index", "name",
}


def _foreign_types() -> list[type]:
    torch = pytest.importorskip("torch")
    numpy = pytest.importorskip("numpy")
    return [torch.Tensor, torch.UntypedStorage, torch.TypedStorage, numpy.ndarray, memoryview,
            types.FunctionType, types.CodeType, types.FrameType, types.GeneratorType,
            types.CoroutineType, types.AsyncGeneratorType, types.TracebackType,
            types.MethodType, types.CellType, type]


def test_policy_names_that_tensors_have_are_the_reviewed_ones() -> None:
    torch = pytest.importorskip("torch")
    allow = load_policy("triton-only").allowlist
    assert allow is not None and allow.attributes is not None
    assert set(allow.attributes) & set(dir(torch.Tensor)) == REVIEWED_TENSOR_NAMES


def test_foreign_snapshot_covers_the_installed_torch_numpy_and_python() -> None:
    # Regenerate grader/scan/foreign.py from this set when it fails.
    names = {n for t in _foreign_types() for n in dir(t)
             if not (n.startswith("__") and n.endswith("__"))}
    missing = sorted(names - FOREIGN_ATTRIBUTES)
    assert not missing, f"grader/scan/foreign.py lacks {missing[:20]}"
