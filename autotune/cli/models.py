"""`autotune models list` and `autotune models show NAME`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from autotune.cli._common import ModelArgOption, cli_command, print_json
from autotune.cli._tables import keep_column_whole

if TYPE_CHECKING:
    from autotune.contract.spec import ModelSpec

__all__ = ["app", "model_info"]

app = typer.Typer(
    help="List the built-in models, or show everything about one (or your own).",
    no_args_is_help=True,
)


def model_info(spec: ModelSpec, *, details: bool = False) -> dict[str, Any]:
    """What ``models list`` (and with ``details``, ``models show``) reports about a spec.

    Each of the spec's own functions runs under ``user_code``: a user model that raises (or
    exits) is a one-paragraph ``ModelLoadError`` naming the function, not a traceback.
    """
    from autotune.contract.spec import user_code

    with user_code(spec, "build_fn"):
        counts = spec.param_counts()
    with user_code(spec, "flops_fn"):
        flops = spec.flops_per_sample()
    with user_code(spec, "tokens_fn"):
        tokens = spec.tokens_per_sample() if spec.throughput_unit == "tokens" else spec.seq_len
    info: dict[str, Any] = {
        "name": spec.name,
        "family": spec.family,
        "task": spec.task,
        "params": counts.total,
        "non_embedding_params": counts.non_embedding,
        "seq_len": spec.seq_len,
        "max_seq_len": spec.max_seq_len,
        "size_name": spec.size_name,  # what seq_len is for this model: seq, image, nodes
        "real_data": spec.data_fn is not None,
        "global_batch": spec.global_batch,
        "throughput_unit": spec.throughput_unit,
        "tokens_per_sample": tokens,
        "flops_per_sample": flops,
        "flops_per_token": flops / tokens,
        "activation_checkpointing": spec.supports_checkpointing,
        "knobs": {k.name: list(k.values) for k in spec.knobs},
        "description": spec.description,
    }
    if details:
        import torch

        with user_code(spec, "make_batch_fn"):
            batch = spec.make_batch(batch_size=2, generator=torch.Generator().manual_seed(0))
        info["source"] = spec.source
        info["args"] = dict(spec.args)
        info["knob_details"] = [
            {"name": k.name, "values": list(k.values), "default": k.default, "help": k.help}
            for k in spec.knobs
        ]
        info["batch"] = {
            key: {"shape": ["B", *t.shape[1:]], "dtype": str(t.dtype).replace("torch.", "")}
            for key, t in batch.items()
        }
        info["extras"] = sorted(spec.extras)
    return info


def _human(n: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


def _knobs_text(info: dict[str, Any]) -> str:
    parts = [f"{name}={','.join(map(str, values))}" for name, values in info["knobs"].items()]
    if info["activation_checkpointing"]:
        parts.insert(0, "checkpointing")
    return "; ".join(parts) or "-"


@app.command("list")
@cli_command
def list_command(
    json_output: Annotated[
        bool, typer.Option("--json", help="Print JSON instead of a table.")
    ] = False,
) -> None:
    """The built-in models: sizes, default sequence length, FLOPs, supported knobs."""
    from autotune.models import list_models

    infos = [model_info(spec) for spec in list_models()]
    if json_output:
        print_json(infos)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title="built-in models (a Hugging Face architecture with --model hf:NAME; your own "
        "with --model pkg.mod:attr or file.py:attr)"
    )
    for column in ("name", "params", "non-emb", "seq len", "FLOPs/token", "global batch", "knobs"):
        table.add_column(column, justify="left" if column in ("name", "knobs") else "right")
    keep_column_whole(table, 0, [info["name"] for info in infos])  # what --model takes
    for info in infos:
        table.add_row(
            info["name"],
            _human(info["params"]),
            _human(info["non_embedding_params"]),
            str(info["seq_len"]),
            _human(info["flops_per_token"]),
            str(info["global_batch"]),
            _knobs_text(info),
        )
    Console(width=max(120, Console().width)).print(table)


@app.command("show")
@cli_command
def show_command(
    name: Annotated[
        str,
        typer.Argument(
            help="A built-in model name, hf:ARCHITECTURE (hf:llama), pkg.module:attr or "
            "path/to/file.py:attr."
        ),
    ],
    json_output: Annotated[
        bool, typer.Option("--json", help="Print JSON instead of text.")
    ] = False,
    model_arg: ModelArgOption = None,
) -> None:
    """Everything about one model: arguments, sizes, FLOPs, batch layout, knobs."""
    from autotune.models.registry import load_model, parse_model_args

    info = model_info(load_model(name, parse_model_args(model_arg or [])), details=True)
    if json_output:
        print_json(info)
        return
    lines = [
        f"{info['name']}: {info['description']}",
        f"  source               {info['source']}",
        f"  family / task        {info['family'] or '-'} / {info['task']}",
        f"  parameters           {info['params']:,} "
        f"({info['non_embedding_params']:,} non-embedding)",
        f"  {'seq len' if info['size_name'] == 'seq' else info['size_name']:<20} "
        f"{info['seq_len']} (max {info['max_seq_len']}; the config's seq_len)",
        "  burst data           "
        + ("its own data_fn (the real pipeline)" if info["real_data"] else "synthetic batches"),
        f"  global batch         {info['global_batch']} samples",
        f"  throughput unit      {info['throughput_unit']}"
        + (
            f" ({info['tokens_per_sample']} per sample)"
            if info["throughput_unit"] == "tokens"
            else ""
        ),
        f"  FLOPs                {_human(info['flops_per_sample'])} per sample, "
        f"{_human(info['flops_per_token'])} per token (training, forward + backward)",
        f"  checkpointing        {'yes' if info['activation_checkpointing'] else 'no'}",
        "  args",
        *(f"    {k} = {v!r}" for k, v in info["args"].items()),
        "  knobs" + ("" if info["knob_details"] else "                none"),
        *(
            f"    {k['name']} in {k['values']} (default {k['default']!r})"
            + (f": {k['help']}" if k["help"] else "")
            for k in info["knob_details"]
        ),
        "  batch",
        *(
            f"    {k}: {v['dtype']} ({', '.join(map(str, v['shape']))})"
            for k, v in info["batch"].items()
        ),
        f"  extras               {', '.join(info['extras']) or '-'}",
    ]
    typer.echo("\n".join(lines))
