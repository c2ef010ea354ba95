"""Allow-list policies and the bypasses of the deny-list that they (and `default`) close.

Every bypass is a snippet that would work if it ran; each must be denied by the named rule
under `default`, `triton-only` and `strict`. The allow-list tests show what a kernel file
may still do, and the legit files added with the allow-lists pass every policy.
"""

from __future__ import annotations

import textwrap
import types
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from grader.cli.scan import register
from grader.errors import PolicyError
from grader.scan import Policy, ScanResult, load_policy, read_candidate, scan_source
from grader.scan.formats import walking_fields

LEGIT = Path(__file__).resolve().parent.parent / "legit"
POLICIES = ["default", "triton-only", "strict"]
ALLOWLISTED = ["triton-only", "strict"]
HEAD = "import torch\nimport triton\nimport triton.language as tl\n"


@pytest.fixture(scope="module", params=POLICIES)
def any_policy(request: pytest.FixtureRequest) -> Policy:
    return load_policy(request.param)


@pytest.fixture(scope="module", params=ALLOWLISTED)
def allowlisted(request: pytest.FixtureRequest) -> Policy:
    return load_policy(request.param)


@pytest.fixture(scope="module")
def default() -> Policy:
    return load_policy("default")


def scan(src: str, policy: Policy) -> ScanResult:
    return scan_source(HEAD + textwrap.dedent(src), policy)


def denied_at(result: ScanResult) -> dict[str, set[int]]:
    """rule id -> lines where it denied (lines counted in the snippet, after HEAD)."""
    out: dict[str, set[int]] = {}
    for f in result.findings:
        if f.severity == "deny" and f.line is not None:
            out.setdefault(f.rule, set()).add(f.line - HEAD.count("\n"))
    return out


# ---------------------------------------------------------------- bypasses, every policy

