from __future__ import annotations

import math

import pytest

from ledger import canonical
from ledger.errors import NotJSON

pytestmark = pytest.mark.sqlite_ok


def test_key_order_and_whitespace_do_not_change_the_hash() -> None:
    assert canonical.input_hash({"b": 1, "a": [1, 2]}) == canonical.input_hash(
        {"a": [1, 2], "b": 1}
    )
    assert canonical.dumps(canonical.normalize({"b": 1, "a": "x"})) == '{"a":"x","b":1}'


def test_one_form_per_number() -> None:
    assert canonical.input_hash({"n": 1}) == canonical.input_hash({"n": 1.0})
    assert canonical.input_hash({"n": 0}) == canonical.input_hash({"n": -0.0})
    assert canonical.input_hash({"n": 1.5}) != canonical.input_hash({"n": 1})
    assert canonical.input_hash((1, 2)) == canonical.input_hash([1, 2])


@pytest.mark.parametrize(
    ("value", "path", "words"),
    [
        ({"a": {"b": object()}}, "$.a.b", "object is not JSON"),
        ({"a": [1, math.nan]}, "$.a[1]", "not a JSON number"),
        ({"x": math.inf}, "$.x", "not a JSON number"),
        ({"blob": b"\x00"}, "$.blob", "bytes are not JSON"),
        ({"s": "bad \ud800 surrogate"}, "$.s", "lone surrogate"),
        ({"s": "nul \x00 byte"}, "$.s", "jsonb rejects"),
        ({1: "int key"}, "$", "is not a string"),
    ],
)
def test_values_that_are_not_json_name_the_step_and_the_path(value, path, words) -> None:
    with pytest.raises(NotJSON) as caught:
        canonical.input_hash(value, step_id="plan.3.fetch")
    message = str(caught.value)
    assert "plan.3.fetch" in message
    assert path in message
    assert words in message
