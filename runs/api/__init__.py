"""The HTTP API (``/api/v1/``, django-ninja): service tokens, problem documents, one module per
resource (``runs``, ``agents``, ``settlements``); see ``runs.api.urls``."""