BYPASSES = [
    # getattr & friends as a value
    ("def fetch(o, n, _g=getattr):\n    return _g(o, n)\n", "getattr-as-value", 1),
    ("fake = list(map(getattr, [torch], ['all' + 'close']))\n", "getattr-as-value", 1),
    ("import functools\nenv = functools.reduce(getattr, ['allclose', '__glo' + 'bals__'], torch)\n",
     "getattr-as-value", 2),
    ("grab = lambda: getattr\ngrab()(torch, 'allclose')\n", "getattr-as-value", 1),
    ("class Tools:\n    pick = getattr\n\nTools.pick(torch, 'allclose')\n", "getattr-as-value", 2),
    ("import functools\nf = functools.partial(getattr, torch)\n", "getattr-as-value", 2),
    ("g = getattr.__call__\n", "getattr-as-value", 1),
    ("list(map(setattr, [torch], ['allclose'], [print]))\n", "getattr-as-value", 1),
    ("d = {'del': delattr}\n", "getattr-as-value", 1),
    # format strings walking attributes and items
    ("import string\nns = string.Formatter().get_field('0.__globals__[__builtins__]', (print,), {})\n",
     "format-attribute-walk", 2),
    ("from string import Formatter\nF = Formatter\n", "format-attribute-walk", 1),
    ("leak = '{0.__init__.__globals__}'.format(torch.cuda.Event)\n", "format-attribute-walk", 1),
    ("leak = '{t.testing.__dict__[assert_close]}'.format_map({'t': torch})\n",
     "format-attribute-walk", 1),
    ("part = ''.join(['__glo', 'bals__'])\nleak = ('{0.' + part + '}').format(print)\n",
     "format-attribute-walk", 2),
    ("TEMPLATE = '{0:{1.__class__}}'\nleak = TEMPLATE.format(1, torch)\n", "format-attribute-walk", 2),
    ("leak = str.format('{0.__self__}', print)\n", "format-attribute-walk", 1),
    ("fmt = '{0.__class__}'.format\n", "format-attribute-walk", 1),
    ("fmt = str.format_map\n", "format-attribute-walk", 1),
    # __dict__, read or write
    ("import sys\ntable = sys.__dict__['modules']\n", "dunder-dict", 2),
    ("torch.__dict__.update(allclose=print)\n", "dunder-dict", 1),
    ("m = type(torch.empty(1)).__dict__['add']\n", "dunder-dict", 1),
    ("f = dict.__getitem__(torch.testing.__dict__, 'assert_close')\n", "dunder-dict", 1),
    # walks through object internals
    ("subs = type(torch.empty(1)).__subclasses__()\n", "dunder-walk", 1),
    ("root = torch.empty(1).__class__.__mro__[-1]\n", "dunder-walk", 1),
    ("f = object.__getattribute__(torch, 'allclose')\n", "dunder-walk", 1),
    ("object.__setattr__(torch, 'allclose', print)\n", "dunder-walk", 1),
    ("import sys\nmods = object.__getstate__(sys)['modules']\n", "dunder-walk", 2),
    ("cell = (lambda: torch).__closure__\n", "dunder-walk", 1),
    # introspection builtins and modules, also as values
    ("import operator\nenv = operator.attrgetter('allclose.__globals__')(torch)\n", "introspection", 2),
    ("import operator\ns = operator.methodcaller('__subclasses__')(object)\n", "introspection", 2),
    ("ns = vars\nf = ns(torch)['allclose']\n", "introspection", 1),
    ("TOOLS = {'scope': globals}\n", "introspection", 1),
    ("import sys\nref = sys.modules['reference']\n", "introspection", 2),
    ("g = __builtins__['getattr']\n", "builtins-access", 1),
    ("import builtins\nbuiltins.print = None\n", "builtins-access", 1),
    ("import importlib\nos_ = importlib.import_module('o' + 's')\n", "dynamic-import", 1),
    # modules reached through another module's attribute
    ("torch.os.system('id')\n", "module-reexport", 1),
    ("import typing\nref = typing.sys.modules.get('reference')\n", "module-reexport", 2),
    ("import enum\nenum.bltns.eval('1')\n", "module-reexport", 2),
    ("from torch import os as o\no.getcwd()\n", "module-reexport", 1),
    ("g = tl.core.builtins.getattr\n", "module-reexport", 1),
    ("import dataclasses\ng = dataclasses.builtins.getattr\n", "module-reexport", 2),
    # library functions that run or resolve strings
    ("import functools\n@functools.singledispatch\ndef h(a):\n    return a\n", "dynamic-code", 2),
    ("import typing\ndef p(a: 'print(1) or int'): pass\ntyping.get_type_hints(p)\n", "dynamic-code", 3),
    ("import timeit\ntimeit.timeit('print(1)', number=1)\n", "dynamic-code", 1),
    ("import types\nf = types.FunctionType(print.__code__, {})\n", "dynamic-code", 2),
    ("from unittest import mock\nmock.patch('torch.allclose', print).start()\n", "dynamic-import", 1),
    ("import marshal\nc = marshal.loads(b'')\n", "serialization", 1),
    ("import copyreg\ncopyreg.pickle(int, print)\n", "serialization", 1),
]


@pytest.mark.parametrize("src,rule,line", BYPASSES, ids=[f"{r}:{s.splitlines()[-1][:40]}"
                                                          for s, r, _ in BYPASSES])
def test_bypass_is_denied_by_its_rule_under_every_policy(any_policy: Policy, src: str, rule: str,
                                                         line: int) -> None:
    r = scan(src, any_policy)
    assert line in denied_at(r).get(rule, set()), [(f.rule, f.line, f.message) for f in r.findings]


def test_getattr_called_directly_with_a_literal_stays_legal_under_default(default: Policy) -> None:
    r = scan("class C:\n    b = 4\n\nx = getattr(C(), 'b', 8)\n", default)
    assert r.findings == []


