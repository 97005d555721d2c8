"""Every bad input a user can give is refused in one line, with a non-zero exit, before anything
starts: sweep files, prompt JSONL, traffic files, notebook parameters, ledgers and command-line
arguments, through the two entry points (``specnb`` and ``python -m specnb.notebooks.runner``).

Each case builds its files in a fresh folder and runs the entry point in this process (so a
case takes milliseconds); the test asserts the exit status, that stderr is exactly one line
naming the problem, and that no server was started: launching one is made to fail the test,
and the process gains no child. ``test_faults.py`` runs a refusal through a real subprocess.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

import specnb.engine.server as server
from specnb import cli
from specnb.ledger import SCHEMA_VERSION
from specnb.notebooks import runner
from tests.unit.factories import ledger
from tests.unit.fakevllm import fake_model

NB = "notebooks/01_concurrency.py"


@dataclass
class Case:
    id: str
    build: Callable[[Path], list[str]]  # files under tmp -> argv (first item: "specnb" or "runner")
    needle: str  # what the one line must say (a file, line, key, or what is accepted)
    code: int = 2


def toml(tmp: Path, body: str = "", **lines: str) -> Path:
    """A good sweep file (a local model that passes preflight) with one thing made bad:
    ``lines`` replace a top-level key's line (``""`` drops it), ``body`` is appended."""
    model = tmp / "model"
    if not model.exists():  # a case may have built (and broken) it first
        fake_model(model)
    good = {"name": 'name = "bad"', "model": f'model = "{model}"', "concurrency": "concurrency = [1]",
            "repeats": "repeats = 1", "workloads": 'workloads = ["copy"]', "warmup_requests": "warmup_requests = 0"}
    good.update(lines)
    text = "".join(line + "\n" for line in good.values() if line) + body
    if "[[arms]]" not in text:
        text += '[[arms]]\nname = "baseline"\n'
    cfg = tmp / "sweep.toml"
    cfg.write_text(text)
    return cfg


def anatomy(tmp: Path, body: str = "", **lines: str) -> list[str]:
    return ["specnb", "anatomy", str(toml(tmp, body, **lines)), "--out", str(tmp / "out")]


def sweep(tmp: Path, body: str = "", *extra: str, **lines: str) -> list[str]:
    return ["specnb", "sweep", str(toml(tmp, body, **lines)), "--out", str(tmp / "out"), *extra]


def prompts(tmp: Path, data: bytes, name: str = "p.jsonl") -> list[str]:
    (tmp / name).write_bytes(data)
    return sweep(tmp, workloads=f'workloads = ["{tmp / name}"]')


def traffic(tmp: Path, data: bytes, extra: str = "") -> list[str]:
    (tmp / "log.jsonl").write_bytes(data)
    return sweep(tmp, workloads=f'workloads = [{{traffic = "{tmp / "log.jsonl"}"{extra}}}]')


def conversations(tmp: Path, data: bytes, extra: str = "") -> list[str]:
    (tmp / "chats.jsonl").write_bytes(data)
    return sweep(tmp, 'load = "conversation"\n' + extra,
                 workloads=f'workloads = [{{conversations = "{tmp / "chats.jsonl"}"}}]')


def context(tmp: Path, table: str) -> list[str]:
    return sweep(tmp, workloads=f"workloads = [{table}]")


def report(tmp: Path, mutate: Callable[[dict], object] | None = None, raw: bytes | None = None) -> list[str]:
    run = tmp / "run" / "baseline" / "copy"
    run.mkdir(parents=True)
    good = json.loads(ledger().model_dump_json())
    (run / "c001-r00.json").write_text(json.dumps(good))
    bad = run / "c002-r00.json"
    if raw is not None:
        bad.write_bytes(raw)
    else:
        data = json.loads(ledger(c=2).model_dump_json())
        mutate(data)
        bad.write_text(json.dumps(data, indent=2))
    return ["specnb", "report", str(tmp / "run")]


def notebook(tmp: Path, *params: str, yaml_text: str | None = None) -> list[str]:
    argv = ["runner", NB, str(tmp / "out.ipynb")]
    if yaml_text is not None:
        (tmp / "p.yaml").write_text(yaml_text)
        argv += ["-f", str(tmp / "p.yaml")]
    for p in params:
        k, v = p.split("=", 1)
        argv += ["-p", k, v]
    return argv


