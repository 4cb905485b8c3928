"""`make demo` for now: run the example refund agent through a crash and print its ledger."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from ledger import services
from ledger.examples import faults
from ledger.models import Step


class _Crash(BaseException):
    pass


class Command(BaseCommand):
    help = "Run the example refund agent, crash it after the charge, resume it, print its ledger."

    def handle(self, *args: Any, **options: Any) -> None:
        run = services.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
        self.stdout.write(f"run {run.run_id}: refund of inv_1001")

        def crash() -> None:
            raise _Crash("the worker died right after the provider charged the card")

        faults.set_hook("charge.after_effect", crash)
        try:
            services.run_execute(run_id=run.run_id, worker="demo-worker-1", lease_seconds=0.5)
        except _Crash as exc:
            self.stdout.write(f"  crash: {exc}")
        faults.clear_hooks()
        import time

        time.sleep(0.6)  # the dead worker's lease expires
        outcome = services.run_execute(run_id=run.run_id, worker="demo-worker-2")
        assert outcome is not None
        self.stdout.write(f"  resumed on demo-worker-2: {outcome.status}, result {outcome.result}")
        self.stdout.write("  ledger:")
        for step in Step.objects.filter(run_id=run.run_id).order_by("seq"):
            self.stdout.write(
                f"    {step.seq:>2} {step.step_id:<16} {step.kind:<6} {step.status:<9} "
                f"attempt={step.attempt} key={step.effect_key or '-'}"
            )