@pytest.mark.parametrize("src", [
    "msg = '{}'.format(1)",
    "msg = '{0} {name}'.format(1, name='x')",
    "msg = '{:>{width}}'.format(3, width=5)",
    "T = 'n={n}'\nmsg = T.format_map({'n': 1})",
    "msg = str.format('{0}!', 1)",
    "x = 3\nmsg = f'{x!r} {x:>{x}} {torch.float16}'",
    "'''Calls os.system and __import__ -- in prose only.'''\nexec_time = 0.1",
])
def test_plain_format_fields_fstrings_and_prose_pass_under_default(default: Policy, src: str) -> None:
    assert scan(src, default).findings == []


@pytest.mark.parametrize("template,walks", [
    ("{}", []), ("{0} {name}", []), ("{{0.x}}", []), ("{0!r:>10}", []),
    ("{0.x}", ["0.x"]), ("{a[k]}", ["a[k]"]), ("{0:{1.x}}", ["1.x"]), ("{", ["{"]),
])
def test_walking_fields_reads_nested_specs_and_refuses_broken_templates(template: str,
                                                                       walks: list[str]) -> None:
    assert walking_fields(template) == walks


# ---------------------------------------------------------------- the allow-list itself


def _rules(result: ScanResult) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in result.findings:
        if f.severity == "deny":
            out.setdefault(f.rule, []).append(f.message)
    return out


@pytest.mark.parametrize("src,rule,needle", [
    ("import numpy as np\n", "module-not-allowed", "module numpy"),
    ("import sys\n", "module-not-allowed", "module sys"),
    ("import heapq\n", "module-not-allowed", "module heapq"),
    ("import warnings\nwarnings.warn('x')\n", "module-not-allowed", "module warnings"),
    ("import string\n", "module-not-allowed", "module string"),
    ("from . import helper\n", "module-not-allowed", "."),
    ("x = torch.add\n", "name-not-allowed", "torch.add is not on policy"),
    ("import torch.nn.functional as F\n", "name-not-allowed", "torch.nn.functional"),
    ("from torch import *\n", "name-not-allowed", "import *"),
    ("from triton.language import *\n", "name-not-allowed", "import *"),
    ("k = tl.random.tl.knobs\n", "name-not-allowed", "'random'"),
    ("from triton.language.core import dtype\n", "name-not-allowed", "'core'"),
    ("import triton.language.core\n", "name-not-allowed", "'core'"),
    ("k = triton.knobs\n", "name-not-allowed", "triton.knobs"),
    ("import typing\nh = typing.get_origin\n", "name-not-allowed", "typing.get_origin"),
    ("t = type(torch.empty(1))\n", "builtin-not-allowed", "type is not one of the builtins"),
    ("x = getattr(torch.empty(1), 'shape')\n", "builtin-not-allowed", "getattr"),
    ("ok = hasattr(torch, 'compile')\n", "builtin-not-allowed", "hasattr"),
    ("where = __file__\n", "builtin-not-allowed", "__file__"),
    ("m = str.maketrans('a', 'b')\n", "builtin-not-allowed", "str.maketrans"),
    ("def f(m):\n    return m\n\nf(torch)\n", "module-as-value", "the module torch"),
    ("mods = [tl]\n", "module-as-value", "triton.language"),
    ("def f(m=torch):\n    return m\n", "module-as-value", "torch"),
    ("def f():\n    return tl.math\n", "module-as-value", "triton.language.math"),
    ("class C:\n    m = torch\n", "module-as-value", "torch"),
    ("class C:\n    import torch as m\n", "module-as-value", "class attribute"),
    ("import typing\nt = typing.cast(object, torch)\n", "module-as-value", "torch"),
    ("x = torch.empty(1).__class__\n", "dunder-attribute", "dunder attribute"),
    ("h = torch.Tensor.__torch_function__\n", "dunder-attribute", "dunder attribute"),
    ("PATH = ('allclose', '__globals__')\n", "dunder-string", "'__globals__'"),
    ("KEY = b'__builtins__'\n", "dunder-string", "'__builtins__'"),
    ("msg = '{}'.format(1)\n", "format-method", ".format"),
])
def test_what_is_not_listed_is_denied_with_a_message_naming_it(allowlisted: Policy, src: str,
                                                               rule: str, needle: str) -> None:
    found = _rules(scan(src, allowlisted))
    assert rule in found, found
    assert any(needle in m for m in found[rule]), found[rule]
    if rule in {"module-not-allowed", "name-not-allowed", "builtin-not-allowed", "module-as-value"}:
        assert any(allowlisted.name in m for m in found[rule])


