"""Studies: notebook parameters -> one paired sweep per condition; parameter files; runs."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest

from specnb import paths
from specnb.ledger.runs import RunError, find_run, latest_run, run_folder
from specnb.notebooks.runner import NotebookError, notebook_parameters, read_params
from specnb.sweep import SweepError
from specnb.sweep.study import Study

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}


def defaults(axis: str) -> dict:
    """A notebook's parameters cell: the one source of a study's defaults."""
    (nb,) = glob.glob(str(paths.ROOT / "notebooks" / f"[0-9][0-9]_{axis}.py"))
    return notebook_parameters(nb)


def make(axis="concurrency", **kw):
    base = {**defaults(axis), "study": "t", "model": "some/hub-id", "drafters": {"ngram-k4": NGRAM},
            "concurrency": [1, 4], "conditions": {}}
    base.update(kw)
    return Study.from_parameters(axis, **base)


def test_one_condition_by_default_with_baseline_first():
    st = make()
    specs = st.specs()
    assert list(specs) == ["default"]
    spec = specs["default"]
    assert [a.name for a in spec.arms] == ["baseline", "ngram-k4"]
    assert spec.arms[0].speculative_config is None
    assert spec.parameters["condition"] == "default" and spec.name == "concurrency-t-default"


def test_conditions_change_only_what_they_name():
    st = make(axis="kv", server_args=["--a"], env={"X": "1", "Y": "2"}, temperature=0.0,
              conditions={"small": {"server_args": ["--b"], "env": {"Y": "3"}, "temperature": 1.0,
                                    "concurrency": [2], "label": "Small pool"},
                          "plain": {}})
    small, plain = st.specs()["small"], st.specs()["plain"]
    assert small.server_args == ["--a", "--b"] and plain.server_args == ["--a"]
    assert small.env == {"X": "1", "Y": "3"} and plain.env == {"X": "1", "Y": "2"}
    assert small.sampling.temperature == 1.0 and plain.sampling.temperature == 0.0
    assert small.load.concurrency == [2] and plain.load.concurrency == [1, 4]
    assert st.label("small") == "Small pool" and st.label("plain") == "plain"
    # the pairing key: every condition is its own sweep
    assert small.name != plain.name


@pytest.mark.parametrize("kw, msg", [
    (dict(drafters={}), "drafters"),
    (dict(drafters={"baseline": NGRAM}), "baseline"),
    (dict(conditions={"a": {"drafters": ["nope"]}}), "unknown drafters"),
    (dict(conditions={"a/b": {}}), "plain folder name"),
    (dict(concurrency=[0]), "concurrency"),
    (dict(conditions={"a": {"bogus": 1}}), "bogus"),
    (dict(drafters={"x": {"method": "ngram"}}), "num_speculative_tokens"),
    (dict(endpoint={"ngram-k8": "http://127.0.0.1:8000"}), "arm(s) 'ngram-k8' the study does not have"),
    (dict(endpoint={"baseline": "127.0.0.1:8000"}), "not a server URL"),
    (dict(endpoint={"baseline": "http://127.0.0.1:8000"}, conditions={"a": {}, "b": {}}), "cannot vary conditions"),
    (dict(conditions={"a": {"drafters": [], "endpoint": {"ngram-k4": "http://127.0.0.1:8000"}}, "b": {}}),
     "arm(s) 'ngram-k4' condition 'a' does not have"),
    (dict(conditions={"a": {"endpoint": "localhost:8000"}, "b": {}}), "not a server URL"),
    (dict(endpoint="http://127.0.0.1:8000", conditions={"a": {"endpoint": "http://127.0.0.1:8001"}}), "not both"),
    (dict(endpoint={"ngram-k4": "http://127.0.0.1:8000"}, conditions={"a": {"drafters": []}}),
     "arm(s) 'ngram-k4' the study does not have (its arms: baseline)"),
])
def test_bad_parameters_fail_in_one_line(kw, msg):
    with pytest.raises(SweepError) as exc:
        make(**kw)
    assert msg in str(exc.value) and "\n" not in str(exc.value)


def test_notebook_only_keys_are_ignored_and_empty_endpoint_means_launch():
    st = make(measure=True, figures_dir="x", endpoint="")
    assert st.endpoint is None


def test_an_endpoint_per_arm_attaches_those_arms_and_launches_the_rest():
    url = "http://127.0.0.1:8000"
    every = make(endpoint=url).specs()["default"]
    assert [a.endpoint for a in every.arms] == [url, url]
    some = make(endpoint={"baseline": url}, drafters={"ngram-k4": NGRAM, "ngram-k2": {**NGRAM, "num_speculative_tokens": 2}})
    arms = {a.name: a.endpoint for a in some.specs()["default"].arms}
    assert arms == {"baseline": url, "ngram-k4": None, "ngram-k2": None}
    assert make(endpoint={}).endpoint is None  # an empty table launches every arm, like ""


def test_a_conditions_own_endpoint_attaches_its_arms_and_the_others_launch():
    url = "http://127.0.0.1:8000"
    st = make(conditions={"bf16": {"endpoint": {"baseline": url, "ngram-k4": url}},
                          "int4": {"model": "/models/int4"}, "one": {"endpoint": url, "drafters": []}})
    specs = st.specs()
    assert [a.endpoint for a in specs["bf16"].arms] == [url, url]
    assert [a.endpoint for a in specs["int4"].arms] == [None, None]
    assert [(a.name, a.endpoint) for a in specs["one"].arms] == [("baseline", url)]


def test_runs_are_found_newest_first(tmp_path):
    assert latest_run("kv", "cpu", tmp_path) is None
    for name in ("20261129T100000Z", "20261129T090000Z"):
        run_folder("kv", "cpu", name, tmp_path).mkdir(parents=True)
    assert latest_run("kv", "cpu", tmp_path).name == "20261129T100000Z"
    with pytest.raises(RunError):
        run_folder("kv", "cpu", "../x", tmp_path)
    with pytest.raises(RunError, match="no run"):
        find_run("kv", "cpu", "missing", tmp_path)
    assert find_run("kv", "cpu", "", tmp_path).name == "20261129T100000Z"
    with pytest.raises(RunError, match="measure first"):
        find_run("kv", "other", "", tmp_path)


NOTEBOOKS = sorted(glob.glob(str(paths.ROOT / "notebooks" / "[0-9][0-9]_*.py")))
PARAM_FILES = sorted(glob.glob(str(paths.ROOT / "notebooks" / "params" / "*" / "*.yaml")))


def test_every_axis_has_a_notebook_and_gpu_parameters_and_one_source_of_defaults():
    axes = {Path(n).stem.split("_", 1)[1] for n in NOTEBOOKS}
    assert {"concurrency", "quantization", "drafter", "temperature", "kv", "parallelism"} <= axes
    have = {Path(p).stem for p in PARAM_FILES if Path(p).parent.name == "gpu"}
    assert axes - {"index"} <= have, f"missing gpu parameter files: {axes - {'index'} - have}"
    # the CPU defaults are the notebooks' own parameters cells, not a second copy: any other
    # parameter file (e.g. params/rate/) holds only what it changes
    for pf in PARAM_FILES:
        if Path(pf).parent.name == "gpu":
            continue
        nb = next(n for n in NOTEBOOKS if Path(n).stem.endswith("_" + Path(pf).stem))
        cell, own = notebook_parameters(nb), read_params(pf, nb)
        same = sorted(k for k, v in own.items() if cell.get(k) == v)
        assert not same, f"{pf} repeats the notebook's defaults {same}"


# the notebooks that run a study (the index and the calculator run none: their cells are checked
# on their own below, not skipped inside a study's case)
NOT_STUDIES = ("index", "calculator")
STUDY_NOTEBOOKS = [n for n in NOTEBOOKS if Path(n).stem.split("_", 1)[1] not in NOT_STUDIES]
STUDY_PARAM_FILES = [p for p in PARAM_FILES if Path(p).stem not in NOT_STUDIES]


def test_the_index_and_the_calculator_have_their_own_literal_parameters():
    (index,) = [n for n in NOTEBOOKS if n.endswith("_index.py")]
    (calc,) = [n for n in NOTEBOOKS if n.endswith("_calculator.py")]
    assert notebook_parameters(index) == {"ledger_root": "ledgers"}
    params = notebook_parameters(calc)
    assert "measure" not in params and {"alpha", "k", "ledgers", "figures_dir"} <= set(params)
    assert len(STUDY_NOTEBOOKS) == len(NOTEBOOKS) - 2
    for pf in set(PARAM_FILES) - set(STUDY_PARAM_FILES):  # a calculator file validates as one
        assert Path(pf).stem == "calculator" and read_params(pf, calc)


@pytest.mark.parametrize("nb", STUDY_NOTEBOOKS, ids=lambda p: Path(p).stem)
def test_notebooks_have_one_literal_parameters_cell(nb):
    params = notebook_parameters(nb)
    assert params["measure"] is False  # analysis by default: figures rebuild without a server
    # the context notebook's workloads are its lengths (context_base x context_tokens)
    workloads = "context_tokens" if Path(nb).stem.endswith("_context") else "workloads"
    assert {"model", "drafters", "concurrency", workloads, "repeats", "max_tokens", "temperature"} <= set(params)


@pytest.mark.parametrize("pf", STUDY_PARAM_FILES, ids=lambda p: "/".join(Path(p).parts[-2:]))
def test_parameter_files_validate_against_their_notebook_and_the_library(pf):
    axis = Path(pf).stem
    nb = next(n for n in NOTEBOOKS if Path(n).stem.endswith("_" + axis))
    params = {**notebook_parameters(nb), **read_params(pf, nb)}
    st = Study.from_parameters(axis, **params)
    assert st.specs()


@pytest.mark.parametrize("nb", STUDY_NOTEBOOKS, ids=lambda p: Path(p).stem)
def test_notebook_defaults_are_a_cpu_study_with_repeats(nb):
    st = Study.from_parameters(Path(nb).stem.split("_", 1)[1], **notebook_parameters(nb))
    assert st.specs()
    assert st.repeats >= 2, "CPU runs vary up to 1.5x between starts: repeats give the interval"


def test_unknown_parameter_in_a_file_is_refused(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("concurrency: [1]\nconcurency: [2]\n")
    with pytest.raises(NotebookError, match="concurency"):
        read_params(f, NOTEBOOKS[1])


def test_a_misspelt_study_parameter_is_named_not_hidden_behind_field_required():
    params = {**defaults("concurrency"), "study": "t"}
    params["concurency"] = params.pop("concurrency")
    with pytest.raises(SweepError) as exc:
        Study.from_parameters("concurrency", **params)
    assert str(exc.value) == "concurrency parameters: unknown key 'concurency' (did you mean 'concurrency'?)"


def test_where_an_arm_key_comes_from_is_not_part_of_a_sweeps_identity():
    from specnb.sweep import SweepSpec

    base = dict(name="x", concurrency=[1], arms=[{"name": "a", "endpoint": "http://127.0.0.1:8000"}])
    other = dict(base, arms=[{"name": "a", "endpoint": "http://127.0.0.1:8000", "api_key_env": "MY_KEY"}])
    assert SweepSpec.parse(base).identity() == SweepSpec.parse(other).identity()


GPU_FILES = [p for p in PARAM_FILES if "/gpu/" in p and not p.endswith("calculator.yaml")]


@pytest.mark.parametrize("pf", GPU_FILES, ids=lambda p: Path(p).stem)
def test_every_gpu_parameter_file_runs_on_ray_with_one_flag(pf):
    """`make measure-<axis> PARAMS=<gpu file> EXECUTOR=ray`: the file plus `executor = "ray"` is a
    Ray study whose every condition's blocks ask for the GPUs its layout serves on."""
    from specnb.sweep.fleet import block_gpus, block_options

    axis = Path(pf).stem
    nb = next(n for n in NOTEBOOKS if Path(n).stem.endswith("_" + axis))
    params = {**notebook_parameters(nb), **read_params(pf, nb), "executor": "ray"}
    st = Study.from_parameters(axis, **params)
    assert st.executor.kind == "ray"
    for name, spec in st.specs().items():
        opts = block_options(spec, st.executor, cpu_engine=False, node_cpus=None)
        assert opts["num_gpus"] == block_gpus(spec) >= 1, name
        if axis == "parallelism" and name in ("tp2", "dp2"):
            assert opts["num_gpus"] == 2


def test_starting_a_repeats_servers_together_reaches_every_condition_and_not_the_identity():
    """A notebook's `start_together` goes into every condition's sweep; it changes how the servers
    start, not what is measured, so a run made either way resumes the other way."""
    st = make(axis="kv", start_together=True, conditions={"small": {"env": {"Y": "3"}}, "big": {}})
    specs = st.specs()
    assert all(s.start_together for s in specs.values())
    assert not any(s.start_together for s in make(axis="kv", conditions={"small": {}}).specs().values())
    one = specs["small"]
    assert one.identity() == one.model_copy(update={"start_together": False}).identity()
