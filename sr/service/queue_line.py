"""The line of refused clients (:class:`Line`): each one's place, and the slot held for it.

A client refused because every slot of the job pool is taken is told to come back when the slot for
its place frees (Retry-After), and that slot is held for it until it comes back or its place lapses.
Without it, the client whose job just ended (or any newcomer) took each freed slot, and 8 retrying
clients waited 3-15x their Retry-After. Places are not tied to a connection: the first request from
the place's address at or after its time takes it (clients that obey Retry-After come when told).
"""

from __future__ import annotations

from dataclasses import dataclass

# A refused client's place is held until this long after the time it was told to come back (a
# retry also uploads and has its header read before it reaches the pool), or a quarter of its
# wait, whichever is longer.
RESERVATION_GRACE_S = 3.0
MAX_RESERVATIONS_PER_SLOT = 4  # the line is bounded: past it, a refusal holds no place


@dataclass
class Place:
    """A refused client's place in line: the slot it was told to come back for is held for it."""

    due: float      # the pool's clock() it was told to come back at (now + Retry-After)
    expires: float  # when its place lapses: a client that never came back holds nothing
    client: str     # its address: only a request from there takes the place


class Line:
    """The places of refused clients, in the order their slots free; at most ``max_places``.
    Not thread-safe: the job pool calls it under its lock."""

    def __init__(self, max_places: int) -> None:
        self.max_places = max_places
        self._places: list[Place] = []

    def find(self, now: float, client: str) -> tuple[int | None, int]:
        """(the place ``client`` comes to claim, or None; how many places are ahead of this request),
        lapsed places dropped first."""
        self._places = [p for p in self._places if p.expires > now]
        # Not before its time: the next request of a client whose job just ended comes at once, and
        # with even 0.5 s of leeway it took the place of one still waiting (a 4.3x wait in a test).
        claim = next((i for i, p in enumerate(self._places) if p.due <= now and p.client == client), None)
        return claim, (claim if claim is not None else self._place_for(client))

    def take(self, claim: int) -> None:
        """The claimed place is used: its client's job is admitted."""
        del self._places[claim]

    def hold(self, claim: int | None, ahead: int, now: float, retry: int, client: str) -> None:
        """Hold a place for ``client``, told to come back in ``retry`` seconds: the one it claimed
        (it came back before its slot freed: it keeps its place), else a new one after ``ahead``
        places, while the line has room."""
        held = Place(now + retry, now + retry + max(RESERVATION_GRACE_S, retry / 4), client)
        if claim is not None:
            self._places[claim] = held
        elif len(self._places) < self.max_places:
            self._places.insert(ahead, held)

    def _place_for(self, client: str) -> int:
        """Where a new place of ``client`` goes in line: after every address's places up to as many as
        this one holds already, so addresses take turns in line too. One address's third refusal
        goes behind another's first (whose promised time stays true); from one address alone, last."""
        rank = sum(1 for p in self._places if p.client == client)
        seen: dict[str, int] = {}
        at = 0
        for i, p in enumerate(self._places):
            seen[p.client] = seen.get(p.client, 0) + 1
            if seen[p.client] <= rank + 1:
                at = i + 1
        return at