@pytest.mark.parametrize("name", ["getattr", "setattr", "delattr", "vars", "globals", "locals",
                                  "eval", "exec", "compile", "__import__", "open", "breakpoint"])
@pytest.mark.parametrize("form", ["{n}(torch, 'x')", "f = {n}", "fs = [{n}]", "g = {n}.__call__",
                                  "def h(a={n}):\n    pass"])
def test_dangerous_builtins_are_denied_in_any_position(allowlisted: Policy, name: str,
                                                       form: str) -> None:
    # builtin-not-allowed, or the more specific rule that already denies it (dynamic-code ...)
    denials = denied_at(scan(form.format(n=name) + "\n", allowlisted))
    assert any(1 in lines for lines in denials.values()), denials


@pytest.mark.parametrize("src", [
    "t = torch\nbuf = t.empty(4)",
    "import triton.language.extra.libdevice as ld\nfrom triton.language.extra.cuda import libdevice",
    "from triton import cdiv, next_power_of_2 as np2\ng = (cdiv(10, 4), np2(3))",
    "import math, functools, dataclasses, enum\nfrom typing import Optional\nfrom collections.abc import Callable",
    "from __future__ import annotations",
    "x = tl.math.rsqrt\ny = tl.float16\nz = tl.constexpr(4)",
    "n = torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 4",
    "class Op:\n    def __init__(self):\n        self.b = 1\n\n    def __call__(self, x):\n        return x\n",
    "class Base:\n    '''Docs may say __init__ and __globals__.'''\n    __slots__ = ('a',)\n",
    "if __name__ == '__main__':\n    print(torch.empty(2).shape)",
    "msg = f'{torch.float16} {1 + 2:>{4}}'",
    "def launch(input, out):\n    n = input.numel() + len([id for id in range(3)])\n    return n",
    "def outer(type):\n    def inner():\n        return type\n    return inner\n\nf = lambda format: format",
])
def test_what_a_kernel_file_needs_is_allowed(allowlisted: Policy, src: str) -> None:
    r = scan(src + "\n", allowlisted)
    assert [f for f in r.findings if f.rule != "require-triton-kernel"] == []


@pytest.mark.parametrize("src,line", [
    ("x = input\n", 1),
    ("class C:\n    type = int\n    t = type\n", 3),
    ("def f(type):\n    global input\n    return input\n", 3),
    ("def f():\n    return [type for _ in range(2)]\n", 2),
    ("def f(type=type):\n    return type\n", 1),
])
def test_only_function_locals_shadow_a_builtin(allowlisted: Policy, src: str, line: int) -> None:
    r = scan(src, allowlisted)
    assert line in denied_at(r).get("builtin-not-allowed", set()), r.findings


def test_a_module_alias_survives_rebinding_elsewhere(allowlisted: Policy) -> None:
    r = scan("t = torch\ndef g():\n    t = 1\n\nx = t.add\n", allowlisted)
    assert 5 in denied_at(r).get("name-not-allowed", set())


def test_a_harmless_alias_is_still_dropped_on_rebinding(allowlisted: Policy) -> None:
    r = scan("d = torch.float16\nd = torch.empty(4, dtype=d)\nn = d.numel()\n", allowlisted)
    assert [f for f in r.findings if f.rule != "require-triton-kernel"] == []


