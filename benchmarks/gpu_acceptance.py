"""GPU acceptance: every GPU path of fwbench proven in one short run, with one report (docs/development.md: run it
first whenever a GPU machine is at hand, and keep its report).

    bash scripts/pack_gpu.sh                                  # here: .gpu/ (wheels and this script's helpers)
    GPU_OUT=$OUT bash benchmarks/gpu_acceptance.sh             # there, through the device tool (carry .gpu)
    python benchmarks/gpu_acceptance.py --out DIR --device cpu # the CPU dry run, tiny shapes (a test runs it)

It starts two torch runners, `a` and `b`, on loopback (b alone plants a difference in one plug-in model, see
section 2), runs each section against them through the fwbench command line, bounded in time, and writes
OUT/report.md and OUT/report.csv: one row a check, with its status (pass, FAIL, withheld or not run, each with its
reason), its figure and its evidence. Each section's stores, logs and the runners' logs stay under OUT.

Sections: 1 A/A with the CLI's defaults over 12 points; 2 a planted difference; 3 the runner against a bare loop;
4 energy (A/A of J/sample, power against batch size); 5 DDP world size 1 against the plain run, and what needs two
GPUs refused; 6 the native profile's TF32 and autotuning, and MFU; 7 the server scenario at two loads; 8 JAX;
9 generation (benchmarks/gpu_acceptance_generation.py: both decoders, A/A, the same tokens).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from gpu_acceptance_generation import run_section as generation_section

from fwbench_aggregator.analyse import stats
from fwbench_aggregator.analyse.comparison import per_run
from fwbench_aggregator.run import launch
from fwbench_aggregator.store.results_store import ResultStore

ROOT = Path(__file__).resolve().parent.parent
PLANTED_MODELS = Path(__file__).resolve().parent / "gpu_acceptance_models"
PLANTED_ENV = "FWBENCH_PLANTED_EXTRA_PASSES"  # read by gpu_acceptance_models/planted_conv/build_torch.py
BASE_PASSES = 8  # the planted model's block passes in runner a; runner b adds Scale.planted_extra_passes
STATUSES = ("pass", "FAIL", "withheld", "not run")


@dataclass(frozen=True)
class Scale:
    """The sizes of every section: the GPU's, and a CPU dry run's that checks the same logic in seconds."""

    device: str
    aa_models: dict[str, str]  # model -> shape
    aa_batches: tuple[int, ...]
    aa_precisions: tuple[str, ...]
    aa_budget_s: float
    # Under the sweep's auto repetitions, its most runs per runner and point; None: the CLI's default. A CPU's A/A
    # points never settle, so they would spend the whole budget, which must be generous for a loaded host.
    aa_max_repetitions: int | None
    planted_batch: int
    planted_shape: str
    planted_extra_passes: int  # a GPU's steps barely vary, so 1.25x must be called; a CPU's drift, so 2x there
    bare: dict[
        str, str
    ]  # also its repetitions and steps: a CPU's resnet18 steps are slow, and only the logic is tested there
    ddp: dict[str, str]
    native: dict[str, str]
    serving: dict[str, str]
    serving_loads_qps: tuple[float, ...]
    power_model: str
    jax: dict[str, str]
    # The most one command of a section may take (a compare, a sweep, the bare loop). A CPU dry run runs beside other
    # tests in CI: on a 2-core host the bare loop, 22 s alone, outlived 150 s there.
    command_limit_s: float = 150
    # Every compare's and sweep's measurement windows: none on a GPU (the CLI's defaults are what is accepted there);
    # a few steps on a CPU, whose default windows (a second's measuring, warm-up until stable) cost minutes here.
    windows: dict[str, str] = field(default_factory=dict)


GPU = Scale(
    device="gpu",
    aa_models={"resnet50": "3x224x224", "bert_base": "seq=128"},
    aa_batches=(1, 16, 256),
    aa_precisions=("fp32", "amp_bf16"),
    aa_budget_s=180,
    aa_max_repetitions=None,
    planted_batch=64,
    planted_shape="3x64x64",
    planted_extra_passes=2,
    bare={
        "model": "resnet50",
        "batch": "128",
        "shape": "3x224x224",
        "precision": "amp_bf16",
        "layout": "channels_last",
        "repetitions": "5",
        "steps": "30",
    },
    ddp={"model": "resnet50", "batch": "64", "shape": "3x224x224", "precision": "amp_bf16"},
    native={"model": "resnet50", "batch": "64", "shape": "3x224x224", "precision": "fp32"},
    serving={"model": "resnet50", "batch": "8", "shape": "3x224x224", "precision": "amp_bf16"},
    serving_loads_qps=(200.0, 800.0),
    power_model="resnet50",
    jax={"model": "resnet50", "batch": "16", "shape": "3x224x224", "precision": "amp_bf16"},
)
CPU = Scale(
    device="cpu",
    aa_models={"resnet50": "3x32x32", "bert_base": "seq=8"},
    aa_batches=(1, 2),
    aa_precisions=("fp32",),
    aa_budget_s=240,  # 60 s left 2 of the 4 points unstarted in a CI run beside other tests
    aa_max_repetitions=3,
    planted_batch=2,
    planted_shape="3x16x16",
    planted_extra_passes=8,
    bare={
        "model": "resnet18",
        "batch": "2",
        "shape": "3x32x32",
        "precision": "fp32",
        "layout": "channels_last",
        "repetitions": "2",
        "steps": "10",
    },
    command_limit_s=600,
    ddp={"model": "resnet18", "batch": "2", "shape": "3x32x32", "precision": "fp32"},
    native={"model": "resnet18", "batch": "2", "shape": "3x32x32", "precision": "fp32"},
    serving={"model": "resnet18", "batch": "2", "shape": "3x32x32", "precision": "fp32"},
    serving_loads_qps=(100.0, 300.0),
    power_model="resnet50",
    jax={"model": "resnet18", "batch": "2", "shape": "3x32x32", "precision": "fp32"},
    windows={"warmup": "3", "steps": "10", "min_measure_s": "0"},
)


@dataclass
class Check:
    section: str
    check: str
    status: str
    figure: str = ""
    detail: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r}; accepted: {', '.join(STATUSES)}")


@dataclass
class Acceptance:
    out: Path
    scale: Scale
    aggregator_python: str
    runner_python: str
    jax_python: str
    wall_budget_s: float
    started: float = field(default_factory=time.monotonic)
    checks: list[Check] = field(default_factory=list)
    runners: dict[str, str] = field(default_factory=dict)  # name -> address

    # --- plumbing ------------------------------------------------------------------------------------------

    def left_s(self) -> float:
        return self.wall_budget_s - (time.monotonic() - self.started)

    def command_limit_s(self) -> float:
        """How long the next command of a section may take: its scale's limit, within what the budget has left."""
        return min(self.scale.command_limit_s, self.left_s() - 5)

    def add(self, section: str, check: str, status: str, figure: str = "", detail: str = "") -> None:
        self.checks.append(Check(section, check, status, figure, detail))
        print(f"[{time.monotonic() - self.started:6.0f} s] {section}: {check}: {status} {figure}", flush=True)

    def fwbench(
        self, name: str, args: list[str], timeout_s: float, only: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess:
        """One fwbench command against the runners (or those named in `only`), its output kept in OUT/logs/NAME.log."""
        runners = [
            arg
            for runner, address in self.runners.items()
            if not only or runner in only
            for arg in ("--runner", f"{runner}={address}")
        ]
        windows = [arg for key, value in self.scale.windows.items() for arg in (f"--{key.replace('_', '-')}", value)]
        command = [
            self.aggregator_python,
            "-m",
            "fwbench_aggregator",
            *args[:1],
            *runners,
            *args[1:],
            *(windows if args[0] == "compare" else ()),
        ]
        log = self.out / "logs" / f"{name}.log"
        env = {**os.environ, "COLUMNS": "160"}
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=max(timeout_s, 1), env=env)
        except subprocess.TimeoutExpired as exc:
            output = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
            log.write_text(f"$ {' '.join(command)}\n(timed out after {timeout_s:.0f} s)\n{output}")
            return subprocess.CompletedProcess(command, 124, output, f"timed out after {timeout_s:.0f} s")
        log.write_text(f"$ {' '.join(command)}\n(exit {done.returncode})\n{done.stdout}\n--- stderr\n{done.stderr}")
        return done

    def report(self, store: Path) -> Path:
        """`fwbench report` over a section's store: comparison.csv, hardware_efficiency.csv, serving.csv."""
        out = store.parent / "report"
        done = subprocess.run(
            [self.aggregator_python, "-m", "fwbench_aggregator", "report", "--store", str(store), "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        (self.out / "logs" / f"report-{store.parent.name}.log").write_text(done.stdout + done.stderr)
        return out

    def section_dir(self, name: str) -> Path:
        folder = self.out / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def run_sections(self, chosen: set[str]) -> None:
        sections = (
            ("1 A/A", 60, self.aa),
            ("2 planted", 30, self.planted),
            ("3 bare loop", 30, self.bare_loop),
            ("4 energy", 0, self.energy),
            ("5 distributed", 30, self.distributed),
            ("6 native and MFU", 30, self.native),
            ("7 serving", 40, self.serving),
            ("8 JAX", 20, self.jax),
            ("9 generation", 30, lambda section: generation_section(self, section)),
        )
        for name, needs_s, run in sections:
            if chosen and name.split()[0] not in chosen:
                self.add(name, "section", "not run", detail="not chosen by --sections")
                continue
            if self.left_s() < needs_s:
                self.add(
                    name,
                    "section",
                    "not run",
                    detail=f"the run's {self.wall_budget_s:.0f} s were spent "
                    f"({self.left_s():.0f} s left, it needs about {needs_s} s)",
                )
                continue
            try:
                run(name)
            except Exception as exc:  # one section's bug must not cost the others their evidence
                self.add(name, "section", "FAIL", detail=f"{type(exc).__name__}: {exc}")

    # --- 1: A/A --------------------------------------------------------------------------------------------

    def aa(self, section: str) -> None:
        folder = self.section_dir("aa")
        shapes = "{" + ", ".join(f"{m}: [{s}]" for m, s in self.scale.aa_models.items()) + "}"
        study = folder / "study.yaml"
        study.write_text(
            f"runners: [a, b]\nmodels: [{', '.join(self.scale.aa_models)}]\nmodes: [infer]\nshapes: {shapes}\n"
            f"batch_sizes: [{', '.join(map(str, self.scale.aa_batches))}]\n"
            f"precisions: [{', '.join(self.scale.aa_precisions)}]\ndevices: [{self.scale.device}]\n"
            f"time_budget_s: {self.scale.aa_budget_s:.0f}\n"
            + "".join(f"{k}: {v}\n" for k, v in self.aa_windows().items())
        )
        store = folder / "store"
        done = self.fwbench(
            "aa-sweep",
            ["sweep", str(study), "--store", str(store)],
            timeout_s=min(self.scale.aa_budget_s * 1.5 + 60, self.left_s() - 5),
        )
        rows = self._comparison(store)
        points = len(self.scale.aa_models) * len(self.scale.aa_batches) * len(self.scale.aa_precisions)
        if rows.empty:
            self.add(section, "A/A sweep", "FAIL", detail=f"no comparison (exit {done.returncode}): {_tail(done)}")
            return
        judged = rows[rows["verdict"] != "fastest"]
        wrong = judged[judged["significant"].astype(bool)]
        resolved = judged["resolvable"].dropna()
        figure = (
            f"{len(wrong)} wrong of {len(judged)} verdicts; resolves {_pct(resolved.min())}-{_pct(resolved.max())} "
            f"(median {_pct(resolved.median())})"
            if len(resolved)
            else f"{len(wrong)} wrong of {len(judged)}"
        )
        windows = ", ".join(f"{k} {v}" for k, v in self.aa_windows().items()) or "CLI defaults"
        self.add(
            section,
            f"wrong verdicts over {points} points ({windows}, sweep time budget {self.scale.aa_budget_s:.0f} s)",
            "pass" if wrong.empty and len(judged) == points else "FAIL",
            figure,
            "" if len(judged) == points else f"{len(judged)} of {points} points compared (exit {done.returncode})",
        )
        tf32 = sorted(
            {
                v
                for v in ResultStore(store).load("summary").get("tf32", pd.Series(dtype=object)).dropna().astype(str)
                if v
            }
        )
        equal_tf32 = ["off"] if self.scale.device == "gpu" else []
        self.add(
            section,
            "the equal profile's runs record TF32 off",
            "pass" if tf32 == equal_tf32 else "FAIL",
            ", ".join(tf32) or "(none)",
            f"expected {', '.join(equal_tf32) or 'none on a CPU'}",
        )
        for _, r in judged.iterrows():
            self.add(
                section,
                f"{r['model']} {r['precision']} b{r['batch_size']}",
                "FAIL" if r["significant"] else "pass",
                f"{r['runs']} runs; a {_ms(rows, r, 'a')} b {_ms(rows, r, 'b')}; resolves {_pct(r['resolvable'])}",
                str(r["verdict"]),
            )

    def aa_windows(self) -> dict[str, str]:
        """The A/A sweep's measurement windows and, where the scale caps them, its runs per point."""
        cap = self.scale.aa_max_repetitions
        return {**self.scale.windows, **({"max_repetitions": str(cap)} if cap else {})}

    # --- 2: a planted difference ----------------------------------------------------------------------------

    def planted(self, section: str) -> None:
        folder = self.section_dir("planted")
        store = folder / "store"
        done = self.fwbench(
            "planted",
            [
                "compare",
                "--model",
                "planted_conv",
                "--mode",
                "infer",
                "--batch-size",
                str(self.scale.planted_batch),
                "--shape",
                self.scale.planted_shape,
                "--device",
                self.scale.device,
                "--store",
                str(store),
                "--out",
                str(folder),
            ],
            timeout_s=self.command_limit_s(),
        )
        rows = self._comparison(store)
        slower = rows[rows["verdict"] != "fastest"] if not rows.empty else rows
        extra = self.scale.planted_extra_passes
        how = (
            f"runner b's process applies planted_conv's shared block {BASE_PASSES + extra} times per step, "
            f"runner a's {BASE_PASSES} ({PLANTED_ENV}={extra}): {(BASE_PASSES + extra) / BASE_PASSES:.2f}x the "
            "block work, the same weights and outputs"
        )
        if slower.empty:
            self.add(
                section,
                "planted difference called",
                "FAIL",
                detail=f"no comparison (exit {done.returncode}): {_tail(done)}; {how}",
            )
            return
        r = slower.iloc[0]
        called = bool(r["significant"]) and r["runner"] == "b"
        self.add(
            section,
            "planted difference called (b slower)",
            "pass" if called else "FAIL",
            f"{r['ratio_to_fastest']:.2f}x [{r['ratio_ci_low']:.2f}, {r['ratio_ci_high']:.2f}] after {r['runs']} runs",
            f"{r['verdict']}; {how}",
        )

    # --- 3: the runner against a bare loop -------------------------------------------------------------------

    def bare_loop(self, section: str) -> None:
        b = self.scale.bare
        result = self.section_dir("bare") / "overhead.json"
        command = [
            self.runner_python,
            str(ROOT / "benchmarks" / "harness_overhead.py"),
            "--framework",
            "torch",
            "--model",
            b["model"],
            "--mode",
            "train",
            "--batch-size",
            b["batch"],
            "--input-shape",
            b["shape"],
            "--device",
            self.scale.device,
            "--precision",
            b["precision"],
            "--layout",
            b["layout"],
            "--repetitions",
            b["repetitions"],
            "--steps",
            b["steps"],
            "--json",
            str(result),
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=max(self.command_limit_s(), 1))
        except subprocess.TimeoutExpired:
            self.add(section, "runner / bare loop", "FAIL", detail="timed out")
            return
        (self.out / "logs" / "bare-loop.log").write_text(done.stdout + "\n--- stderr\n" + done.stderr)
        label = f"{b['model']} train b{b['batch']} {b['precision']} {b['layout']}"
        if done.returncode or not result.exists():
            self.add(section, f"runner / bare loop, {label}", "FAIL", detail=_tail(done))
            return
        figures = pd.read_json(result, typ="series")
        ratio = float(figures["ratio_of_pooled_medians"])
        self.add(
            section,
            f"runner / bare loop, {label}",
            "pass" if ratio <= float(figures["target"]) else "FAIL",
            f"{ratio:.3f} (runner {figures['runner_median_s'] * 1e3:.2f} ms, bare {figures['bare_median_s'] * 1e3:.2f} ms"
            f" per step; {b['repetitions']} interleaved repetitions)",
            f"target <= {figures['target']}",
        )

    # --- 4: energy ---------------------------------------------------------------------------------------------

    def energy(self, section: str) -> None:
        store = self.out / "aa" / "store"
        if not (store / "store.json").exists() and not any(store.glob("*")):
            self.add(section, "energy", "not run", detail="section 1 stored no runs")
            return
        results = ResultStore(store)
        summary, steps = results.load("summary"), results.load("steps")
        runs = per_run(summary, steps)
        statuses = summary.get("energy_status", pd.Series(dtype=object)).dropna()
        reasons = sorted({str(s) for s in statuses if str(s) != "ok"})
        measured = runs.dropna(subset=["energy_per_sample_j"])
        if measured.empty:
            self.add(
                section,
                "J/sample of identical runs agree",
                "withheld",
                detail="no run has an energy figure: " + ("; ".join(reasons) or "no power source on this device"),
            )
            self.add(section, "power against batch size", "withheld", detail="no power readings")
            return
        agree = disagree = 0
        for keys, frame in measured.groupby(["model", "precision", "batch_size"], sort=True):
            per_runner = {r: g["energy_per_sample_j"].to_numpy() for r, g in frame.groupby("runner")}
            if set(per_runner) != {"a", "b"}:
                continue
            c = stats.compare("a", per_runner["a"], "b", per_runner["b"])
            ok = not c.significant
            agree, disagree = agree + ok, disagree + (not ok)
            interval = (
                f"[{c.ci_low:.3f}, {c.ci_high:.3f}]" if not math.isnan(c.ci_low) else "(too few runs for an interval)"
            )
            self.add(
                section,
                f"J/sample a against b, {keys[0]} {keys[1]} b{keys[2]}",
                "pass" if ok else "FAIL",
                f"a {per_runner['a'].mean():.4g} J, b {per_runner['b'].mean():.4g} J; ratio {c.ratio:.3f} {interval}",
                c.verdict,
            )
        self.add(
            section,
            "J/sample of identical runs agree within their uncertainty",
            "pass" if agree and not disagree else "FAIL" if disagree else "withheld",
            f"{agree} agree, {disagree} differ",
            "; ".join(reasons),
        )
        power = (
            summary[(summary.get("model") == self.scale.power_model) & summary["mean_power_w"].notna()]
            if "mean_power_w" in summary
            else summary.iloc[0:0]
        )
        if power.empty:
            self.add(
                section,
                "power against batch size",
                "withheld",
                detail="no power readings for " + self.scale.power_model,
            )
            return
        table = power.groupby(["precision", "batch_size"])["mean_power_w"].agg(["mean", "std", "count"]).reset_index()
        table.to_csv(self.out / "power_by_batch.csv", index=False)
        for _, r in table.iterrows():
            self.add(
                section,
                f"power, {self.scale.power_model} infer {r['precision']} b{r['batch_size']}",
                "pass",
                f"{r['mean']:.0f} W (sd {0 if math.isnan(r['std']) else r['std']:.0f} W over {int(r['count'])} runs)",
            )

    # --- 5: distributed on one GPU ------------------------------------------------------------------------------

    def distributed(self, section: str) -> None:
        d = self.scale.ddp
        folder = self.section_dir("distributed")
        base = [
            "compare",
            "--model",
            d["model"],
            "--mode",
            "train",
            "--batch-size",
            d["batch"],
            "--shape",
            d["shape"],
            "--precision",
            d["precision"],
            "--repetitions",
            "3",
        ]
        medians, exits = {}, {}
        for label, extra in (
            ("plain", ["--device", f"{self.scale.device}:0"]),
            ("ddp", ["--devices", f"{self.scale.device}:0", "--strategy", "ddp"]),
        ):
            store = folder / f"store-{label}"
            done = self.fwbench(
                f"distributed-{label}",
                [*base, *extra, "--store", str(store), "--out", str(folder)],
                timeout_s=self.command_limit_s(),
                only=("a",),
            )
            medians[label], exits[label] = _run_medians(store), done.returncode
            if done.returncode or not len(medians[label]):
                self.add(section, f"{label} run, world size 1", "FAIL", detail=f"exit {done.returncode}: {_tail(done)}")
        if len(medians["plain"]) and len(medians["ddp"]):
            c = stats.compare("plain", medians["plain"], "ddp", medians["ddp"])
            ddp_ratio = stats.geometric_mean(medians["ddp"]) / stats.geometric_mean(medians["plain"])
            self.add(
                section,
                f"DDP world size 1 against the plain run, {d['model']} train b{d['batch']} {d['precision']}",
                "pass" if not any(exits.values()) and c.enough_runs else "FAIL",
                f"ddp/plain {ddp_ratio:.3f} [{_ci(c, ddp_ratio)}]; {len(medians['ddp'])} and "
                f"{len(medians['plain'])} runs",
                c.verdict,
            )
        # What needs two GPUs is refused before anything runs, naming the devices or the strategy.
        for label, extra in (
            ("ddp over gpu:0,gpu:1", ["--devices", "gpu:0,gpu:1", "--strategy", "ddp"]),
            ("dp on gpu:0 alone", ["--devices", "gpu:0", "--strategy", "dp"]),
        ):
            store = folder / "store-refused"
            done = self.fwbench(
                f"refused-{label.split()[0]}",
                [*base, *extra, "--store", str(store), "--out", str(folder)],
                timeout_s=60,
                only=("a",),
            )
            message = " ".join((done.stdout + done.stderr).split())
            names_it = any(word in message for word in ("gpu:1", "GPU", "gpu", "dp"))
            refused = done.returncode == 2 and names_it and not _run_medians(store) and "Traceback" not in message
            self.add(
                section, f"refused: {label}", "pass" if refused else "FAIL", f"exit {done.returncode}", message[-400:]
            )

    # --- 6: native profile and MFU -------------------------------------------------------------------------

    def native(self, section: str) -> None:
        n = self.scale.native
        folder = self.section_dir("native")
        store = folder / "store"
        done = self.fwbench(
            "native",
            [
                "compare",
                "--model",
                n["model"],
                "--mode",
                "train",
                "--batch-size",
                n["batch"],
                "--shape",
                n["shape"],
                "--precision",
                n["precision"],
                "--device",
                self.scale.device,
                "--profile",
                "native",
                "--repetitions",
                "3",
                "--store",
                str(store),
                "--out",
                str(folder),
            ],
            timeout_s=self.command_limit_s(),
        )
        if not (store / "runs").exists():
            self.add(section, "native profile", "FAIL", detail=f"exit {done.returncode}: {_tail(done)}")
            return
        summary = ResultStore(store).load("summary")
        settings = {
            c: sorted(summary[c].dropna().astype(str).unique())
            for c in ("tf32", "cudnn_autotune", "layout")
            if c in summary
        }
        # torch's own defaults: TF32 for cuDNN's convolutions only (matmul stays fp32), no autotuning, NCHW.
        expected = (
            {"tf32": ["convolutions only"], "cudnn_autotune": ["off"], "layout": ["channels_first"]}
            if self.scale.device == "gpu"
            else {"cudnn_autotune": ["off"], "layout": ["channels_first"]}
        )
        wrong = {k: v for k, v in expected.items() if settings.get(k) != v}
        self.add(
            section,
            "native profile's TF32, cuDNN autotuning and layout on every run",
            "FAIL" if wrong else "pass",
            "; ".join(f"{k}: {', '.join(v) or '(none)'}" for k, v in settings.items()),
            f"expected {expected}" + (f"; differs: {wrong}" if wrong else ""),
        )
        efficiency_csv = self.report(store) / "hardware_efficiency.csv"
        if not efficiency_csv.exists():
            self.add(section, "MFU beside the comparison", "FAIL", detail="report wrote no hardware_efficiency.csv")
            return
        efficiency = pd.read_csv(efficiency_csv)
        for _, r in efficiency.iterrows():
            mfu = r.get("mfu", math.nan)
            known = isinstance(mfu, float) and not math.isnan(mfu)
            self.add(
                section,
                f"MFU, runner {r.get('runner', '?')}",
                "pass" if known else "withheld",
                f"{mfu:.1%} of {r.get('peak_entry', '')}" if known else "",
                "" if known else f"no peak known for {r.get('device_name', 'this device')}",
            )

    # --- 7: serving ----------------------------------------------------------------------------------------------

    def serving(self, section: str) -> None:
        s = self.scale.serving
        folder = self.section_dir("serving")
        for qps in self.scale.serving_loads_qps:
            store = folder / f"store-{qps:g}"
            done = self.fwbench(
                f"serving-{qps:g}",
                [
                    "compare",
                    "--model",
                    s["model"],
                    "--mode",
                    "infer",
                    "--batch-size",
                    s["batch"],
                    "--shape",
                    s["shape"],
                    "--precision",
                    s["precision"],
                    "--device",
                    self.scale.device,
                    "--scenario",
                    "server",
                    "--target-qps",
                    f"{qps:g}",
                    "--repetitions",
                    "3",
                    "--store",
                    str(store),
                    "--out",
                    str(folder),
                ],
                timeout_s=self.command_limit_s(),
            )
            serving_csv = self.report(store) / "serving.csv" if (store / "runs").exists() else None
            if serving_csv is None or not serving_csv.exists():
                self.add(
                    section,
                    f"server scenario at {qps:g} queries/s",
                    "FAIL",
                    detail=f"exit {done.returncode}: {_tail(done)}",
                )
                continue
            table = pd.read_csv(serving_csv)
            p99 = table[table["figure"] == "p99"]
            ok = (
                done.returncode == 0
                and set(p99["runner"]) == set(self.runners)
                and not p99["significant"].astype(bool).any()
            )
            for _, r in table.iterrows():
                self.add(
                    section,
                    f"server at {qps:g} queries/s, {r['figure']}, runner {r['runner']}",
                    "pass" if ok else "FAIL",
                    f"{r['latency_ms']:.3g} ms over {r['runs']} runs, {r['queries']} queries in all "
                    f"(achieved {r['achieved_qps']:.4g} queries/s)",
                    str(r["verdict"]),
                )
            if not ok:
                self.add(
                    section,
                    f"server at {qps:g} queries/s",
                    "FAIL",
                    detail=f"exit {done.returncode}; an A/A pair must give every percentile for both runners "
                    f"and call no difference: {_tail(done)}",
                )

    # --- 8: JAX ---------------------------------------------------------------------------------------------------

    def jax(self, section: str) -> None:
        probe = (
            "import importlib.util as u; missing = [m for m in ('jax', 'flax', 'optax') if u.find_spec(m) is None]; "
            "print('missing ' + ' '.join(missing) if missing else "
            "'platforms ' + ' '.join(sorted({d.platform for d in __import__('jax').devices()})))"
        )
        try:
            found = subprocess.run([self.jax_python, "-c", probe], capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            self.add(section, "JAX on the GPU", "FAIL", detail="importing jax took over 120 s")
            return
        answer = found.stdout.strip()
        if not answer.startswith("platforms"):
            self.add(
                section,
                "JAX on the GPU",
                "not run",
                detail=(
                    f"{answer or _tail(found)} in {self.jax_python}; JAX cannot be packed for a machine with no network: "
                    "jax with its CUDA plugin and NVIDIA's cuDNN, cuBLAS and NCCL wheels is about 2 GB, past the device "
                    "tool's 64 MiB carry"
                ),
            )
            return
        platforms = answer.split()[1:]
        if self.scale.device == "gpu" and "gpu" not in platforms and "cuda" not in platforms:
            self.add(
                section,
                "JAX on the GPU",
                "withheld",
                detail=f"JAX here sees only {', '.join(platforms)}: no CUDA backend",
            )
            return
        command = [self.jax_python, "-m", "fwbench_jax", "--address", "127.0.0.1:0"]
        # JAX takes 75% of the GPU's memory at its first operation unless told otherwise; torch's runner shares it.
        runner = launch.LocalRunner(
            "jax",
            command,
            log_path=self.out / "logs" / "runner-jax.log",
            env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
        )
        try:
            runner.start(timeout_s=180)
        except launch.RunnerStartError as exc:
            self.add(section, "the JAX runner starts", "FAIL", detail=str(exc)[-600:])
            return
        try:
            j = self.scale.jax
            folder = self.section_dir("jax")
            store = folder / "store"
            self.runners["jax"] = runner.address
            done = self.fwbench(
                "jax",
                [
                    "compare",
                    "--model",
                    j["model"],
                    "--mode",
                    "infer",
                    "--batch-size",
                    j["batch"],
                    "--shape",
                    j["shape"],
                    "--precision",
                    j["precision"],
                    "--device",
                    self.scale.device,
                    "--repetitions",
                    "3",
                    "--store",
                    str(store),
                    "--out",
                    str(folder),
                ],
                timeout_s=self.command_limit_s(),
                only=("a", "jax"),
            )
        finally:
            self.runners.pop("jax", None)
            runner.stop()
        rows = self._comparison(store)
        jax_rows = rows[rows["runner"] == "jax"] if not rows.empty else rows
        if done.returncode or jax_rows.empty or jax_rows.iloc[0]["status"] != "ok":
            self.add(section, "JAX on the GPU against torch", "FAIL", detail=f"exit {done.returncode}: {_tail(done)}")
            return
        devices = sorted(set(ResultStore(store).load("summary").query("runner == 'jax'")["device_name"].astype(str)))
        r = jax_rows.iloc[0]
        self.add(
            section,
            f"JAX against torch, {j['model']} infer b{j['batch']} {j['precision']}",
            "pass",
            f"jax {r['median_step_ms']:.3g} ms over {r['runs']} runs on {', '.join(devices)}",
            str(r["verdict"]),
        )

    # --- helpers ------------------------------------------------------------------------------------------------

    def _comparison(self, store: Path) -> pd.DataFrame:
        if not (store / "runs").exists():
            return pd.DataFrame()
        path = self.report(store) / "comparison.csv"
        return pd.read_csv(path) if path.exists() else pd.DataFrame()

    # --- the report ---------------------------------------------------------------------------------------------

    def machine_facts(self) -> list[str]:
        facts = []
        smi = shutil.which("nvidia-smi")
        if smi:
            done = subprocess.run(
                [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            facts.append(f"GPU: {done.stdout.strip() or done.stderr.strip()}")
        else:
            facts.append("GPU: none (nvidia-smi not found)")
        probe = (
            "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, "
            "torch.cuda.is_available())"
        )
        done = subprocess.run([self.runner_python, "-c", probe], capture_output=True, text=True, timeout=120)
        facts.append(f"runner Python, torch, CUDA, CUDA available: {done.stdout.strip() or _tail(done)}")
        has = {
            name: subprocess.run(
                [python, "-c", f"import importlib.util as u; exit(u.find_spec('{name}') is None)"], timeout=60
            ).returncode
            == 0
            for name, python in (("tensorflow", self.runner_python), ("jax", self.jax_python))
        }
        facts.append(
            f"TensorFlow: {'present' if has['tensorflow'] else 'absent, so no TensorFlow runner runs here'}; "
            f"JAX: {'present (section 8)' if has['jax'] else 'absent (section 8 says why)'}"
        )
        facts.append(f"Docker: {'present' if shutil.which('docker') else 'absent (no container path is tested here)'}")
        facts.append("network: none is assumed (the GPU machines are lent without one; nothing is fetched)")
        return facts

    def write(self, facts: list[str]) -> None:
        with open(self.out / "report.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["section", "check", "status", "figure", "detail"])
            for c in self.checks:
                writer.writerow([c.section, c.check, c.status, c.figure, c.detail])
        counts = {s: sum(c.status == s for c in self.checks) for s in STATUSES}
        lines = [
            f"# GPU acceptance ({self.scale.device})",
            "",
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {time.monotonic() - self.started:.0f} s of "
            f"a {self.wall_budget_s:.0f} s budget; " + ", ".join(f"{n} {s}" for s, n in counts.items()),
            "",
            "## This machine",
            "",
            *(f"- {fact}" for fact in facts),
            "",
            "## Checks",
            "",
            "| section | check | status | figure | detail |",
            "|---|---|---|---|---|",
        ]
        for c in self.checks:
            cells = (c.section, c.check, c.status, c.figure, c.detail)
            lines.append("| " + " | ".join(str(x).replace("|", "/").replace("\n", " ") for x in cells) + " |")
        (self.out / "report.md").write_text("\n".join(lines) + "\n")


def _pct(value) -> str:
    return "?" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{float(value):.1%}"


def _ms(rows: pd.DataFrame, row: pd.Series, runner: str) -> str:
    same = rows[
        (rows["model"] == row["model"])
        & (rows["precision"] == row["precision"])
        & (rows["batch_size"] == row["batch_size"])
        & (rows["runner"] == runner)
    ]
    return f"{same['median_step_ms'].iloc[0]:.3g} ms" if len(same) else "?"


def _ci(c: stats.Comparison, ratio: float) -> str:
    if math.isnan(c.ci_low):
        return "too few runs"
    # stats.compare orients its ratio slow over fast: turn it to ddp over plain.
    low, high = (c.ci_low, c.ci_high) if (ratio >= 1) == (c.slower == "ddp") else (1 / c.ci_high, 1 / c.ci_low)
    return f"{low:.3f}, {high:.3f}"


def _run_medians(store: Path):
    if not (store / "runs").exists():
        return []
    results = ResultStore(store)
    runs = per_run(results.load("summary"), results.load("steps"))
    return runs["median_step_time_s"].to_numpy() if len(runs) else []


def _tail(done: subprocess.CompletedProcess) -> str:
    return " ".join(((done.stdout or "") + " " + (done.stderr or "")).split())[-500:]


def start_runners(out: Path, runner_python: str, scale: Scale) -> dict[str, launch.LocalRunner]:
    """Runners a and b, serving the planted model too; only b plants its difference."""
    started = {}
    for name, extra in (("a", "0"), ("b", str(scale.planted_extra_passes))):
        command = [
            runner_python,
            "-m",
            "fwbench_torch",
            "--address",
            "127.0.0.1:0",
            "--models-dir",
            str(PLANTED_MODELS),
        ]
        local = launch.LocalRunner(
            name, command, log_path=out / "logs" / f"runner-{name}.log", env={PLANTED_ENV: extra}
        )
        local.start(timeout_s=300)
        started[name] = local
    return started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder the report and every section's files go to")
    parser.add_argument(
        "--device",
        choices=["gpu", "cpu"],
        default="gpu",
        help="gpu: the acceptance run; cpu: the dry run of its logic, tiny shapes",
    )
    parser.add_argument("--runner-python", default=sys.executable, help="a Python with torch and the runner's packages")
    parser.add_argument(
        "--jax-python", default=None, help="a Python with JAX, Flax and optax (default: --runner-python)"
    )
    parser.add_argument("--wall-budget-s", type=float, default=540, help="the whole run's seconds (default 540)")
    parser.add_argument("--sections", default="", help="comma-separated section numbers to run (default: all)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "logs").mkdir(exist_ok=True)
    scale = GPU if args.device == "gpu" else CPU
    acceptance = Acceptance(
        args.out, scale, sys.executable, args.runner_python, args.jax_python or args.runner_python, args.wall_budget_s
    )
    facts = acceptance.machine_facts()
    runners = {}
    try:
        runners = start_runners(args.out, args.runner_python, scale)
        acceptance.runners = {name: r.address for name, r in runners.items()}
        acceptance.run_sections({n for n in args.sections.split(",") if n})
    except launch.RunnerStartError as exc:
        acceptance.add("0 runners", "two torch runners start", "FAIL", detail=str(exc))
    finally:
        for runner in runners.values():
            runner.stop()
        acceptance.write(facts)
    print(f"report: {args.out / 'report.md'}")
    return 1 if any(c.status == "FAIL" for c in acceptance.checks) else 0


if __name__ == "__main__":
    sys.exit(main())
