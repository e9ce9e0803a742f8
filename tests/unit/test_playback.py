"""Playback: pull-based frames, heard-text accounting for barge-in, far-end confirmation."""
import numpy as np

from app.pipeline.playback import Playback


def tone(n):
    return np.full(n, 1000, dtype=np.int16)


def test_read_gives_queued_speech_then_silence():
    pb = Playback(8000)
    first = pb.enqueue(tone(250), "hello there")
    frame, done = pb.read_frame(160)
    assert (frame == 1000).all() and done == [] and pb.busy
    frame, done = pb.read_frame(160)
    assert (frame[:90] == 1000).all() and (frame[90:] == 0).all() and done == [first]
    assert not pb.busy and (pb.read(160) == 0).all()
    assert pb.take_heard() == "hello there"


def test_clear_keeps_only_the_words_heard():
    pb = Playback(8000)
    pb.enqueue(tone(100), "Sure.")
    pb.enqueue(tone(1000), "one two three four five six seven eight nine ten")
    pb.read(100 + 500)          # the first clause and half of the second
    assert pb.clear() == "Sure. one two three four five"
    assert not pb.busy and (pb.read(160) == 0).all()


def test_confirm_marks_mode_counts_only_confirmed_chunks():
    pb = Playback(8000, confirm_marks=True)
    a = pb.enqueue(tone(160), "first")
    pb.enqueue(tone(160), "second")
    pb.read(320)
    assert pb.busy                         # sent, not yet confirmed as played
    pb.confirm(a)
    assert pb.clear() == "first"


def test_listeners_hear_start_and_drain():
    events = []
    pb = Playback(8000)
    pb.add_listener(events.append)
    pb.enqueue(tone(100), "a")
    pb.enqueue(tone(100), "b")
    pb.read(400)
    assert events == ["started", "started", "drained"]