def test_one_clear_finding_when_a_specific_rule_already_denies(allowlisted: Policy) -> None:
    r = scan("import os\nx = torch.compile\n", allowlisted)
    rules = denied_at(r)
    assert rules["os-module"] == {1} and rules["torch-compile"] == {2}
    assert "module-not-allowed" not in rules and "name-not-allowed" not in rules


def test_catch_all_around_a_launch_is_denied(allowlisted: Policy) -> None:
    src = """
    @triton.jit
    def k(p):
        tl.store(p, 1)

    def launch(x):
        try:
            k[(1,)](x)
        except Exception:
            x.fill_(1)
    """
    assert "broad-except-fallback" in denied_at(scan(src, allowlisted))


# ---------------------------------------------------------------- new legit kernels

NEW_LEGIT = ["autotune_many_configs_2d", "autotune_heuristics_rows", "persistent_tiles",
             "constexpr_globals_helpers", "dataclass_callable_op", "builtin_names_as_locals"]


@pytest.mark.parametrize("name", NEW_LEGIT)
@pytest.mark.parametrize("policy", ["default", "triton-only", "strict", "cuda-inline"])
def test_new_legit_kernel_passes_every_policy_without_a_finding(name: str, policy: str) -> None:
    path = LEGIT / f"{name}.py"
    r = scan_source(read_candidate(path), load_policy(policy), filename=str(path))
    assert r.findings == [], [(f.rule, f.line, f.message) for f in r.findings]


@pytest.mark.parametrize("name,rule", [("default/format_plain_fields", "format-method"),
                                       ("default/dunder_string_literals", "dunder-string"),
                                       ("default/print_and_sys_info", "module-not-allowed")])
def test_default_only_legit_file_passes_default_but_not_the_allow_list(name: str, rule: str,
                                                                       allowlisted: Policy,
                                                                       default: Policy) -> None:
    source = read_candidate(LEGIT / f"{name}.py")
    assert scan_source(source, default).findings == []
    assert rule in {f.rule for f in scan_source(source, allowlisted).findings if f.severity == "deny"}


# ---------------------------------------------------------------- the allow-list as data


def _write(folder: Path, name: str, body: str) -> str:
    (folder / f"{name}.toml").write_text(textwrap.dedent(body))
    return str(folder / f"{name}.toml")


def test_shipped_allow_lists_default_has_none_and_strict_inherits_triton_only() -> None:
    assert load_policy("default").allowlist is None
    assert load_policy("cuda-inline").allowlist is None
    assert load_policy("strict").allowlist == load_policy("triton-only").allowlist
    modules = dict(load_policy("strict").allowlist.modules)  # type: ignore[union-attr]
    assert {"torch", "triton", "triton.language", "math", "typing", "dataclasses", "functools",
            "enum"} <= set(modules)
    assert not {"sys", "gc", "inspect", "ctypes", "string", "os", "operator"} & set(modules)


def test_child_allowlist_replaces_a_module_entry_and_inherits_the_rest(tmp_path: Path) -> None:
    _write(tmp_path, "base", """
        [allowlist]
        rationale = "r"
        builtins = ["len"]
        [allowlist.modules.math]
        why = "w"
        names = ["ceil"]
        [allowlist.modules.torch]
        why = "w"
        names = ["empty"]
    """)
    child = _write(tmp_path, "child", """
        extends = "base"
        [allowlist.modules.math]
        why = "more math"
        names = ["ceil", "sqrt"]
    """)
    policy = load_policy(child)
    assert policy.allowlist is not None and policy.allowlist.builtins == ("len",)
    assert policy.allowlist.module("math").names == ("ceil", "sqrt")  # type: ignore[union-attr]
    assert policy.allowlist.module("torch") is not None
    r = scan_source("import math\nx = math.sqrt(len([1]))\ny = math.pi\n", policy)
    assert [(f.rule, f.line) for f in r.findings] == [("name-not-allowed", 3)]


