"""Every benchmark in tools/bench that has a smoke mode runs in it: its numbers are not checked
(tests never assert timings), only that it runs to its table on this machine."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def bench(script: str):
    spec = importlib.util.spec_from_file_location(f"bench_{Path(script).stem}", ROOT / "tools" / "bench" / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_training_bench_measures_quiet_and_loaded_in_one_run(capsys):
    bench("train.py").main(["--smoke", "--background-load", "1"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "x |" in line]
    assert len(rows) == 2 and "1 thread" in rows[0], out


def test_the_load_bench_reports_rates_and_bytes_against_the_layout(capsys):
    bench("load.py").main(["--smoke"])
    out = capsys.readouterr().out
    assert "| (a) WebDataset helper (frames at zlib 9) |" in out and "| packed Parquet (frames at zlib 9) |" in out, out
    assert "ms per record re-compressing" in out, out
