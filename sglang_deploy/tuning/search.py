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
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Mapping

from sglang_deploy.tuning.objective import NOISE_MARGIN, STATUSES, abandon_threshold, better, check_name
from sglang_deploy.tuning.settle import (TOLERANCE, Decision, Judgement, Measured, gain_of, judge, pooled_sd,
                                          spread_of)
from sglang_deploy.tuning.dimensions import ConfigKey, Dimension, Space, _sort_key, config_key
from sglang_deploy.tuning.space import LAYOUT

REMEASURE = 3
SETTLE_RESERVE = 4  # trials kept back for the settle step (two counterfactuals measured twice)
RUNOFF_SAMPLES = 5  # measurements each near-tied finalist may get
MAX_FLAT = 2  # tying steps a line search crosses before it gives up
MAX_RESTARTS = 3  # descents from near misses after the main one
MAX_ROUNDS = 3  # explore / re-measure rounds while re-measuring moves the best


@dataclass(frozen=True)
class Trial:
    number: int
    config: dict[str, Any]
    abandon_below: float | None
    purpose: str  # explore | remeasure


@dataclass(frozen=True)
class TrialResult:
    status: str  # ok | infeasible | abandoned
    objective: float | None = None
    cause: str | None = None
    oom: bool = False
    figures: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {self.status!r}")
        if self.status == "ok" and self.objective is None:
            raise ValueError("an ok trial needs its objective")


#: Settings that take GPU memory out of the same static pool as the KV cache: an out-of-memory
#: trial caps mem_fraction_static only for configs using at least as much of each, in the same layout
#: (another TP holds another share of the weights on each GPU).
MEMORY_HUNGRY = ("cuda_graph_max_bs_decode", "chunked_prefill_size")


def _at_least(value: Any, other: Any) -> bool:
    if value is None or other is None:
        return value is other
    return bool(value >= other)


class _OutOfBudget(Exception):
    pass


Proposal = tuple[dict[str, Any], str, "float | None"]


@dataclass(frozen=True)
class Outcome:
    """What the search chose: the configuration (None when nothing feasible was measured), its
    mean objective (None when that configuration was not measured as a whole), the trials used,
    the best measured configuration it came from, and per setting off its prior why it moved or
    was kept."""

    config: dict[str, Any] | None
    objective: float | None
    trials: int
    proposed: dict[str, Any] | None = None
    decisions: dict[str, Decision] = field(default_factory=dict)


