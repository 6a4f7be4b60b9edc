"""The tuner's search, as ask/tell: it proposes one config at a time and is told what it scored.

    s = Search(space, start, "decode", budget_trials=20, budget_s=None, seed=0)
    while (trial := s.ask()) is not None:
        s.tell(trial, TrialResult("ok", objective=57.1, figures={...}))
    config, value, trials = s.best()

Algorithm:
1. Measure the start config (the current plan's values, projected onto the space) twice:
   every early comparison is against it.
2. Coordinate descent over the dimensions, most sensitive first for the objective: an ordered
   dimension steps from the incumbent's value to a neighbour and keeps stepping while each step
   wins (crossing up to MAX_FLAT steps that tie, a plateau); an unordered one tries every other
   value. A candidate that turns dependent dimensions on (speculation on; top-k > 1 freeing the
   draft tokens) is judged with those walked from it. A move needs to beat the incumbent by more
   than the noise margin on two samples of each (a second one is measured, purpose
   "remeasure", before the move). Passes repeat until one makes no move; then coupled pairs of
   dimensions (space.couplings: more KV cache pays only with a CUDA-graph batch to match) step
   together. Every exploring trial carries ``abandon_below`` = incumbent * (1 - margin): the
   gate may stop it once it cannot win.
3. Re-measure the top candidates (purpose "remeasure") and choose by the mean of each one's
   measurements; if that moves the best away from the incumbent, descend again from it (at most
   MAX_ROUNDS rounds). Descend again from configs that tied with the incumbent within the margin
   and still tie with the best (MAX_RESTARTS). Near-tied finalists get up to RUNOFF_SAMPLES
   measurements each, so one lucky sample does not win.
4. Settle (sglang_deploy/tuning/settle.py): every setting of the best configuration that differs
   from its prior (the start's value) is compared with the same configuration with that one
   setting put back (the settings SGLang derives from it follow), each measured twice (purpose
   "settle"). It moves only when the gain exceeds the measured spread and no other figure of
   the trials gets worse beyond the gate's tolerance; the settings kept are put back together
   and that configuration, the one chosen (``result()``), is measured twice too.
The budget (trials and/or seconds) stops exploring early enough to leave room for step 3, and
the run-off leaves up to SETTLE_RESERVE trials for step 4.

Infeasible trials (start failure, crash, out of memory, gate failure) are recorded and never
chosen; an out-of-memory trial caps mem_fraction_static below the value that failed for every
later trial that uses at least as much CUDA-graph batch and prefill chunk (MEMORY_HUNGRY); a
config at or above its cap is proposed with the highest candidate below it instead. No config is
proposed twice except to re-measure it. Time comes only from the trials' figures
(``figures["trial_s"]``: the trial's wall seconds) or an injected clock. Deterministic for a
seed. Pure: no I/O.

Here: steps 1-3 (:class:`Search`). The state and the ask/tell surface are
sglang_deploy/tuning/search_state.py; step 4, sglang_deploy/tuning/search_settle.py. Every name
stays importable from here.
"""

from __future__ import annotations

from typing import Any, Generator, Mapping

from sglang_deploy.tuning.objective import abandon_threshold, better
from sglang_deploy.tuning.dimensions import ConfigKey, Dimension, _sort_key, config_key
from sglang_deploy.tuning.search_settle import RUNOFF_SAMPLES, SETTLE_RESERVE, SettleStep
from sglang_deploy.tuning.search_state import (MEMORY_HUNGRY, REMEASURE, Outcome, Proposal, SearchState, Trial,
                                               TrialResult)

__all__ = ["MAX_FLAT", "MAX_RESTARTS", "MAX_ROUNDS", "MEMORY_HUNGRY", "REMEASURE", "RUNOFF_SAMPLES",
           "SETTLE_RESERVE", "Outcome", "Search", "SearchState", "Trial", "TrialResult"]

MAX_FLAT = 2  # tying steps a line search crosses before it gives up
MAX_RESTARTS = 3  # descents from near misses after the main one
MAX_ROUNDS = 3  # explore / re-measure rounds while re-measuring moves the best


class _OutOfBudget(Exception):
    pass


