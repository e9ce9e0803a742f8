"""The training side: front-desk dialogues written from templates and run against the real tools (`dialogues`),
the from-scratch model's recipe (`recipe`) and held-out evaluation (`evaluate`). Nothing on the serving path
imports this package."""
