"""`parley chat`: a text conversation on stdin/stdout through the same agent, model and tools as a call."""
import json
import sys

from app.commands.common import add_model_flags, load_services


def register(subparsers) -> None:
    p = subparsers.add_parser("chat", help="talk to the agent in text, one line per turn")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per user line: user, reply, tool_calls, passes, latency_ms")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice; 1 is faster on a busy machine)")
    add_model_flags(p)
    p.set_defaults(func=run)


def turn_record(user: str, turn) -> dict:
    return {"user": user, "reply": turn.reply,
            "tool_calls": [{"name": c.name, "arguments": c.arguments, "result": c.result} for c in turn.tool_calls],
            "passes": turn.passes, "latency_ms": round(1000 * turn.llm_s, 1)}


def run(args) -> int:
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    # warmed up as `parley serve` warms up: the system prompt's KV cache is computed once, before the first line
    services = load_services(args, "parley chat", speech=False)
    if services is None:   # a bad profile, checkpoint directory or device
        return 2
    agent = services.new_agent()
    interactive = sys.stdin.isatty() and not args.json
    while True:
        if interactive:
            print("you> ", end="", flush=True)
        line = sys.stdin.readline()
        if not line:
            return 0
        user = line.strip()
        if not user:
            continue
        turn = agent.respond(user)
        if args.json:
            print(json.dumps(turn_record(user, turn), ensure_ascii=False), flush=True)
        else:
            for call in turn.tool_calls:
                print(f"  [{call.name} {json.dumps(call.arguments)} -> {json.dumps(call.result)}]", flush=True)
            print(f"agent> {turn.reply}", flush=True)
            if any(c.name == "end_call" for c in turn.tool_calls):
                return 0
        # what a call does while the caller hears the reply: a long conversation's window moves here, not in a turn
        agent.prepare_next()
