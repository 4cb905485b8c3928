"""``ledger.webhooks`` (issue 20, item 5): what an application needs to check an event, with no
Django — signatures interoperable with the ``standardwebhooks`` package both ways, timestamps
within the tolerance, headers in any case, a rotated secret's second signature."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from standardwebhooks.webhooks import Webhook

from ledger import webhooks

pytestmark = [pytest.mark.sqlite_ok]

ROOT = Path(__file__).resolve().parents[2]
AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BODY = json.dumps({"type": "run.succeeded", "data": {"run_id": "run_1"}})


def test_a_new_secret_is_the_spec_s_form_and_never_repeats() -> None:
    a, b = webhooks.new_secret(), webhooks.new_secret()
    assert a.startswith("whsec_") and a != b
    assert len(base64.b64decode(a.removeprefix("whsec_"))) == 32


def test_what_runledger_signs_the_package_verifies_and_back() -> None:
    secret = webhooks.new_secret()
    now = datetime.now(tz=UTC)  # the package verifies against the real clock
    headers = webhooks.signed_headers(secret=secret, msg_id="msg_1", at=now, body=BODY)
    assert Webhook(secret).verify(BODY, headers) == json.loads(BODY)
    theirs = {
        "webhook-id": "msg_2",
        "webhook-timestamp": str(int(AT.timestamp())),
        "webhook-signature": Webhook(secret).sign("msg_2", AT, BODY),
    }
    assert webhooks.verify_webhook(BODY.encode(), theirs, secret, now=AT) == json.loads(BODY)


def test_headers_in_any_case_and_a_rotated_secret_s_signature_pass() -> None:
    old, new = webhooks.new_secret(), webhooks.new_secret()
    h = webhooks.signed_headers(secret=new, msg_id="msg_3", at=AT, body=BODY)
    both = (
        f"{webhooks.sign(secret=old, msg_id='msg_3', timestamp=AT, body=BODY)} "
        + (h["webhook-signature"])
    )
    django_style = {"Webhook-Id": "msg_3", "Webhook-Timestamp": h["webhook-timestamp"],
                    "Webhook-Signature": both}  # fmt: skip
    assert webhooks.verify_webhook(BODY, django_style, new, now=AT)["type"] == "run.succeeded"
    assert webhooks.verify_webhook(BODY, django_style, old, now=AT)["type"] == "run.succeeded"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"webhook-id": "msg_other"}, "no signature matches"),
        ({"webhook-timestamp": "yesterday"}, "is not Unix seconds"),
        ({"webhook-timestamp": str(int((AT - timedelta(minutes=6)).timestamp()))}, "more than"),
        ({"webhook-signature": "v2,abc"}, "no signature matches"),
        ({"webhook-id": ""}, "missing header"),
    ],
)
def test_a_changed_header_is_refused(change: dict[str, str], message: str) -> None:
    secret = webhooks.new_secret()
    headers = {**webhooks.signed_headers(secret=secret, msg_id="m", at=AT, body=BODY), **change}
    with pytest.raises(webhooks.WebhookVerificationError, match=message):
        webhooks.verify_webhook(BODY, headers, secret, now=AT)


def test_the_helper_imports_and_verifies_without_django() -> None:
    script = (
        "import sys\n"
        "from datetime import UTC, datetime\n"
        "from ledger.webhooks import new_secret, signed_headers, verify_webhook\n"
        "s = new_secret(); now = datetime.now(tz=UTC)\n"
        "h = signed_headers(secret=s, msg_id='msg_x', at=now, body='{\"a\": 1}')\n"
        "assert verify_webhook(b'{\"a\": 1}', h, s) == {'a': 1}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'django'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