@pytest.mark.parametrize("body,match", [
    ("[allowlist]\nbuiltins = []\n", "allowlist.rationale"),
    ('[allowlist]\nrationale = "r"\n[allowlist.modules."bad name"]\nwhy = "w"\n', "bad module name"),
    ('[allowlist]\nrationale = "r"\n[allowlist.modules.m]\nwhy = "w"\ndeny_segments = ["a.b"]\n',
     "bad deny segment"),
    ('[allowlist]\nrationale = "r"\nextra = 1\n', "extra"),
    ('[allowlist]\nrationale = "r"\n[[rules]]\nid = "name-not-allowed"\nseverity = "deny"\n'
     'message = "m"\nrationale = "r"\nthreat = "t"\nrefs = ["x"]\n', "reserved"),
])
def test_bad_allowlist_is_a_policy_error(tmp_path: Path, body: str, match: str) -> None:
    with pytest.raises(PolicyError, match=match):
        load_policy(_write(tmp_path, "p", body))


def test_policy_show_prints_the_allow_list_readably() -> None:
    group = click.Group("kgrader")
    register(group)
    result = CliRunner().invoke(group, ["policy", "show", "strict"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "allow-list (anything not listed is denied)" in out
    assert "torch: allocation, views, metadata" in out and "never through: _*, core" in out
    assert "builtins: abs, all" in out and "module-as-value" in out
    plain = CliRunner().invoke(group, ["policy", "show", "default"]).output
    assert "anything not listed is denied" not in plain


# ---------------------------------------------------------------- the data against the libraries


def _modules_below(obj: object, path: str, depth: int, out: list[tuple[str, str]],
                   seen: frozenset[int]) -> None:
    if depth > 3:
        return
    for name in dir(obj):
        if name.startswith("__"):
            continue
        try:
            value = getattr(obj, name)
        except Exception:  # lazy attributes of a library may raise anything
            continue
        sub = f"{path}.{name}"
        if isinstance(value, types.ModuleType):
            out.append((sub, value.__name__))
            if id(value) not in seen and value.__name__.startswith("triton.language"):
                _modules_below(value, sub, depth + 1, out, seen | {id(value)})


def test_no_module_reachable_below_triton_language_escapes_the_allow_list(allowlisted: Policy) -> None:
    tl = pytest.importorskip("triton.language")
    found: list[tuple[str, str]] = []
    _modules_below(tl, "tl", 0, found, frozenset({id(tl)}))
    assert found, "triton.language exposes no submodules? the walk is broken"
    allowed_modules = {k for k, _ in allowlisted.allowlist.modules}  # type: ignore[union-attr]
    escaped = []
    for path, module in found:
        if module in allowed_modules:
            continue  # e.g. tl.math: a listed module, judged by its own entry
        r = scan_source(f"import triton.language as tl\nx = {path}.anything\n", allowlisted)
        if not r.denied:
            escaped.append((path, module))
    assert escaped == []


def test_every_exact_allowed_name_exists_and_is_not_a_module(allowlisted: Policy) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    import importlib

    problems = []
    for key, entry in allowlisted.allowlist.modules:  # type: ignore[union-attr]
        try:
            importlib.import_module(key)
        except ImportError:
            continue  # e.g. a libdevice flavour this triton does not ship
        # What the candidate's dotted name reaches: attributes from the top package, since
        # a package may re-export an object over its submodule's name (triton.runtime.driver
        # is Triton's DriverConfig, not triton/runtime/driver.py).
        root: object = importlib.import_module(key.split(".")[0])
        for part in key.split(".")[1:]:
            root = getattr(root, part)
        for name in entry.names:
            if "*" in name:
                continue
            obj: object = root
            try:
                for part in name.split("."):
                    obj = getattr(obj, part)
            except AttributeError:
                problems.append(f"{key}.{name} does not exist")
                continue
            except RuntimeError:
                continue  # driver.active on a machine without a GPU: checked on the GPU
            if isinstance(obj, types.ModuleType):
                problems.append(f"{key}.{name} is a module (it could leave the scan's sight)")
    assert problems == []