class Search(SettleStep):
    # ---- the algorithm (a generator: yields proposals, reads results from the state) ----

    def _run(self) -> Generator[Proposal, None, None]:
        try:
            yield from self._explore()
        except _OutOfBudget:
            self.events.append(f"exploration stopped by the budget after {len(self.history)} trials")
        yield from self._remeasure_top()
        yield from self._runoff()
        yield from self._settle()

    def _explore(self) -> Generator[Proposal, None, None]:
        rounds = 0
        while True:
            yield from self._descend(first=rounds == 0)
            rounds += 1
            yield from self._remeasure_top()
            config, _, _ = self.best()
            if config is None or config_key(config) == config_key(self._inc) or rounds >= MAX_ROUNDS:
                break
            # Re-measuring moved the best elsewhere: the first sample of the old incumbent (or of
            # this one) was noise. Descend again from the new best, whose neighbours are untried.
            self.events.append(f"after re-measuring, the best is no longer the incumbent: exploring again "
                               f"(round {rounds + 1})")
            self._move(config_key(config))
        # A move that lost to the incumbent by less than the noise margin may have lost to noise:
        # descend from the best such near miss too (a few times, while the budget lasts).
        origins = {config_key(self._inc)}
        for restart in range(MAX_RESTARTS):
            best, value, _ = self.best()
            near = [k for k in self._near if k not in origins and k not in self._infeasible and k in self._scores
                    and (best is None or (k != config_key(best) and not better(value, self._mean(k), self.margin)))]
            if not near:
                return
            origin = max(near, key=lambda k: (self._mean(k), -self._first_seen(k)))
            origins.add(origin)
            self.events.append(f"exploring again from a near miss (restart {restart + 1})")
            self._move(origin)
            yield from self._descend(first=False)

    def _evaluate(self, config: dict[str, Any]) -> Generator[Proposal, None, tuple[ConfigKey | None, float | None]]:
        repaired = self._repair(self.space.normalize(config, self._start_raw))
        if repaired is None:
            return None, None
        key = config_key(repaired)
        if key in self._proposed:
            return key, self._score(key)
        if not self._budget_left(self.remeasure):
            raise _OutOfBudget
        self._proposed.add(key)
        inc = self._score(config_key(self._inc))
        yield repaired, "explore", abandon_threshold(inc, self.margin)
        score = self._score(key)
        if score is not None and inc is not None and not better(score, inc, self.margin) \
                and not better(inc, score, self.margin):
            self._near.append(key)
        return key, score

    def _probe(self, candidate: dict[str, Any]) -> Generator[Proposal, None, tuple[ConfigKey | None, float | None]]:
        """Evaluate a candidate; when it turns dependent dimensions on (speculation on, or top-k
        above 1 making the draft tokens a free choice), also walk those from it, so the move is
        judged by its best dependent values, not by whatever they happen to be."""
        key, score = yield from self._evaluate(candidate)
        if key is None:
            return key, score
        base = dict(self._configs[key])
        fresh = [d for d in self.space.order(self.objective) if d.ordered and self.space.active(d, base)
                 and not self.space.active(d, self._inc)]
        for dim in fresh:
            line, i = self._line(dim, base)
            directions = [1, -1]
            self._rng.shuffle(directions)
            for step in directions:
                moved, n = False, 1
                while 0 <= i + n * step < len(line):
                    k2, s2 = yield from self._evaluate({**base, dim.intent: line[i + n * step]})
                    if k2 is None or not better(s2, score, self.margin):
                        break
                    key, score, moved = k2, s2, True
                    n += 1
                if moved:
                    break
            base = dict(self._configs[key])
        return key, score

    def _confirm(self, key: ConfigKey) -> Generator[Proposal, None, None]:
        """Measure a config a second time before a decision rests on its only sample."""
        if key in self._infeasible or len(self._scores.get(key, ())) >= 2:
            return
        if not self._budget_left(self.remeasure):
            raise _OutOfBudget
        self._remeasured.add(key)
        yield dict(self._configs[key]), "remeasure", None

    def _wins(self, key: ConfigKey | None) -> Generator[Proposal, None, bool]:
        """Whether ``key`` beats the incumbent by more than the margin, on at least two samples
        of each: one lucky draw must not move the search (it would then measure every later
        candidate against a value the incumbent does not really reach)."""
        inc = config_key(self._inc)
        if key is None or key == inc or not better(self._score(key), self._score(inc), self.margin):
            return False
        yield from self._confirm(key)
        yield from self._confirm(inc)
        return better(self._score(key), self._score(inc), self.margin)

    def _move(self, key: ConfigKey) -> None:
        self._inc = dict(self._configs[key])

    def _descend(self, first: bool) -> Generator[Proposal, None, None]:
        if first:
            key, _ = yield from self._evaluate(self._start)
            if key is not None:
                self._move(key)
                # every early comparison is against the start: measure it twice
                yield from self._confirm(key)
        order = self.space.order(self.objective)
        while True:
            moved = False
            for dim in order:
                if (yield from self._tune(dim)):
                    moved = True
            if not moved and not (yield from self._diagonals()):
                return

    def _line(self, dim: Dimension, config: Mapping[str, Any]) -> tuple[list[Any], int]:
        current = config.get(dim.intent)
        line = sorted(set(self.space.allowed(dim, config)) | {current}, key=_sort_key)
        return line, line.index(current)

    def _walk(self, dims: tuple[Dimension, ...], steps: tuple[int, ...]) -> Generator[Proposal, None, bool]:
        """Step the incumbent along one direction (one or more ordered dimensions at once) while
        each step beats it by more than the margin; up to MAX_FLAT steps that tie with it are
        crossed (a plateau, e.g. CUDA-graph batches that all stay below the running batch)."""
        lines = [self._line(d, self._inc) for d in dims]
        moved = False
        n, flat = 1, 0
        while True:
            positions = [i + n * s for (_, i), s in zip(lines, steps)]
            if not all(0 <= p < len(line) for p, (line, _) in zip(positions, lines)):
                return moved
            candidate = dict(self._inc)
            candidate.update({d.intent: line[p] for d, p, (line, _) in zip(dims, positions, lines)})
            key, score = yield from self._probe(candidate)
            if key is not None and (yield from self._wins(key)):
                self._move(key)
                moved, flat = True, 0
            elif score is not None and flat < MAX_FLAT and \
                    not better(self._score(config_key(self._inc)), score, 2 * self.margin):
                flat += 1
            else:
                return moved
            n += 1

    def _diagonals(self) -> Generator[Proposal, None, bool]:
        """Coupled dimensions (space.couplings) moved together, once no single one moves: e.g.
        more KV cache pays only with a CUDA-graph batch to match."""
        for a, b in self.space.couplings:
            dims = (self.space.dimension(a), self.space.dimension(b))
            if not all(self.space.active(d, self._inc) for d in dims):
                continue
            directions = [(1, 1), (-1, -1), (1, -1), (-1, 1)]
            self._rng.shuffle(directions)
            for steps in directions:
                if (yield from self._walk(dims, steps)):
                    return True
        return False

    def _tune(self, dim: Dimension) -> Generator[Proposal, None, bool]:
        inc = self._inc
        values = self.space.allowed(dim, inc)
        if not values:
            return False
        current = inc.get(dim.intent)
        if not dim.ordered:
            others = [v for v in values if v != current]
            self._rng.shuffle(others)
            best_key, best_score = None, None
            for value in others:
                key, score = yield from self._probe({**inc, dim.intent: value})
                if key is not None and better(score, best_score, 0.0):
                    best_key, best_score = key, score
            if best_key is not None and (yield from self._wins(best_key)):
                self._move(best_key)
                return True
            return False
        directions = [1, -1]
        self._rng.shuffle(directions)
        for step in directions:
            if (yield from self._walk((dim,), (step,))):
                return True
        return False

    def _runoff(self) -> Generator[Proposal, None, None]:
        """While re-measured configs stay within the noise margin of the best, measure the one
        with the fewest samples again (up to RUNOFF_SAMPLES each, within the budget): a near tie
        is decided by more samples, not by who drew the luckier one."""
        while True:
            config, value, _ = self.best()
            if config is None or not self._remeasured:
                return
            close = [k for k in self._remeasured if k not in self._infeasible and k in self._scores
                     and not better(value, self._mean(k), self.margin)]
            if len(close) < 2:
                return
            if all(len(self._scores[k]) >= 2 and max(self._scores[k]) == min(self._scores[k]) for k in close):
                return  # repeated measurements without spread: a real tie, more samples cannot split it
            key = min(close, key=lambda k: (len(self._scores[k]), -self._mean(k), self._first_seen(k)))
            if len(self._scores[key]) >= RUNOFF_SAMPLES:
                return
            if not self._budget_left(SETTLE_RESERVE):
                return
            yield dict(self._configs[key]), "remeasure", None

    def _remeasure_top(self) -> Generator[Proposal, None, None]:
        ranked = sorted((k for k in self._scores if k not in self._infeasible),
                        key=lambda k: (-self._mean(k), self._first_seen(k)))
        top = ranked[: self.remeasure]
        if len(top) < 2:
            return
        for key in top:
            if not self._budget_left(0):
                self.events.append("re-measuring stopped by the budget")
                return
            self._remeasured.add(key)
            yield dict(self._configs[key]), "remeasure", None
