"""The command line, run as a user would: real files in, CSVs and one-line errors out."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sinkscope import lab
from sinkscope.cli import figure_command, parser
from sinkscope.findings.words import NEEDS_CONTEXT

from tests.helpers import cli

pytestmark = pytest.mark.slow  # see pytest.ini: which worker, and whether make check runs them

ROOT = Path(__file__).resolve().parent.parent


def process(*args: str) -> subprocess.CompletedProcess:
    """``python -m sinkscope ARGS`` in a process of its own, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "sinkscope", *args], cwd=ROOT, capture_output=True, text=True)


def test_analyze_writes_the_documented_csvs_and_json(tmp_path: Path) -> None:
    text = tmp_path / "essay.txt"
    text.write_text("The first token collects attention that has nowhere else to go.", encoding="utf-8")
    heads, layers, out = tmp_path / "heads.csv", tmp_path / "layers.csv", tmp_path / "out.json"
    keys = tmp_path / "keys.csv"
    done = process("analyze", "--text-file", str(text), "--heads-csv", str(heads), "--layers-csv", str(layers),
                   "--keys-csv", str(keys), "--json", str(out), "--eps", "0.4")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "sink rate (eps=0.4" in done.stdout and "float32" in done.stdout
    head_rows = list(csv.DictReader(heads.open()))
    columns = ["layer", "head", "sink", "diagonal", "previous_token", "entropy", "value_sink", "learned_sink", "kind"]
    assert list(head_rows[0]) == columns
    assert len(head_rows) == 30 * 9
    layer_rows = list(csv.DictReader(layers.open()))
    assert list(layer_rows[0])[:2] == ["layer", "top1"] and len(layer_rows) == 31
    report = json.loads(out.read_text())
    assert report["eps"] == 0.4 and len(report["heads"]) == 270 and report["tokens"][0] == "The"
    key_rows = list(csv.DictReader(keys.open(encoding="utf-8")))
    assert list(key_rows[0]) == ["layer", "position", "token", "key_sink"]
    assert len(key_rows) == 30 * (report["n_tokens"] - 1) == len(report["keys"])  # the last key: no later query
    assert key_rows[1]["token"] == report["tokens"][1]
    for layer in (0, 12, 29):  # key 0's column is the layer's mean sink score, as heads.csv has it
        sinks = [float(row["sink"]) for row in head_rows if int(row["layer"]) == layer]
        first = next(float(row["key_sink"]) for row in key_rows if (row["layer"], row["position"]) == (str(layer), "0"))
        assert first == pytest.approx(sum(sinks) / len(sinks), abs=1e-6)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["analyze", "--text", "   "], "empty"),
        (["analyze", "--text-file", "/no/such/file.txt"], "no such file"),
        (["analyze", "--model", "nope", "--text", "hi"], "Unknown model 'nope'"),
        (["analyze", "--text", "word " * 9000], "--max-tokens"),
        (["stream", "--methods", "dense,bogus", "--tokens", "50"], "Unknown method"),
        (["stream", "--window", "0"], "--window: 0 must be between 1 and 8192"),
        (["stream", "--tokens", "50"], "50 tokens never fill a cache of 4 + 252"),
    ],
)
def test_errors_print_one_line_and_no_traceback(args: list[str], message: str) -> None:
    done = cli(*args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len([line for line in done.stderr.splitlines() if line.startswith("error:")]) == 1


def test_binary_and_non_utf8_files_are_refused(tmp_path: Path) -> None:
    binary, latin = tmp_path / "a.bin", tmp_path / "b.txt"
    binary.write_bytes(b"\x7fELF\x00\x01")
    latin.write_bytes("caf\u00e9".encode("latin-1"))
    assert "binary" in cli("analyze", "--text-file", str(binary)).stderr
    assert "not UTF-8" in cli("analyze", "--text-file", str(latin)).stderr


def test_max_tokens_truncates_instead_of_refusing() -> None:
    done = cli("analyze", "--text", "word " * 9000, "--max-tokens", "64")
    assert done.returncode == 0, done.stderr
    assert "64 tokens" in done.stdout


def test_stream_reports_one_row_per_method(tmp_path: Path) -> None:
    table, curve = tmp_path / "s.csv", tmp_path / "p.csv"
    done = cli("stream", "--tokens", "80", "--sinks", "4", "--window", "12", "--methods", "dense,sinks,mask-window",
               "--csv", str(table), "--per-token-csv", str(curve))  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(table.open()))
    assert [r["method"] for r in rows] == ["dense", "sinks", "mask-window"]
    assert list(rows[0]) == ["method", "sinks", "window", "tokens", "ppl", "seconds"]
    assert (rows[1]["sinks"], rows[1]["window"], rows[2]["window"]) == ("4", "12", "16")
    assert len(list(csv.DictReader(curve.open()))) == 79


