"""Arms: the baseline (no drafter) and the speculative configurations it is paired with.

An arm is a name plus vLLM's ``--speculative-config`` (``None`` for the baseline), optional
arm-only server arguments and environment, or an ``endpoint`` to attach to instead of
launching a server. Before any server starts, a draft model is checked against the target:
a different vocabulary makes every proposal a rejection (seed 004's tokenizer gotcha), so
such an arm is refused with a clear error rather than measured. Checked, when both are
local folders: ``vocab_size`` (config.json), the special token ids (bos, eos, pad, unk from
config.json and generation_config.json), the special token strings (tokenizer_config.json),
and the vocabulary itself (every token and id of tokenizer.json, or the bytes of a
SentencePiece tokenizer.model): two tokenizers of the same size can still disagree.

A *ceiling* arm (seed 002: "measure the ceiling before training a drafter") is a
speculative arm whose ``speculative_config`` says ``rejection_sample_method = "synthetic"``:
vLLM then accepts each draft position with a forced probability instead of checking it
against the target, so the run shows what a drafter with that acceptance would buy on this
stack, verification and drafting costs included. The drafter still runs and its tokens
become the output (use ``ngram`` or a draft ``model``; on CPU those are the ones that run),
so the output text is meaningless and its acceptance is not a drafter's: ledgers flag it
``synthetic_acceptance``. Its fields follow vLLM's rules and are checked here, one line
per mistake: exactly one of ``synthetic_acceptance_rates`` (per-position *unconditional*
rates, the chance that the first i+1 drafts are all accepted: k numbers in [0, 1],
non-increasing) or ``synthetic_acceptance_length`` (mean acceptance length in [1, k+1]).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import urllib.parse
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from specnb import paths
from specnb.analysis.schedule import SCHEDULE_KEY, ScheduleError, canonical_schedule, check_schedule
from specnb.errors import SpecnbError
from specnb.ledger.schema import ArmRecord, synthetic_rates

__all__ = ["Arm", "ArmError", "check_drafter", "check_server_args", "check_endpoint", "read_policy",
           "synthetic_rates", "DEFAULT_API_KEY_ENV"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_DRAFT_METHODS = {"ngram", "draft_model", "eagle", "eagle3", "mtp", "medusa", "mlp_speculator",
                  "suffix", "dflash", "ngram_gpu"}
_REJECTION_METHODS = {"standard", "synthetic", "block"}
_SYNTHETIC_KEYS = ("synthetic_acceptance_rates", "synthetic_acceptance_length")


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_synthetic(v: dict[str, Any], k: int) -> None:
    """vLLM's own rules for a synthetic config, as one-line errors before anything starts."""
    method = v.get("rejection_sample_method", "standard")
    if method not in _REJECTION_METHODS:
        raise ValueError(f"unknown rejection_sample_method {method!r}; known: {sorted(_REJECTION_METHODS)}")
    given = [key for key in _SYNTHETIC_KEYS if v.get(key) is not None]
    if method != "synthetic":
        if given:
            raise ValueError(f"{given[0]} needs rejection_sample_method = 'synthetic'")
        return
    if len(given) != 1:
        raise ValueError("a synthetic (ceiling) arm needs exactly one of synthetic_acceptance_rates "
                         "or synthetic_acceptance_length")
    rates = v.get("synthetic_acceptance_rates")
    if rates is not None:
        if not isinstance(rates, list) or not all(_is_number(r) for r in rates):
            raise ValueError("synthetic_acceptance_rates must be a list of numbers")
        if len(rates) != k:
            raise ValueError(f"synthetic_acceptance_rates has {len(rates)} entries; "
                             f"num_speculative_tokens is {k}: give one rate per draft position")
        if not all(0.0 <= r <= 1.0 for r in rates):
            raise ValueError(f"synthetic_acceptance_rates entries must be in [0, 1], got {rates}")
        if any(b > a for a, b in zip(rates, rates[1:], strict=False)):
            raise ValueError(f"synthetic_acceptance_rates must be non-increasing (rate i is the chance that "
                             f"the first i+1 drafts are all accepted), got {rates}")
        return
    length = v["synthetic_acceptance_length"]
    if not _is_number(length) or not 1.0 <= length <= k + 1:
        raise ValueError(f"synthetic_acceptance_length must be a number in [1, {k + 1}] "
                         f"(num_speculative_tokens + 1), got {length!r}")


