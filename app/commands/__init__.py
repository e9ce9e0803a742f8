"""One module per `parley` subcommand.

Each command imports the model stack (torch, llm, speech, the pipeline, the server) inside its run(), not at the
top: app.cli imports every command to build its parser, and `parley --help` or a usage error (exit 2) must not
wait seconds for torch. Imports deferred for that reason say `deferred: the model stack`."""