def test_lab_commands_report_and_save_a_run(tmp_path: Path) -> None:
    report = tmp_path / "polarize.json"
    options = ["--attention", "softmax", "--steps", "200", "--save", str(tmp_path)]
    done = cli("lab", "polarize", *options, "--json", str(report))
    assert done.returncode == 0, done.stderr
    numbers = json.loads(report.read_text())
    assert numbers["final_entropy"] < 1 and numbers["ratio_curve"][0]["step"] == 1
    saved = lab.PolarizeRun.load(tmp_path / "softmax-logistic-seed0.json")
    assert saved.settings["steps"] == 200 and saved.entropy[-1] == numbers["final_entropy"]
    for task, heads in (("induction", 8), ("backcopy", 1)):
        out = tmp_path / f"{task}.json"
        options = ["--attention", "sigmoid", "--steps", "20", "--seed", "3", "--save", str(tmp_path / task)]
        done = cli("lab", task, *options, "--json", str(out))
        assert done.returncode == 0, done.stderr
        assert "first head >= 0.9 at dormant queries" in done.stdout
        assert (tmp_path / task / "sigmoid-seed3.json").exists()
        report = json.loads(out.read_text())
        assert report["task"] == task and report["steps"] == 20 and len(report["heads"]) == heads
        assert {"bos_dormant", "bos_active", "total_dormant", "total_active"} <= set(report["heads"][0])


def test_intervene_prints_loss_and_predictions_before_and_after(tmp_path: Path) -> None:
    text = tmp_path / "capitals.txt"
    text.write_text("The capital of France is Paris. The capital of Italy is", encoding="utf-8")
    out = tmp_path / "out.json"
    changes = ["--drop-first", "1", "--layers", "2-29", "--replace-first", r"\n", "--force", "sink-to-diagonal"]
    done = cli("intervene", "--text-file", str(text), *changes, "--perturb", "5", "--json", str(out))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[2].startswith("intact") and "␣Rome" in lines[2]
    assert any(line.startswith("drop the first key in layers 2-29") for line in lines)
    assert any("first token replaced by '↵'" in line for line in lines)
    report = json.loads(out.read_text())
    dropped = report["interventions"][0]
    assert dropped["loss_change"] > 0 and max(dropped["sink_per_layer"][2:]) == 0
    assert report["intact"]["top"][0]["token"] == "␣Rome" and len(report["interventions"]) == 3
    assert set(report["sensitivity"]["kl"]) == {"0", "5"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--text", "Some text here"], "Choose at least one intervention"),
        (["--text", "Some text here", "--drop-first", "1", "--layers", "2-99"], "outside this model's layers 0-29"),
        (["--text", "Some text here", "--drop-first", "1", "--layers", "two"], "is not a list like"),
        (["--text", "Some text here", "--replace-first", "many words here"], "exactly one"),
        (["--text", "Some text here", "--perturb", "50"], "past the last token"),
        (["--text", "   ", "--drop-first", "1"], "The text is empty"),
        (["--text", "Some text here", "--drop-first", "0"], "--drop-first: 0 must be between 1 and 8192"),
        (["--text", "Some text here", "--drop-first", "5"], "drops every key of this 3-token text"),
        (["--text", "Some text here", "--zero-massive", "--from-layer", "999"], "past this model's last layer"),
    ],
)
def test_intervene_explains_bad_input_in_one_line(args: list[str], message: str) -> None:
    done = cli("intervene", *args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["analyze", "--text", "a b", "--eps", "-1"], "--eps: -1 must be between 0 and 1 (both excluded)"),
        (["analyze", "--text", "a b", "--eps", "nan"], "--eps: nan must be between 0 and 1"),
        (["intervene", "--text", "a b", "--perturb", "1", "--size", "nan"], "--size: nan must be between 0 and 1000"),
        (["lab", "backcopy", "--lr", "nan"], "--lr: nan must be between 1e-06 and 10.0"),
        (["lab", "backcopy", "--seed", "-1"], "--seed: -1 must be between 0 and 4294967295"),
        (["analyze", "--text", "a b", "--device", "bogus"], "invalid choice: 'bogus'"),
        (
            ["analyze", "--text", "a b", "--json", "/no/such/folder/out.json"],
            "the folder /no/such/folder does not exist",
        ),
        (["analyze", "--text", "a b", "--json", "/tmp"], "is a folder; give a file name"),
        (["lab", "backcopy", "--save", "/etc/hostname"], "is a file; give a folder"),
    ],
)
def test_bad_arguments_get_one_error_line_before_any_work(args: list[str], message: str) -> None:
    done = cli(*args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], done.stderr