# Arguments specnb sets on every launched server itself: given again in server_args they would
# point the server somewhere specnb does not look (a --port elsewhere left the sweep waiting for
# its ready timeout), or record a secret in every ledger's argv (--api-key).
_OWN_ARGS = {
    "--port": "specnb picks a free port for every launched server",
    "--host": "launched servers bind to 127.0.0.1; to measure a server elsewhere, give the arm an endpoint",
    "--model": "give the checkpoint as the sweep's (or condition's) model",
    "--served-model-name": "give it as served_model_name",
    "--speculative-config": "put the drafter in speculative_config",
    "--api-key": "a launched server listens on 127.0.0.1 only and needs no key (its argv is recorded in every "
                 "ledger); protected servers are measured by attaching (endpoint, api_key_env)",
}
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def check_server_args(args: list[str]) -> list[str]:
    """Refuse the arguments specnb sets itself (``--port``, ``--host``, ...), in either form
    (``--port 8000``, ``--port=8000``), and anything that is not a string."""
    for a in args:
        if not isinstance(a, str):
            raise ValueError(f"server_args holds {a!r}: every argument must be a string")
        flag = a.split("=", 1)[0]
        if flag in _OWN_ARGS:
            raise ValueError(f"{flag} is not allowed in server_args: {_OWN_ARGS[flag]}")
    return args


