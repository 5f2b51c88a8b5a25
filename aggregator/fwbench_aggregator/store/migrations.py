"""Reading runs stored by older fwbench versions: each step brings one store format's frames to the next, so that
old stores keep reading and every reader sees the current columns (schema.STORE_FORMAT says what each format is).

A run records its format in its manifest ("store_format"); runs from before formats were recorded are format 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import pandas as pd

from ..plan.design import ROUNDS_LABEL
from ..plan.settings import BY_NAME, stored
from .run_columns import BUILT_IN, DEFAULT_PROFILE
from .schema import STORE_FORMAT

FORMAT_KEY = "store_format"
CONFIG_KEY = "config_key"  # in a sweep's run's manifest: the key of the configuration it measured
UNVERSIONED = 1
RUN_FRAMES = ("steps", "summary", "power")


class StoreFormatError(ValueError):
    """A store or run written by a newer fwbench than this one: the message names the store and both formats."""


def is_format(version: object) -> bool:
    """Whether `version` (as a store.json or a manifest holds it) is a store format: a whole number from 1."""
    return isinstance(version, int) and not isinstance(version, bool) and version >= UNVERSIONED


def run_format(manifest: Mapping) -> int:
    return int(manifest.get(FORMAT_KEY, UNVERSIONED))


def check_readable(version: int, where: str) -> None:
    if version > STORE_FORMAT:
        raise StoreFormatError(
            f"{where} was written by a newer fwbench (store format {version}); this fwbench reads store formats up to "
            f"{STORE_FORMAT}: update fwbench to read it"
        )


def _distributed_columns(name: str, frame: pd.DataFrame, manifest: Mapping) -> pd.DataFrame:
    """Format 1 -> 2: runs from before distributed runs ran on one device of one runner, with no strategy."""
    if name not in RUN_FRAMES:
        return frame
    frame = frame.copy()
    for column, value in (("strategy", "single"), ("nodes", 1), ("world_size", 1)):
        if column not in frame:
            frame[column] = value
    if "devices" not in frame and "device" in frame:
        frame["devices"] = frame["device"]
    if "global_batch_size" not in frame and "batch_size" in frame:
        frame["global_batch_size"] = frame["batch_size"]
    return frame


def _model_source_columns(name: str, frame: pd.DataFrame, manifest: Mapping) -> pd.DataFrame:
    """Format 2 -> 3: runs from before model plug-ins ran a built-in model, and runs and calibrations from before
    settings profiles ran under the equal one."""
    frame = frame.copy()
    if name in (*RUN_FRAMES, "calibration") and "profile" not in frame:
        frame["profile"] = DEFAULT_PROFILE
    if name == "summary":
        for column, value in (("model_source", BUILT_IN), ("model_hash", "")):
            if column not in frame:
                frame[column] = value
    return frame


def _quiet_evidence_columns(name: str, frame: pd.DataFrame, manifest: Mapping) -> pd.DataFrame:
    """Format 3 -> 4: calibrations from before they were flagged count as quiet (analyse.floors applies them as
    before), their date unknown; runs from before --wait-for-quiet waited for nothing, and were a fixed number of
    runs (max_repetitions 0: judged by stats.compare, not sequential looks)."""
    frame = frame.copy()
    if name == "calibration":
        for column, value in (("flagged", ""), ("calibrated_at_unix_s", math.nan)):
            if column not in frame:
                frame[column] = value
    if name == "summary":
        for column, value in (("quiet_wait_s", math.nan), ("max_repetitions", 0)):
            if column not in frame:
                frame[column] = value
    return frame


def _steps_asked_column(name: str, frame: pd.DataFrame, manifest: Mapping) -> pd.DataFrame:
    """Format 4 -> 5: a run with no minimum window measured the steps it was asked; one with a window may have run
    more, so what it was asked is unknown (it pools only with runs unknown for it)."""
    if name != "summary" or "measured_steps_asked" in frame:
        return frame
    frame = frame.copy()
    window_s = pd.to_numeric(frame.get("min_measure_s", pd.Series(math.nan, index=frame.index)), errors="coerce")
    steps = pd.to_numeric(frame.get("measured_steps", pd.Series(math.nan, index=frame.index)), errors="coerce")
    frame["measured_steps_asked"] = steps.where(window_s == 0)
    return frame


def _run_isolation_column(name: str, frame: pd.DataFrame, manifest: Mapping) -> pd.DataFrame:
    """Format 5 -> 6: where the runner executed the run, as its options recorded it ("run_isolation=process;...");
    unknown ("") where they did not (it pools only with runs unknown for it)."""
    if name != "summary" or "run_isolation" in frame:
        return frame
    frame = frame.copy()
    options = frame.get("runner_options", pd.Series("", index=frame.index)).fillna("").astype(str)
    frame["run_isolation"] = options.str.extract(r"(?:^|;)run_isolation=([^;]*)", expand=False).fillna("")
    return frame


def _design_columns(name: str, frame: pd.DataFrame, manifest: Mapping) -> pd.DataFrame:
    """Format 6 -> 7: runs from before designs were recorded were made in rounds, each run a build of its own, in no
    process block; which process ran their steps is unknown (0). A calibration then was made in rounds too, so its
    floor goes on applying to comparisons in rounds."""
    if name == "calibration" and "design" not in frame:
        return frame.assign(design=ROUNDS_LABEL)
    if name != "summary":
        return frame
    frame = frame.copy()
    for column, value in (
        ("design", ROUNDS_LABEL),
        ("process_block", ""),
        ("block_window", -1),
        ("build_continued", False),
        ("process_id", 0),
    ):
        if column not in frame:
            frame[column] = value
    return frame


def _looks_column(name: str, frame: pd.DataFrame, manifest: Mapping) -> pd.DataFrame:
    """Format 7 -> 8: a sequential design looked after every round, and in blocks after every block from the third
    (with a budget of 20 blocks by default): looks "" says so."""
    if name != "summary" or "looks" in frame:
        return frame
    return frame.assign(looks="")


def _own_run_ids(name: str, frame: pd.DataFrame, manifest: Mapping) -> pd.DataFrame:
    """Format 8 -> 9: only ids changed (a run's own, random), and old runs keep theirs; no frame changes
    (config_key_of reads an old sweep run's configuration key from its id)."""
    return frame


def _new_setting_columns(version: int, name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """Format `version` -> `version` + 1 for the run settings first stored in the newer format (plan.settings:
    stored_since): an older run ran each at the value its default comes from (another setting's column), or at its
    default."""
    new = [s for s in stored() if s.stored_since == version + 1 and s.column not in frame]
    if name != "summary" or not new:
        return frame
    frame = frame.copy()
    for setting in new:
        source = BY_NAME[setting.default_from].column if setting.default_from else ""
        frame[setting.column] = frame[source] if source in frame else (setting.default or math.nan)
    return frame


# From format N to N + 1: (frame name, frame, the run's manifest) -> frame; a run setting's new column is filled by
# _new_setting_columns.
STEPS: dict[int, Callable[[str, pd.DataFrame, Mapping], pd.DataFrame]] = {
    1: _distributed_columns,
    2: _model_source_columns,
    3: _quiet_evidence_columns,
    4: _steps_asked_column,
    5: _run_isolation_column,
    6: _design_columns,
    7: _looks_column,
    8: _own_run_ids,
}
OWN_IDS_FORMAT = 9


def config_key_of(key: str, manifest: Mapping) -> str:
    """The configuration key a sweep stored the run under `key` for (plan.keys.config_key): its manifest's config_key;
    before format 9 a sweep's run was stored under that key as its id, so an old run's id is its key ("" for an entry
    of format 9 that records none: a compare's run, a calibration, a FLOP count)."""
    recorded = manifest.get(CONFIG_KEY)
    if isinstance(recorded, str):
        return recorded
    version = manifest.get(FORMAT_KEY, UNVERSIONED)  # read here from damaged manifests too: any value
    return key if isinstance(version, int) and version < OWN_IDS_FORMAT else ""


def migrated(name: str, frame: pd.DataFrame, manifest: Mapping) -> pd.DataFrame:
    """One run's frame `name` in the current format."""
    for version in range(run_format(manifest), STORE_FORMAT):
        if version in STEPS:
            frame = STEPS[version](name, frame, manifest)
        frame = _new_setting_columns(version, name, frame)
    return frame


def is_refusal_record(manifest: Mapping) -> bool:
    """Format 1 stored a refused request (unknown model, unsupported setting) as a failed run, so that a resume
    skipped it for ever. Only running out of memory is a fact about a configuration: such a record is no run, and a
    resume runs it again (keeping the old record aside)."""
    return (
        run_format(manifest) == UNVERSIONED
        and manifest.get("status") == "failed"
        and manifest.get("code") != "RESOURCE_EXHAUSTED"
    )