class Search:
    def __init__(self, space: Space, start: Mapping[str, Any], objective: str, budget_trials: int | None = None,
                 budget_s: float | None = None, seed: int = 0, *, margin: float = NOISE_MARGIN,
                 remeasure: int = REMEASURE, clock: Callable[[], float] | None = None,
                 tolerance: float = TOLERANCE) -> None:
        check_name(objective)
        if budget_trials is not None and budget_trials < 1:
            raise ValueError("budget_trials must be at least 1")
        if budget_s is not None and budget_s <= 0:
            raise ValueError("budget_s must be positive")
        self.space = space
        self.objective = objective
        self.budget_trials = budget_trials
        self.budget_s = budget_s
        self.margin = margin
        self.remeasure = remeasure
        self.tolerance = tolerance
        self.history: list[tuple[Trial, TrialResult]] = []
        self.events: list[str] = []  # what changed the search's course, for the record
        self._rng = random.Random(seed)
        self._clock = clock
        self._t0 = clock() if clock is not None else None
        self._start_raw = dict(start)
        self._start = self._project(start)
        self._scores: dict[ConfigKey, list[float]] = {}
        self._figures: dict[ConfigKey, list[dict[str, Any]]] = {}
        self._settled: Outcome | None = None
        self._configs: dict[ConfigKey, dict[str, Any]] = {}
        self._infeasible: dict[ConfigKey, str] = {}
        self._abandoned: set[ConfigKey] = set()
        self._proposed: set[ConfigKey] = set()
        self._remeasured: set[ConfigKey] = set()
        self._near: list[ConfigKey] = []  # explored configs within the noise margin of the incumbent
        self.mem_ceiling: float | None = None  # the lowest mem_fraction_static that ran out of memory
        self._ooms: list[tuple[float, dict[str, Any]]] = []
        self._default_mem_oom = False
        self._inc: dict[str, Any] = dict(self._start)
        self._pending: Trial | None = None
        self._done = False
        self._gen = self._run()

    # ---- public -------------------------------------------------------------------

    def ask(self) -> Trial | None:
        """The next trial to run, or None when the search is over."""
        if self._pending is not None:
            raise RuntimeError(f"tell() the result of trial {self._pending.number} before asking for another")
        if self._done:
            return None
        try:
            config, purpose, abandon = next(self._gen)
        except StopIteration:
            self._done = True
            return None
        self._pending = Trial(len(self.history) + 1, dict(config), abandon, purpose)
        return self._pending

    def tell(self, trial: Trial, result: TrialResult) -> None:
        if self._pending is None or trial.number != self._pending.number:
            raise RuntimeError(f"trial {trial.number} is not the one outstanding")
        self._pending = None
        self.history.append((trial, result))
        key = config_key(trial.config)
        self._configs[key] = trial.config
        if result.status == "ok" and result.objective is not None:  # an ok result always has one (__post_init__)
            self._scores.setdefault(key, []).append(float(result.objective))
            self._figures.setdefault(key, []).append(dict(result.figures))
        elif result.status == "abandoned":
            self._abandoned.add(key)
        else:
            self._infeasible[key] = result.cause or "infeasible"
            if result.oom:
                self._lower_ceiling(trial)

    def best(self) -> tuple[dict[str, Any] | None, float | None, int]:
        """The chosen config, its mean objective and the trials used (None, None, n when nothing
        feasible was measured). Once re-measuring started, only re-measured configs compete."""
        pool = [k for k in self._scores if k not in self._infeasible]
        if self._remeasured:
            pool = [k for k in pool if k in self._remeasured] or pool
        if not pool:
            return None, None, len(self.history)
        key = max(pool, key=lambda k: (self._mean(k), -self._first_seen(k)))
        return dict(self._configs[key]), self._mean(key), len(self.history)

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

    @property
    def done(self) -> bool:
        return self._done

    @property
    def elapsed_s(self) -> float:
        if self._clock is not None and self._t0 is not None:  # _t0 is the clock's first reading
            return self._clock() - self._t0
        return sum(float(r.figures.get("trial_s") or 0.0) for _, r in self.history)

    def measurements(self, config: Mapping[str, Any]) -> list[float]:
        return list(self._scores.get(config_key(config), ()))

    # ---- state --------------------------------------------------------------------

    def _project(self, start: Mapping[str, Any]) -> dict[str, Any]:
        config = {n: start.get(n) for n in self.space.intents}
        for dim in self.space.dimensions:
            if len(dim.values) == 1:
                config[dim.intent] = dim.values[0]  # pinned by the space
        return self.space.normalize(config, self._start_raw)

    def _mean(self, key: ConfigKey) -> float:
        values = self._scores[key]
        return sum(values) / len(values)

    def _score(self, key: ConfigKey) -> float | None:
        if key in self._infeasible or key not in self._scores:
            return None
        return self._mean(key)

    def _first_seen(self, key: ConfigKey) -> int:
        for i, (trial, _) in enumerate(self.history):
            if config_key(trial.config) == key:
                return i
        return len(self.history)

    def _lower_ceiling(self, trial: Trial) -> None:
        value = trial.config.get("mem_fraction_static")
        if value is None:
            self._default_mem_oom = True
            self.events.append(f"trial {trial.number} ran out of memory at SGLang's default mem_fraction_static: "
                               "later trials set it explicitly")
            return
        self._ooms.append((value, {n: trial.config.get(n) for n in (*MEMORY_HUNGRY, *LAYOUT) if n in trial.config}))
        if self.mem_ceiling is None or value < self.mem_ceiling:
            self.mem_ceiling = value
        shape = ", ".join(f"{n}={trial.config.get(n)}" for n in MEMORY_HUNGRY if n in trial.config)
        self.events.append(f"trial {trial.number} ran out of memory at mem_fraction_static={value:g}: later "
                           f"trials stay below it" + (f" unless they use less than {shape}" if shape else ""))

    def ceiling_for(self, config: Mapping[str, Any]) -> float | None:
        """The mem_fraction_static this config must stay below: the lowest that ran out of memory
        in a trial using no more memory elsewhere (the same or smaller CUDA-graph batch and prefill
        chunk; None = SGLang's default, comparable only to itself)."""
        limits = [mem for mem, other in self._ooms
                  if all(config.get(n) == v if n in LAYOUT else _at_least(config.get(n), v) for n, v in other.items())]
        return min(limits) if limits else None

    def _repair(self, config: dict[str, Any]) -> dict[str, Any] | None:
        """The config with mem_fraction_static moved below what ran out of memory (None when no
        candidate is left)."""
        value = config.get("mem_fraction_static")
        ceiling = self.ceiling_for(config)
        if value is None and not self._default_mem_oom:
            return config
        if value is not None and (ceiling is None or value < ceiling):
            return config
        candidates = (self.space.dimension("mem_fraction_static").values
                      if "mem_fraction_static" in self.space else ())
        below = [v for v in candidates if v is not None and (ceiling is None or v < ceiling)]
        if not below:
            return None
        out = dict(config)
        # the highest candidate below the ceiling; after an OOM at SGLang's default, the lowest
        out["mem_fraction_static"] = max(below) if value is not None else min(below)
        return out

    def _budget_left(self, keep: int) -> bool:
        """Whether another trial fits, leaving ``keep`` trials for the steps after this one."""
        n = len(self.history)
        k = keep
        if self.budget_trials is not None:
            keep = min(k, self.budget_trials // 3)
            if n >= self.budget_trials - keep:
                return False
        if self.budget_s is not None:
            # the next trial and the reserved re-measures, at the mean trial time so far
            spent = self.elapsed_s
            mean = spent / n if n else 0.0
            if spent >= self.budget_s or spent + (1 + k) * mean > self.budget_s:
                return False
        return True

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
                    reason += f"; set to {value} by the settings that moved (SGLang derives it)"
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
