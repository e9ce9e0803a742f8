"""One conversation's pipeline, whatever carries its audio: the Session (turn detection, ASR, agent, TTS,
barge-in), drafting at the first silence, the playback that keeps what was heard, the per-turn trace, and the
Services every session shares (the loaded models, their executors, the agent's factory)."""
