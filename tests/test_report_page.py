"""The report as a reader takes it in: the terminal prints labels as they are (brackets included), the method is
described from the runs, the answer comes first, and sections that would say nothing are absent."""

from __future__ import annotations

import pandas as pd
import pytest
from rich.console import Console
from test_report import assert_fits_the_window, build_frames, chromium, rendered

from fwbench_aggregator.analyse.comparison import comparison_rows
from fwbench_aggregator.analyse.results import analysed
from fwbench_aggregator.present import terminal
from fwbench_aggregator.present.evidence import evidence_plot, evidence_units
from fwbench_aggregator.present.headline import headlines
from fwbench_aggregator.present.html_table import lifted, table_html
from fwbench_aggregator.present.method import counts_text, method_html
from fwbench_aggregator.present.report import write_report
from fwbench_aggregator.present.strip import strip_lines
from fwbench_aggregator.store.run_columns import CONFIG_COLUMNS

BRACKETED = "tensorflow [device H100]"


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    return comparison_rows(*build_frames())


def recorded(monkeypatch, width: int = 250) -> Console:
    console = Console(record=True, width=width)
    monkeypatch.setattr(terminal, "out_console", console)
    return console


@pytest.mark.parametrize("width", [250, 80])
def test_the_terminal_prints_a_label_with_square_brackets_whole(rows, monkeypatch, width):
    labelled = rows.replace({"runner": {"tensorflow": BRACKETED}})
    console = recorded(monkeypatch, width)
    terminal.print_series(labelled, console=console)
    one = labelled[(labelled["model"] == "resnet18") & (labelled["mode"] == "train") & (labelled["batch_size"] == 2)]
    terminal.print_compare(one[one["device"] == "gpu:0"], None, "store", pd.DataFrame(), [])
    text = console.export_text()
    assert "[device" in text and "H100]" in text
    assert f"({BRACKETED} vs torch)" not in text  # two runners: the verdict names no pair
    assert "profile): torch faster by" in text


# ------------------------------------------------------------------------------------------------ the method


