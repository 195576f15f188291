"""What a GuideLLM report does not say: the deployment behind it.

A report records the load and the latencies, not which verifier and drafter served them. That comes
from TOML metadata, merged in this order (later wins):

1. ``bayeslat.toml`` in the report's folder (for every report there);
2. ``<report stem>.toml`` next to the report (``sweep.json`` -> ``sweep.toml``);
3. the file given with ``--meta``;
4. options given on the command line.

Keys (all optional unless said)::

    verifier = "llama-8b"            # required unless the report names the model it served
    verifier_params_b = 8.0          # default: the size in the verifier's name ("...-8B-...")
    drafter = "eagle3-llama-8b"      # required when k > 0
    drafter_params_b = 0.25
    method = "eagle3"                # none, eagle3, draft_model, ngram, mtp, ...
    k = 3                            # draft length, 0 = no SD (the default)
    alpha = 0.7                      # forced acceptance (synthetic rejection sampling)
    alpha_source = "forced"          # or "assumed"; "measured" comes from the metrics files
    metrics_before = "before.prom"   # vLLM /metrics before the sweep (relative to the TOML)
    metrics_after = "after.prom"     # ... and after: alpha is measured from the counters
    hardware = "H100"                # default: "unknown"
    moe_experts_active = 0
    moe_experts_total = 0
    prefill_tokens = 512             # default: the report's measured prompt-token mean
    decode_tokens = 256              # default: the report's measured output-token mean

A baseline sweep (no SD) of a report that names its model needs no metadata at all: its
verifier's size is read from the name where the name carries one (NaN, unknown, otherwise: a fit
of one verifier does not need it) and its hardware is ``"unknown"``. A run with SD needs its
method, drafter and alpha (or the metrics files that measure alpha). Every key still missing is
named in one error, with example lines. Metadata that contradicts
the report or itself is an error: ``k`` for a server whose metrics show
no speculative decoding, a ``k`` other than the number of draft positions the server counted,
``alpha`` together with metrics files, token lengths far from what was measured.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from bayeslat.data import vllm_metrics
from bayeslat.errors import COMMAND_LINE, InputError

DIR_FILE = "bayeslat.toml"
# A stated prefill/decode length this far (relative) from the measured mean contradicts the report.
MAX_LENGTH_MISMATCH = 0.25

_TYPES: dict[str, tuple[type, ...]] = {
    "verifier": (str,), "verifier_params_b": (int, float), "drafter": (str,),
    "drafter_params_b": (int, float), "method": (str,), "k": (int,), "alpha": (int, float),
    "alpha_source": (str,), "metrics_before": (str,), "metrics_after": (str,),
    "hardware": (str,), "moe_experts_active": (int,), "moe_experts_total": (int,),
    "prefill_tokens": (int, float), "decode_tokens": (int, float),
}
KEYS = tuple(_TYPES)
REQUIRED = ("verifier",)
UNKNOWN_HARDWARE = "unknown"
# A size in a model name: "Llama-3.1-8B-Instruct", "Qwen3-0.6B", "SmolLM-135M" (not "opt125m",
# not the 7B of "Mixtral-8x7B", not the active 3B of "Qwen3-30B-A3B": those are not the size).
_SIZE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)([bm])(?![\w.])", re.IGNORECASE)
# How a missing key looks in a metadata file (the missing-keys message shows them).
_EXAMPLES = {"verifier": '"llama-8b"', "verifier_params_b": "8.0", "hardware": '"H100"',
             "method": '"eagle3"', "drafter": '"eagle3-llama-8b"', "alpha": "0.7"}


@dataclass(frozen=True)
class Meta:
    """Merged metadata for one report, and where each key came from (for error messages)."""

    values: dict
    origin: dict  # key -> file path or "command line"

    def where(self, key: str) -> str:
        return self.origin.get(key, "metadata")


def read_meta_file(path: str | os.PathLike) -> dict:
    """Read one TOML metadata file, checking key names and types.

    Paths of metrics files are resolved relative to the TOML file.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError("no such metadata file; give a TOML file (see 'bayeslat ingest --help')",
                         path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"not valid TOML ({exc})", path) from None
    return check_values(data, path, base=path.parent)


