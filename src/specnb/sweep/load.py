"""A sweep's load: how its points' requests arrive, one registered pydantic profile per mode.

A sweep file keeps its flat keys (``load = "rate"``, ``rates = [...]``, ``burstiness``, ...);
:attr:`specnb.sweep.spec.SweepSpec.load_profile` reads them into one of three profiles,
discriminated by ``load``:

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
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from specnb.ledger import LoadMode, LoadShape

__all__ = ["LoadProfile", "ConcurrencyLoad", "RateLoad", "ConversationLoad", "SweepLoad", "profile_of",
           "load_profile", "LOAD_KEYS", "MIN_ARRIVALS"]

MIN_ARRIVALS = 20  # an open-loop point sends at least this many requests
# a sweep's flat keys the profiles read
LOAD_KEYS = frozenset({"load", "concurrency", "rates", "burstiness", "max_in_flight", "arrival_seed", "history",
                       "think_time_s"})


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

    @abstractmethod
    def levels(self) -> list[float]:
        """The levels asked for, ascending."""

    @classmethod
    @abstractmethod
    def tag(cls, level: float) -> str:
        """A level in a file name."""

    def identity(self) -> dict[str, Any]:
        """Keys a resumed sweep must keep besides the flat ones every sweep records."""
        return {}

    @abstractmethod
    def shape(self, level: float, *, client_workers: int | None = None, history: str | None = None,
              conversations: int | None = None) -> LoadShape:
        """The load shape a point's ledger records."""

    @abstractmethod
    def point(self, level: float, n: int, *, history: str | None = None, prompt_offset: int = 0) -> Any:
        """The load driver's shape for one point of ``n`` requests (conversations, for a replay)."""


class ConcurrencyLoad(LoadProfile):
    """A closed loop at fixed concurrency: exactly N requests in flight."""

    mode: ClassVar[LoadMode] = LoadMode.CONCURRENCY
    load: Literal["concurrency"] = "concurrency"
    concurrency: list[int] = Field(default_factory=list, description="requests in flight")

    def levels(self) -> list[float]:
        return list(self.concurrency)

    @classmethod
    def tag(cls, level: float) -> str:
        return f"c{int(level):03d}"

    def shape(self, level: float, *, client_workers: int | None = None, history: str | None = None,
              conversations: int | None = None) -> LoadShape:
        return LoadShape(mode=self.mode.shape, concurrency=int(level), client_workers=client_workers)

    def point(self, level: float, n: int, *, history: str | None = None, prompt_offset: int = 0) -> Any:
        from specnb.engine.loadgen import ClosedLoop

        return ClosedLoop(int(level), n, prompt_offset)


class RateLoad(LoadProfile):
    """Open-loop arrivals at a request rate: gamma-distributed gaps (Poisson at burstiness 1), at
    most ``max_in_flight`` requests in flight."""

    mode: ClassVar[LoadMode] = LoadMode.RATE
    closed: ClassVar[bool] = False
    min_requests: ClassVar[int] = MIN_ARRIVALS  # percentiles of latency need arrivals, not only tokens
    records_concurrency: ClassVar[bool] = False
    load: Literal["rate"] = "rate"
    rates: list[float] = Field(default_factory=list, description="requests per second")
    burstiness: float = Field(1.0, gt=0)
    max_in_flight: int = Field(64, ge=1)
    arrival_seed: int = 0

    def levels(self) -> list[float]:
        return list(self.rates)

    @classmethod
    def tag(cls, level: float) -> str:
        return f"rate{level:g}"

    def shape(self, level: float, *, client_workers: int | None = None, history: str | None = None,
              conversations: int | None = None) -> LoadShape:
        return LoadShape(mode=self.mode.shape, rate_rps=level, burstiness=self.burstiness,
                         max_in_flight=self.max_in_flight, arrival_seed=self.arrival_seed)

    def point(self, level: float, n: int, *, history: str | None = None, prompt_offset: int = 0) -> Any:
        from specnb.engine.loadgen import OpenLoop

        return OpenLoop(level, n, self.burstiness, self.max_in_flight, self.arrival_seed)


class ConversationLoad(LoadProfile):
    """Users replaying conversations turn by turn, the whole history before each turn."""

    mode: ClassVar[LoadMode] = LoadMode.CONVERSATION
    load: Literal["conversation"] = "conversation"
    concurrency: list[int] = Field(default_factory=list, description="users")
    history: Literal["recorded", "model"] | None = None
    think_time_s: float = Field(0.0, ge=0)

    def levels(self) -> list[float]:
        return list(self.concurrency)

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

    def point(self, level: float, n: int, *, history: str | None = None, prompt_offset: int = 0) -> Any:
        from specnb.engine.loadgen import ConversationReplay

        return ConversationReplay(int(level), n, history or "recorded", self.think_time_s)


SweepLoad = Annotated[ConcurrencyLoad | RateLoad | ConversationLoad, Field(discriminator="load")]
PROFILES: dict[LoadMode, type[LoadProfile]] = {p.mode: p for p in (ConcurrencyLoad, RateLoad, ConversationLoad)}
_ADAPTER: TypeAdapter[Any] = TypeAdapter(SweepLoad)


def profile_of(load: LoadMode | str) -> type[LoadProfile]:
    """The profile class of a mode (``"concurrency"``, ``"rate"`` or ``"conversation"``)."""
    return PROFILES[LoadMode(load)]


def load_profile(fields: dict[str, Any]) -> LoadProfile:
    """A profile from a sweep's flat keys (``load`` and its mode's own keys; others ignored)."""
    cls = profile_of(fields.get("load", LoadMode.CONCURRENCY))
    own = {k: v for k, v in fields.items() if k in cls.model_fields}
    return _ADAPTER.validate_python({**own, "load": cls.mode.value})
