"""The field importers' pure logic (grader/tasks/kernelbench.py, gpumode.py): no sandbox."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from grader.cli.tasks import register
from grader.errors import TaskError
from grader.formats.common import ProblemPathError, confined_task_folder, task_name, write_task
from grader.formats.gpumode import importer as gpumode
from grader.formats.kernelbench import importer as kernelbench

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "field"
KB = EXAMPLES / "kernelbench" / "problems"
GM = EXAMPLES / "gpumode"

KB_SOURCE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, features, eps):
        super().__init__()
        self.norm = nn.LayerNorm(features, eps=eps)
    def forward(self, x, y):
        return self.norm(x) + y * scale

batch_size = 16
features = 64
width = 48
scale = 2
derived = width * 2
a, b = 1, 2
flag: int = 7
eps = 1e-5
negative = -3

def get_inputs():
    x = torch.randn(batch_size, features)
    y = torch.randn(batch_size, width, flag)
    return [x, y]

def get_init_inputs():
    return [features, eps]
'''


def test_kernelbench_plan_varies_only_what_get_inputs_alone_reads() -> None:
    tree = ast.parse(KB_SOURCE)
    consts = kernelbench.size_constants(tree)
    # derived = width * 2 is a size too (products of sizes are sizes), read by nothing here
    assert consts == {"batch_size": 16, "features": 64, "width": 48, "scale": 2, "derived": 96,
                      "flag": 7}
    dims, varied = kernelbench.plan(tree)
    # features feeds the model, scale the forward, width another constant: fixed
    assert dims == {"batch_size": 16, "features": 64, "width": 48, "flag": 7}
    assert varied == ["batch_size", "flag"]


def test_kernelbench_variants_move_a_little_never_onto_multiples_of_16() -> None:
    base = {"batch_size": 16, "dim": 1, "fixed": 64}
    vs = kernelbench.variants(base, ["batch_size", "dim"])
    # dim 1 cannot go down (0 is no size): it goes up; the mixed move repeats "all up"
    assert vs == [{"batch_size": 17, "dim": 2, "fixed": 64}, {"batch_size": 15, "dim": 2, "fixed": 64}]
    for v in vs:
        assert v["fixed"] == 64 and v != base
        assert all(v[k] >= 1 and v[k] % 16 for k in ("batch_size", "dim"))
    assert any(all(v[k] > base[k] for k in ("batch_size", "dim")) for v in vs)
    assert kernelbench.variants(base, []) == []
    assert kernelbench._nudge(17, -1) == 15 and kernelbench._nudge(15, +1) == 17


def test_kernelbench_import_makes_a_module_task(tmp_path: Path) -> None:
    task = kernelbench.import_problem(KB / "5_Linear_GELU.py")
    spec = task.spec
    assert (spec.name, spec.contract, spec.entrypoint, spec.policy) == \
        ("kb_5_linear_gelu", "module", "ModelNew", "cuda-inline")
    assert spec.problem is not None and spec.problem.varied == ["batch_size"]
    assert spec.shapes.tune == [{"batch_size": 32, "in_features": 256, "out_features": 128}]
    assert {h["batch_size"] for h in spec.shapes.hidden} == {33, 31, 35}
    assert spec.to_wire().problem.init == "get_init_inputs"  # type: ignore[union-attr]
    folder = write_task(task, tmp_path)
    assert (folder / "reference.py").read_text() == (KB / "5_Linear_GELU.py").read_text()
    written = json.loads((folder / "task.json").read_text())
    assert written["contract"] == "module"
    # the controlled rule (bounded false accepts), written out, not left to the default
    assert spec.acceptance.rule == "controlled" and written["acceptance"]["rule"] == "controlled"
    with pytest.raises(TaskError, match="exists"):
        write_task(task, tmp_path)


def test_not_a_kernelbench_problem_is_a_clear_error(tmp_path: Path) -> None:
    p = tmp_path / "x.py"
    p.write_text("class Model: pass\n")
    with pytest.raises(TaskError, match=r"not a KernelBench problem \(no get_inputs, get_init_inputs\)"):
        kernelbench.import_problem(p)
    p.write_text("def broken(:\n")
    with pytest.raises(TaskError, match=r"x\.py:1: not valid Python"):
        kernelbench.import_problem(p)
    with pytest.raises(TaskError, match="no KernelBench problem files"):
        kernelbench.find_problems(tmp_path)
    assert len(kernelbench.find_problems(KB)) == 5


def test_gpumode_import_maps_tests_benchmarks_seed_tolerances_and_helpers() -> None:
    task = gpumode.import_problem(GM / "vectoradd")
    spec = task.spec
    assert (spec.contract, spec.entrypoint, spec.name) == ("gpumode", "custom_kernel", "gm_vectoradd")
    assert spec.shapes.tune == [{"size": 64}, {"size": 127}, {"size": 200}]
    assert spec.shapes.timed == {"size": 256} and spec.shapes.hidden == [{"size": 255}]
    p = spec.problem
    assert p is not None and p.seed_arg == "seed" and p.checker == "check_implementation"
    assert set(p.support_modules) == {"task", "utils"} and p.scratch == []
    assert (spec.correctness.rtol, spec.correctness.atol) == (1e-3, 1e-3)
    assert spec.acceptance.rule == "controlled"


def test_gpumode_output_buffers_are_scratch() -> None:
    p = gpumode.import_problem(GM / "linear").spec.problem
    assert p is not None and p.scratch == [3]


def write_problem(folder: Path, yml: str, ref: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.yml").write_text(yml)
    (folder / "reference.py").write_text(ref or (
        "def ref_kernel(data):\n    return data\n\n"
        "def generate_input(n, seed, mode='x'):\n    return None\n"))
    return folder


def test_gpumode_fixed_non_integer_arguments_pass_through(tmp_path: Path) -> None:
    f = write_problem(tmp_path / "p", 'tests:\n  - {"n": 4, "seed": 1, "mode": "a"}\n'
                                      '  - {"n": 5, "seed": 2, "mode": "a"}\n')
    spec = gpumode.import_problem(f).spec
    assert spec.problem is not None and spec.problem.fixed_args == {"mode": "a"}
    assert spec.shapes.tune == [{"n": 4}, {"n": 5}] and spec.shapes.timed is None
    assert (spec.correctness.rtol, spec.correctness.atol) == (gpumode.DEFAULT_RTOL,
                                                              gpumode.DEFAULT_ATOL)


@pytest.mark.parametrize("yml,msg", [
    ('tests:\n  - {"n": 4, "mode": "a"}\n  - {"n": 5, "mode": "b"}\n', "changes between entries"),
    ('tests:\n  - {"n": 4}\n  - {"m": 5}\n', "name different arguments"),
    ('tests:\n  - {"n": 0}\n', "dimensions must be positive"),
    ('tests:\n  - {"n": [1, 2]}\n', "not a plain value"),
    ('tests: {"n": 4}\n', "must be a list"),
    ("benchmarks: []\n", "no tests"),
    ("tests: [\n", "invalid YAML"),
    ("- 1\n", "expected a mapping"),
])
def test_bad_gpumode_task_yml_is_a_clear_error(tmp_path: Path, yml: str, msg: str) -> None:
    f = write_problem(tmp_path / "p", yml)
    with pytest.raises(TaskError, match=msg):
        gpumode.import_problem(f)


def test_gpumode_missing_pieces_are_named(tmp_path: Path) -> None:
    f = write_problem(tmp_path / "p", 'tests:\n  - {"n": 4}\n', "def ref_kernel(d):\n    return d\n")
    with pytest.raises(TaskError, match="defines no generate_input"):
        gpumode.import_problem(f)
    f = write_problem(tmp_path / "q", 'tests:\n  - {"n": 4}\n',
                      "from utils import x\ndef ref_kernel(d):\n    return d\n"
                      "def generate_input(n):\n    return n\n")
    with pytest.raises(TaskError, match="imports utils, which the folder does not ship"):
        gpumode.import_problem(f)
    with pytest.raises(TaskError, match=r"no task\.yml"):
        gpumode.import_problem(tmp_path)
    assert len(gpumode.find_problems(GM)) == 8


def test_task_names_are_identifiers() -> None:
    assert task_name("1_Square matrix-mult_", "kb_") == "kb_1_square_matrix_mult"
    assert task_name("..", "gm_") == "gm_problem"


# ---- every path an importer follows stays in the problem's tree ------------------------
GM_REF = ("def ref_kernel(data):\n    return data\n\n"
          "def generate_input(n, seed):\n    return None\n")


def gm_with_files(root: Path, files: list[tuple[str, str]]) -> Path:
    """A problem set ``root/set`` with one problem ``root/set/p`` whose task.yml lists ``files``."""
    entries = "".join(f'  - {{"name": "{n}", "source": "{s}"}}\n' for n, s in files)
    return write_problem(root / "set" / "p", f'files:\n{entries}tests:\n  - {{"n": 4, "seed": 1}}\n',
                         GM_REF)


def secret_file(tmp_path: Path) -> Path:
    """A host file outside every problem folder, mode 0600 (what the attack copied)."""
    s = tmp_path / "secret.py"
    s.write_text("TOKEN = 'host-secret-6f1d'\n")
    s.chmod(0o600)
    return s


@pytest.mark.parametrize("source,why", [
    ("../../secret.py", "leaves"),
    ("../../../../../../../../secret.py", "leaves"),
    ("sub/../../../secret.py", "leaves"),
])
def test_gpumode_files_entry_with_dotdot_outside_the_set_is_refused(
        tmp_path: Path, source: str, why: str) -> None:
    secret_file(tmp_path)
    (tmp_path / "set" / "p" / "sub").mkdir(parents=True)
    f = gm_with_files(tmp_path, [("helper.py", source)])
    with pytest.raises(ProblemPathError, match=why) as e:
        gpumode.import_problem(f)
    assert "files[0]" in str(e.value) and source in str(e.value)


def test_gpumode_absolute_files_entry_is_refused(tmp_path: Path) -> None:
    s = secret_file(tmp_path)
    f = gm_with_files(tmp_path, [("helper.py", str(s))])
    with pytest.raises(ProblemPathError, match="absolute path"):
        gpumode.import_problem(f)


def test_gpumode_non_python_files_entry_is_refused(tmp_path: Path) -> None:
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "id_rsa").write_text("KEY")
    f = gm_with_files(tmp_path, [("helper.py", "../id_rsa")])
    with pytest.raises(ProblemPathError, match=r"not a \.py file"):
        gpumode.import_problem(f)


def test_gpumode_symlinked_helper_file_is_refused(tmp_path: Path) -> None:
    s = secret_file(tmp_path)
    f = gm_with_files(tmp_path, [("helper.py", "helper.py")])
    (f / "helper.py").symlink_to(s)
    with pytest.raises(ProblemPathError, match="symbolic link"):
        gpumode.import_problem(f)
    # task.py / utils.py picked up beside reference.py are followed too
    g = write_problem(tmp_path / "set" / "q", 'tests:\n  - {"n": 4, "seed": 1}\n', GM_REF)
    (g / "utils.py").symlink_to(s)
    with pytest.raises(ProblemPathError, match="symbolic link"):
        gpumode.import_problem(g)


def test_gpumode_helper_through_symlinked_folder_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "h.py").write_text("X = 1\n")
    f = gm_with_files(tmp_path, [("h.py", "lib/h.py")])
    (f / "lib").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ProblemPathError, match="lib is a symbolic link"):
        gpumode.import_problem(f)


def test_gpumode_symlinked_reference_or_task_yml_is_refused(tmp_path: Path) -> None:
    s = secret_file(tmp_path)
    f = write_problem(tmp_path / "set" / "p", 'tests:\n  - {"n": 4, "seed": 1}\n', GM_REF)
    (f / "reference.py").unlink()
    (f / "reference.py").symlink_to(s)
    with pytest.raises(ProblemPathError, match=r"reference\.py is a symbolic link"):
        gpumode.import_problem(f)
    g = write_problem(tmp_path / "set" / "q", 'tests:\n  - {"n": 4, "seed": 1}\n', GM_REF)
    real = tmp_path / "real.yml"
    (g / "task.yml").rename(real)
    (g / "task.yml").symlink_to(real)
    with pytest.raises(ProblemPathError, match=r"task\.yml is a symbolic link"):
        gpumode.import_problem(g)
    with pytest.raises(TaskError, match="no GPU MODE problem folders"):
        gpumode.find_problems(tmp_path / "set")  # neither linked problem is found in a scan


def test_gpumode_nested_and_set_level_helpers_still_import(tmp_path: Path) -> None:
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "utils.py").write_text("SHARED = 1\n")
    f = gm_with_files(tmp_path, [("helpers.py", "lib/deep/helpers.py"), ("utils.py", "../utils.py"),
                                 ("dot.py", "./lib/../lib/deep/dot.py")])
    (f / "lib" / "deep").mkdir(parents=True)
    (f / "lib" / "deep" / "helpers.py").write_text("NESTED = 2\n")
    (f / "lib" / "deep" / "dot.py").write_text("DOT = 3\n")
    mods = gpumode.import_problem(f).spec.problem.support_modules  # type: ignore[union-attr]
    assert mods == {"helpers": "NESTED = 2\n", "utils": "SHARED = 1\n", "dot": "DOT = 3\n"}
    # GPU MODE's own examples name ../utils.py: they still import
    assert set(gpumode.import_problem(GM / "rmsnorm").spec.problem.support_modules) >= {"utils"}  # type: ignore[union-attr]


def test_cli_import_refuses_an_escaping_files_entry_and_writes_nothing(tmp_path: Path) -> None:
    secret_file(tmp_path)
    f = gm_with_files(tmp_path, [("helper.py", "../../secret.py")])
    out = tmp_path / "out"
    out.mkdir()

    @click.group()
    def cli() -> None:
        pass

    register(cli)
    result = CliRunner().invoke(cli, ["task", "import", "gpumode", str(f), "--out", str(out),
                                      "--no-verify"])
    assert result.exit_code == 2, result.output
    assert "files[0]" in result.output and "leaves" in result.output
    assert "host-secret" not in result.output
    assert list(out.iterdir()) == []


def test_kernelbench_symlinked_problem_file_is_refused_and_skipped(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.py"
    real.write_text((KB / "5_Linear_GELU.py").read_text())
    probs = tmp_path / "problems"
    probs.mkdir()
    (probs / "linked.py").symlink_to(real)
    (probs / "real.py").write_text(real.read_text())
    with pytest.raises(ProblemPathError, match="symbolic link"):
        kernelbench.import_problem(probs / "linked.py")
    assert kernelbench.find_problems(probs) == [probs / "real.py"]
    assert kernelbench.import_problem(probs / "real.py").spec.name == "kb_real"


def test_task_check_refuses_a_task_folder_whose_reference_is_a_link(tmp_path: Path) -> None:
    task = write_task(kernelbench.import_problem(KB / "5_Linear_GELU.py"), tmp_path)
    confined_task_folder(task)
    (task / "reference.py").unlink()
    (task / "reference.py").symlink_to(secret_file(tmp_path))

    @click.group()
    def cli() -> None:
        pass

    register(cli)
    result = CliRunner().invoke(cli, ["task", "check", str(task), "--backend", "bwrap"])
    assert result.exit_code == 2 and "symbolic link" in result.output, result.output


def _guess(src: str) -> list[int]:
    fn = ast.parse(src).body[0]
    assert isinstance(fn, ast.FunctionDef)
    return gpumode.scratch_positions(fn)


def test_the_syntactic_buffer_guess_follows_method_chains_and_in_place_fills() -> None:
    """Only the fallback (the sandbox classifies by behaviour), but no longer blind to
    ``.contiguous()`` or fooled by ``empty`` then ``uniform_``."""
    assert _guess("def g(n):\n    a = torch.randn(n).contiguous()\n"
                  "    c = torch.empty(n, device='cuda').contiguous()\n    return a, c\n") == [1]
    assert _guess("def g(n):\n    a = torch.randn(n)\n    return a, torch.zeros(n).contiguous()\n") == [1]
    assert _guess("def g(m, k):\n    a = torch.empty(m, k).uniform_(-1, 1)\n"
                  "    b = torch.empty(k, m)\n    b.uniform_()\n    c = torch.empty(m)\n"
                  "    c[0] = 1\n    return a, b, c\n") == []


def test_gpumode_replicas_record_how_buffers_and_values_are_decided() -> None:
    for name, guess in (("prefixsum", [1]), ("histogram", [1]), ("vectoradd_out", [2]),
                        ("matmul", [])):
        task = gpumode.import_problem(GM / name)
        p = task.spec.problem
        assert p is not None and p.scratch == guess and p.strict is False, name
        assert any("found by behaviour" in n for n in task.notes), name
        assert any("check_implementation decides values and dtypes" in n for n in task.notes), name
    strict = gpumode.import_problem(GM / "prefixsum", overrides={"problem": {
        **gpumode.import_problem(GM / "prefixsum").spec.problem.model_dump(),  # type: ignore[union-attr]
        "strict": True}})
    assert strict.spec.problem is not None and strict.spec.problem.strict
    assert strict.spec.problem.to_wire().strict is True
    assert any(n.startswith("strict:") for n in strict.notes)
