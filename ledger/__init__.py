"""runledger's ledger: the durable step record of an agent run and the engine that writes it.

Agent authors import from ``ledger.agents``; workers and the dashboard call ``ledger.services``.
This package never imports ``runs``.
"""
