"""`autotune presets`: list, show, diff, check (re-measure here) and export presets.

Every command takes a preset by path or by name (see ``autotune.preset.resolve_preset``).
A malformed preset is a one-paragraph ``error: ...`` and exit code 2. A preset is hostile
input: whatever of it reaches the terminal goes through ``autotune.core.text.terminal_safe``
(``_echo``, ``_text``), so no escape sequence in a preset acts on the terminal.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autotune.cli._common import cli_command, print_json
from autotune.cli._tables import keep_column_whole
from autotune.cli.bench import check_burst_numbers
from autotune.core.errors import AutotuneError, ConfigError, PresetError, UsageError
from autotune.core.text import terminal_safe

if TYPE_CHECKING:
    from autotune.burst.result import BurstResult
    from autotune.contract.spec import ModelSpec
    from autotune.core.device_caps import DeviceCaps
    from autotune.preset import PortabilityReport, Preset

__all__ = ["app", "check", "diff", "export", "list_presets", "show"]

app = typer.Typer(
    help=(
        "Tuned configs saved by `autotune search`: list them, show one, compare two, "
        "re-measure one on this machine, export it (JSON, YAML, Hugging Face, Lightning, "
        "Accelerate, DeepSpeed, torchrun)."
    ),
    no_args_is_help=True,
)

PresetArg = Annotated[
    str,
    typer.Argument(
        help="A preset file (./best.yaml), or the name of a shipped or user preset.",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


# -- formatting helpers ------------------------------------------------------------------


def _fmt(value: Any, key: str = "") -> str:
    """One field's value for people: sizes in GiB, None as '-', short floats."""
    from autotune.core.units import format_bytes

    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if key.endswith("_bytes") and isinstance(value, int):
        return f"{format_bytes(value)} ({value} bytes)"
    if isinstance(value, float):
        return f"{value:,.6g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.3g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fmt(v)}" for k, v in value.items()) or "{}"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


def _throughput(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:,.1f} {unit}"


# Free-form mappings: compared whole (their keys differ from preset to preset).
_WHOLE = ("model.args", "config.knobs", "baseline.config.knobs")


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """``{"config": {"precision": "bf16"}}`` -> ``{"config.precision": "bf16"}``."""
    if isinstance(data, dict) and prefix not in _WHOLE:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: data}


def _load(ref: str) -> tuple[Path, Preset]:
    from autotune.preset import load_preset, resolve_preset

    path = resolve_preset(ref)
    return path, load_preset(path)


def _text(value: str) -> Any:
    from rich.text import Text

    # never parsed as rich markup (names may contain brackets), never a terminal sequence
    return Text(terminal_safe(value))


def _echo(text: str, *, err: bool = False) -> None:
    """Print text that holds a preset's strings, with no terminal control sequence in it."""
    typer.echo(terminal_safe(text), err=err)


# -- list ----------------------------------------------------------------------------------


@app.command("list")
@cli_command
def list_presets(json_out: JsonOpt = False) -> None:
    """List the presets in reach: shipped, in the working directory, and in the user folder."""
    from autotune.preset import find_presets, load_preset, preset_ref, user_preset_dir

    rows: list[dict[str, Any]] = []
    for origin, path in find_presets():
        row: dict[str, Any] = {"origin": origin, "ref": preset_ref(origin, path)}
        row["path"] = str(path)
        try:
            preset = load_preset(path)
        except PresetError as exc:
            row["error"] = exc.problems[0] if exc.problems else exc.context
            rows.append(row)
            continue
        headline = preset.measured.throughput
        row.update(
            name=preset.name,
            model=preset.model.name,
            device=preset.fingerprint.device_name,
            device_kind=preset.fingerprint.device_kind,
            throughput=None if headline is None else headline[0],
            throughput_unit=None if headline is None else headline[1],
            speedup=_speedup_of(preset),
            speedup_text=_qualified_speedup(preset),
        )
        rows.append(row)
    if json_out:
        print_json(rows)
        return
    if not rows:
        typer.echo(
            "no presets found: none shipped, none in the working directory, none in "
            f"{user_preset_dir()} (write one with `autotune search`)"
        )
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("origin", "name", "model", "device", "throughput", "speedup")
    refs = [_text(row["ref"]) for row in rows]
    # the name is what a user types next (presets show NAME): whole on any terminal
    keep_column_whole(table, 1, refs)
    for column in table.columns[-2:-1]:  # the figure stays whole; the other columns wrap
        column.no_wrap = True
    for row, ref in zip(rows, refs, strict=True):
        if "error" in row:
            table.add_row(row["origin"], ref, "", _text(f"invalid: {row['error']}"), "", "")
            continue
        unit = row["throughput_unit"] or ""
        speedup = _text(row["speedup_text"])
        device = f"{row['device']} ({row['device_kind']})"
        table.add_row(
            row["origin"],
            ref,
            _text(row["model"]),
            _text(device),
            _throughput(row["throughput"], unit),
            speedup,
        )
    Console().print(table)