def _set(path: str, value):
    def mutate(d):
        *head, last = path.split(".")
        for k in head:
            d = d[k]
        d[last] = value
    return mutate


GOOD_LINE = b'{"prompt": "hello"}\n'

CASES = [
    # ---------------------------------------------------------------- sweep files
    Case("toml-syntax", lambda t: sweep(t, "concurrency = [1,\n"), "not valid TOML"),
    # specnb anatomy reads the same files, and refuses what cannot be profiled
    Case("toml-anatomy-attached-arm", lambda t: anatomy(t, '[[arms]]\nname = "a"\nendpoint = "http://127.0.0.1:9"\n'),
         "attach to an endpoint"),
    Case("toml-anatomy-own-profiler", lambda t: anatomy(t, server_args='server_args = ["--profiler-config", "{}"]'),
         "--profiler-config is set by specnb anatomy"),
    Case("toml-anatomy-rate-load", lambda t: anatomy(t, concurrency='load = "rate"\nrates = [1.0]'),
         "anatomy profiles closed-loop levels"),
    Case("cli-anatomy-window", lambda t: [*anatomy(t), "--window-requests", "0"], "window_requests must be >= 1"),
    Case("toml-missing", lambda t: ["specnb", "sweep", str(t / "none.toml")], "none.toml: No such file"),
    Case("toml-misspelt-key", lambda t: sweep(t, concurrency="concurency = [1]"),
         "unknown key 'concurency' (did you mean 'concurrency'?)"),
    Case("toml-misspelt-arm-key", lambda t: sweep(t, '[[arms]]\nname = "n"\nspeculative_confg = {}\n'),
         "arms.0: unknown key 'speculative_confg' (did you mean 'speculative_config'?)"),
    Case("toml-misspelt-sampling-key", lambda t: sweep(t, "[sampling]\nmax_token = 8\n"),
         "sampling: unknown key 'max_token' (did you mean 'max_tokens'?)"),
    Case("toml-unknown-key", lambda t: sweep(t, 'colour = "blue"\n'), "unknown key 'colour' (known: arms"),
    Case("concurrency-zero", lambda t: sweep(t, concurrency="concurrency = [0]"),
         "concurrency levels must be >= 1"),
    Case("concurrency-repeated", lambda t: sweep(t, concurrency="concurrency = [2, 2]"),
         "concurrency levels must be distinct"),
    Case("repeats-zero", lambda t: sweep(t, repeats="repeats = 0"),
         "repeats: Input should be greater than or equal to 1 (got 0)"),
    Case("max-tokens-text", lambda t: sweep(t, '[sampling]\nmax_tokens = "many"\n'),
         "sampling.max_tokens: Input should be a valid integer"),
    Case("temperature-negative", lambda t: sweep(t, "[sampling]\ntemperature = -1.0\n"),
         "sampling.temperature: Input should be greater than or equal to 0"),
    Case("arm-name", lambda t: sweep(t, '[[arms]]\nname = "a b"\n'), "arm name 'a b' must be"),
    Case("arm-names-repeated", lambda t: sweep(t, '[[arms]]\nname = "a"\n[[arms]]\nname = "a"\n'),
         "arm names must be distinct"),
    Case("drafter-method", lambda t: sweep(
        t, '[[arms]]\nname = "b"\n[[arms]]\nname = "x"\nspeculative_config = {method = "magic", '
           'num_speculative_tokens = 2}\n'), "unknown speculative method 'magic'"),
    Case("drafter-without-k", lambda t: sweep(
        t, '[[arms]]\nname = "b"\n[[arms]]\nname = "x"\nspeculative_config = {method = "ngram"}\n'),
         "integer num_speculative_tokens >= 1"),
    Case("ceiling-rates", lambda t: sweep(
        t, '[[arms]]\nname = "b"\n[[arms]]\nname = "x"\nspeculative_config = {method = "ngram", '
           'num_speculative_tokens = 2, rejection_sample_method = "synthetic", '
           'synthetic_acceptance_rates = [0.9]}\n'), "one rate per draft position"),
    Case("port-in-server-args", lambda t: sweep(t, 'server_args = ["--port", "8000"]\n'),
         "--port is not allowed in server_args: specnb picks a free port"),
    Case("host-in-arm-server-args", lambda t: sweep(t, '[[arms]]\nname = "b"\nserver_args = ["--host=0.0.0.0"]\n'),
         "arms.0.server_args: --host is not allowed in server_args"),
    Case("api-key-in-server-args", lambda t: sweep(t, 'server_args = ["--api-key", "k"]\n'),
         "--api-key is not allowed in server_args"),
    Case("model-missing", lambda t: sweep(t, model=f'model = "{t / "nope"}"'),
         f"model folder '{'{t}'}/nope' does not exist"),
    Case("model-without-config", lambda t: (fake_model(t / "model"), (t / "model" / "config.json").unlink(),
                                            sweep(t))[-1], "has no config.json: not a model checkpoint"),
    Case("model-without-tokenizer", lambda t: (fake_model(t / "model"), (t / "model" / "tokenizer.json").unlink(),
                                               sweep(t))[-1], "holds no tokenizer"),
    Case("model-hub-id-offline", lambda t: sweep(t, "[env]\nHF_HUB_OFFLINE = \"1\"\n",
                                                 model='model = "nobody/no-such-model"'),
         "'nobody/no-such-model' is not a local folder and not in the Hugging Face cache"),
    Case("model-required", lambda t: sweep(t, model=""), "'model' is required"),
    # a path with a typo in a parent folder, an unexpanded variable: neither a folder nor a hub id
    # (vLLM would die at start in every arm: HFValidationError, about 18 s each)
    Case("model-neither-folder-nor-id", lambda t: sweep(t, model='model = "a/b/c-model"'),
         "model 'a/b/c-model' is neither an existing folder nor a model id"),
    Case("model-unexpanded-variable", lambda t: sweep(t, model='model = "$MODELS/smollm2"'),
         "model '$MODELS/smollm2' is neither an existing folder nor a model id"),
    Case("draft-model-neither-folder-nor-id", lambda t: sweep(
        t, '[[arms]]\nname = "b"\n[[arms]]\nname = "d"\nspeculative_config = {model = "drafts/x/y-draft", '
           'num_speculative_tokens = 3}\n'), "draft model 'drafts/x/y-draft' is neither an existing folder nor a model id"),
    Case("draft-model-missing", lambda t: sweep(
        t, f'[[arms]]\nname = "b"\n[[arms]]\nname = "d"\nspeculative_config = {{model = "{t / "nodraft"}", '
           'num_speculative_tokens = 3}\n'), f"arm 'd': draft model folder '{'{t}'}/nodraft' does not exist"),
    Case("draft-vocabulary", lambda t: (fake_model(t / "draft"), (t / "draft" / "config.json").write_text(
        json.dumps({"vocab_size": 99})), sweep(
        t, f'[[arms]]\nname = "b"\n[[arms]]\nname = "d"\nspeculative_config = {{model = "{t / "draft"}", '
           'num_speculative_tokens = 3}\n'))[-1], "draft model vocabulary (99) differs"),
    Case("endpoint-not-a-url", lambda t: sweep(t, '[[arms]]\nname = "x"\nendpoint = "localhost:8000"\n'),
         "endpoint 'localhost:8000' is not a server URL: give http://host:port"),
    Case("endpoint-unreachable", lambda t: sweep(t, '[[arms]]\nname = "x"\nendpoint = "http://127.0.0.1:9"\n'),
         "arm 'x': cannot reach http://127.0.0.1:9/v1/models"),
    Case("endpoint-unreachable-after-a-good-arm", lambda t: sweep(
        t, '[[arms]]\nname = "baseline"\n[[arms]]\nname = "x"\nendpoint = "http://127.0.0.1:9"\n'
           'speculative_config = { method = "ngram", num_speculative_tokens = 2 }\n'),
         "arm 'x': cannot reach"),
    Case("api-key-env-not-a-name", lambda t: sweep(
        t, '[[arms]]\nname = "x"\nendpoint = "http://127.0.0.1:9"\napi_key_env = "sk-abc"\n'),
         "api_key_env must be the NAME of an environment variable"),
    Case("two-arms-without-a-drafter", lambda t: sweep(
        t, '[[arms]]\nname = "baseline"\n[[arms]]\nname = "fp32"\nserver_args = ["--dtype", "float32"]\n'),
         "arms 'baseline', 'fp32' have no drafter: a sweep pairs every drafter arm with exactly one baseline"),
    Case("key-replaced-by-a-schema-version", lambda t: sweep(t, "requests_per_user = 4\n"),
         "'requests_per_user' is gone: it was replaced by panel_size and work_floor_tokens"),
    Case("nb-parameter-replaced-by-a-schema-version", lambda t: notebook(t, "requests_per_user=4"),
         "'requests_per_user' is gone: it was replaced by panel_size and work_floor_tokens"),
    Case("vllm-api-key-in-launch-env", lambda t: sweep(t, '[env]\nVLLM_API_KEY = "k"\n'),
         "VLLM_API_KEY is set, so a launched server would refuse"),
    Case("workload-unknown", lambda t: sweep(t, workloads='workloads = ["poetry"]'),
         "workload 'poetry' is neither a bundled set"),
    Case("workload-category-unknown", lambda t: sweep(t, workloads='workloads = ["copy:haiku"]'),
         "has no category 'haiku'"),
    Case("out-not-writable", lambda t: ((t / "file").write_text("x"),
                                        ["specnb", "sweep", str(toml(t)), "--out", str(t / "file" / "out")])[-1],
         "ledger folder"),
    Case("out-other-sweep", lambda t: ((t / "out").mkdir(), (t / "out" / "sweep.json").write_text(
        json.dumps({"identity_hash": "0000"})), sweep(t))[-1], "holds a sweep with different settings"),
    Case("out-sweep-json-truncated", lambda t: ((t / "out").mkdir(), (t / "out" / "sweep.json").write_text(
        '{"identity_hash": "00'), sweep(t))[-1], "sweep.json: not valid JSON at line 1"),
    Case("set-without-equals", lambda t: sweep(t, "", "--set", "repeats"), "--set 'repeats': expected key=value"),
    Case("set-misspelt-key", lambda t: sweep(t, "", "--set", "concurency=[1]"),
         "unknown key 'concurency' (did you mean 'concurrency'?)"),
    # ---------------------------------------------------------------- prompt files (JSONL)
    Case("jsonl-not-utf8", lambda t: prompts(t, GOOD_LINE + b'{"prompt": "caf\xe9"}\n'),
         "p.jsonl:2: not UTF-8 (byte 0xe9 at column 16)"),
    Case("jsonl-not-json", lambda t: prompts(t, GOOD_LINE + b"{prompt: hello}\n"), "p.jsonl:2: not valid JSON"),
    Case("jsonl-not-object", lambda t: prompts(t, b'["hello"]\n'), "p.jsonl:1: expected a JSON object"),
    Case("jsonl-no-prompt", lambda t: prompts(t, b'{"text": "hello"}\n'),
         "p.jsonl:1: needs a 'prompt' string or a 'messages' list"),
    Case("jsonl-empty-prompt", lambda t: prompts(t, b'{"prompt": "  "}\n'), "'prompt' must be a non-empty string"),
    Case("jsonl-duplicate-id", lambda t: prompts(t, b'{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n'),
         "p.jsonl:2: duplicate id 'a'"),
    Case("jsonl-bad-role", lambda t: prompts(t, b'{"messages": [{"role": "robot", "content": "x"}]}\n'),
         "messages[0] needs a 'role' in"),
    Case("jsonl-empty-file", lambda t: prompts(t, b"\n\n"), "p.jsonl: no prompts"),
    Case("jsonl-missing", lambda t: sweep(t, workloads=f'workloads = ["{t / "gone.jsonl"}"]'),
         "gone.jsonl: no such prompt file"),
    # ---------------------------------------------------------------- traffic files
    Case("traffic-not-utf8", lambda t: traffic(t, b'{"prompt": "\xff"}\n'), "log.jsonl:1: not UTF-8"),
    Case("traffic-not-json", lambda t: traffic(t, b"not json\n"), "log.jsonl:1: not valid JSON"),
    Case("traffic-response-not-text", lambda t: traffic(t, b'{"prompt": "x", "response": 3}\n'),
         "log.jsonl:1: 'response' must be a string"),
    Case("traffic-nothing-usable", lambda t: traffic(t, b'{"prompt": ""}\n\n'),
         "no usable prompts (blank x1, empty x1)"),
    Case("traffic-sample-zero", lambda t: traffic(t, GOOD_LINE, ", sample = 0"),
         "workloads.0.sample: Input should be greater than or equal to 1"),
    Case("traffic-misspelt-key", lambda t: traffic(t, GOOD_LINE, ", sampel = 3"),
         "workloads.0: unknown key 'sampel' (did you mean 'sample'?)"),
    # ---------------------------------------------------------------- conversation files and context lengths
    Case("conversation-not-json", lambda t: conversations(t, b"not json\n"), "chats.jsonl:1: not valid JSON"),
    Case("conversation-assistant-first", lambda t: conversations(
        t, b'{"id": "a", "messages": [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "x"}]}\n'),
         "chats.jsonl:1:"),
    Case("conversation-recorded-without-answers", lambda t: conversations(
        t, b'{"id": "a", "turns": ["one", "two"]}\n', 'history = "recorded"\n'), "recorded"),
    Case("conversation-on-a-prompt-set", lambda t: sweep(t, 'load = "conversation"\n'), "conversation"),
    Case("context-tokens-too-few", lambda t: context(t, '{context = "copy", tokens = 8, tokenizer = "m"}'),
         "tokens"),
    Case("context-no-tokenizer", lambda t: context(t, '{context = "copy", tokens = 1024, tokenizer = "no/such"}'),
         "no tokenizer"),
    Case("mix-traffic-missing", lambda t: ["specnb", "mix", str(t / "none.jsonl")], "none.jsonl: no such traffic file"),
    # ---------------------------------------------------------------- notebook parameters
    Case("nb-misspelt-parameter", lambda t: notebook(t, "concurency=[1]"),
         "unknown parameter 'concurency' (did you mean 'concurrency'?)"),
    Case("nb-bad-type", lambda t: notebook(t, "concurrency=one"),
         "concurrency parameters: concurrency: Input should be a valid list"),
    Case("nb-repeats-zero", lambda t: notebook(t, "repeats=0"), "repeats: Input should be greater than or equal to 1"),
    Case("nb-condition-misspelt", lambda t: notebook(t, "conditions={a: {modle: x}}"),
         "conditions.a: unknown key 'modle' (did you mean 'model'?)"),
    Case("nb-measure-missing-model", lambda t: notebook(t, "measure=true", f"model={t / 'nope'}"),
         "does not exist"),
    Case("nb-measure-unreachable-endpoint", lambda t: notebook(t, "measure=true", "endpoint=http://127.0.0.1:9"),
         "cannot reach http://127.0.0.1:9/v1/models"),
    Case("nb-params-file-yaml", lambda t: notebook(t, yaml_text="repeats: [1\n"), "p.yaml: not valid YAML"),
    Case("nb-params-file-not-mapping", lambda t: notebook(t, yaml_text="- 1\n- 2\n"),
         "p.yaml: expected a mapping of parameter names"),
    Case("nb-params-file-unknown", lambda t: notebook(t, yaml_text="repeat: 3\n"),
         "p.yaml: unknown parameter 'repeat' (did you mean 'repeats'?)"),
    Case("nb-missing-notebook", lambda t: ["runner", str(t / "99_none.py"), str(t / "o.ipynb")], "99_none.py"),
    Case("nb-missing-value", lambda t: ["runner", NB, str(t / "o.ipynb"), "-p", "measure"],
         "argument -p/--param: expected 2 arguments"),
    # ---------------------------------------------------------------- ledgers
    Case("ledger-truncated", lambda t: report(t, raw=ledger(c=2).model_dump_json(indent=2).encode()[:400]),
         "c002-r00.json: not valid JSON at line"),
    Case("ledger-not-json", lambda t: report(t, raw=b"<html>proxy error</html>"), "c002-r00.json: not valid JSON"),
    Case("ledger-not-utf8", lambda t: report(t, raw=b'{"sweep": "\xff"}'), "c002-r00.json: not UTF-8"),
    Case("ledger-not-object", lambda t: report(t, raw=b"[1, 2]"), "c002-r00.json: expected a JSON object"),
    Case("ledger-newer-schema", lambda t: report(t, _set("schema_version", SCHEMA_VERSION + 1)),
         f"c002-r00.json: schema version {SCHEMA_VERSION + 1} is newer than this specnb reads"),
    Case("ledger-number-as-string", lambda t: report(t, _set("results.output_tok_s", "fast")),
         "c002-r00.json: results.output_tok_s: must be a number or null, got 'fast'"),
    Case("ledger-typed-number-as-string", lambda t: report(t, _set("concurrency", "2")),
         "c002-r00.json: concurrency: Input should be a valid integer"),
    Case("ledger-missing-field", lambda t: report(t, lambda d: d.pop("sweep")), "c002-r00.json: sweep: Field required"),
    Case("ledger-unknown-field", lambda t: report(t, _set("surprise", 1)), "c002-r00.json: unknown key 'surprise'"),
    Case("ledger-folder-missing", lambda t: ["specnb", "report", str(t / "nothing")], "no ledger file or folder at"),
    # ---------------------------------------------------------------- command-line arguments
    Case("cli-no-command", lambda t: ["specnb"], "the following arguments are required: cmd"),
    Case("cli-unknown-command", lambda t: ["specnb", "rep"], "invalid choice: 'rep'"),
    Case("cli-report-no-folder", lambda t: ["specnb", "report"], "the following arguments are required: folder"),
    Case("cli-report-n-boot", lambda t: ["specnb", "report", str(t), "--n-boot", "many"],
         "argument --n-boot: invalid int value: 'many'"),
    Case("cli-sweep-unknown-option", lambda t: sweep(t, "", "--repeats", "2"), "unrecognized arguments: --repeats 2"),
    Case("cli-mix-ledgers-without-arm", lambda t: ((t / "l.jsonl").write_text('{"prompt": "a", "response": "b"}\n'),
                                                   ["specnb", "mix", str(t / "l.jsonl"), "--ledgers", str(t)])[-1],
         "--ledgers needs --arm and --concurrency"),
]


