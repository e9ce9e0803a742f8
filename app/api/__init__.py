"""OpenAI-compatible APIs on the loaded model: chat completions (`chat`) and the Realtime protocol (`realtime`)."""
