"""The front desk, synchronous: the tool-call protocol (`protocol`), the business (`profile`), its tools and their
store (`tools`, `store`), the grammars that hold a call to its schema (`schema_grammar`, `tool_grammar`), the rule
for arguments the caller must have said (`said`, `heard`, `spoken_times`), how a checkpoint decodes (`options`),
and the agent loop (`loop`).

No asyncio here: the session runs `Agent.respond` in an executor, and any engine can drive it."""
