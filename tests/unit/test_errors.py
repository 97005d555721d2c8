"""One wording for every refusal: unknown keys named with the closest known one, pydantic
errors as one line, and paths in ledgers made portable."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from specnb import paths
from specnb.errors import did_you_mean, first_error, unknown_key


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_tokens: int = 1


class Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    concurrency: list[int]
    sampling: Inner = Inner()
    items: list[str | Inner] = []
    by_name: dict[str, Inner] = {}
    api_key_env: str = "X"


def error(data) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        Outer.model_validate(data)
    return info.value


def test_a_misspelt_key_is_named_with_the_closest_known_one_not_the_field_it_hides():
    exc = error({"concurency": [1]})
    assert first_error(exc, count_more=True, model=Outer) == "unknown key 'concurency' (did you mean 'concurrency'?)"
    # without the model, the missing field beside it is the candidate
    assert first_error(exc) == "unknown key 'concurency' (did you mean 'concurrency'?)"


@pytest.mark.parametrize("data, text", [
    ({"concurrency": [1], "sampling": {"max_token": 2}}, "sampling: unknown key 'max_token' (did you mean 'max_tokens'?)"),
    ({"concurrency": [1], "items": [{"max_tokns": 2}]}, "items.0: unknown key 'max_tokns' (did you mean 'max_tokens'?)"),
    ({"concurrency": [1], "by_name": {"a": {"max_tokenz": 2}}},
     "by_name.a: unknown key 'max_tokenz' (did you mean 'max_tokens'?)"),
    ({"concurrency": [1], "colour": 1}, "unknown key 'colour' (known: api_key_env, by_name, concurrency, items, sampling)"),
    ({"concurrency": "x"}, "concurrency: Input should be a valid list (got 'x')"),
    ({"concurrency": [1], "items": [3]}, "items.0: Input should be a valid dictionary or instance of Inner (got 3)"),
])
def test_nested_keys_and_values(data, text):
    assert first_error(error(data), count_more=True, model=Outer) == text


def test_a_value_near_a_secret_is_never_echoed():
    exc = error({"concurrency": [1], "api_key_env": 123456})
    assert first_error(exc, model=Outer) == "api_key_env: Input should be a valid string"


def test_did_you_mean():
    assert did_you_mean("repeat", ["repeats", "model"]) == " (did you mean 'repeats'?)"
    assert did_you_mean("zzz", ["b", "a"]) == " (known: a, b)"
    assert unknown_key("x", [], "parameter") == "unknown parameter 'x'"


def test_portable_paths(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    root = str(paths.ROOT)
    assert paths.portable(f"{root}/.venv/lib/libiomp5.so") == ".venv/lib/libiomp5.so"
    assert paths.portable(f"{root}/.cache/vllm:{tmp_path}/lib") == ".cache/vllm:~/lib"
    assert paths.portable(f"--model={tmp_path}/m") == "--model=~/m"
    assert paths.portable(f'{{"model": "{tmp_path}/draft"}}') == '{"model": "~/draft"}'
    assert paths.portable(str(tmp_path)) == "~"
    assert paths.portable(f"{tmp_path}x/a") == f"{tmp_path}x/a"  # another folder that only starts alike
    assert paths.portable("http://127.0.0.1:8000") == "http://127.0.0.1:8000"
    assert paths.portable("/usr/lib/x.so") == "/usr/lib/x.so"
