"""The seeded fault schedule (``nemesis.schedule``) applied to the simulated world.

Same steps, same params, same history events (``start-*``/``stop-*``/``heal-partition`` with
``fault`` and ``kind``) as the docker nemeses; the faults act on the simulated network, clocks,
disk and processes instead of iptables, libfaketime and signals. Each fault takes effect at
once (no remote round trip), so ``elapsed_ms`` is 0 and runs repeat exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from typing import Any, Protocol

from nemesis.partition import grudge as partition_grudge
from nemesis.schedule import START, STOP, NemesisStep
from sim.cluster import METASTORE_PORT, SimCluster
from sim.network import Network

log = logging.getLogger("schemachaos.sim.nemesis")
TBF_DELAY_S = 0.25  # a learner behind a slow link: every byte to it waits this long


class Recorder(Protocol):
    def nemesis(self, f: str, value: dict) -> dict: ...


class SimNemesis:
    """Plays one schedule; ``heal`` undoes every fault still in force."""

    def __init__(self, cluster: SimCluster, seed: int, delay_ms: int) -> None:
        self.cluster = cluster
        self.net: Network = cluster.world.network
        self.rng = random.Random(f"{seed}:sim-nemesis")  # leader-dependent partition shapes
        self.delay_ms = delay_ms
        self.active: dict[int, dict[str, Any]] = {}
        self._strobe: asyncio.Task[None] | None = None
        self._cuts: dict[int, set[tuple[str, str, int]]] = {}
        self.faults_run: dict[str, int] = {}  # kind -> faults started (the CLI's summary)

    async def play(self, schedule: list[NemesisStep], recorder: Recorder, stop: asyncio.Event):
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        for step in schedule:
            delay = t0 + step.at_s - loop.time()
            if delay > 0 and not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await stop.wait()
            if stop.is_set():
                return
            await self.apply(step, recorder)

    async def apply(self, step: NemesisStep, recorder: Recorder) -> dict[str, Any]:
        kind = step.params["kind"]
        fault = int(step.params["fault"])
        try:
            if step.action == START[kind]:
                self.active[fault] = dict(step.params)
                self.faults_run[kind] = self.faults_run.get(kind, 0) + 1
                value = await self._start(fault, kind, step.params)
                self.active[fault].update(value)
            elif step.action == STOP[kind]:
                value = await self._stop(fault, kind)
            else:
                raise ValueError(f"action {step.action!r} does not belong to {kind!r}")
        except Exception as e:
            log.warning("sim nemesis %s failed: %s", step.action, e)
            value = {"error": f"{type(e).__name__}: {e}"}
        event = {**step.params, **value, "at_s": step.at_s, "elapsed_ms": 0.0}
        recorder.nemesis(step.action, event)
        return event

    async def heal(self, recorder: Recorder) -> None:
        """Stop every fault in force (``by: heal-all``), then make sure all is healthy."""
        for fault, started in sorted(self.active.items()):
            kind = started["kind"]
            try:
                value = await self._stop(fault, kind)
            except Exception as e:
                value = {"error": f"{type(e).__name__}: {e}"}
            recorder.nemesis(
                STOP[kind],
                {"fault": fault, "kind": kind, "by": "heal-all", **value, "elapsed_ms": 0.0},
            )
        c = self.cluster
        resumed = sorted(c.paused)
        for n in resumed:
            c.resume(n)
        restarted = sorted(c.killed)
        for n in restarted:
            c.start(n)
        self._cuts.clear()
        self.net.set_cut(set())
        for key in list(self.net.extra_delay_s):
            self.net.set_delay(key[0], key[1], 0)
        self._stop_strobe()
        c.world.clocks.reset()
        recorder.nemesis(
            "heal-all", {"resumed": resumed, "restarted": restarted, "elapsed_ms": 0.0}
        )

    # -- faults ------------------------------------------------------------------------------
    async def _start(self, fault: int, kind: str, p: dict[str, Any]) -> dict[str, Any]:
        c = self.cluster
        if kind == "clock":
            return self._start_clock(p)
        if kind == "partition":
            g = p.get("grudge")
            if g is None:
                g = partition_grudge(p["shape"], c.nodes, self.rng, c.leader())
            self._cuts[fault] = {(m, n, 0) for n, drops in g.items() for m in drops}
            self._apply_cuts()
            return {"grudge": g}
        if kind == "lagging-learner":
            return await self._start_lagging(fault, p)
        if kind in ("kill", "pause"):
            nodes = p.get("nodes")
            if nodes is None:
                leader = c.leader()
                nodes = [leader] if leader else []
            for n in nodes:
                if kind == "kill":
                    c.kill(n)
                else:
                    c.pause(n)
            return {"nodes": list(nodes)}
        if kind == "delay":
            return await self._set_delays(p["delays_ms"])
        raise ValueError(f"unknown nemesis kind {kind!r}")

    async def _stop(self, fault: int, kind: str) -> dict[str, Any]:
        c = self.cluster
        started = self.active.pop(fault, {"kind": kind})
        if kind == "clock":
            self._stop_strobe()
            c.world.clocks.reset()
            return {"clock": "reset"}
        if kind == "partition":
            self._cuts.pop(fault, None)
            self._apply_cuts()
            return {"rules_remaining": 0}
        if kind == "lagging-learner":
            self._cuts.pop(fault, None)
            self._apply_cuts()
            for n in started.get("learners") or c.learners:
                for m in c.nodes:
                    self.net.set_delay(m, n, 0)
            if started.get("mode") == "inhibit":
                await self._inhibit(list(started.get("learners") or c.learners), False)
            return {}
        if kind == "kill":
            nodes = [n for n in started.get("nodes") or sorted(c.killed) if n in c.killed]
            for n in nodes:
                c.start(n)
            return {"restarted": nodes}
        if kind == "pause":
            nodes = started.get("nodes") or sorted(c.paused)
            for n in nodes:
                c.resume(n)
            return {"resumed": list(nodes)}
        if kind == "delay":
            restore = int(started.get("restore_ms", self.delay_ms))
            return await self._set_delays(dict.fromkeys(c.nodes, restore))
        raise ValueError(f"unknown nemesis kind {kind!r}")

    def _apply_cuts(self) -> None:
        cut: set[tuple[str, str, int]] = set()
        for rules in self._cuts.values():
            cut |= rules
        self.net.set_cut(cut)

    def _start_clock(self, p: dict[str, Any]) -> dict[str, Any]:
        clocks = self.cluster.world.clocks
        if p["mode"] == "strobe":
            self._stop_strobe()
            self._strobe = asyncio.get_running_loop().create_task(
                self._run_strobe(
                    p["node"], list(p["offsets"]), float(p["period_s"]), float(p["duration_s"])
                )
            )
            return {}
        for n, offset in sorted(p["offsets"].items()):
            clocks.set_offset(n, float(offset))
        return {}

    async def _run_strobe(
        self, node: str, offsets: list[float], period_s: float, duration_s: float
    ) -> None:
        clocks = self.cluster.world.clocks
        loop = asyncio.get_running_loop()
        end = loop.time() + duration_s
        i = 0
        while loop.time() < end:
            clocks.set_offset(node, offsets[i % len(offsets)])
            i += 1
            await asyncio.sleep(period_s)
        clocks.set_offset(node, 0.0)

    def _stop_strobe(self) -> None:
        if self._strobe is not None:
            self._strobe.cancel()
            self._strobe = None

    async def _start_lagging(self, fault: int, p: dict[str, Any]) -> dict[str, Any]:
        c = self.cluster
        learners = list(p["learners"])
        mode = p["mode"]
        if mode == "drop":
            # the learners' Meta Storage traffic is dropped both ways; clients still reach them
            self._cuts[fault] = {
                rule
                for n in learners
                for m in c.nodes
                if m != n
                for rule in ((m, n, METASTORE_PORT), (n, m, METASTORE_PORT))
            }
            self._apply_cuts()
        elif mode == "tbf":
            for n in learners:
                for m in c.nodes:
                    if m != n:
                        self.net.set_delay(m, n, TBF_DELAY_S)
        elif mode == "inhibit":
            errors = await self._inhibit(learners, True)
            if errors:
                return {"errors": errors}
        else:
            raise ValueError(f"unknown lagging-learner mode {mode!r}")
        return {}

    async def _inhibit(self, nodes: list[str], hold: bool) -> dict[str, str]:
        errors: dict[str, str] = {}
        for n in nodes:
            try:
                client = await self.cluster.raw_client(n, 5.0)
                try:
                    await client.inhibit_apply(hold)
                finally:
                    await client.close()
            except Exception as e:
                errors[n] = f"{type(e).__name__}: {e}"
        return errors

    async def _set_delays(self, delays: dict[str, int]) -> dict[str, Any]:
        errors: dict[str, str] = {}
        for n, ms in sorted(delays.items()):
            try:
                client = await self.cluster.raw_client(n, 5.0)
                try:
                    await client.set_delay(int(ms))
                finally:
                    await client.close()
            except Exception as e:
                errors[n] = f"{type(e).__name__}: {e}"
        return {"errors": errors} if errors else {}
