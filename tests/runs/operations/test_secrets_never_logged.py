"""A token sent where it does not belong — the query string (``?access_token=rl_…``) — is
refused and never written whole into a log (issue 30, security, hole 6): not by a real
gunicorn's access log (JSON or plain), not by the project's own log handlers."""

from __future__ import annotations

import logging

import pytest

from runs.api import tokens
from runs.operations.logs import RedactSecrets, redact
from tests.support.processes import deployment_env, free_port, get, gunicorn, wait_for

SECRET = tokens.PREFIX + "Q2hlY2tUaGlzVG9rZW5Jc05ldmVyTG9nZ2VkXzEyMzQ1Njc4"
HOOK_SECRET = "whsec_c2VjcmV0LXNpZ25pbmcta2V5LW9mLWEtc3Vic2NyaXB0aW9u"


@pytest.mark.slow
@pytest.mark.parametrize("log_format", ["json", "plain"])
def test_a_token_in_the_query_string_is_refused_and_redacted_in_the_access_log(
    tmp_path, log_format: str
) -> None:
    env = deployment_env(
        tmp_path,
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{free_port()}/gone",
        RUNLEDGER_LOG_FORMAT=log_format,
        WEB_CONCURRENCY="1",
    )
    port = free_port()
    web = gunicorn(env, tmp_path, port)
    try:
        url = f"http://127.0.0.1:{port}/api/v1/runs?status=queued&access_token={SECRET}"
        status, _, body = get(url, Referer=f"http://127.0.0.1/x?token={SECRET}")
        assert status == 401 and b"query string is never accepted" in body
        assert wait_for(lambda: "access_token=[redacted]" in web.output(), timeout=30)
    finally:
        web.stop()
    output = web.output()
    assert SECRET not in output and SECRET[3:20] not in output
    assert "status=queued&access_token=[redacted]" in output


def test_the_projects_log_handlers_redact_tokens_and_secrets() -> None:
    handlers = [h for h in logging.getLogger().handlers if h.filters]
    assert handlers and all(any(isinstance(f, RedactSecrets) for f in h.filters) for h in handlers)
    record = logging.LogRecord(
        "django.server", logging.INFO, __file__, 1, '"%s" %s', (
            f"GET /api/v1/runs?access_token={SECRET} HTTP/1.1", 401), None
    )  # fmt: skip
    record.query = f"api_key={SECRET}&x=1"
    for handler in handlers:
        assert handler.filter(record)
        line = handler.format(record)
        assert SECRET not in line and "access_token=[redacted]" in line, line
    assert record.query == "api_key=[redacted]&x=1"


def test_redact_leaves_ordinary_text_alone() -> None:
    assert redact(f"posted with {HOOK_SECRET}") == "posted with whsec_[redacted]"
    assert redact(f"Bearer {SECRET}") == "Bearer rl_[redacted]"
    assert redact("status=queued&agent=refund&url_token_x=1") == (
        "status=queued&agent=refund&url_token_x=1"
    )
    assert redact("GET /runs?password=hunter2#frag") == "GET /runs?password=[redacted]#frag"
