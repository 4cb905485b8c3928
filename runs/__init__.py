"""The runledger Django project: settings, URLs, the Celery app, the dashboard and the workers."""