def check_values(data: dict, where: str | os.PathLike, base: Path | None = None) -> dict:
    """Check key names and value types of one metadata source; resolve metrics paths."""
    out = {}
    for key, value in data.items():
        if key not in _TYPES:
            raise InputError(f"unknown key; use one of {', '.join(KEYS)}", where, key)
        if isinstance(value, bool) or not isinstance(value, _TYPES[key]):
            kind = {str: "a string", int: "a whole number"}.get(_TYPES[key][0], "a number")
            raise InputError(f"must be {kind}, got {value!r}", where, key)
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError("must be a finite number", where, key)
        if key.startswith("metrics_") and base is not None:
            value = str(base / value)
        out[key] = value
    return out


def merge(sources: list[tuple[dict, str]]) -> Meta:
    """Merge ``(values, origin)`` pairs, later ones winning."""
    values, origin = {}, {}
    for data, where in sources:
        values.update(data)
        origin.update(dict.fromkeys(data, str(where)))
    return Meta(values, origin)


def meta_for(report: Path, meta_file: Path | None, overrides: dict) -> Meta:
    """The merged metadata of one report: folder file, sibling file, ``--meta``, CLI options."""
    sources = []
    for candidate in (report.parent / DIR_FILE, report.with_suffix(".toml")):
        if candidate.is_file() and candidate != meta_file:
            sources.append((read_meta_file(candidate), str(candidate)))
    if meta_file is not None:
        sources.append((read_meta_file(meta_file), str(meta_file)))
    sources.append((check_values(overrides, COMMAND_LINE), COMMAND_LINE))
    return merge(sources)


def params_from_name(name: str) -> float:
    """A model's size in 1e9 parameters as its name states it (``"Llama-3.1-8B"`` -> 8.0,
    ``"SmolLM-135M"`` -> 0.135), NaN where the name states none or several."""
    sizes = {float(n) * (1e-3 if unit.lower() == "m" else 1.0) for n, unit in _SIZE.findall(name)}
    return sizes.pop() if len(sizes) == 1 else math.nan


def missing_keys(values: dict) -> list[str]:
    """The keys a report's metadata still needs: :data:`REQUIRED`, and for a run with SD
    (``k > 0``) its method, drafter and alpha (or the metrics files to measure it)."""
    out = [key for key in REQUIRED if key not in values]
    if values.get("k", 0) > 0:
        out += [key for key, needed in (
            ("method", values.get("method", "none") == "none"),
            ("drafter", "drafter" not in values),
            ("alpha", not {"alpha", "metrics_before", "metrics_after"} & set(values)))
            if needed]
    return out


def resolve(meta: Meta, prompt_mean: float, output_mean: float, report: str,
            model: str | None = None) -> dict:
    """The tidy-table columns that come from metadata, checked against the report.

    Parameters
    ----------
    meta
        Merged metadata of the report.
    prompt_mean, output_mean
        Measured mean prompt and output token counts over the report's benchmarks.
    report
        The report's path, for messages.
    model
        The model name the report's backend served, the verifier when the metadata name none.

    Returns
    -------
    dict
        ``verifier, verifier_params_b, drafter, drafter_params_b, method, hardware,
        moe_experts_active, moe_experts_total, prefill_tokens, decode_tokens, k, alpha,
        alpha_source``.
    """
    v = dict(meta.values)
    if "verifier" not in v and model:
        v["verifier"] = model  # the model the report's backend served
        meta = Meta(v, meta.origin | {"verifier": report})
    k = v.get("k", 0)
    if k < 0:
        raise InputError("must be 0 (no SD) or a positive draft length", meta.where("k"), "k")
    missing = missing_keys(v)
    if missing:
        them = "it" if len(missing) == 1 else "them"
        snippet = "; ".join(f"{key} = {_EXAMPLES[key]}" for key in missing)
        raise InputError(f"missing (the report does not say {them}): put {them} in {DIR_FILE} "
                         f"beside the report, one key per line, e.g. {snippet} (or in "
                         f"{Path(report).stem}.toml for this report alone, --meta FILE, or "
                         "options)", report, ", ".join(missing))
    row = {
        "verifier": v["verifier"],
        "verifier_params_b": float(v.get("verifier_params_b", params_from_name(v["verifier"]))),
        "hardware": v.get("hardware", UNKNOWN_HARDWARE), "k": k,
        "moe_experts_active": v.get("moe_experts_active", 0),
        "moe_experts_total": v.get("moe_experts_total", 0),
        "prefill_tokens": _length(meta, "prefill_tokens", prompt_mean, report),
        "decode_tokens": _length(meta, "decode_tokens", output_mean, report),
    }
    row.update(_drafter(meta, k) if k > 0 else _no_sd(meta))
    return row