def test_a_device_this_machine_lacks_says_which_it_has() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    done = cli("analyze", "--text", "a b", "--device", "cuda")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "error: Device 'cuda' is not available on this machine; available: cpu (or auto)."
    )


def test_cost_writes_the_sweep_the_page_reads(tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    done = cli("cost", "--max-length", "16", "--dim", "8", "--json", str(out))
    assert done.returncode == 0, done.stderr
    assert "aligned  sink" in done.stdout and "slope" in done.stdout
    report = json.loads(out.read_text())
    assert set(report["slopes"]) == {"aligned/sink", "aligned/diagonal", "random/sink", "random/diagonal"}
    assert [p["n_tokens"] for p in report["points"]][:2] == [8, 8] and len(report["points"]) == 8
    shipped = json.loads((ROOT / "assets" / "cost.json").read_text())
    assert set(shipped) == set(report) and set(shipped["points"][0]) == set(report["points"][0])


def test_an_output_the_system_refuses_is_one_line_and_exit_2() -> None:
    done = cli("cost", "--dim", "4", "--max-length", "8", "--json", "/proc/sinkscope.json")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: cannot write /proc/sinkscope.json: No such file or directory."
    ]


def test_figure_writes_a_texts_slides_with_their_captions_in_the_language_asked(tmp_path: Path) -> None:
    done = process(
        "figure", "--text", "Le gardien du phare montait l'escalier.", "--out", str(tmp_path), "--lang", "fr"
    )
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if not line.startswith("Loading ")] == []  # no Kaleido chatter
    names = ["head_map", "kind_counts", "depth_profile", "sink_head", "diagonal_head", "key_map", "first_writes",
             "qk_terms"]  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{n}.{f}" for n in names for f in ("png", "svg"))
    assert all((tmp_path / f"{n}.png").read_bytes().startswith(b"\x89PNG") for n in names)
    sink = (tmp_path / "sink_head.svg").read_text(encoding="utf-8")
    assert "SmolLM2-135M-Instruct" in sink and "“Le gardien du phare montait l&#x27;escalier.”" in sink
    assert "Couche 18, tête 8 : le puits le plus fort" in sink  # the example head, titled in French
    assert "Pourquoi la tête 8 de la couche 18 regarde-t-elle" in (tmp_path / "qk_terms.svg").read_text(
        encoding="utf-8"
    )
    asked = {flags: figure_command.formats(parser().parse_args(["figure", "--text", "x", "--out", "o", *flags]))
             for flags in ((), ("--png",), ("--svg",), ("--png", "--svg"))}  # fmt: skip
    assert list(asked.values()) == [("png", "svg"), ("png",), ("svg",), ("png", "svg")]


