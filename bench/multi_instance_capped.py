"""`bench.multi_instance --cpu-cap CORES`: does a second and third daemon add throughput when each
has only its own share of a core? One daemon and then `--instances` daemons on PostgreSQL, each in a
cgroup of its own held to CORES (bench/cpu_cap.py); PostgreSQL, the stand-ins and the proxy (this
process) uncapped. Printed: updates/s answered for each (the whole run, and steady: between the
10th and the 90th percent of the answers), their ratio against 2.5 × one, CPU-seconds per answered
update per instance (the cgroup's usage over the load / webhook POSTs it answered), how much of its
quota each daemon used (below ~90 % the machine's load, not the cap, held it back, and the ratio
says little), lost, twice (there is no kill, so every double is outside a send window) and out of
order, and how much of a core this process used: near 100 % it, not the daemons, set the pace.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from bench.cpu_cap import CgroupUnavailable, CpuCap
from bench.multi_instance import run_once
from bench.multi_instance_count import Outcome, block
from bench.multi_instance_daemons import Plan

STEADY = (0.10, 0.90)
TARGET = 2.5


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


async def capped(plan: Plan, workdir: Path) -> None:
    from bot.testing.postgres import PostgresServer

    assert plan.cap is not None
    try:
        CpuCap.create(f"switchboard-bench-{os.getpid()}-probe", plan.cap).remove()
    except CgroupUnavailable as exc:
        print(f"multi_instance --cpu-cap: skipped ({exc})")
        return
    print(f"multi_instance --cpu-cap {plan.cap:g}: {plan.users} users × {plan.per_user} = "
          f"{plan.users * plan.per_user} updates, each daemon in a cgroup held to {plan.cap:g} of a "
          f"core, PostgreSQL and the stand-ins uncapped, lease_ttl {plan.lease_ttl:g} s; {load()}",
          flush=True)
    server = PostgresServer()
    server.start()
    runs: list[tuple[Outcome, float]] = []
    try:
        for n in (1, plan.instances):
            label = f"{n} instance{'s' * (n > 1)} capped at {plan.cap:g} core, PostgreSQL"
            cpu_here = time.process_time()
            outcome = await run_once(label, Plan(**{**plan.__dict__, "instances": n, "kill": False}),
                                     server.create_database(), workdir / f"capped{n}")
            here = (time.process_time() - cpu_here) / outcome.elapsed if outcome.elapsed else 0.0
            runs.append((outcome, here))
            print("\n".join(block(outcome) + per_instance(outcome, here)), flush=True)
    finally:
        server.stop()
    (one, _), (many, _) = runs
    whole = many.rate() / one.rate() if one.rate() else 0.0
    steady = many.warm_rate(STEADY) / one.warm_rate(STEADY) if one.warm_rate(STEADY) else 0.0
    print(f"capped at {plan.cap:g} core each: one {one.rate():.1f} updates/s answered "
          f"(steady {one.warm_rate(STEADY):.1f}), {plan.instances} {many.rate():.1f} "
          f"(steady {many.warm_rate(STEADY):.1f}); ratio {whole:.2f}× (steady {steady:.2f}×; target "
          f"≥ {TARGET:g}×: {'met' if steady >= TARGET else 'MISSED'})")
    got = [cpu / o.elapsed / plan.cap for o in (one, many) for cpu in o.cpu if o.elapsed]
    print(f"each daemon used {min(got):.0%}-{max(got):.0%} of its quota: " + (
        "the cap, not the machine's load, set its pace" if min(got) >= 0.9 else
        "BELOW its cap, so the machine's load (or the load generator) held it back; run on a quieter "
        "machine"))
    print(f"lost {one.lost} / {many.lost}, twice {one.twice} / {many.twice} (no kill: none inside a send "
          f"window), out of order {one.out_of_order} / {many.out_of_order}; {load()}")


def per_instance(o: Outcome, here: float) -> list[str]:
    ms = [f"{1000 * cpu / n:.1f}" if n else "-" for cpu, n in zip(o.cpu, o.forwarded, strict=True)]
    shares = [f"{cpu / o.elapsed:.2f}" if o.elapsed else "-" for cpu in o.cpu]
    answered = sum(1 for m in o.pushed if o.delivered[m])
    return [f"  daemon CPU per answered update (ms, per instance) {', '.join(ms)}; all daemons "
            f"{1000 * sum(o.cpu) / answered if answered else 0:.1f} ms; cores used per instance "
            f"{', '.join(shares)}",
            f"  this process (stand-ins, proxy) used {here:.0%} of a core"]
