"""The front desk, synchronous: the tool-call protocol (`protocol`), the business (`profile`), its tools and their
store (`tools`, `store`), the grammar that holds a call to its schema (`schema_grammar`), the rule for arguments
the caller must have said (`said`, `spoken_times`), how a checkpoint decodes (`options`), what of a reply is
spoken (`speech_filter`), and the agent loop (`loop`).

No asyncio here: the session runs `Agent.respond` in an executor, and any engine can drive it."""