def in_blocks(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows as a blocks compare records them: 8 blocks of 8 windows a runner, looked at after blocks 10 and 20."""
    return rows.assign(
        design="blocks of 8 windows", blocks=8, runs=64, max_repetitions=20, looks="10,20", outcome="unresolved"
    )


def test_the_method_names_blocks_for_a_blocks_compare_and_rounds_for_rounds(rows):
    summary = pd.DataFrame({"status": ["ok"] * 128, "run_isolation": "thread"})
    blocks = method_html(in_blocks(rows), summary)
    assert "process blocks (8 blocks, 8 windows a runner a block)" in blocks
    assert "after blocks 10 and 20, with a budget of 20 blocks" in blocks
    assert "rounds" not in blocks and "run isolation" not in blocks
    assert counts_text(in_blocks(rows), summary) == "8 blocks of 8 windows a runner (128 windows stored, none failed)"

    fixed = rows.assign(design="rounds", blocks=0, max_repetitions=0)
    rounds = method_html(fixed, summary)
    assert "counterbalanced rounds" in rounds and "3 runs a runner" in rounds and "block" not in rounds
    assert "the number of runs was fixed in advance" in rounds
    assert "all of a runner's runs in one process (run isolation thread)" in rounds
    assert "docs/verdict.md" in rounds
    assert counts_text(fixed, summary.iloc[:12]) == "3 runs a runner in rounds (12 runs stored, none failed)"


# ------------------------------------------------------------------------------------------------ the answer


def test_each_configuration_has_a_headline_with_its_figures_ratio_and_interval(rows):
    found = {h.title: h for h in headlines(rows)}
    assert len(found) == len(rows.groupby(list(CONFIG_COLUMNS)))
    resnet = found["resnet18 · train · batch 2 · 3x224x224 · fp32 · gpu:0 · equal profile"]
    assert resnet.answer.startswith("torch faster by ") and resnet.answer.endswith("% than tensorflow")
    assert resnet.figures.startswith("torch ") and "tensorflow" in resnet.figures and "(over 3 runs)" in resnet.figures
    assert resnet.ratio.startswith("tensorflow ÷ torch 1.") and "[" in resnet.ratio
    bert = found["bert · infer · batch 1 · 3x224x224 · fp32 · gpu:0 · equal profile"]
    assert bert.answer in ("not resolved", "torch and tensorflow equivalent", "tensorflow and torch equivalent")
    below = rows.assign(
        significant=False,
        verdict="no significant difference (ratio 1.031 [1.012, 1.050]: 3% is below the noise floor, 30.0%)",
    )
    assert {h.answer for h in headlines(below) if h.answer != "no verdict"} == {"no difference worth calling"}
    oom = found["bert · train · batch 4 · 3x224x224 · fp32 · gpu:0 · equal profile"]
    assert oom.answer == "no verdict" and "tensorflow failed: RESOURCE_EXHAUSTED" in oom.why


def test_runners_on_different_machines_get_no_verdict_and_the_page_says_why():
    summary, steps = build_frames(devices={"cpu:0": 8.0}, oom=None, power=False)
    summary = summary.assign(device_name=["Xeon A" if r == "torch" else "Xeon B" for r in summary["runner"]])
    found = headlines(analysed(summary, steps).rows)
    assert {h.answer for h in found} == {"no verdict"}
    assert "ran on different machines (torch with device Xeon A; tensorflow with device Xeon B)" in found[0].why


# ------------------------------------------------------------------------------------------------ the page


def test_constant_columns_are_lifted_into_the_caption():
    shown = pd.DataFrame({"model": ["resnet18"] * 2, "runner": ["torch", "tensorflow"], "energy": ["–", "–"]})
    caption, table = lifted(shown)
    assert caption == "model resnet18" and list(table.columns) == ["runner"]
    page = table_html(shown, lift=True)
    assert '<p class="caption">Every row: model resnet18</p><table>' in page and "<th>model</th>" not in page
    assert lifted(shown.iloc[:1])[0] == ""  # one row: nothing to lift


@pytest.fixture(scope="module")
def one_configuration(tmp_path_factory):
    """The report of one CPU configuration at one batch size, as the demo's compare makes: most studies have
    nothing to say about it."""
    summary, steps = build_frames(devices={"cpu:0": 8.0}, oom=None, power=False)
    only = (summary["model"] == "resnet18") & (summary["mode"] == "train") & (summary["batch_size"] == 2)
    summary, steps = (
        summary[only],
        steps[(steps["model"] == "resnet18") & (steps["mode"] == "train") & (steps["batch_size"] == 2)],
    )
    out = tmp_path_factory.mktemp("one")
    return write_report(analysed(summary, steps), summary, {"run_id": "r1"}, out)


@pytest.mark.slow  # writes a report, plots included
def test_a_one_configuration_page_opens_with_the_answer_and_says_nothing_empty(one_configuration):
    page = one_configuration.read_text(encoding="utf-8")
    assert page.index(">The answer</h2>") < page.index('class="headlines"') < page.index("<table")
    assert "<b>torch faster by " in page and "% than tensorflow</b>" in page
    for empty in ("Not measured", "Not tested", "Not compared", "one batch size measured", "Plots not drawn"):
        assert empty not in page, empty
    for absent in (">Optimal batch size</h2>", ">Batch size and time per sample</h2>", ">Hardware efficiency</h2>"):
        assert absent not in page, absent
    covered = page[page.index('<p class="not-covered">') :]
    assert "GPU inference (<code>fwbench compare --mode infer --device gpu</code>" in covered
    assert "Power and energy" in covered and "Scaling over devices" in covered
    # The evidence is drawn under the answer: each runner's runs in the order they ran, its time, the interval.
    assert page.index('class="headlines"') < page.index('alt="The evidence behind each verdict"') < page.index("<table")
    evidence = pd.read_csv(one_configuration.parent / "plots" / "evidence.csv")
    assert sorted(evidence.groupby("runner")["unit"].apply(list).tolist()) == [[1, 2, 3], [1, 2, 3]]
    # The runners' facts and the manifest are folded; the page needs no script to open them.
    assert "<details><summary>Manifest (JSON)</summary>" in page and "<script" not in page
    assert page.count("<details>") == 2
    # The comparison table keeps only what tells its rows apart.
    comparison = page[page.index(">Comparison</h2>") :]
    assert '<p class="caption">Every row: model resnet18 · mode train · batch 2' in comparison


# ------------------------------------------------------------------------------------------------ unresolved


def test_an_unresolved_compare_says_what_its_blocks_tell_and_what_would_tell_more(rows, monkeypatch):
    one = rows[(rows["model"] == "bert") & (rows["mode"] == "infer") & (rows["batch_size"] == 1)]
    one = in_blocks(one[one["device"] == "cpu:0"].sort_values("ratio_to_fastest")).assign(
        resolvable=0.182, ratio_to_fastest=[1.0, 1.08], noise_floor=float("nan"), wall_s=80.0, run_spread=0.12
    )
    console = recorded(monkeypatch)
    terminal.print_rounds(one, "run budget")
    text = " ".join(console.export_text().split())
    assert (
        "a difference above 18.2% would have been called, a smaller one cannot be told from this host's noise" in text
    )
    # 8 blocks resolve 18.2%: about 30 more (10 s each) would resolve the 8.0% seen.
    assert "Next: about 30 more blocks, about 5 min at this pace, would tell whether the 8.0% seen is real" in text
    assert "--max-repetitions 38 (or --time-budget-s 300)" in text and "quieter host" in text
    console = recorded(monkeypatch)
    terminal.print_rounds(one.assign(resolvable=138.0, run_spread=0.98), "futile")
    text = " ".join(console.export_text().split())
    assert "not even a twofold difference (they varied 98%)" in text and "--wait-for-quiet" in text
    assert "more blocks, about" not in text
    console = recorded(monkeypatch)
    terminal.print_rounds(one.assign(outcome="different"), "settled")
    assert "Next:" not in console.export_text()


@pytest.mark.browser
def test_a_one_configuration_page_fits_1280_pixels_with_the_answer_first(one_configuration, tmp_path):
    tags = rendered(chromium(), one_configuration, tmp_path)
    assert_fits_the_window(tags)
    assert [tag for tag, attrs in tags if attrs.get("class") == "headlines"] == ["ul"]


def test_the_evidence_of_blocks_draws_each_block_and_its_windows(rows, tmp_path):
    one = rows[(rows["model"] == "resnet18") & (rows["mode"] == "train") & (rows["batch_size"] == 2)]
    one = one[one["device"] == "cpu:0"]
    runs = pd.DataFrame(
        [
            {**one.iloc[0][list(CONFIG_COLUMNS)].to_dict(), "group": "", "runner": runner, "runner_name": runner}
            | {"run_id": "c", "repetition": 4 * block + window, "median_step_time_s": (1.0 + block) * scale}
            for runner, scale in (("torch", 0.01), ("tensorflow", 0.013))
            for block in range(3)
            for window in range(4)
        ]
    )
    summary = runs[["run_id", "runner", "repetition"]].assign(
        process_block=[f"c-block{r // 4}" for r in runs["repetition"]]
    )
    plot = evidence_plot(one, runs, summary, tmp_path)
    assert plot.path is not None and plot.path.exists()
    units = evidence_units(runs, summary)
    blocks = units[~units["window"] & (units["runner"] == "torch")].sort_values("unit")
    assert blocks["unit"].tolist() == [1, 2, 3] and blocks["value_ms"].round(6).tolist() == [10.0, 20.0, 30.0]
    assert int(units["window"].sum()) == 24
    assert evidence_plot(one.iloc[:1], runs, summary, tmp_path).reason  # one runner: nothing compared


def test_the_terminal_draws_each_runners_blocks_as_a_strip_on_one_scale():
    from fwbench_aggregator.run.client import BlockPlace, RunResult
    from fwbench_aggregator.run.replies import Summary

    def window(runner: str, block: int, ms: float) -> RunResult:
        place = BlockPlace("blocks of 2 windows", f"c-block{block}", 0)
        return RunResult(runner, "", None, 0, summary=Summary(median_step_time_s=ms / 1e3), block=place)

    results = [window(r, b, ms * (1 + b)) for b in (2, 0, 1, 10) for r, ms in (("torch", 10.0), ("jax", 20.0))]
    lines = strip_lines(results)
    assert lines[0] == "blocks in the order run, one scale (▁ 10 ms to █ 220 ms):"
    torch, jax = lines[1:]
    # Block 10 runs after block 2, not between 1 and 2: the slowest bar comes last.
    assert torch.startswith("  torch ▁") and torch.split()[1][-1] == "▆" and jax.split()[1][-1] == "█"
    assert torch.endswith("10–110 ms")
    assert strip_lines(results[:2]) == []  # one block: nothing to draw
