"""Speculative-decoding counters from a server's Prometheus ``/metrics`` text.

llama-server (``llamacpp:`` prefix) and vLLM (``vllm:``) export the same four counters;
SGLang's ``sglang:`` names are read the same way where it exports them:

* ``<prefix>:spec_decode_num_drafts_total``: draft rounds (verification passes that
  carried a draft);
* ``<prefix>:spec_decode_num_draft_tokens_total``: draft tokens proposed;
* ``<prefix>:spec_decode_num_accepted_tokens_total``: draft tokens accepted;
* ``<prefix>:spec_decode_num_accepted_tokens_per_pos_total{position="i"}``: accepted
  tokens at draft position i (0-based). llama-server exports one series per position up
  to its maximum draft length, so their number is k there.

The text is parsed with ``prometheus_client.parser`` (the Prometheus project's own
client). Samples that differ only in other labels (vLLM's ``model_name``, ``engine``) are
summed.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

#: metric name (after the prefix and colon) → SpecCounters field
_COUNTERS = {
    "spec_decode_num_drafts_total": "drafts",
    "spec_decode_num_draft_tokens_total": "draft_tokens",
    "spec_decode_num_accepted_tokens_total": "accepted",
}
_PER_POS = "spec_decode_num_accepted_tokens_per_pos_total"
#: the most draft positions read (per-position counts, an acceptance histogram, a
#: reported k); a higher ``position`` label is not a draft position, a longer list is not
#: reported
MAX_POSITIONS = 1024
#: the largest counter value taken (2**53: past it a float no longer counts by ones)
MAX_VALUE = float(2**53)


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """The speculation counters of one ``/metrics`` scrape, or the change between two.

    Attributes:
        prefix: the metric prefix the server uses (``llamacpp``, ``vllm``, ``sglang``).
        drafts: draft rounds.
        draft_tokens: draft tokens proposed.
        accepted: draft tokens accepted.
        accepted_per_pos: accepted tokens at each draft position (0-based); empty when
            the server exports no per-position series.
    """

    prefix: str
    drafts: int
    draft_tokens: int
    accepted: int
    accepted_per_pos: tuple[int, ...] = ()

    def minus(self, before: SpecCounters) -> SpecCounters:
        """The change from ``before`` to this scrape (counters only grow; a restart of
        the server in between shows as negative and is clamped to 0)."""
        n = max(len(self.accepted_per_pos), len(before.accepted_per_pos))
        after_pos = self.accepted_per_pos + (0,) * (n - len(self.accepted_per_pos))
        before_pos = before.accepted_per_pos + (0,) * (n - len(before.accepted_per_pos))
        return SpecCounters(
            prefix=self.prefix,
            drafts=max(0, self.drafts - before.drafts),
            draft_tokens=max(0, self.draft_tokens - before.draft_tokens),
            accepted=max(0, self.accepted - before.accepted),
            accepted_per_pos=tuple(max(0, a - b) for a, b in zip(after_pos, before_pos)),
        )


def metric_prefixes(text: str) -> set[str]:
    """The ``prefix:`` parts of every sample name in ``text`` (``{"llamacpp"}``…).

    Raises:
        ValueError: the text is not Prometheus exposition format.
    """
    prefixes: set[str] = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if ":" in sample.name:
                prefixes.add(sample.name.split(":", 1)[0])
    return prefixes


def parse_spec_counters(text: str) -> SpecCounters | None:
    """The speculation counters in one ``/metrics`` text.

    Args:
        text: Prometheus text exposition format, as ``GET /metrics`` returns it.

    Returns:
        The counters (summed over other labels), or None when the text has none of the
        three ``spec_decode_num_*_total`` counters (a server without speculation metrics).

    Raises:
        ValueError: the text is not Prometheus exposition format, a per-position series
            has no integer ``position`` label from 0 to :data:`MAX_POSITIONS` − 1, or a
            counter is not a count (negative, NaN, infinite, past :data:`MAX_VALUE`).
    """
    totals: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    prefix: str | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if ":" not in sample.name:
                continue
            head, name = sample.name.split(":", 1)
            value = float(sample.value)
            if name in (*_COUNTERS, _PER_POS) and not 0.0 <= value <= MAX_VALUE:
                raise ValueError(f"{sample.name} is not a count: {value}")  # NaN too
            if name in _COUNTERS:
                prefix = prefix or head
                totals[name] = totals.get(name, 0.0) + value
            elif name == _PER_POS:
                prefix = prefix or head
                try:
                    pos = int(sample.labels["position"])
                except (KeyError, ValueError) as exc:
                    raise ValueError(f"{sample.name} has no integer 'position' label: "
                                     f"{sample.labels}") from exc
                if not 0 <= pos < MAX_POSITIONS:
                    raise ValueError(f"{sample.name}: position {pos} is not a draft position")
                per_pos[pos] = per_pos.get(pos, 0.0) + value
    if prefix is None or not totals:
        return None
    n_pos = max(per_pos) + 1 if per_pos else 0
    return SpecCounters(
        prefix=prefix,
        drafts=int(totals.get("spec_decode_num_drafts_total", 0.0)),
        draft_tokens=int(totals.get("spec_decode_num_draft_tokens_total", 0.0)),
        accepted=int(totals.get("spec_decode_num_accepted_tokens_total", 0.0)),
        accepted_per_pos=tuple(int(per_pos.get(i, 0.0)) for i in range(n_pos)),
    )
