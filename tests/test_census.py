"""The census on a local Ray instance with 2 CPUs: its numbers equal direct analyses, resumes write no
duplicates, a killed worker is retried, and bad corpora get one clear error or a counted skip."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
from sinkscope.census import files as census_files
from sinkscope.census import runner
from sinkscope.census.corpus import content_id
from sinkscope.census.runner import CensusRequest, Cluster, run_census
from sinkscope.cli import main
from sinkscope.core.capture import analyze_ids
from sinkscope.core.errors import InputError, ModelLoadError
from sinkscope.core.models import load_model
from sinkscope.core.names import HEAD_METRICS
from sinkscope.core.tokens import cut_windows

from tests.tiny import corpus

pytestmark = pytest.mark.slow  # see pytest.ini: which worker, and whether make check runs them

ray = pytest.importorskip("ray")
LENGTHS = [16, 32]
ONE = Cluster(workers=1)  # one actor to start per census: the tests check what the driver does


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> object:
    # the reading tasks' worker processes stay up from one census to the next (a run's actors would exceed
    # Ray's default soft limit of one idle worker per CPU and have them killed)
    keep = {"num_workers_soft_limit": 8, "idle_worker_killing_time_threshold_ms": 600_000}
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False, _system_config=keep)
    yield
    ray.shutdown()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Four readable documents (the app's example texts) in a folder with a subfolder."""
    docs = tmp_path / "docs"
    (docs / "more").mkdir(parents=True)
    for i, text in enumerate(corpus()[:4]):
        (docs / ("more" if i == 3 else ".") / f"doc{i}.txt").write_text(text, encoding="utf-8")
    return docs


def heads_of(out: Path) -> pd.DataFrame:
    return census_files.read_heads(out).sort_values(["length", "doc_id", "start", "layer", "head"])


def windows_of(heads: pd.DataFrame) -> pd.DataFrame:
    return heads[["model", "length", "doc_id", "start"]].drop_duplicates()


def test_census_numbers_equal_a_direct_analysis_of_each_window_even_when_a_worker_is_killed(
    folder: Path, tiny_dir: str, tmp_path: Path
) -> None:
    """Two workers, one killed with SIGKILL mid-run: Ray restarts it, and every window is written once, with the
    numbers a direct analysis gives."""
    killed = []

    def kill_one_worker(progress: runner.CensusProgress) -> None:
        workers = [p for p in psutil.process_iter(["cmdline"]) if "CensusWorker" in " ".join(p.info["cmdline"] or [])]
        if not killed and workers:
            os.kill(workers[0].pid, signal.SIGKILL)
            killed.append(workers[0].pid)

    request = CensusRequest(str(folder), [tiny_dir], LENGTHS, windows_per_doc=2)
    summary = run_census(request, tmp_path / "out", Cluster(workers=2), progress=kill_one_worker)
    assert killed
    heads = heads_of(tmp_path / "out")
    assert not heads.duplicated(["length", "doc_id", "start", "layer", "head"]).any()
    loaded = load_model(tiny_dir)
    layers = pd.read_parquet(tmp_path / "out" / "layers")
    expected_windows = 0
    for path in sorted(folder.rglob("*.txt")):
        doc_id = str(path.relative_to(folder))
        for length in LENGTHS:
            for start, ids in cut_windows(loaded.tokenizer, path.read_text(encoding="utf-8"), length, 2):
                expected_windows += 1
                trace = analyze_ids(loaded, ids)
                rows = heads[(heads.doc_id == doc_id) & (heads.length == length) & (heads.start == start)]
                assert len(rows) == trace.shape[0] * trace.shape[1]
                for metric in HEAD_METRICS:
                    np.testing.assert_allclose(rows[metric], trace.heads[metric].ravel(), atol=1e-5, err_msg=metric)
                assert rows["kind"].tolist() == trace.heads["kind"].ravel().tolist()
                window = layers[(layers.doc_id == doc_id) & (layers.length == length) & (layers.start == start)]
                keys = window.sort_values("layer")[list(census_files.KEY_SINK_COLUMNS)].to_numpy()  # (layer + 1, key)
                np.testing.assert_allclose(keys[:-1], trace.key_sink[:, : census_files.KEY_POSITIONS], atol=1e-5)
                assert np.isnan(keys[-1]).all()  # h^L: no attention reads it
    assert summary.windows == expected_windows == len(windows_of(heads)) == 4 * 2 * 2
    assert summary.docs == 4 and summary.skipped == {}
    assert len(layers) == expected_windows * (loaded.info.n_layers + 1)
    manifest = census_files.read_manifest(tmp_path / "out")
    assert manifest["complete"] and manifest["request"]["lengths"] == LENGTHS