def test_there_are_at_least_forty_cases_of_every_kind():
    kinds = {c.id.split("-")[0] for c in CASES}
    assert len(CASES) >= 40 and {"toml", "jsonl", "traffic", "nb", "ledger", "cli"} <= kinds


@pytest.fixture
def no_server(monkeypatch):
    """Launching a server fails the test; the process must also gain no child."""
    launched = []

    def refuse(self):
        launched.append(self)
        raise AssertionError("a server was started")

    monkeypatch.setattr(server.VllmServer, "start", refuse)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield launched
    assert launched == []
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_and_nothing_starts(case, tmp_path, capsys, no_server, monkeypatch):
    import specnb.sweep.preflight as preflight
    from tests.unit.conftest import REAL_IN_HUB_CACHE

    monkeypatch.setattr(preflight, "in_hub_cache", REAL_IN_HUB_CACHE)  # the offline check is a case here
    monkeypatch.chdir(tmp_path)  # relative names in a case mean its own folder
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    argv = case.build(tmp_path)
    entry, args = argv[0], argv[1:]
    if entry == "runner":
        args = [str(Path(runner.paths.ROOT) / a) if a == NB else a for a in args]
        rc = runner.main(args)
    else:
        rc = cli.main(args)
    out = capsys.readouterr()
    lines = [ln for ln in out.err.splitlines() if ln.strip()]
    assert rc == case.code, out.err
    assert len(lines) == 1, out.err
    assert lines[0].startswith("specnb: "), lines[0]
    needle = case.needle.replace("{t}", str(tmp_path))
    assert needle in lines[0], lines[0]
    assert not (tmp_path / "out" / "logs").exists()  # no server log: nothing was launched
    assert os.environ.get("SPECNB_OUTCOME_FILE") is None
