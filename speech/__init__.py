"""Synchronous speech stages: audio conversions, turn detection, recognition and synthesis."""
