"""One module per `parley` subcommand."""
