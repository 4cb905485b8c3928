"""Static files: WhiteNoise's compressed, hashed storage, usable before `collectstatic` ran."""

from __future__ import annotations

from whitenoise.storage import CompressedManifestStaticFilesStorage


class HashedStaticStorage(CompressedManifestStaticFilesStorage):
    """Hashed names once `collectstatic` wrote its manifest; the plain names before that.

    Without the fallback, `{% static %}` raises on every page until `collectstatic` has run,
    so the demo and the tests (which serve files from the source tree) could not render.
    """

    def stored_name(self, name: str) -> str:
        if not self.hashed_files:  # no manifest: nothing was collected
            return name
        return str(super().stored_name(name))
