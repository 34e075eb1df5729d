"""sinkscope as a library: installable on its own, importable without torch where it promises, no cycles,
and the examples in its docstrings run."""

from __future__ import annotations

import ast
import doctest
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "backend" / "sinkscope"
LIGHT = (
    "sinkscope.cli",
    "sinkscope.plot",
    "sinkscope.plot.export",
    "sinkscope.plot.handout",
    "sinkscope.core.metrics",
    "sinkscope.serving.settings",
    "sinkscope.core.names",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """Every sinkscope module ``path`` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        found |= {name for name in names if name in modules}
    return found


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imports_of(path, set(paths)) - {name} for name, path in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path of module names, or None (depth-first search with three colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node], _ = 1, path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node], _ = 2, path.pop()
        return None

    return next((cycle for node in sorted(graph) if node not in state and (cycle := visit(node))), None)


def test_the_package_has_no_import_cycles() -> None:
    graph = import_graph()
    assert "sinkscope.cli.intervene_command" in graph and len(graph) > 20
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_figures_and_the_census_never_import_the_experiments() -> None:
    """Figures read results, the census reads texts: neither pulls the experiments (and torch) in through them."""
    graph = import_graph()
    layers = ("sinkscope.plot", "sinkscope.census")
    crossing = sorted(f"{module} -> {target}" for module, targets in graph.items() if module.startswith(layers)
                      for target in targets if target.startswith("sinkscope.experiments"))  # fmt: skip
    assert any(module.startswith("sinkscope.plot.kv_slides") for module in graph) and crossing == []


def test_the_cycle_check_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]


def test_the_command_line_figures_metrics_and_settings_load_no_torch() -> None:
    code = f"import sys\nfor m in {LIGHT!r}: __import__(m)\n"
    code += "print(sorted(m for m in ('torch', 'transformers', 'streamlit') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(("given", "expected"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_openmp_threads_sleep_while_they_wait_unless_the_user_says_otherwise(given: str | None, expected: str) -> None:
    """Set before torch loads (libgomp reads it once), and never over the user's own setting."""
    code = "import os, sinkscope, sinkscope.core.capture\nprint(os.environ['OMP_WAIT_POLICY'])"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env |= {"OMP_WAIT_POLICY": given} if given else {}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert done.stdout.strip() == expected


def test_the_package_root_loads_its_api_on_first_use() -> None:
    import sinkscope

    assert {"analyze", "load_model", "intervene", "plot", "Trace"} <= set(dir(sinkscope))
    assert sinkscope.DropFirst.__module__ == "sinkscope.experiments.interventions"
    with pytest.raises(AttributeError):
        sinkscope.no_such_thing  # noqa: B018


@pytest.mark.parametrize("module", ["sinkscope.plot", "sinkscope.core.metrics", "sinkscope.core.arrays", "sinkscope"])
def test_docstring_examples_run(module: str) -> None:
    """The examples a researcher copies from the docstrings (the package's runs the bundled model)."""
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.slow
def test_pip_install_gives_a_working_cli_and_api_without_the_app(tmp_path: Path) -> None:
    """``pip install ./backend`` on its own (dependencies already here), used from outside the repository."""
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "--target", str(target), str(ROOT / "backend")], check=True, capture_output=True)
    assert (target / "sinkscope" / "locales" / "fr.json").is_file()
    assert (target / "sinkscope" / "plot" / "figures.css").is_file()  # the HTML figures' stylesheet
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    out = tmp_path / "out.json"
    command = [str(target / "bin" / "sinkscope"), "analyze", "--model", "smollm2-135m"]
    command += ["--text", "The capital of France is Paris.", "--json", str(out)]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["n_tokens"] == 7 and len(report["heads"]) == 30 * 9 and "bos_cosine_raw" in report["layers"][0]
    code = (
        "import sys; sys.modules['streamlit'] = None\n"  # importing streamlit now fails: the API must not need it
        "import sinkscope\n"
        "assert sinkscope.__file__.startswith(sys.argv[1]), sinkscope.__file__\n"
        "trace = sinkscope.analyze(sinkscope.load_model('smollm2-135m'), 'The capital of France is Paris.')\n"
        "print(trace.to_pandas().shape, sinkscope.plot.fig_head_map(trace.heads, 'sink').layout.title.text)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(target)], cwd=tmp_path, env=env, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split("\n")[0] == "(270, 9) sink score: attention to the first<br>token"


def test_the_distribution_keeps_the_app_out_of_its_required_dependencies() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "backend" / "pyproject.toml").read_text())["project"]
    required = " ".join(project["dependencies"])
    assert "streamlit" not in required and "torch" in required
    assert any(dep.startswith("streamlit") for dep in project["optional-dependencies"]["app"])
    assert project["scripts"]["sinkscope"] == "sinkscope.cli:main"


@pytest.mark.slow
def test_the_quickstart_notebook_runs_headless_and_is_committed_without_outputs(tmp_path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(ROOT / "docs" / "quickstart.ipynb", as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    figures = [o for cell in code for o in cell.outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figures) == 4
    printed = "".join(o.get("text", "") for cell in code for o in cell.outputs)
    assert "without the first key" in printed and "loss" in printed
