"""Keys and ids wrap at their own joints on a narrow screen, and stay escaped."""

from __future__ import annotations

from runs.dashboard.templatetags.dashboard import breakable


def test_a_key_gets_break_opportunities_after_its_separators() -> None:
    assert breakable("run_ab12:refund.inv_1") == "run_<wbr>ab12:<wbr>refund.<wbr>inv_<wbr>1"


def test_markup_in_a_key_is_escaped_before_breaks_are_added() -> None:
    out = breakable('<script>alert("x")</script>:k')
    assert "<script>" not in out and out.startswith("&lt;script&gt;")
    assert out.endswith(":<wbr>k") and breakable(None) == ""
