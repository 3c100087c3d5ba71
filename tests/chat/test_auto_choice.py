"""The auto drafter choice through the chat controller and service, on the synthetic
model: each reply records what auto chose, runs with it, and the next reply of the
conversation is given the earlier ones' measured statistics. Which drafter wins depends
on this machine's timings, so it is not asserted."""

from __future__ import annotations

from pathlib import Path

from app.chat.service import ChatService
from app.engine.auto import ReplyObservation
from app.options import SamplingParams, SpecMode, SpeculationConfig
from tests.chat.fakes import Script
from tests.chat.test_controller import Rig


def test_auto_records_its_choice_per_reply_and_learns_within_the_conversation(
    tmp_path: Path, tiny_target: Path
) -> None:
    rig = Rig(tmp_path, Script(), service=ChatService())
    rig.settings.model.target_path = tiny_target
    rig.settings.model.n_ctx = 256
    rig.settings.sampling = SamplingParams(temperature=0.0, max_tokens=12)
    rig.settings.speculation = SpeculationConfig(mode=SpecMode.AUTO, draft_max=8)
    rig.start()
    try:
        seen: list[list[ReplyObservation]] = []
        original = rig.c.auto_observations

        def spy(cid: int) -> list[ReplyObservation]:
            got = original(cid)
            seen.append(got)
            return got

        rig.c.auto_observations = spy  # type: ignore[method-assign]
        for text in ("hello", "hello again"):
            assert rig.c.send_message(text)
            rig.reply_done()
        cid = rig.c.current_conversation
        assert cid is not None
        replies = [m for m in rig.store.messages(cid) if m.role == "assistant"]
        assert len(replies) == 2
        for m in replies:
            assert m.stats is not None and m.status == "done"
            auto = m.stats["auto"]
            assert auto["mode"] in ("off", "prompt-lookup", "suffix")  # no draft loaded
            assert m.stats["mode"] == auto["mode"]  # the reply ran with what was chosen
            assert auto["reason"] in ("estimate", "measured", "prior", "no-gain")
        # the second reply was chosen knowing the first one's figures
        assert [len(s) for s in seen] == [0, 1]
        assert seen[1][0].mode is SpecMode(replies[0].stats["mode"])  # type: ignore[index]
        assert seen[1][0].emitted == replies[0].stats["emitted"]  # type: ignore[index]
        # the session's first reply had nothing to learn from: the model-free prior ran;
        # the second was scored from the first (replayed through both lookups)
        first = replies[0].stats["auto"]  # type: ignore[index]
        assert (first["reason"], first["mode"]) == ("prior", "suffix")
        assert {m for m, _, _ in replies[1].stats["auto"]["scores"]} == {  # type: ignore[index]
            "prompt-lookup", "suffix"}
        # a new conversation has no reply of its own: it is scored from the session's
        # latest replies (the chat service keeps a few)
        rig.c.open_conversation(None)
        assert rig.c.send_message("something else")
        rig.reply_done()
        new = rig.c.current_conversation
        assert new is not None and new != cid
        [fresh] = [m for m in rig.store.messages(new) if m.role == "assistant"]
        assert fresh.stats is not None and seen[-1] == []
        assert {m for m, _, _ in fresh.stats["auto"]["scores"]} == {"prompt-lookup", "suffix"}
    finally:
        rig.c.close()
