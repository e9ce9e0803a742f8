"""The training side: front-desk dialogues written from templates and run against the real tools (`dialogues`,
which `parley adapt` trains the brain on) and held-out evaluation (`evaluate`, `parley eval`). Nothing on the
serving path imports this package."""
