"""Search finds text in any version of a reply, and a conversation named after its first
message follows that message when it is edited (a title given by hand stays)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.store.history import DEFAULT_TITLE, HistoryStore, automatic_title


@pytest.fixture
def store() -> Iterator[HistoryStore]:
    s = HistoryStore.open()
    yield s
    s.close()


def _reply(store: HistoryStore, cid: int, text: str) -> int:
    mid = store.begin_reply(cid).id
    store.finish_reply(mid, text, "stop", {"mode": "off"})
    return mid


def test_search_finds_a_reply_version_that_is_not_shown(store: HistoryStore) -> None:
    cid = store.create_conversation().id
    store.add_user_message(cid, "tell me about animals")
    mid = _reply(store, cid, "the aardvark eats ants")
    store.begin_reply_version(mid)
    store.finish_reply(mid, "the pangolin has scales", "stop", {"mode": "off"})
    other = store.create_conversation().id
    store.add_user_message(other, "something else")
    assert [c.id for c in store.list_conversations("pangolin")] == [cid]  # the shown one
    assert [c.id for c in store.list_conversations("AARDVARK")] == [cid]  # an earlier one
    assert store.list_conversations("zebra") == []
    store.show_version(mid, 1)
    assert [c.id for c in store.list_conversations("pangolin")] == [cid]


def test_search_finds_the_messages_kept_with_a_version_not_shown(store: HistoryStore) -> None:
    cid = store.create_conversation().id
    first = store.add_user_message(cid, "tell me about animals")
    _reply(store, cid, 'the "okapi" lives in\nthe Ituri forest — naïve giraffe')
    store.edit_message(first.id, "tell me about plants")  # the reply leaves with version 1
    assert [m.content for m in store.messages(cid)] == ["tell me about plants"]
    for needle in ("Ituri", '"okapi"', "in\nthe", "naïve", "ANIMALS"):
        assert [c.id for c in store.list_conversations(needle)] == [cid], needle
    assert store.list_conversations("baobab") == []
    # the kept messages' text only: not the names and values stored beside it
    for needle in ("role", "assistant", "content", "finish_reason", "stop", "created_at",
                   "versions", "null"):
        assert store.list_conversations(needle) == [], needle


def test_editing_the_first_message_renames_a_conversation_named_after_it(
        store: HistoryStore) -> None:
    cid = store.create_conversation().id
    first = store.add_user_message(cid, "What do  foxes\neat?")
    assert store.conversation(cid).title == "What do foxes eat?"
    _reply(store, cid, "mice")
    store.edit_message(first.id, "What do owls eat?")
    assert store.conversation(cid).title == "What do owls eat?"
    store.show_version(first.id, 1)  # the first text again: its title too
    assert store.conversation(cid).title == "What do foxes eat?"
    store.edit_message(first.id, "   ")  # a blank text gives the default title back
    assert store.conversation(cid).title == DEFAULT_TITLE


def test_a_long_first_message_edited_follows_too(store: HistoryStore) -> None:
    text = "word " * 40
    cid = store.create_conversation().id
    first = store.add_user_message(cid, text)
    assert store.conversation(cid).title == automatic_title(text)
    assert len(automatic_title(text)) == 60 and automatic_title(text).endswith("…")
    store.edit_message(first.id, "short now")
    assert store.conversation(cid).title == "short now"


def test_a_title_given_by_hand_stays_when_the_first_message_is_edited(
        store: HistoryStore) -> None:
    cid = store.create_conversation().id
    first = store.add_user_message(cid, "What do foxes eat?")
    store.rename_conversation(cid, "Fox diet")
    store.edit_message(first.id, "What do owls eat?")
    assert store.conversation(cid).title == "Fox diet"
    store.show_version(first.id, 1)
    assert store.conversation(cid).title == "Fox diet"


def test_editing_a_later_message_keeps_the_title(store: HistoryStore) -> None:
    cid = store.create_conversation().id
    store.add_user_message(cid, "hello")
    _reply(store, cid, "hi")
    # a later message with the same text as the title: still not the first one
    later = store.add_user_message(cid, "hello")
    store.edit_message(later.id, "bye")
    assert store.conversation(cid).title == "hello"
    # removing a reply (a failed one) leaves the title alone
    failed = store.begin_reply(cid).id
    store.delete_reply(failed)
    assert store.conversation(cid).title == "hello"


def test_found_elsewhere_names_the_shown_message_whose_versions_hold_the_text(
        store: HistoryStore) -> None:
    cid = store.create_conversation().id
    first = store.add_user_message(cid, "tell me about animals")
    _reply(store, cid, "the okapi lives in the Ituri forest")
    store.add_user_message(cid, "and birds?")
    second = _reply(store, cid, "the hoatzin")
    store.begin_reply_version(second)
    store.finish_reply(second, "the kakapo", "stop")
    assert store.found_elsewhere(cid, "kakapo") is None  # shown
    assert store.found_elsewhere(cid, "animals") is None  # shown
    assert store.found_elsewhere(cid, "zebra") is None  # nowhere
    where = store.found_elsewhere(cid, "HOATZIN")  # an earlier version of the reply
    assert where is not None and where.id == second
    store.edit_message(first.id, "tell me about plants")
    where = store.found_elsewhere(cid, "okapi")  # kept with the first text
    assert where is not None and (where.id, where.content) == (first.id, "tell me about plants")
    assert store.found_elsewhere(cid, "  ") is None


def test_search_snippets_give_the_line_around_the_first_place_found(store: HistoryStore) -> None:
    """Under each conversation the search finds in a message shown: the text around the
    first place (of its first message that has it), on one line, cut between words with
    "…"; for one found only in a version not shown, the same of that version after
    "another version: "; none for one found by its title; %, _ and the case as the
    search reads them."""
    cid = store.create_conversation("Lake trip").id
    store.add_user_message(cid, "Summer plans.\n\nWe go to the LAKE house with 100% of\nus.")
    _reply(store, cid, "the lake house is " + "far " * 40)
    titled = store.create_conversation("lake notes").id
    versioned = store.create_conversation().id
    mid = _reply(store, versioned, "the old lake")
    store.begin_reply_version(mid)
    store.finish_reply(mid, "the new sea", "stop", {"mode": "off"})
    snippets = store.search_snippets("lake house", width=30)
    assert snippets == {cid: "…the LAKE house with 100% of us."}  # whole words
    assert titled in [c.id for c in store.list_conversations("lake")]
    found = store.search_snippets("lake")
    assert set(found) == {cid, versioned}  # not by title
    assert found[versioned] == "another version: the old lake"
    assert store.search_snippets("100%", width=30) == {cid: "…100% of us."}
    assert store.search_snippets("house is", width=20)[cid] == "…house is far far far far…"
    assert store.search_snippets("  ") == {} and store.search_snippets("1_0") == {}


def test_a_snippet_finds_its_place_after_letters_that_fold_to_more(store: HistoryStore) -> None:
    """ß folds to ss and İ to i̇ (longer): the place is found in the text itself."""
    cid = store.create_conversation().id
    store.add_user_message(cid, "Straße " * 8 + "then the lake house " + "İ" * 20)
    assert "lake house" in store.search_snippets("lake house")[cid]
