"""The search's state and its ask/tell surface: the trials asked and told, every configuration's
measurements, what ran out of memory (the mem_fraction_static ceilings), and the budget left.
The algorithm that fills it is sglang_deploy/tuning/search.py (:class:`Search`); the settle step
sglang_deploy/tuning/search_settle.py.

Time comes only from the trials' figures (``figures["trial_s"]``: the trial's wall seconds) or
an injected clock. Pure: no I/O.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Mapping

from sglang_deploy.tuning.dimensions import ConfigKey, Space, config_key
from sglang_deploy.tuning.objective import NOISE_MARGIN, STATUSES, check_name
from sglang_deploy.tuning.settle import TOLERANCE, Decision
from sglang_deploy.tuning.space import LAYOUT

REMEASURE = 3


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


class SearchState:
    """What the search knows; :class:`Search` (sglang_deploy/tuning/search.py) decides what to ask."""

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

    def _run(self) -> Generator[Proposal, None, None]:
        """The algorithm (sglang_deploy/tuning/search.py Search._run): yields proposals, reads
        results from the state."""
        raise NotImplementedError
