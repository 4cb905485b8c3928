"""Example agents and the simulated downstream systems they call (used by the demo and tests)."""
