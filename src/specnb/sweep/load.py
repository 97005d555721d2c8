"""A sweep's load: how its points' requests arrive, one registered pydantic profile per mode.

A sweep file keeps its flat keys (``load = "rate"``, ``rates = [...]``, ``burstiness``, ...);
:attr:`specnb.sweep.spec.SweepSpec.load` is one of three profiles, folded from those keys
(:func:`fold`) and discriminated by ``load``:

- :class:`ConcurrencyLoad` (``"concurrency"``): a closed loop, its levels requests in flight;
- :class:`RateLoad` (``"rate"``): open-loop arrivals, its levels request rates, with the gaps'
  burstiness, the cap on requests in flight and the arrivals' seed;
- :class:`ConversationLoad` (``"conversation"``): users replaying conversations, its levels
  users, with the history before each turn and the pause between turns.

Each profile answers, for its own mode, what the sweep and its ledgers ask of a load: its
levels, how a level is named in a file, how a point is sized, the keys a resumed sweep must
keep, the load shape a ledger records and the load driver's shape for one point
(:mod:`specnb.engine.loadgen`, imported only when a point is driven). Nothing here compares
mode strings: a mode's behaviour is its profile's.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from specnb.errors import first_error
from specnb.ledger import LoadMode, LoadShape

__all__ = ["LoadProfile", "ConcurrencyLoad", "RateLoad", "ConversationLoad", "SweepLoad", "profile_of",
           "fold", "flat", "LOAD_KEYS", "MIN_ARRIVALS"]

MIN_ARRIVALS = 20  # an open-loop point sends at least this many requests


class LoadProfile(BaseModel):
    """What every load profile answers; a subclass per mode (registered in :data:`PROFILES`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: ClassVar[LoadMode]
    # a point keeps its requests in flight as a closed loop's slots (a conversation's users do too):
    # its steady window excludes the requests in flight at its ends
    closed: ClassVar[bool] = True
    min_requests: ClassVar[int] = 0  # requests a point sends at the least, whatever its work floor
    # a point's ledger keeps its level's requests in flight as its concurrency (an open loop's
    # cap is recorded as load.max_in_flight instead)
    records_concurrency: ClassVar[bool] = True
    # a point sends conversations (its workloads are conversation sets, its panel their turns),
    # not single prompts
    replays_conversations: ClassVar[bool] = False
    # its levels are a closed loop's requests in flight, each a single request: the adaptive
    # search, tune's rounds and the step anatomy work on such levels
    concurrency_levels: ClassVar[bool] = False
    one_client_process: ClassVar[bool] = False  # client_workers > 1 refused
    no_levels: ClassVar[str]  # the one line for a sweep that gives none of its levels

    @abstractmethod
    def levels(self) -> list[float]:
        """The levels asked for, ascending."""

    @classmethod
    @abstractmethod
    def tag(cls, level: float) -> str:
        """A level in a file name."""

    def in_flight(self, level: float) -> int:
        """The most requests a point at ``level`` has in flight (a closed loop's level itself)."""
        return int(level)

    def identity(self) -> dict[str, Any]:
        """Keys a resumed sweep must keep besides the flat ones every sweep records."""
        return {}

    @abstractmethod
    def shape(self, level: float, *, client_workers: int | None = None, history: str | None = None,
              conversations: int | None = None) -> LoadShape:
        """The load shape a point's ledger records."""

    @abstractmethod
    def point(self, level: float, n: int, *, history: str | None = None, prompt_offset: int = 0,
              client_workers: int = 1) -> Any:
        """The load driver's shape for one point of ``n`` requests (conversations, for a replay),
        which :func:`specnb.engine.clients.drive` sends."""


def _check_levels(v: list[Any], what: str) -> list[Any]:
    if any(not x > 0 for x in v):
        raise ValueError(f"{what} must be > 0 (requests per second)" if what == "request rates"
                         else f"{what} must be >= 1")
    if len(set(v)) != len(v):
        raise ValueError(f"{what} must be distinct")
    return sorted(v)


class _SlotLevels(LoadProfile):
    """A mode whose levels are ``concurrency``: requests in flight (a replay's users)."""

    concurrency: list[int] = Field(default_factory=list, description="requests in flight (a replay: users)")

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, v: list[int]) -> list[int]:
        return _check_levels(v, "concurrency levels")

    def levels(self) -> list[float]:
        return list(self.concurrency)


