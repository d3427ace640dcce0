"""What a job costs (:class:`Work`) and how long it takes on this machine (:class:`WorkModel`).

Each job declares its :class:`Work`: network forwards, the megapixels its tiles output, the
megapixels decoded and encoded. Seconds are a per-item cost (the priors below) times a factor
measured on this machine at start-up and learnt from the jobs that completed, times the machine's
current load, a moving average over the last jobs of all kinds. The job pool
(:mod:`sr.service.jobs`) predicts with it: a job that cannot finish within the time limit is refused
(the app's 422), one that would start too late to finish in time too (503), and ``Retry-After`` is
the predicted time until a slot frees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Rough per-item costs (asa-base x2 on 2 CPU cores: ~0.8 output MP/s idle; a 1-row tile's forward
# took 5-30 ms depending on the load). They only set the units: the factors measured at start-up and
# learnt from jobs (WorkModel) scale them to the model served and the machine's load. Measured with
# the factors, 1x100000 and 1x200000 strips (202 and 404 forwards) were predicted 1.24 and 2.48 s
# and took 1.02 and 1.93 s; 384x384 was predicted 0.82 s and took 0.87 s.
PRIOR_SECONDS_PER_JOB = 0.05
PRIOR_SECONDS_PER_FORWARD = 0.03
PRIOR_SECONDS_PER_MP = 1.25       # per megapixel the network outputs, tile overlaps included
PRIOR_SECONDS_PER_IO_MP = 0.1     # per megapixel decoded or encoded
EMA_WEIGHT = 0.2
# The load: how much slower than calibrated the network ran in the last jobs, whatever their size,
# a moving average of seconds per unit of network work. It moves fast (a third of the way per job,
# in log space) because the machine's load does: with two trainings beside it a job ran 2-3x slower
# than at start-up, while the per-forward and per-megapixel factors, which only a job dominated by
# their part could teach, kept the start-up speed. Thin strips and 67-MP images were admitted on
# it and ran to a 504 (a soak: 18 of 298 requests).
LOAD_WEIGHT = 1 / 3
LOAD_RANGE = (0.05, 20.0)
# The load is a ratio measured on the jobs that ran, and it does not carry to a far bigger job: a
# 64x64 upload ran at 0.7x its predicted network time, a 1536^2 one at 1.04x (asa-base x2, one
# thread, idle), so a stream of small jobs talked the load down to 0.7 and a 67-MP job was predicted
# at 22 s, admitted under a 30-s limit and ran into a 504 (a soak: 21 of 25). A job more
# than EXTRAPOLATE_ABOVE times the network work of the biggest recent teacher is predicted at no
# less than the start-up speed, with a margin; the teacher's size fades by TAUGHT_DECAY per job.
EXTRAPOLATE_ABOVE = 4.0
EXTRAPOLATION_MARGIN = 1.25
TAUGHT_DECAY = 0.98
FACTOR_RANGE = (0.02, 50.0)       # one odd job (a swapped-out page, a cold cache) moves it only so far


@dataclass(frozen=True)
class Work:
    """What a job costs, in the units :class:`WorkModel` counts."""

    forwards: int = 0         # network forwards: tiles x passes, x8 with tta
    tiled_mp: float = 0.0     # megapixels the network outputs, over every tile as run (overlaps included)
    io_mp: float = 0.0        # megapixels decoded and encoded


class WorkModel:
    """Seconds a job takes: per-item costs (the priors), each part times a factor measured here, the
    network's parts also times its current load.

    Three parts, because they do not move together: the fixed cost of a job (per job, per decoded or
    encoded pixel), the network's cost per forward (what a thin image's many tiles cost) and its
    cost per megapixel. The forward and megapixel factors are measured at start-up
    (:meth:`calibrate`: a square image, then a strip of thin tiles) and give the network's shape.

    Each completed job that reports its network seconds (``network_s``, the engine's stage) then
    teaches two averages: the fixed factor from the rest of its time, and the ``load`` from the
    network seconds per unit of predicted network work. Every job moves the load, so the small jobs
    that make most of the traffic keep the prediction of a rare big one current when other
    processes slow the machine down. A job's time split by stage, not by guess: a total alone cannot
    tell the parts apart, and hundreds of small jobs (mostly fixed cost) talked the megapixel factor
    down until a 67-megapixel job looked like 30 s (a soak: admitted, it ran to the limit).
    A job without stage times teaches the factor of the part that dominated its prediction.

    A job stopped at the time limit still says something: it ran ``elapsed`` seconds and was not
    done. When that is more than its prediction, :meth:`overran` moves the load towards it.

    The load is only trusted for jobs of the size that taught it (:meth:`load_for`): a job far
    bigger than any recent one is predicted at no less than the start-up speed, times a margin.
    """

    def __init__(self) -> None:
        self.fixed_factor = 1.0
        self.forward_factor = 1.0
        self.mp_factor = 1.0
        self.load = 1.0
        self.taught = 0.0  # network seconds (calibrated) of the biggest recent job that taught the load
        self._seen = 0

    @staticmethod
    def parts(work: Work) -> tuple[float, float, float]:
        """(fixed, per-forward, per-megapixel) seconds at the priors' rates."""
        return (PRIOR_SECONDS_PER_JOB + PRIOR_SECONDS_PER_IO_MP * work.io_mp,
                PRIOR_SECONDS_PER_FORWARD * work.forwards, PRIOR_SECONDS_PER_MP * work.tiled_mp)

    def _network(self, work: Work) -> float:
        """Network seconds at the calibrated speed (no load)."""
        _, forwards, per_mp = self.parts(work)
        return self.forward_factor * forwards + self.mp_factor * per_mp

    def load_for(self, network: float) -> float:
        """The load to predict ``network`` calibrated seconds of network work with: the learnt one
        within EXTRAPOLATE_ABOVE of the jobs that taught it, else at least 1 (the start-up speed),
        times EXTRAPOLATION_MARGIN. Before any measurement the priors stand as they are."""
        if self.taught > 0 and network > EXTRAPOLATE_ABOVE * self.taught:
            return max(self.load, 1.0) * EXTRAPOLATION_MARGIN
        return self.load

    def predict(self, work: Work) -> float:
        network = self._network(work)
        return self.fixed_factor * self.parts(work)[0] + self.load_for(network) * network

    def _taught_by(self, network: float) -> None:
        self.taught = max(self.taught * TAUGHT_DECAY, network)

    def calibrate(self, square: tuple[Work, float], strip: tuple[Work, float]) -> None:
        """Forward and megapixel factors from two timed network runs (no fixed cost: no HTTP, no
        decode): ``square`` mostly megapixels, ``strip`` mostly forwards. The load is the unit then."""
        (_, f1, m1), t1 = self.parts(square[0]), square[1]
        (_, f2, m2), t2 = self.parts(strip[0]), strip[1]
        det = m1 * f2 - m2 * f1
        low, high = FACTOR_RANGE
        if abs(det) < 1e-12:
            return
        mp = (t1 * f2 - t2 * f1) / det  # m1*mp + f1*fw = t1; m2*mp + f2*fw = t2
        fw = (m1 * t2 - m2 * t1) / det
        if mp <= 0 or fw <= 0:  # timing noise beyond what two runs can separate: one shared factor
            mp = fw = (t1 + t2) / (f1 + m1 + f2 + m2)
        self.mp_factor, self.forward_factor = min(max(mp, low), high), min(max(fw, low), high)
        self.fixed_factor = self.mp_factor  # until jobs teach it: the same machine speed
        self.load = 1.0
        self.taught = max(self._network(square[0]), self._network(strip[0]))

    def learn(self, work: Work, elapsed: float, network_s: float | None = None,
              weight: float = EMA_WEIGHT) -> None:
        """Move the averages towards what this job measured, in log space (a job twice as slow and
        one twice as fast cancel out); the first jobs are averaged (weight 1/n: the priors and the
        start-up's timings are left quickly), later ones a moving average.

        With ``network_s`` (the job's network seconds): the fixed factor learns from the rest, the
        load from the network seconds. Without: the factor of the part that dominated.
        """
        self._seen += 1
        first = 1 / self._seen
        fixed, _, _ = self.parts(work)
        network = self._network(work)
        if network_s is not None and network > 0:
            rest = max(elapsed - network_s, 0.0)
            self.fixed_factor = _moved(self.fixed_factor, rest / fixed, max(weight, first), FACTOR_RANGE)
            self.load = _moved(self.load, network_s / network, max(LOAD_WEIGHT, first), LOAD_RANGE)
            self._taught_by(network)
            return
        predicted = self.predict(work)
        name = self._dominant(work)
        setattr(self, name, _moved(getattr(self, name), getattr(self, name) * elapsed / predicted,
                                   max(weight, first), FACTOR_RANGE))

    def overran(self, work: Work, elapsed: float) -> None:
        """A job stopped after ``elapsed`` seconds, unfinished: it takes at least that long. The
        load moves towards what would explain it, as a completed job's would; not a factor, which
        no later job could bring down again once every job of that size got a 422."""
        predicted = self.predict(work)
        network = self._network(work)
        if elapsed <= predicted or network <= 0:
            return
        needed = (elapsed - self.fixed_factor * self.parts(work)[0]) / network
        self.load = _moved(self.load, needed, LOAD_WEIGHT, LOAD_RANGE)  # a lower bound: not a teacher

    def _dominant(self, work: Work) -> str:
        fixed, forwards, per_mp = self.parts(work)
        load = self.load_for(self._network(work))
        shares = {"fixed_factor": self.fixed_factor * fixed,
                  "forward_factor": load * self.forward_factor * forwards,
                  "mp_factor": load * self.mp_factor * per_mp}
        return max(shares, key=shares.__getitem__)


def _moved(value: float, target: float, weight: float, bounds: tuple[float, float]) -> float:
    """``value`` moved ``weight`` of the way to ``target`` in log space, within ``bounds``."""
    low, high = bounds
    target = min(max(target, low / 10), high * 10)
    return min(max(value * math.exp(weight * math.log(target / value)), low), high)