def test_figure_without_chromium_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sinkscope.plot.export.available", lambda: False)
    done = cli("figure", "--text", "Hello.", "--out", "/tmp/unused")
    assert done.returncode == 2 and done.stderr.strip().endswith("apt-get install chromium, or BROWSER_PATH.")


@pytest.mark.parametrize("out", ["", "   ", "file"])
def test_figure_checks_its_folder_before_the_model_loads(
    out: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 38, item 3: --out "" wrote into the current folder, and --out was checked after 8-12 s of work."""
    monkeypatch.setattr("sinkscope.plot.export.available", lambda: True)
    monkeypatch.setattr(figure_command, "load", lambda args: pytest.fail("the model loaded before --out was checked"))
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.chdir(tmp_path)
    done = cli("figure", "--text", "Hello.", "--out", out)
    assert done.returncode == 2 and done.stderr.startswith("error: --out") and len(done.stderr.splitlines()) == 1


def test_kv_writes_a_row_per_bits_and_protection_beside_the_dense_cache(tmp_path: Path) -> None:
    examples = json.loads((ROOT / "assets" / "examples.json").read_text(encoding="utf-8"))
    text = tmp_path / "english.txt"  # long enough for a perplexity to mean something (18 tokens: 425 dense)
    text.write_text(next(e["text"] for e in examples if e["id"] == "english"), encoding="utf-8")
    done = cli("kv", "--text-file", str(text), "--bits", "2", "--protect", "none,sinks", "--out", str(tmp_path / "kv"))
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader((tmp_path / "kv" / "kv.csv").open(encoding="utf-8")))
    assert list(rows[0]) == ["bits", "protect", "residual", "perplexity"]
    assert [(row["bits"], row["protect"]) for row in rows] == [("dense", "-"), ("2", "none"), ("2", "sinks")]
    dense, bare, kept = (float(row["perplexity"]) for row in rows)
    assert dense < bare and kept < bare  # two bits cost perplexity; keeping the sinks gives some back
    assert "sinks kept by 'sinks': 0" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--bits", "5"], "--bits 5: choose from 2, 3, 4, 8"),
     (["--protect", "all"], "--protect all: choose from none, first4, sinks"),
     (["--residual", "12"], "--residual 12: 0 or a multiple of 32")],
)  # fmt: skip
def test_kv_names_a_wrong_choice_in_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    done = cli("kv", "--text", "Hello there.", "--out", str(tmp_path), *args)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_kv_with_a_budget_also_runs_the_eviction_policies(tmp_path: Path) -> None:
    examples = json.loads((ROOT / "assets" / "examples.json").read_text(encoding="utf-8"))
    text = tmp_path / "portuguese.txt"
    text.write_text(next(e["text"] for e in examples if e["id"] == "portuguese"), encoding="utf-8")
    done = cli("kv", "--text-file", str(text), "--bits", "8", "--protect", "none", "--budget", "32",
               "--out", str(tmp_path / "kv"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader((tmp_path / "kv" / "evict.csv").open(encoding="utf-8")))
    assert [row["policy"] for row in rows] == ["window", "sinks_window", "h2o", "h2o_sinks"]
    assert float(rows[0]["first_kept"]) == 0 and float(rows[1]["first_kept"]) == 1 == float(rows[3]["first_kept"])
    too_long = cli("kv", "--text", "Hello there.", "--budget", "64", "--bits", "8", "--out", str(tmp_path / "short"))
    assert too_long.returncode == 2 and "--budget 64: A cache of 64 tokens never fills" in too_long.stderr
    assert not (tmp_path / "short").exists()  # refused before kv.csv is written


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--out", ""], "--out is empty"),
     (["--max-tokens", "1", "--out", "{tmp}"], "give it two"),
     (["--budget", "7.5", "--out", "{tmp}"], "--budget"),
     (["--budget", "4", "--out", "{tmp}"], "cannot hold the 4 sinks")],
)  # fmt: skip
def test_kv_refuses_what_it_cannot_measure_in_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    done = cli("kv", "--text", "The keeper climbed the stairs at dusk and wrote the weather.", "--bits", "8",
               *[arg.replace("{tmp}", str(tmp_path / "out")) for arg in args])  # fmt: skip
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_kv_heads_writes_each_heads_loss_change_duoattentions_policy_curve_and_the_figures(tmp_path: Path) -> None:
    examples = json.loads((ROOT / "assets" / "examples.json").read_text(encoding="utf-8"))
    text = tmp_path / "portuguese.txt"
    text.write_text(next(e["text"] for e in examples if e["id"] == "portuguese"), encoding="utf-8")
    done = cli("kv", "--text-file", str(text), "--bits", "8", "--protect", "none", "--budget", "16", "--heads",
               "--figures", "--lang", "pt", "--out", str(tmp_path / "kv"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = {"kv_curves", "kv_kept", "kv_evict_curves", "kv_heads_map", "kv_duo"}
    assert {path.name for path in (tmp_path / "kv").iterdir()} >= {f"{n}.{f}" for n in figures for f in ("png", "svg")}
    assert "cabeça" in (tmp_path / "kv" / "kv_heads_map.svg").read_text(encoding="utf-8")  # in the language asked
    heads = list(csv.DictReader((tmp_path / "kv" / "heads.csv").open(encoding="utf-8")))
    columns = ["layer", "head", "loss_change", "low", "high", "estimated", "needs_context", "within_noise"]
    assert len(heads) == 30 * 9 and list(heads[0]) == columns
    assert {row["needs_context"] for row in heads} <= {"True", "False"}
    assert all(float(row["low"]) <= float(row["high"]) for row in heads)
    assert {row["estimated"] for row in heads} <= {"True", "False"}
    estimated = [row for row in heads if row["estimated"] == "True"]  # left estimated only far under the threshold
    assert all(float(row["high"]) <= math.log1p(NEEDS_CONTEXT) for row in estimated)
    duo = list(csv.DictReader((tmp_path / "kv" / "duo.csv").open(encoding="utf-8")))
    assert [row["order"] for row in duo] == ["ranked"] * 6 + ["random"] * 6
    assert float(duo[5]["perplexity"]) == pytest.approx(float(duo[5]["dense"]), rel=1e-4)  # all whole: dense
    assert float(duo[0]["cache_kept"]) < float(duo[5]["cache_kept"]) == 1
    alone = cli("kv", "--text", "Hello there.", "--heads", "--out", str(tmp_path / "alone"))
    assert alone.returncode == 2 and "--heads needs --budget" in alone.stderr
    exact = cli("kv", "--text", "Hello there.", "--budget", "8", "--exact", "--out", str(tmp_path / "exact"))
    assert exact.returncode == 2 and "give --heads too" in exact.stderr


@pytest.mark.parametrize(("flag", "value", "message"), [("--bits", "5", "--bits 5: choose from 2, 3, 4, 8"),
                                                       ("--residual", "7", "--residual 7: 0 or a multiple of 32"),
                                                       ("--out", "", "--out is empty")])  # fmt: skip
def test_kv_flags_are_refused_before_torch_loads(flag: str, value: str, message: str) -> None:
    args = ["kv", "--text", "Hello there.", "--out", "kv-out", flag, value]
    code = ("import sys; from sinkscope.cli import main; status = main(sys.argv[1:]); "
            "print(status, 'torch' in sys.modules)")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["2", "False"] and message in done.stderr, done.stderr