def _speedup_of(preset: Preset) -> float | None:
    """The preset's speedup over naive: the race's when it has one (null when the race
    had no evidence for it), else its baseline's."""
    if preset.race is not None:
        return preset.race.speedup
    return None if preset.baseline is None else preset.baseline.speedup


def _qualified_speedup(preset: Preset) -> str:
    """The speedup with its evidence, as every output prints it (``preset.figures``)."""
    from autotune.preset.figures import race_speedup

    baseline = None if preset.baseline is None else preset.baseline.speedup
    return race_speedup(preset.race, baseline)


def _speedup_said(preset: Preset) -> str:
    """What follows the headline: ``, 2.47x the naive config (95% interval 2.20-2.60)``,
    or ``; speedup: not measured (no quiet round ...)``; "" without a naive figure."""
    from autotune.preset.figures import speedup_clause

    if preset.baseline is None and preset.race is None:
        return ""
    return speedup_clause(_qualified_speedup(preset))


# -- show ----------------------------------------------------------------------------------


def render_preset(preset: Preset, path: Path | None = None) -> str:
    """The whole preset, readable: one block per section."""
    from autotune.core.units import format_bytes
    from autotune.preset import preset_to_dict

    data = preset_to_dict(preset)
    lines = [f"preset {preset.name}" + (f"  ({path})" if path else "")]
    lines.append(f"  created       {preset.created}")
    args = f"  (args: {_fmt(preset.model.args)})" if preset.model.args else ""
    lines.append(f"  model         {preset.model.name}{args}")
    lines.append(
        f"  task          {preset.task.size_label()}, global batch {preset.task.global_batch}"
    )
    budget = "none" if preset.budget_bytes is None else _fmt(preset.budget_bytes, "budget_bytes")
    lines.append(f"  budget        {budget}")
    headline = preset.measured.throughput
    said = _speedup_said(preset)
    if headline is not None:
        lines.append(f"  throughput    {_throughput(*headline)}{said}")
    elif said:
        lines.append(f"  speedup       {said.lstrip(',; ')}")
    peak = preset.measured.peak_memory_bytes
    lines.append(f"  peak memory   {format_bytes(peak)}")

    def section(title: str, values: dict[str, Any] | None) -> None:
        lines.append("")
        lines.append(title)
        if values is None:
            lines.append("  (none)")
            return
        width = max((len(k) for k in values), default=0)
        for key, value in values.items():
            lines.append(f"  {key.ljust(width)}  {_fmt(value, key)}")

    section("config", data["config"])
    section(f"measured  (on {preset.fingerprint.describe()})", data["measured"])
    baseline = data["baseline"]
    if baseline is not None:
        baseline = {k: v for k, v in baseline.items() if k != "config"}
        changed = {
            k: v for k, v in data["baseline"]["config"].items() if data["config"].get(k) != v
        }
        baseline["config (where it differs)"] = changed
    section("baseline  (the naive config, same study)", baseline)
    section("search", data["search"])
    section("fingerprint", data["fingerprint"])
    section("training  (defaults of `autotune train`)", data["training"])
    if preset.notes:
        lines += ["", "notes", *(f"  {line}" for line in preset.notes.splitlines())]
    return "\n".join(lines)


@app.command("show")
@cli_command
def show(preset: PresetArg, json_out: JsonOpt = False) -> None:
    """Show every field of a preset."""
    from autotune.preset import preset_to_dict

    path, loaded = _load(preset)
    if json_out:
        print_json({"path": str(path), **preset_to_dict(loaded)})
        return
    _echo(render_preset(loaded, path))


# -- diff ----------------------------------------------------------------------------------