class ConcurrencyLoad(_SlotLevels):
    """A closed loop at fixed concurrency: exactly N requests in flight."""

    mode: ClassVar[LoadMode] = LoadMode.CONCURRENCY
    concurrency_levels: ClassVar[bool] = True
    no_levels: ClassVar[str] = "a closed-loop sweep needs concurrency levels (concurrency = [1, 2, 4, 8])"
    load: Literal["concurrency"] = "concurrency"

    @classmethod
    def tag(cls, level: float) -> str:
        return f"c{int(level):03d}"

    def shape(self, level: float, *, client_workers: int | None = None, history: str | None = None,
              conversations: int | None = None) -> LoadShape:
        return LoadShape(mode=self.mode.shape, concurrency=int(level), client_workers=client_workers)

    def point(self, level: float, n: int, *, history: str | None = None, prompt_offset: int = 0,
              client_workers: int = 1) -> Any:
        from specnb.engine.loadgen import ClosedLoop

        return ClosedLoop(int(level), n, prompt_offset, client_workers)


class RateLoad(LoadProfile):
    """Open-loop arrivals at a request rate: gamma-distributed gaps (Poisson at burstiness 1), at
    most ``max_in_flight`` requests in flight."""

    mode: ClassVar[LoadMode] = LoadMode.RATE
    closed: ClassVar[bool] = False
    min_requests: ClassVar[int] = MIN_ARRIVALS  # percentiles of latency need arrivals, not only tokens
    records_concurrency: ClassVar[bool] = False
    no_levels: ClassVar[str] = "an open-loop sweep (load = 'rate') needs request rates (rates = [0.5, 1, 2])"
    load: Literal["rate"] = "rate"
    rates: list[float] = Field(default_factory=list, description="requests per second")
    burstiness: float = Field(1.0, gt=0)
    max_in_flight: int = Field(64, ge=1)
    arrival_seed: int = 0

    @field_validator("rates")
    @classmethod
    def _levels(cls, v: list[float]) -> list[float]:
        return [float(r) for r in _check_levels(v, "request rates")]

    def in_flight(self, level: float) -> int:
        return self.max_in_flight  # the cap: arrivals do not wait for answers

    def levels(self) -> list[float]:
        return list(self.rates)

    @classmethod
    def tag(cls, level: float) -> str:
        return f"rate{level:g}"

    def shape(self, level: float, *, client_workers: int | None = None, history: str | None = None,
              conversations: int | None = None) -> LoadShape:
        return LoadShape(mode=self.mode.shape, rate_rps=level, burstiness=self.burstiness,
                         max_in_flight=self.max_in_flight, arrival_seed=self.arrival_seed)

    def point(self, level: float, n: int, *, history: str | None = None, prompt_offset: int = 0,
              client_workers: int = 1) -> Any:
        from specnb.engine.loadgen import OpenLoop

        return OpenLoop(level, n, self.burstiness, self.max_in_flight, self.arrival_seed)


class ConversationLoad(_SlotLevels):
    """Users replaying conversations turn by turn, the whole history before each turn."""

    mode: ClassVar[LoadMode] = LoadMode.CONVERSATION
    replays_conversations: ClassVar[bool] = True
    one_client_process: ClassVar[bool] = True
    no_levels: ClassVar[str] = ("a conversation sweep (load = 'conversation') needs users: concurrency = [1, 4] "
                                "(each level is that many users)")
    load: Literal["conversation"] = "conversation"
    history: Literal["recorded", "model"] | None = None
    think_time_s: float = Field(0.0, ge=0)

    @classmethod
    def tag(cls, level: float) -> str:
        return f"u{int(level):03d}"

    def identity(self) -> dict[str, Any]:
        # only here: sweeps from before these fields resume
        return {"history": self.history, "think_time_s": self.think_time_s}

    def shape(self, level: float, *, client_workers: int | None = None, history: str | None = None,
              conversations: int | None = None) -> LoadShape:
        return LoadShape(mode=self.mode.shape, concurrency=int(level), users=int(level), history=history,
                         think_time_s=self.think_time_s, conversations=conversations)

    def point(self, level: float, n: int, *, history: str | None = None, prompt_offset: int = 0,
              client_workers: int = 1) -> Any:
        from specnb.engine.loadgen import ConversationReplay

        return ConversationReplay(int(level), n, history or "recorded", self.think_time_s)


