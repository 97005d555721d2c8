"""Published ledgers: every committed file validates, every number is in its seed or source, the frame is tidy."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest

from specnb import paths
from specnb.ledger.published import (
    PUBLISHED_DIR,
    PUBLISHED_SCHEMA_VERSION,
    PublishedLedger,
    PublishedLedgerError,
    list_published,
    load_published,
    normalize_space,
    numbers_in,
    published_curves,
    published_schema_json,
    read_published,
    seed_sha256,
    seeds_dir,
)
from specnb.models import theory

IDS = list_published()
SEED_IDS = [i for i in IDS if read_published(i).source.seed_file]


def _cell(df, ledger_id, **match):
    sel = df[df["ledger_id"] == ledger_id]
    for k, v in match.items():
        sel = sel[sel[k] == v]
    assert len(sel) == 1, f"{ledger_id} {match}: {len(sel)} rows"
    return sel.iloc[0]


def _minimal(**over) -> dict:
    data = {
        "schema_version": 1,
        "kind": "published",
        "id": "demo-table",
        "source": {"title": "T", "publisher": "P", "seed_file": "000_x.txt", "seed_sha256": "0" * 64,
                   "locator": "table 1", "transcribed_at": "2026-11-29"},
        "setup": {"hardware": "B200"},
        "caveats": [],
        "rows": [{"metric": "speedup_x", "unit": "x", "value": 1.5, "concurrency": 1, "condition": "c1",
                  "text": "1.5x", "quote": "one user gives 1.5x"}],
    }
    data.update(over)
    return data


_CURVE = {"condition": "c1", "ratio_type": "per_user_speed", "hardware_preset": "h100-sxm", "target": "t",
          "target_params_b": 8.0, "target_layers": 32, "target_kv_heads": 8, "target_head_dim": 128,
          "weight_bytes_per_param": 2.0, "drafter": "d", "drafter_kind": "eagle", "k": 3, "tokens_per_step": 2.0,
          "prompt_tokens": 0.0, "output_tokens": 256.0, "basis": "a test"}


def _write(folder: Path, data: dict, name: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name or f"{data['id']}.json")
    path.write_text(json.dumps(data))
    return path


# ---- the committed files ---------------------------------------------------------------------

def test_committed_schema_matches_the_model():
    committed = paths.SCHEMAS / f"published-ledger.v{PUBLISHED_SCHEMA_VERSION}.json"
    assert committed.read_text() == published_schema_json(), "regenerate with published_schema_json()"


def test_the_seeds_tables_are_all_there():
    assert set(IDS) >= {
        "thakicloud-concurrency-speedup", "thakicloud-quantization", "thakicloud-acceptance-length",
        "thakicloud-kv-capacity", "thakicloud-workload-mix", "thakicloud-temperature",
        "primalabs-crossover", "primalabs-parallelism", "primalabs-amdahl",
    }


@pytest.mark.parametrize("ledger_id", IDS)
def test_committed_file_validates(ledger_id):
    path = PUBLISHED_DIR / f"{ledger_id}.json"
    schema = json.loads(published_schema_json())
    jsonschema.validate(json.loads(path.read_text()), schema)
    led = read_published(ledger_id)
    assert led.kind == "published" and led.id == ledger_id
    assert led.source.transcribed_by == "specnb"


def test_ids_are_unique_and_name_their_files():
    ids = [json.loads(p.read_text())["id"] for p in sorted(PUBLISHED_DIR.glob("*.json"))]
    assert len(ids) == len(set(ids)) == len(IDS)
    assert sorted(ids) == IDS


# ---- the frame: cells as published -----------------------------------------------------------

def test_concurrency_table_cells():
    df = load_published("thakicloud-concurrency-speedup")
    assert _cell(df, "thakicloud-concurrency-speedup", condition="INT4, 256k, edge budget",
                 concurrency=8)["value"] == pytest.approx(0.82)
    assert _cell(df, "thakicloud-concurrency-speedup", condition="NVFP4-GPTQ, 131k, batch 256",
                 concurrency=64)["value"] == pytest.approx(0.26)
    gap = _cell(df, "thakicloud-concurrency-speedup", condition="KV fp8, 256k, edge budget", concurrency=16)
    assert gap["text"] == "not measured" and gap["note"] and gap["value"] != gap["value"]  # NaN
    table = df[df["condition"].isin(["NVFP4-GPTQ, 131k, batch 256", "KV fp8, 256k, edge budget",
                                     "INT4, 256k, edge budget"])]
    assert len(table) == 18 and table["value"].isna().sum() == 6
    assert str(df["concurrency"].dtype) == "Int64"


def test_the_texts_numbers_are_the_table_rounded():
    df = load_published("thakicloud-concurrency-speedup")
    text = df[df["condition"].str.endswith("(text)") & df["condition"].str.startswith("free-form")]
    table = df[df["condition"] == "INT4, 256k, edge budget"].set_index("concurrency")["value"]
    assert list(text["concurrency"]) == [1, 2, 4, 8]
    for _, r in text.iterrows():
        assert r["value"] == pytest.approx(round(table[r["concurrency"]], 1))
    fp8 = _cell(df, "thakicloud-concurrency-speedup", condition="fp8 KV cache arm (text)")
    assert fp8["value"] == pytest.approx(round(_cell(
        df, "thakicloud-concurrency-speedup", condition="KV fp8, 256k, edge budget", concurrency=8)["value"], 1))
    prod = df[df["condition"] == "production checkpoint, larger batch"].set_index("metric")
    tok = prod.loc["throughput_tok_s"].set_index("arm")["value"]
    ratio = tok["speculative"] / tok["baseline"]
    assert round(ratio, 1) == pytest.approx(prod.loc["speedup_x", "value"])
    assert round(ratio, 2) == pytest.approx(_cell(
        df, "thakicloud-concurrency-speedup", condition="NVFP4-GPTQ, 131k, batch 256", concurrency=64)["value"])


def test_quantization_speedups_follow_from_the_throughputs():
    df = load_published("thakicloud-quantization")
    for cond in ("bf16 (original)", "4-bit checkpoint"):
        sel = df[df["condition"] == cond]
        tok = sel[sel["metric"] == "throughput_tok_s"].set_index("arm")["value"]
        speedup = sel[sel["metric"] == "speedup_x"]["value"].item()
        assert round(tok["speculative"] / tok["baseline"], 1) == pytest.approx(speedup)
    assert df[df["metric"] == "throughput_tok_s"]["unit"].eq("tok_s").all()


def test_kv_sessions_shrink_with_the_pool():
    df = load_published("thakicloud-kv-capacity")
    sessions = df[df["metric"] == "concurrent_sessions"].set_index("arm")["value"]
    pool = df[df["metric"] == "kv_pool_reduction_pct"]["value"].item()
    assert 100 * (1 - sessions["speculative"] / sessions["baseline"]) == pytest.approx(pool, abs=1.0)


def test_primalabs_crossover_and_ranges():
    df = load_published(["primalabs-crossover", "primalabs-parallelism"])
    agg = df[df["metric"] == "aggregate_throughput_x"].set_index("concurrency")["value"]
    assert agg[10] == pytest.approx(1.29) and agg[16] == pytest.approx(0.91)
    mal = df[df["metric"] == "mean_acceptance_length_tokens"]
    assert mal["value"].tolist() == [3.07, 3.07] and mal["unit"].eq("tokens").all()
    ranges = df[df["ledger_id"] == "primalabs-parallelism"]
    assert ranges["value"].isna().all()  # only ranges were published: no invented bars
    assert sorted(zip(ranges["low"], ranges["high"], strict=True)) == [(3.0, 4.0), (9.0, 10.0)]


def test_amdahl_table_is_what_the_formula_gives():
    df = load_published("primalabs-amdahl")
    cells = df[df["metric"] == "required_decode_speedup_x"]
    assert len(cells) == 9
    for _, r in cells.iterrows():
        want = theory.required_decode_speedup(r["decode_share_pct"] / 100, r["target_speedup_x"])
        assert r["value"] == pytest.approx(want, abs=0.005 + 1e-9)
    cap = df[df["metric"] == "end_to_end_speedup_cap_x"]["value"].item()
    assert cap == pytest.approx(round(theory.amdahl_ceiling(0.83), 1))


def test_frame_carries_provenance_and_never_looks_measured():
    df = load_published()
    assert set(df["ledger_id"]) == set(IDS)
    assert df["kind"].eq("published").all()
    assert {"ThakiCloud", "PrimaLabs"} <= set(df["publisher"])
    # every row names its seed file or its public address, never neither
    assert (df["seed_file"].notna() ^ df["url"].notna()).all()
    assert df["locator"].notna().all() and df["text"].notna().all()
    assert (df["value"].notna() | df["low"].notna() | df["note"].notna()).all()
    assert (~df["inferred"] | df["note"].notna()).all()


def _row_prints_its_number(row) -> None:
    """A row's text is inside its quote and prints exactly the number (or range) the row holds;
    an inferred row (read off a figure, or computed from printed cells) says how in its note instead."""
    assert normalize_space(row.text) in normalize_space(row.quote)
    if row.inferred:
        assert row.note, row.text
        return
    printed = numbers_in(row.text)
    if row.value is not None:
        assert printed == [pytest.approx(row.value)], (row.text, row.value)
    elif row.low is not None:
        assert printed == [pytest.approx(row.low), pytest.approx(row.high)], row.text
    else:
        assert printed == [] and row.text == "not measured", row.text


@pytest.mark.parametrize("ledger_id", IDS)
def test_every_number_is_the_one_its_quote_prints_and_names_the_seed_it_came_from(ledger_id):
    """What the repo ships, checked without the seeds: each row's number is the one printed in its
    own text, that text is inside its quote, and the ledger names its seed by file and SHA-256 (the
    maintainer check below holds the quotes against the seed itself), or a public source by its
    address and where the text was retrieved."""
    led = read_published(ledger_id)
    if led.source.seed_file:
        assert re.fullmatch(r"[0-9a-f]{64}", led.source.seed_sha256) and led.source.seed_file.endswith(".txt")
    else:
        assert led.source.url.startswith("https://") and led.source.retrieved_from
    for row in led.rows:
        _row_prints_its_number(row)


# ---- public GPU sources beyond the seeds, and the curves the step-cost model is held against ---

def test_at_least_four_sources_carry_curves_or_ratio_types():
    leds = [read_published(i) for i in IDS]
    with_ratio = {led.source.url or led.source.seed_file for led in leds if led.setup.ratio_type}
    assert len(with_ratio) >= 4
    assert {led.setup.ratio_type for led in leds if led.setup.ratio_type} >= {
        "aggregate_throughput", "per_user_speed", "latency_at_rate", "unspecified"}
    for led in leds:
        for curve in led.curves:
            assert curve.basis and curve.ratio_type == led.setup.ratio_type, (led.id, curve.condition)


def test_published_curves_frame():
    df = published_curves()
    assert set(df["ledger_id"]) >= {"thakicloud-concurrency-speedup", "specdecode-bench-batch-speedup",
                                    "vllm-eagle-k-sweep"}
    assert df["value"].gt(0).all() and df["tokens_per_step"].ge(1).all() and df["k"].ge(1).all()
    seed = df[df["condition"] == "INT4, 256k, edge budget"].set_index("concurrency")["value"]
    assert seed.to_dict() == {1: pytest.approx(1.43), 2: pytest.approx(1.23), 4: pytest.approx(1.06),
                              8: pytest.approx(0.82)}
    sweep = df[df["ledger_id"] == "vllm-eagle-k-sweep"]
    assert sorted(sweep["k"].unique()) == [2, 3, 4, 5, 6, 7] and sweep["concurrency"].eq(1).all()
    # the ledger's own inferred inputs are listed per curve
    assert df["curve_inferred"].str.len().gt(0).all()


def test_digitized_figure_agrees_with_the_printed_anchor():
    df = load_published("specdecode-bench-batch-speedup")
    read = _cell(df, "specdecode-bench-batch-speedup", condition="Llama-3.1-8B, GSM8K, EAGLE", concurrency=128)
    printed = _cell(df, "specdecode-bench-batch-speedup", condition="Llama-3.1-8B, GSM8K, EAGLE (text)",
                    concurrency=128)
    assert read["inferred"] and read["approx"] and not printed["inferred"]
    assert read["value"] == pytest.approx(printed["value"], abs=0.03)


def test_the_tree_figure_read_off_its_vector_paths_agrees_with_its_printed_numbers():
    df = load_published("specdecode-bench-tree-chain")
    for read_as, printed_as in (("Qwen3-8B, GSM8K, EAGLE-3 chain k=3", "Qwen3-8B, GSM8K, EAGLE chain k=3 (text)"),
                                ("Qwen3-8B, GSM8K, EAGLE-3 tree k=21", "Qwen3-8B, GSM8K, EAGLE tree k=21 (text)")):
        read = _cell(df, "specdecode-bench-tree-chain", condition=read_as, concurrency=1)
        printed = _cell(df, "specdecode-bench-tree-chain", condition=printed_as, concurrency=1)
        assert read["inferred"] and not printed["inferred"]
        assert read["value"] == pytest.approx(printed["value"], abs=0.005)
    k21 = df[df["condition"].str.endswith("tree k=21") & df["concurrency"].eq(64)]
    assert len(k21) == 8 and k21["value"].lt(1.0).all()  # "by batch size 64, the k=21 tree falls below 1x on all workloads"


def test_k_sweep_ratios_follow_from_the_tpot_table():
    df = load_published("vllm-eagle-k-sweep")
    tpot = df[df["metric"] == "tpot_ms"]
    speed = df[df["metric"] == "speedup_x"]
    for _, r in speed.iterrows():
        base = tpot[(tpot["condition"] == "vanilla") & (tpot["k"] == r["k"])]["value"].item()
        spec = tpot[(tpot["condition"] == r["condition"]) & (tpot["k"] == r["k"])]["value"].item()
        assert r["value"] == pytest.approx(base / spec, rel=1e-3) and r["inferred"]
    # the issue's own 'E1 over vanilla' column matches its TPOTs at K = 2, 3, 7 only: the curve uses the TPOTs
    printed = df[df["metric"] == "printed_e1_over_vanilla_x"].set_index("k")["value"]
    e1 = speed[speed["condition"] == "EAGLE 1"].set_index("k")["value"]
    agrees = {int(k) for k in printed.index if abs(printed[k] - e1[k]) < 2e-3}
    assert agrees == {2, 3, 7}


# ---- every number is in its seed: a maintainer check, outside `make test` ----------------------
# The seeds are the project workspace's, not the repo's: a clone has only what it ships (above).
# `make check-seeds` runs these against ../shared/seeds (or SPECNB_SEEDS), and fails without them.

SEEDS = seeds_dir()
needs_seeds = pytest.mark.maintainer


@pytest.fixture(autouse=True)
def _seeds_for_maintainer_checks(request):
    if request.node.get_closest_marker("maintainer") and SEEDS is None:
        pytest.fail("seed write-ups not found: set SPECNB_SEEDS to the folder of the seed .txt files", pytrace=False)


@needs_seeds
@pytest.mark.parametrize("ledger_id", SEED_IDS)
def test_every_number_and_caveat_is_in_the_seed(ledger_id):
    led = read_published(ledger_id)
    seed = SEEDS / led.source.seed_file
    assert seed.is_file(), f"{seed} missing"
    assert seed_sha256(seed) == led.source.seed_sha256, "the seed changed since transcription: re-check"
    text = normalize_space(seed.read_text())
    for caveat in led.caveats:
        assert normalize_space(caveat) in text, caveat
    for row in led.rows:
        assert normalize_space(row.quote) in text, row.quote
        _row_prints_its_number(row)


def _seed_table(seed: Path, header_start: str, n_rows: int) -> tuple[list[str], list[list[str]]]:
    lines = seed.read_text().splitlines()
    (i,) = [k for k, line in enumerate(lines) if line.startswith(header_start)]
    header = lines[i].split("\t")
    body = [line.split("\t") for line in lines[i + 1:i + 1 + n_rows]]
    assert all(len(r) == len(header) for r in body)
    return header, body


@needs_seeds
def test_seed_000_table_cell_by_cell():
    df = load_published("thakicloud-concurrency-speedup")
    header, body = _seed_table(SEEDS / read_published("thakicloud-concurrency-speedup").source.seed_file,
                               "Condition\t", 3)
    for cells in body:
        for conc, printed in zip(header[1:], cells[1:], strict=True):
            r = _cell(df, "thakicloud-concurrency-speedup", condition=cells[0], concurrency=int(conc))
            assert r["text"] == printed


@needs_seeds
def test_seed_002_tables_cell_by_cell():
    seed = SEEDS / read_published("primalabs-crossover").source.seed_file
    df = load_published(["primalabs-crossover", "primalabs-amdahl"])
    header, body = _seed_table(seed, "Metric\tConcurrency", 4)
    for cells in body:
        for col, printed in zip(header[1:], cells[1:], strict=True):
            conc = int(col.removeprefix("Concurrency "))
            assert _cell(df, "primalabs-crossover", condition=cells[0], concurrency=conc)["text"] == printed
    header, body = _seed_table(seed, "End-to-end target\t", 3)
    for cells in body:
        for col, printed in zip(header[1:], cells[1:], strict=True):
            (share,) = numbers_in(col)
            (target,) = numbers_in(cells[0])
            r = _cell(df, "primalabs-amdahl", metric="required_decode_speedup_x",
                      decode_share_pct=share, target_speedup_x=target)
            assert r["text"] == printed


def test_seeds_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECNB_SEEDS", str(tmp_path))
    assert seeds_dir() == tmp_path
    monkeypatch.setenv("SPECNB_SEEDS", str(tmp_path / "absent"))
    assert seeds_dir() is None


# ---- bad input -------------------------------------------------------------------------------

def test_a_valid_minimal_ledger_loads(tmp_path):
    _write(tmp_path, _minimal())
    assert list_published(tmp_path) == ["demo-table"]
    df = load_published(folder=tmp_path)
    assert df["value"].tolist() == [1.5] and df["path"].str.endswith("demo-table.json").all()
    assert load_published(tmp_path / "demo-table.json")["ledger_id"].tolist() == ["demo-table"]


def test_empty_folder_gives_an_empty_frame(tmp_path):
    df = load_published(folder=tmp_path)
    assert df.empty and {"ledger_id", "value", "unit", "concurrency"} <= set(df.columns)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["rows"][0].update(value=None), "needs a note"),
        (lambda d: d["rows"][0].update(value=None, low=1.0), "both low and high"),
        (lambda d: d["rows"][0].update(low=1.0, high=2.0), "not both"),
        (lambda d: d["rows"][0].update(value=None, low=2.0, high=1.0), "low 2.0 > high"),
        (lambda d: d["rows"][0].update(text="1.7x"), "not in its quote"),
        (lambda d: d["rows"][0].update(params={"value": 1.0}), "reuse column names"),
        (lambda d: d["rows"][0].update(unit="furlongs"), "unit"),
        (lambda d: d.update(kind="measured"), "kind"),
        (lambda d: d.update(schema_version=2), "schema_version"),
        (lambda d: d.update(rows=[]), "rows"),
        (lambda d: d["source"].update(seed_file="../000_x.txt"), "seed_file"),
        (lambda d: d["source"].update(url="https://example.org", retrieved_from="x"), "exactly one"),
        (lambda d: d["source"].update(seed_file=None, seed_sha256=None), "exactly one"),
        (lambda d: d["rows"][0].update(inferred=True), "how it was obtained"),
        (lambda d: d.update(curves=[dict(_CURVE, condition="absent")]), "names no rows"),
        (lambda d: d.update(curves=[dict(_CURVE, inferred=["colour"])]), "unknown inputs"),
    ],
)
def test_bad_ledgers_are_refused_with_a_one_line_reason(tmp_path, change, message):
    data = copy.deepcopy(_minimal())
    change(data)
    _write(tmp_path, data)
    with pytest.raises(PublishedLedgerError, match=message) as err:
        read_published("demo-table", folder=tmp_path)
    assert "\n" not in str(err.value)


def test_file_name_must_be_the_id(tmp_path):
    path = _write(tmp_path, _minimal(), name="other.json")
    with pytest.raises(PublishedLedgerError, match="demo-table.json"):
        read_published(path)


def test_unknown_id_lists_the_known_ones(tmp_path):
    _write(tmp_path, _minimal())
    with pytest.raises(PublishedLedgerError, match="known: demo-table"):
        load_published("no-such-table", folder=tmp_path)
    with pytest.raises(PublishedLedgerError, match="no published ledger"):
        load_published(tmp_path / "nowhere" / "x.json")


def test_a_folder_is_not_one_ledger(tmp_path):
    _write(tmp_path, _minimal())
    with pytest.raises(PublishedLedgerError, match="is a folder"):
        read_published(tmp_path)


def test_duplicate_ids_across_folders_are_refused(tmp_path):
    _write(tmp_path / "a", _minimal())
    _write(tmp_path / "b", _minimal())
    with pytest.raises(PublishedLedgerError, match="in both"):
        load_published([tmp_path / "a", tmp_path / "b"])
    # naming the same file twice is not a duplicate
    assert len(load_published([tmp_path / "a", tmp_path / "a" / "demo-table.json"])) == 1


def test_model_round_trip_is_lossless():
    led = read_published(IDS[0])
    assert PublishedLedger.model_validate_json(led.model_dump_json()) == led


def test_a_public_source_with_a_curve_loads(tmp_path):
    data = _minimal(source={"title": "T", "publisher": "P", "url": "https://example.org/post",
                            "retrieved_from": "github:o/r@abc:post.md", "locator": "table 1",
                            "transcribed_at": "2026-12-04"}, curves=[_CURVE])
    _write(tmp_path, data)
    df = published_curves(folder=tmp_path)
    assert df[["condition", "k", "tokens_per_step", "value"]].values.tolist() == [["c1", 3, 2.0, 1.5]]
    assert load_published(folder=tmp_path)["url"].tolist() == ["https://example.org/post"]