def _length(meta: Meta, key: str, measured: float, report: str) -> float:
    if key not in meta.values:
        if not (math.isfinite(measured) and measured > 0):
            raise InputError(f"the report has no token counts; give {key} in the metadata",
                             report, key)
        return float(measured)
    stated = float(meta.values[key])
    if stated <= 0:
        raise InputError("must be a positive number of tokens", meta.where(key), key)
    if math.isfinite(measured) and abs(stated - measured) > MAX_LENGTH_MISMATCH * measured:
        raise InputError(f"{stated:g} contradicts the report {report}, which measured a mean of "
                         f"{measured:.1f} tokens; fix the metadata or drop the key",
                         meta.where(key), key)
    return stated


def _no_sd(meta: Meta) -> dict:
    v = meta.values
    for key in ("alpha", "drafter", "drafter_params_b"):
        if key in v:
            raise InputError(f"given for a run without speculative decoding (k = 0); set k or "
                             f"drop {key}", meta.where(key), key)
    if v.get("method", "none") != "none":
        raise InputError(f"method {v['method']!r} needs k > 0; set k or drop method",
                         meta.where("method"), "method")
    if "metrics_after" in v:
        counters = vllm_metrics.read_counters(v["metrics_after"])
        if counters.present and counters.drafts > 0:
            raise InputError("k = 0, but these metrics show speculative decoding; set k",
                             v["metrics_after"], "k")
    return {"drafter": "none", "drafter_params_b": 0.0, "method": "none",
            "alpha": math.nan, "alpha_source": "none"}


def _drafter(meta: Meta, k: int) -> dict:
    v = meta.values
    alpha, source = _alpha(meta, k)
    return {"drafter": v["drafter"], "drafter_params_b": float(v.get("drafter_params_b", 0.0)),
            "method": v["method"], "alpha": alpha, "alpha_source": source}


def _alpha(meta: Meta, k: int) -> tuple[float, str]:
    v = meta.values
    has_metrics = "metrics_before" in v or "metrics_after" in v
    if has_metrics and "alpha" in v:
        raise InputError("give alpha or the metrics files to measure it, not both",
                         meta.where("alpha"), "alpha")
    if has_metrics:
        for key in ("metrics_before", "metrics_after"):
            if key not in v:
                raise InputError("measuring alpha needs both metrics_before and metrics_after",
                                 meta.where("metrics_before" if key == "metrics_after" else
                                            "metrics_after"), key)
        after = vllm_metrics.read_counters(v["metrics_after"])
        if not after.present:
            raise InputError(f"k = {k}, but {v['metrics_after']} has no vllm:spec_decode_* "
                             "counters: that server ran without speculative decoding; set k = 0 "
                             "or give the SD run's metrics", meta.where("k"), "k")
        measured = vllm_metrics.acceptance(vllm_metrics.read_counters(v["metrics_before"]), after,
                                           v["metrics_after"])
        if measured.k != k:
            raise InputError(f"k = {k} contradicts the metrics, which count {measured.k} draft "
                             "positions", meta.where("k"), "k")
        return measured.alpha, "measured"
    alpha = float(v["alpha"])
    if not 0 <= alpha <= 1:
        raise InputError(f"must lie in [0, 1], got {alpha:g}", meta.where("alpha"), "alpha")
    source = v.get("alpha_source", "forced")
    if source not in ("forced", "assumed"):
        raise InputError("must be forced or assumed (measured comes from metrics files)",
                         meta.where("alpha_source"), "alpha_source")
    return alpha, source
