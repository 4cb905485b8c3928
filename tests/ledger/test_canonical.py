from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_the_plain_walk_gives_what_the_full_walk_gives(value) -> None:
    """``normalize`` walks plain data without paths; the result (or refusal) is the full walk's."""
    try:
        expected = canonical._normalize(value, step_id="s", path="$", depth=0)
    except NotJSON as exc:
        with pytest.raises(NotJSON) as caught:
            canonical.normalize(value, step_id="s")
        assert str(caught.value) == str(exc)
        return
    got = canonical.normalize(value, step_id="s")
    assert got == expected
    assert canonical.dumps(got) == canonical.dumps(expected)
    assert [type(x) for x in _leaves(got)] == [type(x) for x in _leaves(expected)]


def _leaves(value: object) -> list[object]:
    if isinstance(value, dict):
        return [k for k in value] + [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [value]


def test_subclasses_and_deep_values_take_the_full_walk() -> None:
    import enum
    from collections import OrderedDict

    class Level(enum.IntEnum):
        HIGH = 3

    value = OrderedDict([("b", Level.HIGH), ("a", [True, 2.0])])
    assert canonical.normalize(value) == {"a": [True, 2], "b": 3}
    assert type(canonical.normalize(value)["b"]) is int
    deep: object = 1
    for _ in range(canonical.MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(NotJSON, match="nested deeper"):
        canonical.normalize(deep)
