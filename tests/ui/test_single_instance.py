"""A second start hands its file to the running window instead of opening another window
on the same history and settings (app/ui/single_instance.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from app.ui.single_instance import InstanceServer, hand_over, take_lock

REPO = Path(__file__).resolve().parents[2]
SECOND_START = ("import sys; from pathlib import Path; "
                "from app.ui.single_instance import hand_over, take_lock; "
                "assert take_lock() is None, 'the lock was free'; "
                "sys.exit(0 if hand_over(Path(sys.argv[1]) if sys.argv[1] else None) else 3)")


def _second_start(arg: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", SECOND_START, arg], cwd=REPO)


def test_a_second_start_hands_its_file_to_the_running_window(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lock = take_lock()
    assert lock is not None  # the first start runs
    opened: list[Path | None] = []
    # a start while the first is still building its window waits for it to listen
    early = _second_start(str(tmp_path / "early.gguf"))
    time.sleep(1.0)
    server = InstanceServer()
    server.open_requested.connect(opened.append)
    try:
        qtbot.waitUntil(lambda: len(opened) == 1, timeout=20_000)
        assert early.wait(20) == 0 and opened == [tmp_path / "early.gguf"]
        second = _second_start("")  # no file: the window only comes forward
        qtbot.waitUntil(lambda: len(opened) == 2, timeout=20_000)
        assert second.wait(20) == 0 and opened[1] is None
    finally:
        server.close()
    t0 = time.monotonic()
    assert not hand_over(None, wait_s=1.0)  # nobody listens: the caller says so
    assert time.monotonic() - t0 < 5
    lock.unlock()
    assert take_lock() is not None  # released: the next start runs


def test_a_lock_left_by_a_crash_is_taken_over(tmp_path: Path) -> None:
    crash = ("import os, signal; from app.ui.single_instance import take_lock; "
             "lock = take_lock(); assert lock is not None; os.kill(os.getpid(), signal.SIGKILL)")
    subprocess.run([sys.executable, "-c", crash], cwd=REPO, check=False)
    lock = take_lock()
    assert lock is not None
    lock.unlock()


def test_a_peer_that_closes_resets_or_says_nothing_never_stops_the_hand_over(qtbot) -> None:  # type: ignore[no-untyped-def]
    """Peers that connect and close, reset, or stay silent (a second start killed at the
    wrong moment, any local program): the window keeps answering the next start, which
    never waits past its own deadline."""
    import socket
    import struct
    import threading

    from app.ui.single_instance import address

    server = InstanceServer()
    opened: list[object] = []
    server.open_requested.connect(opened.append)
    silent = []
    try:
        for how in ("close", "reset", "silent"):
            peer = socket.socket(socket.AF_UNIX)
            peer.connect(address())
            if how == "reset":
                peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            if how == "silent":
                silent.append(peer)  # stays connected, sends nothing
            else:
                peer.close()
            time.sleep(0.2)
            got: list[bool] = []
            t = threading.Thread(target=lambda: got.append(hand_over(None, wait_s=3.0)))
            t0 = time.monotonic()
            t.start()
            qtbot.waitUntil(lambda: not t.is_alive(), timeout=10_000)
            assert got == [True] and time.monotonic() - t0 < 3.5, how
        qtbot.waitUntil(lambda: len(opened) == 3, timeout=5_000)
    finally:
        for s in silent:
            s.close()
        server.close()


def test_a_start_gives_up_on_a_window_that_accepts_and_never_answers(tmp_path: Path) -> None:
    """A listening socket whose owner never answers (hung): the start returns False after
    its wait, instead of hanging (the key's challenge has no timeout of its own)."""
    import socket

    from app.ui.single_instance import _new_key, address

    _new_key()
    Path(address()).unlink(missing_ok=True)
    hung = socket.socket(socket.AF_UNIX)
    hung.bind(address())
    hung.listen(8)  # accepts into the backlog, never reads
    try:
        t0 = time.monotonic()
        assert not hand_over(None, wait_s=1.5)
        assert time.monotonic() - t0 < 4
    finally:
        hung.close()
        Path(address()).unlink(missing_ok=True)


def test_the_stdlib_client_with_the_key_is_answered(qtbot) -> None:  # type: ignore[no-untyped-def]
    """The window checks the key with multiprocessing's own challenge functions, called
    one by one: a stdlib ``Client(address, authkey=key)`` must still be answered (a
    Python that changed the handshake fails here)."""
    from multiprocessing.connection import Client

    from app.ui.single_instance import _read_key, address

    server = InstanceServer()
    opened: list[object] = []
    server.open_requested.connect(opened.append)
    try:
        key = _read_key()
        assert key is not None
        with Client(address(), authkey=key) as conn:
            conn.send({"open": None})
            assert conn.poll(5) and conn.recv() == "ok"
        qtbot.waitUntil(lambda: opened == [None], timeout=5000)
    finally:
        server.close()


def test_a_trickling_peer_is_cut_after_the_handshake_time(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A peer that sends a byte now and then (each read within its per-read limit) is
    cut once the whole handshake time is up, freeing its slot."""
    import socket
    import struct

    from app.ui import single_instance
    from app.ui.single_instance import address

    monkeypatch.setattr(single_instance, "HANDSHAKE_S", 1.0)
    server = InstanceServer()
    peer = socket.socket(socket.AF_UNIX)
    try:
        peer.connect(address())
        peer.send(struct.pack("!i", 200))  # an answer of 200 bytes is on its way…
        t0 = time.monotonic()
        peer.settimeout(0.3)
        closed = False
        while time.monotonic() - t0 < 6 and not closed:
            try:
                if peer.recv(4096) == b"":
                    closed = True  # the window ended the connection
            except socket.timeout:
                pass
            try:
                peer.send(b"a")  # …a byte at a time, well within each read's limit
            except OSError:
                closed = True
        assert closed and time.monotonic() - t0 < 4
    finally:
        peer.close()
        server.close()
