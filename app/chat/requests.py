"""What the race window asks the chat service for, and the progress it hears back.

Requests are frozen values handed to :mod:`app.chat.measure`, which queues them as jobs
on the service; progress comes back as the events below (tied to their job by
``job_id``) and the result as the job's :class:`~app.chat.events.JobDone` value, a
failure as :class:`~app.chat.events.JobFailed`: never as an exception crossing threads.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.chat.history_source import PastConversation
from app.engine.chat import ChatMessage
from app.engine.measure.race import RacePair
from app.options import SamplingParams, SpeculationConfig


@dataclass(frozen=True, slots=True)
class PromptSpec:
    """What to race. With ``messages`` the conversation goes through the model's chat
    template; otherwise ``text`` is a plain completion prompt for base models and a user
    message for models with a chat template (``stop``: stop strings for the plain form).
    ``name``: a label for the prompt ("rename-variable", "this conversation")."""

    text: str
    messages: tuple[ChatMessage, ...] = ()
    stop: tuple[str, ...] = ()
    name: str = ""


@dataclass(frozen=True, slots=True)
class RaceRequest:
    """Race ``prompt`` off vs on. ``warm_up``: first run both modes for two untimed
    tokens (the first generation of a session maps weights in and builds graphs, which
    would slow down whichever lane runs first). ``pairs``: off/on pairs timed for the
    speedup's median and spread (:func:`app.engine.measure.race.run_race`); five, so
    that a verdict (every kept pair on one side) is rarely noise: with three, two races
    of the same prompt on a noisy 2-core machine gave "1.07× as fast (1.05–1.08)" and
    then "no verdict (0.87–1.14)". Value: a :class:`~app.chat.recording.RaceRecording`."""

    prompt: PromptSpec
    sampling: SamplingParams
    speculation: SpeculationConfig
    warm_up: bool = True
    pairs: int = 5


@dataclass(frozen=True, slots=True)
class RaceProgressed:
    """A run of the race advanced: ``lane`` ("warm-up", "off" or "on") has produced
    ``tokens`` of at most ``max_tokens``; after the first pair, ``lane`` is "pairs" and
    ``tokens`` counts the pairs timed of ``max_tokens``, with ``pair`` the one just timed.
    Emitted at most every 0.1 s."""

    job_id: int
    lane: str
    tokens: int
    max_tokens: int
    pair: RacePair | None = None


@dataclass(frozen=True, slots=True)
class SweepRequest:
    """Run ``prompt`` with speculation off and at every k of ``ks`` (``repeat`` runs each,
    after one untimed warm-up run per configuration when ``warm_up``). Value: a
    :class:`~app.engine.measure.sweep.KSweepResult` (partial when cancelled)."""

    prompt: PromptSpec
    sampling: SamplingParams
    speculation: SpeculationConfig
    ks: tuple[int, ...]
    repeat: int = 1
    warm_up: bool = True


@dataclass(frozen=True, slots=True)
class SweepProgressed:
    """``done`` of ``total`` timed runs finished; the latest was ``label`` at ``decode_tps``."""

    job_id: int
    done: int
    total: int
    label: str
    decode_tps: float | None


@dataclass(frozen=True, slots=True)
class LookupRequest:
    """Estimate prompt lookup's n-gram hit rate over ``conversations`` (cancelling is
    checked between conversations). Value: a
    :class:`~app.engine.measure.lookup.LookupEstimate`."""

    conversations: tuple[PastConversation, ...]
    ngram_sizes: tuple[int, ...] = (2, 3, 4, 5)
