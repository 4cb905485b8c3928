from __future__ import annotations

import json
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


# --- orjson writes the canonical text of plain data: the same bytes as json's encoder ------

#: Every kind of JSON value, with the edges where two encoders could part: unicode (control
#: characters, quotes, backslashes, U+2028, astral planes, lone surrogates), integers past 64
#: bits, floats of every magnitude (exponents both ways, subnormals, -0.0, NaN), keys in any
#: order, nesting, and subclasses (which the plain walk leaves to the full one).
_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1])
    | st.floats()
    | st.floats(min_value=-1e-3, max_value=1e-3)
    | st.floats(min_value=1e15, max_value=1e17)
    | st.sampled_from([1e-4, -1e-4, 9.999999e-5, 1.5e-5, 5e-324, 1e16, 1e22, 0.1, -0.0, 1e-7])
    | st.text()
    | st.text(alphabet=st.characters(codec=None, max_codepoint=0x2FFFF))
    | st.sampled_from(['\x1f\x7f"\\\b\f\n\r\t', "\u2028\u2029", "\U0001f600", "é", "\ud800"])
)
_any_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=6), inner, max_size=5)
        | st.dictionaries(st.sampled_from(["b", "a", "é", "Z", "aa", "", "\U0001f600"]), inner)
    ),
    max_leaves=30,
)


def _reference(value: object) -> str:
    """The canonical text as it was before orjson: normalize, then json's encoder."""
    return canonical._ENCODER.encode(canonical._normalize(value, step_id="s", path="$", depth=0))


@settings(max_examples=2000, deadline=None)
@given(_any_json)
def test_orjson_writes_the_same_canonical_bytes_as_the_standard_encoder(value) -> None:
    try:
        expected = _reference(value)
    except NotJSON as exc:
        with pytest.raises(NotJSON) as caught:
            canonical.canonical(value, step_id="s")
        assert str(caught.value) == str(exc)
        return
    data, text = canonical.canonical(value, step_id="s")
    assert text == expected
    assert canonical.canonical_hashed(value, step_id="s") == (data, text, canonical.hash_text(text))
    assert canonical.input_hash(value) == canonical.hash_text(expected)
    assert data == canonical._normalize(value, step_id="s", path="$", depth=0)


@settings(max_examples=500, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_plain_float_orjson_writes_is_written_as_repr(value) -> None:
    """Where the plain walk lets orjson write a float, orjson's text is the standard one."""
    import orjson

    try:
        data = canonical._plain([value], 0)
    except canonical._Unusual:
        return  # a tiny float: the standard encoder writes it
    try:
        text = orjson.dumps(data).decode()
    except orjson.JSONEncodeError:  # an integral float past 2**64, now an int: the fallback's
        assert type(data[0]) is int and abs(data[0]) >= 2**63
        return
    assert text == canonical._ENCODER.encode(data)


def test_the_encoders_part_where_the_plain_walk_says_so() -> None:
    """The edges the fallback exists for: orjson writes 1e-05 as 0.00001 and refuses ints
    beyond 64 bits; canonical text keeps the standard form for both."""
    import orjson

    assert orjson.dumps(1.5e-05) != canonical._ENCODER.encode(1.5e-05).encode()
    assert canonical.canonical({"x": 1.5e-05})[1] == '{"x":1.5e-05}'
    assert canonical.canonical({"big": 2**64, "n": -(2**63) - 1})[1] == (
        '{"big":18446744073709551616,"n":-9223372036854775809}'
    )
    text = canonical.canonical({"b": "\x1f\u2028é", "a": 0.1})[1]
    assert text == '{"a":0.1,"b":"\\u001f\u2028é"}'


def test_the_standard_encoder_alone_gives_the_same_text(monkeypatch) -> None:
    value = {"q": "refund", "amount": 12.5, "items": [{"sku": "a", "n": 2}], "when": None}
    with_orjson = canonical.canonical(value)
    monkeypatch.setattr(canonical, "USE_ORJSON", False)
    assert canonical.canonical(value) == with_orjson


_JSON_TEXT = _any_json.map(lambda v: json.dumps(v, ensure_ascii=False)) | _any_json.map(
    lambda v: json.dumps(v, sort_keys=True)
)


@settings(max_examples=2000, deadline=None)
@given(_JSON_TEXT)
def test_orjson_decodes_stored_text_as_the_standard_decoder_does(text) -> None:
    """``loads`` by orjson equals ``json`` with sorted keys: same values, same types (a big
    integer stays an int), same key order at every depth."""
    expected = canonical._DECODER.decode(text)
    got = canonical.loads(text)
    assert _typed(got) == _typed(expected)
    try:
        raw = text.encode()
    except UnicodeEncodeError:  # a lone surrogate has no UTF-8 bytes
        return
    assert _typed(canonical.loads(raw)) == _typed(expected)


def _typed(value: object) -> object:
    """The value with each object's key order and each scalar's type made visible to ==."""
    if isinstance(value, dict):
        return ["{", *[(k, _typed(v)) for k, v in value.items()]]
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if isinstance(value, float) and value != value:
        return ("nan",)
    return (type(value).__name__, value)


def test_a_big_integer_is_decoded_as_an_integer() -> None:
    assert canonical.loads('{"n": 18446744073709551616, "b": [-9223372036854775809]}') == {
        "b": [-(2**63) - 1],
        "n": 2**64,
    }
    assert type(canonical.loads("[18446744073709551616]")[0]) is int