def check_endpoint(url: str) -> str:
    """An endpoint is ``http(s)://host[:port][/path]``; a one-line error says what is accepted."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1 or parts.query or parts.fragment:
        raise ValueError(f"endpoint {url!r} is not a server URL: give http://host:port "
                         "(e.g. http://127.0.0.1:8000), without a query")
    if parts.path.rstrip("/").endswith("/v1"):
        raise ValueError(f"endpoint {url!r}: give the server's root (specnb adds /v1/...), "
                         f"e.g. {url.rstrip('/')[:-3]}")
    return url.rstrip("/")


class ArmError(SpecnbError):
    """An arm that cannot be run; raised before any server starts."""


class Arm(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="short id used in file names, e.g. 'baseline', 'ngram-k4'")
    speculative_config: dict[str, Any] | None = Field(
        None, description="vLLM --speculative-config; None = no drafter"
    )
    server_args: list[str] = Field(default_factory=list, description="extra args for this arm only")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment for this arm")
    endpoint: str | None = Field(None, description="attach to this running server instead of launching")
    api_key_env: str = Field(
        DEFAULT_API_KEY_ENV, description="attached arms: the environment variable holding the endpoint's API "
        "key, sent as a bearer token (never recorded); unset = no key",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"arm name {v!r} must be 1-64 of [A-Za-z0-9._-], starting alphanumeric")
        return v

    @field_validator("speculative_config", mode="before")
    @classmethod
    def _policy_file(cls, v: Any) -> Any:
        """``{policy_file = "..."}``: the config ``specnb policy`` wrote (a schedule to verify)."""
        if isinstance(v, dict) and "policy_file" in v:
            extra = sorted(set(v) - {"policy_file"})
            if extra:
                raise ValueError(f"a policy_file arm takes its whole config from the file; drop {extra}")
            return read_policy(v["policy_file"])
        return v

    @field_validator("speculative_config")
    @classmethod
    def _spec(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is None:
            return v
        k = v.get("num_speculative_tokens")
        if not isinstance(k, int) or k < 1:
            raise ValueError("speculative_config needs an integer num_speculative_tokens >= 1")
        if "method" not in v and "model" not in v:
            raise ValueError("speculative_config needs a 'method' (e.g. 'ngram') or a draft 'model'")
        if "method" in v and v["method"] not in _DRAFT_METHODS:
            raise ValueError(f"unknown speculative method {v['method']!r}; known: {sorted(_DRAFT_METHODS)}")
        if v.get("method") == "ngram" and "model" in v:
            raise ValueError("an ngram arm takes no draft 'model'")
        _check_synthetic(v, k)
        try:  # vLLM's new name for the schedule is read as the old one (specnb keeps one name)
            v = canonical_schedule(v)
        except ScheduleError as exc:
            raise ValueError(str(exc)) from None
        if SCHEDULE_KEY in v:
            try:
                v = {**v, SCHEDULE_KEY: check_schedule(v[SCHEDULE_KEY], k)}
            except ScheduleError as exc:
                raise ValueError(str(exc)) from None
        return v

    @field_validator("server_args")
    @classmethod
    def _args(cls, v: list[str]) -> list[str]:
        return check_server_args(v)

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        return None if v is None else check_endpoint(v)

    @field_validator("api_key_env")
    @classmethod
    def _key_env(cls, v: str) -> str:
        if not _ENV_NAME.match(v):
            # never echo the value: it may be the key itself, pasted in the wrong place
            raise ValueError(f"api_key_env must be the NAME of an environment variable in capitals "
                             f"(e.g. {DEFAULT_API_KEY_ENV!r}) that holds the key, not the key itself")
        return v

    def api_key(self) -> str | None:
        """The attached endpoint's API key from the environment (None for a launched arm or when
        the variable is unset). Never recorded: ledgers keep only the variable's name."""
        if self.endpoint is None:
            return None
        return os.environ.get(self.api_key_env) or None

    @property
    def speculative(self) -> bool:
        return self.speculative_config is not None

    @property
    def schedule(self) -> list[list[int]] | None:
        """vLLM's dynamic speculation schedule ([lo, hi, K] batch-size ranges), if the arm has one."""
        return (self.speculative_config or {}).get(SCHEDULE_KEY)

    @property
    def ceiling(self) -> bool:
        """True for a synthetic-acceptance arm: forced acceptance, not a drafter's."""
        return synthetic_rates(self.speculative_config) is not None

    def record(self) -> ArmRecord:
        return ArmRecord(
            name=self.name, speculative_config=self.speculative_config,
            server_args=self.server_args, endpoint=self.endpoint,
        )


def read_policy(path: str | Path) -> dict[str, Any]:
    """The speculative config of a policy file (``specnb policy`` writes them); relative paths
    are read from the repository root when they are not found from here."""
    p = Path(path)
    if not p.is_file() and (paths.ROOT / p).is_file():
        p = paths.ROOT / p
    try:
        doc = json.loads(p.read_text())
    except OSError as exc:
        raise ValueError(f"policy_file {str(path)!r}: {exc.strerror}") from None
    except ValueError as exc:
        raise ValueError(f"policy_file {str(path)!r}: not JSON ({exc})") from None
    cfg = doc.get("speculative_config") if isinstance(doc, dict) else None
    if not isinstance(cfg, dict):
        raise ValueError(f"policy_file {str(path)!r} has no 'speculative_config' (write one with `specnb policy`)")
    return cfg


def _read_config(model_dir: Path) -> dict[str, Any]:
    cfg = model_dir / "config.json"
    try:
        data = json.loads(cfg.read_text())
    except (OSError, ValueError) as exc:
        raise ArmError(f"cannot read {cfg}: {exc}") from exc
    # Multimodal and some MoE configs nest the language model's config.
    return data.get("text_config", data) if "vocab_size" not in data else data


