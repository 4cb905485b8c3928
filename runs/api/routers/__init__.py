"""One router per resource: ``runs``, ``agents``, ``settlements``."""
