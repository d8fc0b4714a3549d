"""``forklift tune``: candidate settings the plan says fit, measured on the owner's workload under an SLO, with
compare's start-level statistics; the winner written into the recipe on request.

    result = forklift.tune.flow.run(forklift.tune.flow.Request("my.yaml", ("chat",), "ttft_p95=2000,tpot_p95=80", 30))

Modules: ``slo`` (the SLO), ``workloads`` (classes and replays), ``space`` (candidates, pruned and ranked by the
plan), ``evidence`` (intervals), ``search`` (the budgeted sequential search), ``live`` (the real measurer),
``report`` (table, Pareto page), ``apply`` (the recipe edit), ``flow`` (all of it).
"""