def _special_ids(model_dir: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    ids = {k: cfg.get(k) for k in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id")}
    gen = model_dir / "generation_config.json"
    if gen.exists():
        try:
            g = json.loads(gen.read_text())
            for k in ("bos_token_id", "eos_token_id"):
                ids[k] = ids[k] if ids[k] is not None else g.get(k)
        except ValueError:
            pass
    return ids


_SPECIAL_STRINGS = ("bos_token", "eos_token", "unk_token", "pad_token")


def _special_strings(model_dir: Path) -> dict[str, Any]:
    """bos/eos/unk/pad token strings from tokenizer_config.json ({} when absent or unreadable)."""
    try:
        cfg = json.loads((model_dir / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for k in _SPECIAL_STRINGS:
        v = cfg.get(k)
        out[k] = v.get("content") if isinstance(v, dict) else v  # AddedToken dicts in older files
    return {k: v for k, v in out.items() if v is not None}


def _vocabulary(model_dir: Path) -> tuple[str, dict[int, str]] | None:
    """(kind, id -> token) from tokenizer.json, ("sentencepiece", {}) keyed by the model file's
    digest, or None when the folder has neither."""
    tj = model_dir / "tokenizer.json"
    if tj.exists():
        try:
            data = json.loads(tj.read_text())
        except (OSError, ValueError) as exc:
            raise ArmError(f"cannot read {tj}: {exc}") from exc
        vocab = (data.get("model") or {}).get("vocab")
        ids: dict[int, str] = {}
        if isinstance(vocab, dict):
            ids = {int(i): t for t, i in vocab.items()}
        elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], id = position
            ids = {i: (p[0] if isinstance(p, list) else p) for i, p in enumerate(vocab)}
        for tok in data.get("added_tokens") or []:
            ids[int(tok["id"])] = tok["content"]
        return "tokenizer.json", ids
    sp = model_dir / "tokenizer.model"
    if sp.exists():
        return "sentencepiece:" + hashlib.sha256(sp.read_bytes()).hexdigest(), {}
    return None


def _compare_tokenizers(arm: Arm, draft_dir: Path, target_dir: Path) -> list[str]:
    d_str, t_str = _special_strings(draft_dir), _special_strings(target_dir)
    diff = {k: (d_str[k], t_str[k]) for k in d_str.keys() & t_str.keys() if d_str[k] != t_str[k]}
    if diff:
        raise ArmError(f"arm {arm.name!r}: draft and target special tokens differ "
                       + ", ".join(f"{k} {a!r} vs {b!r}" for k, (a, b) in sorted(diff.items())))
    d_voc, t_voc = _vocabulary(draft_dir), _vocabulary(target_dir)
    not_compared = ["draft or target has no tokenizer.json / tokenizer.model to compare: vocabulary contents "
                    "not checked (sizes and special tokens were)"]
    if d_voc is None or t_voc is None:
        return not_compared
    (d_kind, d_ids), (t_kind, t_ids) = d_voc, t_voc
    if d_kind.startswith("sentencepiece:") and t_kind.startswith("sentencepiece:"):
        if d_kind != t_kind:
            raise ArmError(f"arm {arm.name!r}: draft and target tokenizer.model files differ")
        return []
    if d_kind != t_kind:  # one tokenizer.json, one SentencePiece file: no common ground
        return not_compared
    if d_ids != t_ids:
        bad = sorted(i for i in d_ids.keys() | t_ids.keys() if d_ids.get(i) != t_ids.get(i))
        i = bad[0]
        raise ArmError(
            f"arm {arm.name!r}: draft and target tokenizers differ in {len(bad)} token(s), e.g. id {i} is "
            f"{d_ids.get(i)!r} in the draft and {t_ids.get(i)!r} in the target (proposals are token ids: they would "
            "be rejected)"
        )
    return []


def _check_eagle_head(arm: Arm, head_dir: Path, h_cfg: dict[str, Any], t_cfg: dict[str, Any]) -> list[str]:
    """An EAGLE / EAGLE-3 head reads the target's hidden states and emits its tokens: one trained for
    another target (another hidden size, vocabulary or depth) cannot draft for this one, and vLLM would
    fail at load or accept nothing. Checked from the head's config (speculators' format keeps the
    layer shape in ``transformer_layer_config``; EAGLE's own format at the top level)."""
    layer = h_cfg.get("transformer_layer_config") or h_cfg
    if not any(head_dir.glob("*.safetensors")) and not any(head_dir.glob("*.bin")):
        raise ArmError(f"arm {arm.name!r}: EAGLE head folder {str(head_dir)!r} holds no weights (*.safetensors)")
    problems = []
    hidden = h_cfg.get("target_hidden_size") or layer.get("hidden_size")
    if None not in (hidden, t_cfg.get("hidden_size")) and hidden != t_cfg["hidden_size"]:
        problems.append(f"it reads hidden states of size {hidden}, the target's are {t_cfg['hidden_size']}")
    if None not in (layer.get("vocab_size"), t_cfg.get("vocab_size")) and layer["vocab_size"] != t_cfg["vocab_size"]:
        problems.append(f"its vocabulary has {layer['vocab_size']} tokens, the target's {t_cfg['vocab_size']}")
    aux = h_cfg.get("eagle_aux_hidden_state_layer_ids") or (h_cfg.get("eagle_config") or {}).get(
        "eagle_aux_hidden_state_layer_ids") or []
    depth = t_cfg.get("num_hidden_layers")
    if depth is not None and aux and max(aux) > depth:
        problems.append(f"it reads target layers {aux}, the target has {depth}")
    if problems:
        raise ArmError(f"arm {arm.name!r}: EAGLE head {str(head_dir)!r} was trained for another target: "
                       + "; ".join(problems))
    verifier = ((h_cfg.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path")
    return [f"EAGLE head trained for {verifier!r}"] if verifier else []


def check_drafter(arm: Arm, target_model: str | None) -> list[str]:
    """Refuse a draft model whose vocabulary differs from the target's.

    Returns notes for the ledger (e.g. when a check could not be made because a model is
    not a local folder); raises :class:`ArmError` on a mismatch.
    """
    spec = arm.speculative_config or {}
    draft = spec.get("model")
    if not draft or spec.get("method") in {"ngram", "suffix", "ngram_gpu"}:
        return []
    notes = []
    draft_dir, target_dir = Path(draft), Path(target_model) if target_model else None
    if not draft_dir.is_dir():
        if spec.get("method") in (None, "draft_model"):
            notes.append(f"draft model {draft!r} is not a local folder: vocabulary not checked")
        return notes
    if target_dir is None or not target_dir.is_dir():
        notes.append(f"target {target_model!r} is not a local folder: draft vocabulary not checked")
        return notes
    d_cfg, t_cfg = _read_config(draft_dir), _read_config(target_dir)
    if spec.get("method") in ("eagle", "eagle3"):
        return _check_eagle_head(arm, draft_dir, d_cfg, t_cfg)
    dv, tv = d_cfg.get("vocab_size"), t_cfg.get("vocab_size")
    if spec.get("method") in (None, "draft_model"):
        if dv is None or tv is None:
            notes.append("vocab_size missing from a config.json: vocabulary not checked")
        elif dv != tv:
            raise ArmError(
                f"arm {arm.name!r}: draft model vocabulary ({dv}) differs from the target's ({tv}); "
                "every proposal would be rejected"
            )
        d_ids, t_ids = _special_ids(draft_dir, d_cfg), _special_ids(target_dir, t_cfg)
        diff = {k: (d_ids[k], t_ids[k]) for k in d_ids if None not in (d_ids[k], t_ids[k]) and d_ids[k] != t_ids[k]}
        if diff:
            raise ArmError(
                f"arm {arm.name!r}: draft and target special tokens differ "
                + ", ".join(f"{k} {a} vs {b}" for k, (a, b) in diff.items())
            )
        notes += _compare_tokenizers(arm, draft_dir, target_dir)
    return notes