def test_a_rerun_skips_written_windows_and_an_interrupted_run_resumes(
    folder: Path, tiny_dir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, request = tmp_path / "out", CensusRequest(str(folder), [tiny_dir], LENGTHS, windows_per_doc=2)
    monkeypatch.setattr(runner, "FLUSH_WINDOWS", 2)

    def crash(progress: runner.CensusProgress) -> None:
        if progress.windows >= 5:
            raise KeyboardInterrupt  # the user pressed Ctrl-C mid-run

    with pytest.raises(KeyboardInterrupt):
        run_census(request, out, ONE, progress=crash)
    assert not census_files.read_manifest(out)["complete"]
    written = len(windows_of(heads_of(out)))
    assert 0 < written
    part = next((out / "heads").rglob("part-*.parquet"))  # a crash between the two renames of a later part
    part.with_name("part-orphan.parquet").write_bytes(part.read_bytes())
    (part.parent / ".part-half.parquet.tmp").write_bytes(b"PAR1 half a file")
    resumed = run_census(request, out, ONE)
    heads = heads_of(out)
    assert resumed.already == written and resumed.windows + written == len(windows_of(heads))
    assert not heads.duplicated(["length", "doc_id", "start", "layer", "head"]).any()
    assert not list(out.rglob("*.tmp")) and not list(out.rglob("part-orphan.parquet"))
    again = run_census(request, out, ONE)
    assert again.windows == 0 and again.already == len(windows_of(heads))


def test_unreadable_documents_are_skipped_and_counted(folder: Path, tiny_dir: str, tmp_path: Path) -> None:
    (folder / "binary.txt").write_bytes(b"\x00\x01\x02 not text")
    (folder / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (folder / "short.txt").write_text("tiny", encoding="utf-8")
    summary = run_census(CensusRequest(str(folder), [tiny_dir], [16]), tmp_path / "out", ONE)
    assert summary.skipped == {"binary_file": 1, "not_utf8": 1, "too_short": 1}
    assert summary.windows == 4 and summary.docs == 7


def test_a_parquet_corpus_reads_its_text_column(tiny_dir: str, tmp_path: Path) -> None:
    pd.DataFrame({"body": corpus()[:3]}).to_parquet(tmp_path / "docs.parquet")
    request = CensusRequest(str(tmp_path / "docs.parquet"), [tiny_dir], [16], text_column="body")
    assert run_census(request, tmp_path / "out", ONE).windows == 3
    with pytest.raises(InputError, match="no column 'text'.*body"):
        run_census(CensusRequest(str(tmp_path / "docs.parquet"), [tiny_dir], [16]), tmp_path / "x")


@pytest.mark.parametrize(
    ("corpus_of", "lengths", "model", "error"),
    [
        (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", [16], None, "no documents to read"),
        (lambda tmp: tmp / "missing", [16], None, "no such file or folder"),
        (lambda tmp: tmp / "docs.csv", [16], None, "a corpus is a folder"),
        (lambda tmp: tmp / "docs", [8192], None, "over .* limit of 4,096"),
        (lambda tmp: tmp / "docs", [1], None, "2 tokens or more"),
        (lambda tmp: tmp / "docs", [16], "no-such-model", "no-such-model"),
        (lambda tmp: tmp / "docs", [4000], None, "No window could be cut"),
        (lambda tmp: tmp / "x.parquet", [16], None, "x.parquet is not a readable Parquet file"),
    ],
)
def test_bad_corpora_and_arguments_give_one_clear_error(
    folder: Path, tiny_dir: str, tmp_path: Path, corpus_of: object, lengths: list[int], model: str | None, error: str
) -> None:
    (tmp_path / "docs.csv").write_text("text\nhello\n", encoding="utf-8")
    (tmp_path / "x.parquet").write_bytes(b"not parquet at all")  # pyarrow's ArrowInvalid, not an OSError
    source = corpus_of(tmp_path)
    with pytest.raises((InputError, ModelLoadError), match=error):
        run_census(CensusRequest(str(source), [model or tiny_dir], lengths), tmp_path / "out", ONE)
    assert not list((tmp_path / "out").rglob("part-*.parquet"))


def test_the_command_line_writes_a_census_and_says_what_is_wrong_in_one_line(
    folder: Path, tiny_dir: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    assert (
        main(["census", str(folder), "--model", tiny_dir, "--lengths", "16", "--workers", "1", "--out", str(out)]) == 0
    )
    said = capsys.readouterr()
    assert "4 windows analyzed" in said.out and "census" in said.err  # the progress bar
    assert len(windows_of(heads_of(out))) == 4
    assert main(["census", str(tmp_path / "missing"), "--model", tiny_dir, "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [f"error: Cannot read the corpus {tmp_path / 'missing'}: no such file or folder."]


class AddsBos:
    """A tokenizer that starts every text with BOS (id 1), as Gemma's does; one id per character."""

    bos_token_id = 1

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        ids = [ord(ch) for ch in text]
        return {"input_ids": [self.bos_token_id, *ids] if add_special_tokens else ids}

    def get_vocab(self) -> dict[str, int]:
        return {"a": 97}


def test_windows_are_consecutive_start_with_bos_where_the_tokenizer_adds_it_and_are_all_full() -> None:
    windows = cut_windows(AddsBos(), "abcdefghij", length=4, count=5)
    assert windows == [(0, [1, 97, 98, 99]), (3, [1, 100, 101, 102]), (6, [1, 103, 104, 105])]  # "j" is left over
    assert cut_windows(AddsBos(), "abc", length=8, count=1) == []


def test_bad_lines_are_counted_and_repeated_ids_and_identical_texts_stay_separate_documents(
    tiny_dir: str, tmp_path: Path
) -> None:
    """Two lines with one id, one text twice without an id, a line of no JSON and one with no text: four
    documents analyzed, four windows, none merged, two lines skipped and counted."""
    texts = corpus()
    lines = [json.dumps(line) for line in ({"id": "x", "text": texts[0]}, {"id": "x", "text": texts[1]},
             {"text": texts[2]}, {"title": "no text"}, {"text": texts[2]})]  # fmt: skip
    source = tmp_path / "docs.jsonl"
    source.write_text("\n".join([*lines[:3], "{not json", "", *lines[3:]]) + "\n", encoding="utf-8")
    summary = run_census(CensusRequest(str(source), [tiny_dir], [16]), tmp_path / "out", ONE)
    assert (summary.docs, summary.windows, summary.renamed) == (6, 4, 2)
    assert summary.skipped == {"no_text": 1, "bad_json": 1}
    heads = heads_of(tmp_path / "out")
    digest = content_id(texts[2])
    ids = set(heads["doc_id"])
    assert ids == {"x", "x#2", digest, f"{digest}#2"}
    assert heads.groupby("doc_id").size().nunique() == 1  # every document has one window's heads, not two
    assert "2 with an id seen before" in runner.describe(summary)


def test_a_corpus_with_no_readable_document_is_told_why_not_to_shorten_its_windows(
    tiny_dir: str, tmp_path: Path
) -> None:
    source = tmp_path / "docs.jsonl"
    source.write_text('{not json\n{"title": "no text"}\n', encoding="utf-8")
    with pytest.raises(InputError, match="No document of the corpus could be analyzed") as err:
        run_census(CensusRequest(str(source), [tiny_dir], [16]), tmp_path / "out", ONE)
    assert "--lengths" not in str(err.value) and "bad_json 1, no_text 1" in str(err.value)


def test_a_driver_killed_outright_leaves_no_ray_process_and_a_rerun_resumes(tiny_dir: str, tmp_path: Path) -> None:
    """kill -9 of the census command: every process its Ray started is gone within 10 s; the rerun finishes the
    windows still missing and writes none twice."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "sinkscope", "census", "builtin", "--model", tiny_dir, "--lengths", "16",
               "--windows", "2", "--max-docs", "60", "--workers", "1", "--out", str(out)]  # fmt: skip
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    process, deadline = psutil.Process(driver.pid), time.monotonic() + 180
    while time.monotonic() < deadline and not list((out / "heads").rglob("part-*.parquet")):
        time.sleep(0.2)  # Ray is up and some windows are written
    started = [p for p in process.children(recursive=True) if "ray" in " ".join(p.cmdline()).lower()]
    driver.kill()
    driver.wait()
    assert started, "the census wrote nothing before the deadline"
    gone_by = time.monotonic() + 10
    while time.monotonic() < gone_by and any(_running(p) for p in started):
        time.sleep(0.2)
    assert not [p.pid for p in started if _running(p)]
    finished = subprocess.run([*command], capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr
    assert "WARNING" not in finished.stderr and "logging.cc" not in finished.stderr  # Ray's lines: --debug only
    windows = windows_of(heads_of(out))
    assert len(windows) == 120 and not windows.duplicated().any()


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
