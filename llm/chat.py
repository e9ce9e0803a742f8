"""Chat formats: Parley's own, LLaDA's header-token template (Llama 3 style) and ChatML for Dream/Qwen.

Messages are dicts {"role": "system"|"user"|"assistant"|"tool", "content": str}. Tool results render the way
each family does: Parley has its own `<|tool|>` turn; LLaDA's Llama 3 template uses the `ipython` role (Llama 3.1's
role for tool output); Qwen/Dream wrap tool output in `<tool_response>` inside a user turn, consecutive tool
results sharing one turn.
"""
STYLES = ("parley", "llada", "dream", "smollm")
ROLES = ("system", "user", "assistant", "tool")

# Parley's special tokens (exact strings; the tokenizer holds each as one added token).
PAD, MASK, END = "<|pad|>", "<|mask|>", "<|end|>"
PARLEY_ROLE_TOKENS = {role: f"<|{role}|>" for role in ROLES}
PARLEY_SPECIAL_TOKENS = (PAD, MASK, END, *PARLEY_ROLE_TOKENS.values())

# End-of-turn token string of each style (its id comes from the checkpoint's tokenizer).
END_OF_TURN = {"parley": END, "llada": "<|eot_id|>", "dream": "<|im_end|>", "smollm": "<|im_end|>"}

DREAM_DEFAULT_SYSTEM = "You are a helpful assistant."  # ChatML default when no system turn is given (Qwen2)


def _check(messages: list[dict]) -> None:
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ROLES:
            raise ValueError(f"message {i} has role {role!r}: choose one of {', '.join(ROLES)}")
        if not isinstance(message.get("content"), str):
            raise ValueError(f"message {i} ({role}) needs a string 'content'")


def render_parley(messages: list[dict], add_generation_prompt: bool = True) -> str:
    """`<|system|>S<|end|><|user|>U<|end|><|assistant|>A<|end|><|tool|>J<|end|>` + `<|assistant|>`."""
    text = "".join(PARLEY_ROLE_TOKENS[m["role"]] + m["content"] + END for m in messages)
    return text + (PARLEY_ROLE_TOKENS["assistant"] if add_generation_prompt else "")


def render_llada(messages: list[dict], add_generation_prompt: bool = True, bos_token: str | None = None) -> str:
    """LLaDA-8B-Instruct: BOS, then `<|start_header_id|>ROLE<|end_header_id|>\\n\\n` + content.strip() + `<|eot_id|>`."""
    parts = [bos_token or ""]
    for m in messages:
        role = "ipython" if m["role"] == "tool" else m["role"]
        parts.append(f"<|start_header_id|>{role}<|end_header_id|>\n\n{m['content'].strip()}<|eot_id|>")
    if add_generation_prompt:
        parts.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
    return "".join(parts)


def render_chatml(messages: list[dict], add_generation_prompt: bool = True) -> str:
    """Dream/Qwen ChatML: `<|im_start|>ROLE\\ncontent<|im_end|>\\n`, a default system turn when none is given."""
    parts = []
    if not messages or messages[0]["role"] != "system":
        parts.append(f"<|im_start|>system\n{DREAM_DEFAULT_SYSTEM}<|im_end|>\n")
    for i, m in enumerate(messages):
        if m["role"] != "tool":
            parts.append(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n")
            continue
        opens = i == 0 or messages[i - 1]["role"] != "tool"
        closes = i == len(messages) - 1 or messages[i + 1]["role"] != "tool"
        parts.append(("<|im_start|>user" if opens else "") + f"\n<tool_response>\n{m['content']}\n</tool_response>"
                     + ("<|im_end|>\n" if closes else ""))
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def render_smollm(messages: list[dict], add_generation_prompt: bool = True) -> str:
    """ChatML as SmolLM2 has it, with tool results in a `tool` turn of their own (Parley's adapter is trained
    on that) and no default system turn: `<|im_start|>ROLE\ncontent<|im_end|>\n`."""
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def render(messages: list[dict], style: str, add_generation_prompt: bool = True, bos_token: str | None = None) -> str:
    """The conversation as the prompt text of `style` (parley, llada or dream); ends with the assistant header."""
    _check(messages)
    if style == "parley":
        return render_parley(messages, add_generation_prompt)
    if style == "llada":
        return render_llada(messages, add_generation_prompt, bos_token)
    if style == "dream":
        return render_chatml(messages, add_generation_prompt)
    if style == "smollm":
        return render_smollm(messages, add_generation_prompt)
    raise ValueError(f"chat style {style!r}: choose one of {', '.join(STYLES)}")


def render_open_turn(messages: list[dict], text: str, style: str, bos_token: str | None = None) -> str:
    """The conversation with a user turn that says `text` so far and has not ended: every style closes a turn
    with its end-of-turn token (END_OF_TURN), so this is the rendering up to that last token."""
    rendered = render(messages + [{"role": "user", "content": text}], style, add_generation_prompt=False,
                      bos_token=bos_token)
    return rendered[:rendered.rindex(END_OF_TURN[style])]
