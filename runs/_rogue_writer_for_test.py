from ledger.models import Run


def f(run):
    Run.objects.filter(pk=1).update(status='failed')
    run.save()
