"""Step 4 of the search (sglang_deploy/tuning/search.py): settle. Every setting of the best
configuration that differs from its prior (the start's value) is compared with the same
configuration with that one setting put back, and moves only when the gain exceeds the measured
spread with no other figure worse beyond the gate's tolerance (the judgement itself:
sglang_deploy/tuning/settle.py). Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Generator, Mapping

from sglang_deploy.tuning.dimensions import ConfigKey, config_key
from sglang_deploy.tuning.search_state import Outcome, Proposal, SearchState
from sglang_deploy.tuning.settle import Decision, Judgement, Measured, gain_of, judge, pooled_sd, spread_of

SETTLE_RESERVE = 4  # trials kept back for the settle step (two counterfactuals measured twice)
RUNOFF_SAMPLES = 5  # measurements each near-tied finalist may get


class SettleStep(SearchState):
    """Step 4 on the search's state; :meth:`result` is the configuration chosen."""

    def result(self) -> Outcome:
        """The configuration chosen: the best measured one with every setting whose move was
        noise (or cost another figure beyond its tolerance) put back to its prior. Once the
        search is over this is what its settle step measured; before (an interrupted tune), it
        is decided from the trials so far."""
        if self._settled is not None:
            return self._settled
        best, _, used = self.best()
        if best is None:
            return Outcome(None, None, used)
        final, decisions = self._decide(best)
        return self._outcome(best, final, decisions)

    # ---- settle: which settings move off their prior ----------------------------------------

    def _measured(self, key: ConfigKey) -> Measured | None:
        if key in self._infeasible or not self._scores.get(key):
            return None
        return Measured(tuple(self._scores[key]), tuple(self._figures.get(key, ())))

    def _sd(self) -> float | None:
        return pooled_sd([m for k in self._scores if (m := self._measured(k)) is not None])

    def _off_prior(self, config: Mapping[str, Any]) -> list[str]:
        """The intents of ``config`` off the start's value, least sensitive first (the likeliest
        to be noise are settled first, which leaves fewer counterfactuals for the others)."""
        order = [d.intent for d in reversed(self.space.order(self.objective))]
        names = [n for n in self.space.intents if n not in order] + order
        return [n for n in names if config.get(n) != self._start.get(n)]

    def _counterfactual(self, config: Mapping[str, Any], intent: str) -> dict[str, Any]:
        """``config`` with ``intent`` at its prior, the settings SGLang derives from it following."""
        return self.space.normalize({**config, intent: self._start.get(intent)}, self._start_raw)

    def _cannot_run(self, key: ConfigKey) -> str | None:
        """Why the config of ``key`` is known not to run: it failed, or its memory fraction is at or
        above one that ran out of memory with no less CUDA-graph batch and prefill chunk."""
        if key in self._infeasible:
            return self._infeasible[key]
        config = dict(key)
        value, ceiling = config.get("mem_fraction_static"), self.ceiling_for(config)
        if value is None and self._default_mem_oom:
            return "out of memory at SGLang's default mem_fraction_static in an earlier trial"
        if value is not None and ceiling is not None and value >= ceiling:
            return f"out of memory at mem_fraction_static={ceiling:g} in an earlier trial"
        return None

    def _judge(self, cur: Mapping[str, Any], intent: str) -> Judgement | None:
        """``intent`` of ``cur`` against its counterfactual; None when it cannot take its prior
        with the rest (SGLang derives it from another setting): it follows that one."""
        ckey = config_key(cur)
        okey = config_key(self._counterfactual(cur, intent))
        if okey == ckey:
            return None
        cause = self._cannot_run(okey)
        if cause is not None:
            return True, f"moved: its prior value does not run with the rest ({cause})", None, None, {}
        mine, other = self._measured(ckey), self._measured(okey)
        if mine is None or other is None:
            return False, "kept: never measured against its prior value with the rest unchanged", None, None, {}
        return judge(mine, other, self.objective, self._sd(), self.tolerance)

    def _decide(self, best: Mapping[str, Any], cur: Mapping[str, Any] | None = None,
                why: Mapping[str, Judgement] | None = None) -> tuple[dict[str, Any], dict[str, Decision]]:
        """The configuration chosen from ``cur`` (the best measured one with what was settled so
        far put back; default ``best``) and a decision for every setting ``best`` has off its
        prior: those still off are judged against ``cur`` on all the trials; one that is kept
        without having been put back yet is put back now (unmeasured that way)."""
        final = dict(cur if cur is not None else best)
        judged: dict[str, Judgement] = dict(why or {})
        back = {}
        alone: list[str] = []  # never measured against its prior alone (the budget was spent)
        for intent in self._off_prior(final):
            j = self._judge(final, intent)
            if j is not None:
                judged[intent] = j
                if j[1].startswith("kept: never measured"):
                    alone.append(intent)
                elif not j[0]:
                    back[intent] = self._start.get(intent)
        if alone:
            # Put back, they would make a configuration never measured. Judged together instead:
            # they stay only if this configuration beats the plan's own (the start) by more than
            # the spread, with no other figure worse beyond the tolerance.
            mine, start = self._measured(config_key(final)), self._measured(config_key(self._start))
            group = (judge(mine, start, self.objective, self._sd(), self.tolerance) if mine and start else
                     (False, "kept: never measured against its prior value", None, None, {}))
            for intent in alone:
                moved, reason, gain, spread, worse = group
                judged[intent] = (moved, reason.replace("moved: ", "moved with the others (not measured alone, "
                                                                   "budget spent): ", 1)
                                  .replace("kept: ", "kept with the others (not measured alone, budget spent): ", 1),
                                  gain, spread, worse)
                if not moved:
                    back[intent] = self._start.get(intent)
        if back:
            final = self.space.normalize({**final, **back}, self._start_raw)
        decisions: dict[str, Decision] = {}
        for intent in self._off_prior(best):
            value, prior = final.get(intent), self._start.get(intent)
            moved = value != prior
            if intent in judged:
                _, reason, gain, spread, worse = judged[intent]
                if reason.startswith("kept") and moved:  # put back, then set again by a setting that moved
                    # Its own judgement (in the reason) was of a configuration not chosen: no gain of
                    # its own moved it, as for a setting that follows the others.
                    reason += f"; set to {value} by the settings that moved (SGLang derives it)"
                    gain = spread = None
                    worse = {}
            else:
                reason = ("moved" if moved else "kept") + ": follows the settings it depends on (SGLang derives it)"
                gain = spread = None
                worse = {}
            decisions[intent] = Decision(intent, value, prior, best.get(intent), moved, reason, gain, spread,
                                         dict(worse))
        return final, decisions

    def _outcome(self, best: Mapping[str, Any], final: Mapping[str, Any],
                 decisions: dict[str, Decision]) -> Outcome:
        fkey = config_key(final)
        value = self._mean(fkey) if fkey in self._scores and fkey not in self._infeasible else None
        return Outcome(dict(final), value, len(self.history), dict(best), decisions)

    def _twice(self, key: ConfigKey) -> Generator[Proposal, None, None]:
        """Measure ``key`` until it has two samples (or turns out infeasible), within the budget."""
        for _ in range(2):
            if key in self._infeasible or len(self._scores.get(key, ())) >= 2 or not self._budget_left(0):
                return
            yield dict(self._configs[key]), "settle", None

    def _closer(self, a: ConfigKey, b: ConfigKey) -> Generator[Proposal, None, None]:
        """While a gain of ``a`` over ``b`` lies between half the spread and the spread, measure
        the one with fewer samples again (up to RUNOFF_SAMPLES each, within the budget): a real
        gain gets the samples to show it, noise does not get a free pass."""
        for _ in range(2 * RUNOFF_SAMPLES):
            ma, mb = self._measured(a), self._measured(b)
            if ma is None or mb is None:
                return
            spread = spread_of(ma, mb, self._sd())
            if spread is None or not spread / 2 < gain_of(ma, mb) <= spread:
                return
            key = a if len(ma.values) <= len(mb.values) else b
            if len(self._scores[key]) >= RUNOFF_SAMPLES or not self._budget_left(0):
                return
            yield dict(self._configs[key]), "settle", None

    def _settle(self) -> Generator[Proposal, None, None]:
        best, _, _ = self.best()
        if best is None:
            return
        cur = dict(best)
        why: dict[str, Judgement] = {}  # the judgement that put each setting back
        for _ in range(4 * len(self.space.intents) + 4):  # every round puts one setting back, or ends
            ckey = config_key(cur)
            yield from self._twice(ckey)
            reverted = False
            for intent in self._off_prior(cur):
                other = self._counterfactual(cur, intent)
                okey = config_key(other)
                if okey == ckey:
                    continue
                self._configs.setdefault(okey, other)
                if self._cannot_run(okey) is not None:
                    continue
                yield from self._twice(okey)
                yield from self._closer(ckey, okey)
                j = self._judge(cur, intent)
                if j is not None and not j[0] and self._measured(okey) is not None:
                    why[intent] = j
                    cur = dict(self._configs[okey])
                    reverted = True
                    break
            if reverted:
                continue
            # judged again on all the trials (the pooled spread moved while the pass measured):
            # what is kept now is put back and the configuration measured, then judged again
            final, decisions = self._decide(best, cur, why)
            fkey = config_key(final)
            if fkey == ckey:
                break
            self._configs.setdefault(fkey, dict(final))
            if self._cannot_run(fkey) is None:
                yield from self._twice(fkey)
            if self._cannot_run(fkey) is not None:
                self.events.append(f"the settings put back do not run together ({self._cannot_run(fkey)}): "
                                   f"the last measured configuration stays")
                break
            if self._measured(fkey) is None:
                break  # the budget is spent: chosen unmeasured as a whole
            for intent, d in decisions.items():
                if not d.moved and intent not in why:
                    why[intent] = (False, d.reason, d.gain, d.spread, d.worse)
            cur = dict(final)
        final, decisions = self._decide(best, cur, why)
        if self._cannot_run(config_key(final)) is not None:
            final, decisions = dict(cur), {n: Decision(n, cur.get(n), d.prior, d.proposed, cur.get(n) != d.prior,
                                                       "moved: put back with the others it does not run",
                                                       d.gain, d.spread, d.worse) if cur.get(n) != d.prior else d
                                           for n, d in decisions.items()}
        kept = [n for n, d in decisions.items() if not d.moved]
        if kept:
            self.events.append(f"kept at the prior value (noise, or a cost elsewhere): {', '.join(kept)}")
        self._settled = self._outcome(best, final, decisions)
