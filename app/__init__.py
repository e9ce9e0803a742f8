"""Parley's asyncio side: pipeline, sessions, agent, transports, server and CLI."""