# every mode's profile: a new mode is a profile class here, its value in LoadMode and its driver
# in specnb.engine.loadgen (tests/unit/sweep/test_new_load_mode.py adds one that way)
MODES: tuple[type[LoadProfile], ...] = (ConcurrencyLoad, RateLoad, ConversationLoad)
SweepLoad = Annotated[Union[MODES], Field(discriminator="load")]  # noqa: UP007 - a union built from the tuple
PROFILES: dict[LoadMode, type[LoadProfile]] = {p.mode: p for p in MODES}
LOAD_KEYS = frozenset(k for p in MODES for k in p.model_fields)  # a sweep's flat keys the profiles read


def profile_of(load: LoadProfile | LoadMode | str) -> type[LoadProfile]:
    """The profile class of a mode (``"concurrency"``, ``"rate"`` or ``"conversation"``), or of a profile."""
    return type(load) if isinstance(load, LoadProfile) else PROFILES[LoadMode(load)]


# a flat key given to a mode that has no use for it: the one line that says which mode does
# (the open loop's own settings are ignored elsewhere, as a study passes them to every mode)
_NOT_MINE = {
    (LoadMode.CONCURRENCY, "rates"): "rates are open-loop levels: set load = 'rate' to use them",
    (LoadMode.RATE, "concurrency"): "load = 'rate' sends at request rates: give rates, not concurrency levels",
    (LoadMode.CONVERSATION, "rates"): "load = 'conversation' sends whole conversations per user: give concurrency "
                                      "levels (users), not rates",
}
_CONVERSATION_ONLY = "history and think_time_s are conversation settings: set load = 'conversation'"
# what a sweep file leaves out, in the order a run's sweep.json writes the keys
_EMPTY: dict[str, Any] = {"concurrency": [], "history": None, "think_time_s": 0.0, "rates": [], "burstiness": 1.0,
                          "max_in_flight": 64, "arrival_seed": 0}


def _validated(cls: type[LoadProfile], data: dict[str, Any]) -> LoadProfile:
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise ValueError(first_error(exc)) from None  # "<flat key>: <message> (got <value>)"


def fold(fields: dict[str, Any]) -> LoadProfile:
    """A sweep's flat keys (``load`` and the levels and settings beside it) read into its mode's
    profile; raises ValueError with one line naming the flat key (a key of another mode, a bad
    value, an unknown mode). A key of another mode is checked as that mode checks it, then
    refused where it would change what was asked (levels, a conversation's settings), else
    ignored (a study passes the open loop's settings to every mode)."""
    mode = fields.get("load", LoadMode.CONCURRENCY)
    try:
        cls = profile_of(mode)
    except ValueError:
        names = [m.value for m in PROFILES]
        raise ValueError(f"load: Input should be {', '.join(map(repr, names[:-1]))} or {names[-1]!r} "
                         f"(got {mode!r})") from None
    order = [*_EMPTY, *sorted(k for k in fields if k not in _EMPTY and k != "load")]  # one answer whatever the hash seed
    given = {k: fields[k] for k in order if k in fields and fields[k] != _EMPTY.get(k, object())}
    for key, value in given.items():
        if key not in cls.model_fields:
            _validated(next(p for p in MODES if key in p.model_fields), {key: value})
    # (a sweep with none of its own levels is told that first, by the sweep's checks)
    for key in given if any(k in cls.model_fields for k in given) else ():
        if (cls.mode, key) in _NOT_MINE:
            raise ValueError(_NOT_MINE[cls.mode, key])
        if key in ("history", "think_time_s") and key not in cls.model_fields:
            raise ValueError(_CONVERSATION_ONLY)
    return _validated(cls, {**{k: v for k, v in fields.items() if k in cls.model_fields}, "load": cls.mode.value})


def flat(profile: LoadProfile) -> dict[str, Any]:
    """A profile as a sweep file's flat keys, every one of them (the others at their defaults):
    what a run's ``sweep.json`` records, as before the profiles."""
    return {"load": profile.mode.value, **_EMPTY, **profile.model_dump(exclude={"load"})}