SECTION_BELOW = "(its fields below)"


def diff_rows(a: Preset, b: Preset) -> list[dict[str, Any]]:
    """Every field of two presets side by side (dotted paths), with ``differs`` set; a
    side without the field is None (``--json``'s null)."""
    from autotune.preset import preset_to_dict

    left, right = _flatten(preset_to_dict(a)), _flatten(preset_to_dict(b))
    keys = list(left) + [k for k in right if k not in left]
    missing = object()
    rows = []
    for key in keys:
        va, vb = left.get(key, missing), right.get(key, missing)
        rows.append(
            {
                "field": key,
                "a": None if va is missing else va,
                "b": None if vb is missing else vb,
                "differs": va != vb,
            }
        )
    return rows


def _sections_below(rows: list[dict[str, Any]], side: str) -> set[str]:
    """The fields that are sections on ``side`` ("a" or "b"): a field whose rows below
    hold a value there. Where the other preset holds the section as null (a baseline its
    race did not measure), the table said "-" on both sides of its row."""
    found: set[str] = set()
    for row in rows:
        if row[side] is not None:
            parts = row["field"].split(".")
            found.update(".".join(parts[:n]) for n in range(1, len(parts)))
    return found


@app.command("diff")
@cli_command
def diff(
    a: PresetArg,
    b: PresetArg,
    all_fields: Annotated[
        bool, typer.Option("--all", help="Show every field, not only those that differ.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Compare two presets side by side; differing fields are marked with *."""
    path_a, preset_a = _load(a)
    path_b, preset_b = _load(b)
    rows = diff_rows(preset_a, preset_b)
    shown = rows if all_fields else [r for r in rows if r["differs"]]
    if json_out:
        print_json({"a": str(path_a), "b": str(path_b), "fields": shown})
        return
    differing = sum(r["differs"] for r in rows)
    if not shown:
        _echo(f"{path_a} and {path_b} are identical ({len(rows)} fields)")
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table("", "field", escape(terminal_safe(f"A: {a}")), escape(terminal_safe(f"B: {b}")))
    sections = {side: _sections_below(rows, side) for side in ("a", "b")}

    def cell(row: dict[str, Any], side: str) -> str:
        if row[side] is None and row["field"] in sections[side]:
            return SECTION_BELOW
        return _fmt(row[side], row["field"])

    for row in shown:
        table.add_row(
            "*" if row["differs"] else "",
            _text(row["field"]),
            _text(cell(row, "a")),
            _text(cell(row, "b")),
            style="bold" if row["differs"] and all_fields else None,
        )
    console = Console()
    console.print(table)
    console.print(f"{differing} of {len(rows)} fields differ", highlight=False)


# -- check ---------------------------------------------------------------------------------


def render_portability(report: PortabilityReport) -> list[str]:
    if report.same_device:
        lines = [f"portability: same device as recorded ({report.device_name}, {report.device})"]
    else:
        lines = [
            f"portability: measured elsewhere; checking on {report.device_name} ({report.device})"
        ]
    lines += [f"  differs  {d}" for d in report.differences]
    lines += [f"  warning  {w}" for w in report.warnings]
    return lines


def compare_burst(preset: Preset, result: BurstResult) -> list[dict[str, Any]]:
    """Recorded vs measured-here figures, with here/recorded ratios."""
    recorded = preset.measured
    there_tp, unit = recorded.throughput or (None, result.throughput_label)
    here_tp = result.tokens_per_s if unit == "tokens/s" else result.samples_per_s
    rows = [
        ("throughput", unit, there_tp, here_tp),
        ("step_time_median_s", "s", recorded.step_time_median_s, result.step_time_median_s),
        ("step_time_p90_s", "s", recorded.step_time_p90_s, result.step_time_p90_s),
        ("peak_memory_bytes", "bytes", recorded.peak_memory_bytes, result.peak_memory_bytes),
        ("compile_s", "s", recorded.compile_s, result.compile_s),
    ]
    out = []
    for name, unit_name, there, here in rows:
        ratio = here / there if here is not None and there else None
        out.append(
            {"field": name, "unit": unit_name, "recorded": there, "here": here, "ratio": ratio}
        )
    return out


@app.command("check")
@cli_command
def check(
    preset: PresetArg,
    device: Annotated[
        str | None,
        typer.Option(help="cpu, cuda or cuda:N (default: the kind the preset was measured on)."),
    ] = None,
    steps: Annotated[int, typer.Option(help="Timed optimizer steps.")] = 10,
    warmup: Annotated[int, typer.Option(help="Untimed warm-up steps.")] = 3,
    timeout: Annotated[float, typer.Option(help="Seconds before the burst is killed.")] = 300.0,
    force: Annotated[
        bool, typer.Option("--force", help="Run even if the recorded peak exceeds free memory.")
    ] = False,
    trust_model: Annotated[
        bool,
        typer.Option(
            "--trust-model",
            help="Run the model code the preset names when it is not a built-in model.",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Re-measure a preset here with a short burst: measured vs recorded figures."""
    from autotune.burst import supervisor as burst
    from autotune.core.signals import stop_signals_raise
    from autotune.machine import hardware
    from autotune.preset import check_portability

    check_burst_numbers(steps=steps, warmup=warmup, timeout=timeout, seed=None)
    path, loaded = _load(preset)
    profile = hardware.probe()
    report = check_portability(loaded, profile, device, force=force)
    if not json_out:
        _echo("\n".join(render_portability(report)))
    notes: list[str] = []
    from autotune.models.registry import load_within

    spec = load_within(  # no --model here
        loaded.model.name,
        timeout,
        lambda: loaded.model.load(trust=trust_model, notes=notes, again=False),
        limit="--timeout",
    )
    for text in notes:
        _echo(f"warning: {text}", err=True)
    _check_runnable(loaded, spec, profile.device(report.device))
    if not json_out:
        _echo(f"running {steps} steps (after {warmup} warm-up) of {path} on {report.device}")
    with stop_signals_raise():  # SIGTERM: the burst's process ended, "stopped by SIGTERM"
        result = burst.run_burst(
            spec,
            loaded.config,
            steps=steps,
            warmup=warmup,
            budget_bytes=loaded.budget_bytes,
            timeout_s=timeout,
            device=report.device,
            seed=loaded.training.seed,
        )
    rows = compare_burst(loaded, result) if result.ok else []
    if json_out:
        print_json(
            {
                "path": str(path),
                "portability": report.to_dict(),
                "burst": result.to_dict(),
                "comparison": rows,
            }
        )
    if not result.ok:
        raise AutotuneError(
            f"the burst of {str(path)!r} did not finish on {report.device}: "
            f"{result.status}{': ' + result.reason if result.reason else ''}"
        )
    if json_out:
        return
    typer.echo(_comparison_table(rows, elsewhere=report.measured_elsewhere))


def _comparison_table(rows: list[dict[str, Any]], *, elsewhere: bool) -> str:
    from autotune.core.units import format_bytes

    def cell(value: float | None, unit: str) -> str:
        if value is None:
            return "-"
        if unit == "bytes":
            return format_bytes(value)
        if unit == "s":
            return f"{value:.4g} s"
        return f"{value:,.1f} {unit}"

    recorded = "recorded (elsewhere)" if elsewhere else "recorded"
    lines = [f"{'':20}{recorded:>24}{'here':>24}{'ratio':>10}"]
    for row in rows:
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}x"
        lines.append(
            f"{row['field']:20}{cell(row['recorded'], row['unit']):>24}"
            f"{cell(row['here'], row['unit']):>24}{ratio:>10}"
        )
    speed = rows[0]["ratio"] if rows else None
    if speed is not None and speed < 0.8:
        lines.append(
            f"throughput here is {speed:.2f}x the recorded figure: this machine is slower, or "
            "busy; `autotune search` here may find a better config"
        )
    return "\n".join(lines)


# -- export --------------------------------------------------------------------------------
def _check_model(loaded: Preset) -> None:
    """A preset's config against its model, as ``train`` holds it, before it is exported
    for another trainer (a knob of 999, a sequence past the model's limit, a model that
    does not exist were exported, then refused by ``train``). A user's model file is not
    run here (``train --trust-model`` runs it), so its config is exported as it is."""
    from autotune.models.registry import is_user_code

    if is_user_code(loaded.model.name):
        _echo(f"note: {loaded.model.name!r} is user code, not run here: its knobs are not "
              "checked", err=True)  # fmt: skip
        return
    _refuse_misfit(loaded, loaded.model.load(trust=False, notes=[], again=False))


def _check_runnable(loaded: Preset, spec: ModelSpec, caps: DeviceCaps) -> None:
    """What ``train`` refuses in the preset here, refused before ``check``'s burst (exit 2,
    as ``train`` says it): a knob the model has not (the burst failed with a KeyError,
    exit 1), a sequence past its limit, a size its code refuses."""
    from autotune.contract.spec import check_built_arguments

    _refuse_misfit(loaded, spec, caps)
    check_built_arguments(spec)


def _refuse_misfit(loaded: Preset, spec: ModelSpec, caps: DeviceCaps | None = None) -> None:
    """A ConfigError with what ``spec`` refuses in the preset's config (``model_problems``;
    with ``caps``, on that device too)."""
    from autotune.config.checks import model_problems

    problems = model_problems(loaded.config, spec=spec, device=caps)
    if problems:
        where = "" if caps is None else f" on {caps.device}"
        raise ConfigError(
            problems, context=f"the preset's config does not fit {spec.name!r}{where}"
        )


@app.command("export")
@cli_command
def export(
    preset: PresetArg,
    format_: Annotated[
        str,
        typer.Option(
            "--format",
            help=(
                "json or yaml (the preset itself); hf (TrainingArguments keywords), lightning "
                "(Trainer, DataLoader, AdamW, compile arguments), accelerate (a config file "
                "for accelerate launch), deepspeed (a config JSON), torchrun (the command)."
            ),
        ),
    ] = "json",
    nproc: Annotated[
        int | None,
        typer.Option(
            "--nproc",
            help="Processes (GPUs) to train on: the global batch is kept, each process "
            "accumulating grad_accum / nproc micro-batches (default: the preset's own "
            "count, config.parallel.nproc_per_node, else 1).",
        ),
    ] = None,
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Write here instead of to stdout.")
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace --output if it exists.")
    ] = False,
) -> None:
    """Export a preset (validated) as JSON or YAML, or as the settings of another trainer.

    What a format cannot carry (a model knob, the budget, the data's length) is listed in
    the file as comments where the format has them, and printed as notes on stderr.
    """
    from autotune.core.files import atomic_write_text
    from autotune.core.validator import PROCESSES
    from autotune.preset.export import EXPORT_FORMATS, export_preset

    if format_ not in EXPORT_FORMATS:
        raise UsageError(f"--format: expected one of {', '.join(EXPORT_FORMATS)}; got {format_!r}")
    if nproc is not None and (wanted := PROCESSES.wanted(nproc)) is not None:
        raise UsageError(f"--nproc: expected {wanted}, got {nproc}")
    if output is not None:
        _check_export_output(output, overwrite=overwrite, example=_EXAMPLE_FILES[format_])
    path, loaded = _load(preset)
    _check_model(loaded)
    exported = export_preset(loaded, format_, nproc=nproc, preset_ref=preset)
    for line in exported.unmapped:
        _echo(f"note: not mapped: {line}", err=True)
    text = exported.text
    if output is None:
        sys.stdout.write(text)
        return
    target = Path(output).expanduser()
    try:
        atomic_write_text(target, text, overwrite=overwrite)
    except FileExistsError:
        raise UsageError(f"--output {str(target)!r} already exists") from None
    except OSError as exc:
        raise PresetError([], context=f"cannot write {str(target)!r}: {exc}") from None
    _echo(f"wrote {target} ({format_}, from {path})", err=True)


# A file to name in a refusal of --output, per format.
_EXAMPLE_FILES = {
    "json": "preset.json",
    "yaml": "preset.yaml",
    "hf": "hf.yaml",
    "lightning": "lightning.yaml",
    "accelerate": "accelerate.yaml",
    "deepspeed": "ds.json",
    "torchrun": "run.sh",
}


def _check_export_output(output: str, *, overwrite: bool, example: str) -> None:
    """Refuse ``--output`` before the preset is read and converted: a folder, a device or
    a path ending with a slash (``newdir/``, which names a folder: kept as a str for its
    slash), a folder that cannot be made or written in (``p.yaml/x``), and a file there
    without ``--overwrite``."""
    from autotune.core.files import output_problem

    if problem := output_problem(output, example=example):
        raise UsageError(f"--output {problem}")
    if Path(output).expanduser().exists() and not overwrite:
        raise UsageError(f"--output {output!r} already exists (add --overwrite to replace it)")
