"""OpenAI-compatible chat completions on the loaded model: `GET /v1/models`, `POST /v1/chat/completions`.

Two models are listed. The loaded language model under its directory's name (e.g. `parley-smollm2`) writes the
next assistant message of the conversation it is given; the caller's `tools` are the caller's to run: a call comes
back as `tool_calls` (its arguments held to the tool's JSON schema by the reply grammar, app.agent.schema_grammar, when
the model decodes left to right) and the caller sends the result as a `tool` message. `parley-agent` is Parley's
own front desk: the conversation's last user message is answered with Parley's tools, run here. A `developer` message
(OpenAI's newer name for the system message) is read as a system message.

Differences from OpenAI's API: decoding is greedy (`temperature` and `top_p` are accepted and do not change the
reply), one choice (`n` 1), no logprobs; a stream sends the reply's text as the model settles it, and a tool
call whole at the end. Errors use OpenAI's error object: 400 for a malformed request, 401 without the token
(app.server.auth), 404 for an unknown model, 413 for a body over 1 MB, 429 while the model has too many requests
waiting.
"""
import asyncio
import json
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from app.agent.protocol import format_tool_call, parse_tool_calls, tool_message
from app.agent.schema_grammar import grammar_for
from app.agent.speech_filter import SpeechFilter
from app.server.request_body import read_limited

router = APIRouter(prefix="/v1")

AGENT_MODEL = "parley-agent"
MAX_BODY_BYTES = 1 << 20
MAX_WAITING = 4                  # requests queued for the model beyond which a new one gets 429
ROLES = ("system", "developer", "user", "assistant", "tool")   # developer: OpenAI's newer name for system
_TOOL_INSTRUCTION = 'To call a tool, write only: <tool_call>{"name": ..., "arguments": {...}}</tool_call>'


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None):
        super().__init__(message)
        self.status, self.kind, self.param, self.code = status, kind, param, code

    def response(self) -> JSONResponse:
        body = {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}}
        headers = {"Retry-After": "1"} if self.status == 429 else None
        return JSONResponse(body, status_code=self.status, headers=headers)


def model_id(settings) -> str:
    """The loaded model's name: its directory's (or .gguf file's) name."""
    path = Path(settings.llm_model)
    return path.stem if path.suffix == ".gguf" else path.name


def _models(settings) -> dict[str, dict]:
    created = int(time.time())
    return {i: {"id": i, "object": "model", "created": created, "owned_by": "parley"}
            for i in (model_id(settings), AGENT_MODEL)}


@router.get("/models")
async def list_models(request: Request) -> dict:
    return {"object": "list", "data": list(_models(request.app.state.settings).values())}


@router.get("/models/{model:path}")
async def retrieve_model(model: str, request: Request):
    models = _models(request.app.state.settings)
    if model not in models:
        return ApiError(404, f"The model '{model}' does not exist; this server has {', '.join(models)}",
                        param="model", code="model_not_found").response()
    return models[model]


@router.post("/chat/completions")
async def chat_completions(request: Request):
    state = request.app.state
    try:
        body = await read_limited(request, MAX_BODY_BYTES)
        if body is None:
            raise ApiError(413, f"the request body is over {MAX_BODY_BYTES} bytes")
        req = _parse(body, model_id(state.settings))
        services = state.services
        if services is None or not services.ready:
            raise ApiError(503, "the models are still loading; try again shortly", "server_error")
        waiting = getattr(state, "api_waiting", 0)
        if waiting >= MAX_WAITING:
            raise ApiError(429, f"{waiting} requests are waiting for the model; try again shortly",
                           "rate_limit_exceeded", code="rate_limit_exceeded")
        job = _AgentJob(services, req) if req["model"] == AGENT_MODEL else ModelJob(services, req)
    except ApiError as exc:
        return exc.response()
    completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    if req["stream"]:
        return StreamingResponse(_stream(state, job, req, completion_id), media_type="text/event-stream")
    with _waiting(state):
        try:
            result = await asyncio.get_running_loop().run_in_executor(services.llm_pool, job.run, None, None)
        except ApiError as exc:
            return exc.response()
    message = {"role": "assistant", "content": result["content"]}
    if result["tool_calls"]:
        message["tool_calls"] = result["tool_calls"]
    return {"id": completion_id, "object": "chat.completion", "created": int(time.time()), "model": req["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": result["finish_reason"],
                         "logprobs": None}],
            "usage": result["usage"]}


async def _stream(state, job, req: dict, completion_id: str):
    """Server-sent events: a role chunk, the text as it settles, any tool calls, the finish reason, [DONE]."""
    loop = asyncio.get_running_loop()
    pieces: asyncio.Queue = asyncio.Queue()
    cancel = threading.Event()
    created = int(time.time())

    def chunk(delta: dict, finish: str | None = None, usage: dict | None = None) -> str:
        body = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": req["model"],
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
        if usage is not None:
            body = dict(body, choices=[], usage=usage)
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    with _waiting(state):
        job_future = loop.run_in_executor(
            state.services.llm_pool, job.run, lambda text: loop.call_soon_threadsafe(pieces.put_nowait, text), cancel)
        job_future.add_done_callback(lambda _: pieces.put_nowait(None))
        try:
            yield chunk({"role": "assistant", "content": ""})
            while (piece := await pieces.get()) is not None:
                yield chunk({"content": piece})
            try:
                result = await job_future
            except ApiError as exc:
                yield f"data: {json.dumps({'error': {'message': str(exc), 'type': exc.kind}})}\n\n"
                return
            if result["tool_calls"]:
                yield chunk({"tool_calls": [dict(call, index=i) for i, call in enumerate(result["tool_calls"])]})
            yield chunk({}, result["finish_reason"])
            if (req.get("stream_options") or {}).get("include_usage"):
                yield chunk({}, usage=result["usage"])
            yield "data: [DONE]\n\n"
        finally:
            cancel.set()   # a client that went away stops the model


@contextmanager
def _waiting(state):
    """Counts a request waiting for (or using) the model, for the 429 of MAX_WAITING."""
    state.api_waiting = getattr(state, "api_waiting", 0) + 1
    try:
        yield
    finally:
        state.api_waiting -= 1


# --- the request ------------------------------------------------------------------------------------------------


def _parse(body: bytes, loaded: str) -> dict:
    try:
        req = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the body is not JSON") from None
    if not isinstance(req, dict):
        raise ApiError(400, "the body must be a JSON object")
    model = req.get("model")
    if not isinstance(model, str):
        raise ApiError(400, "'model' is required: a string", param="model")
    if model not in (loaded, AGENT_MODEL):
        raise ApiError(404, f"The model '{model}' does not exist; this server has '{loaded}' and '{AGENT_MODEL}'",
                       param="model", code="model_not_found")
    messages = req.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list", param="messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise ApiError(400, f"messages[{i}]: each message needs a role of {', '.join(ROLES)}",
                           param=f"messages[{i}].role")
        _text(m.get("content"), f"messages[{i}].content", allow_none=m["role"] == "assistant")
    limit = req.get("max_completion_tokens", req.get("max_tokens"))
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise ApiError(400, "'max_tokens' must be a positive integer", param="max_tokens")
    if req.get("n", 1) != 1:
        raise ApiError(400, "only n=1 is supported", param="n")
    temperature = req.get("temperature", 1)
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not 0 <= temperature <= 2:
        raise ApiError(400, "'temperature' must be a number from 0 to 2", param="temperature")
    tools = parse_tools(req.get("tools"))
    if tools and model == AGENT_MODEL:
        raise ApiError(400, f"'{AGENT_MODEL}' runs Parley's own tools; send yours to '{loaded}'", param="tools")
    return {"model": model, "messages": messages, "max_tokens": limit, "stream": bool(req.get("stream")),
            "stream_options": req.get("stream_options"), "tools": tools,
            "tool_choice": parse_tool_choice(req.get("tool_choice"), tools)}


def _text(content, param: str, allow_none: bool = False) -> str:
    """A message's content as text: a string, or a list of text parts."""
    if content is None and allow_none:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    raise ApiError(400, f"{param} must be a string or a list of text parts", param=param)


def parse_tools(tools) -> list[dict]:
    """The request's tools as {"name", "description", "parameters"} schemas."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ApiError(400, "'tools' must be a list", param="tools")
    out = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise ApiError(400, f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ...}}}}",
                           param=f"tools[{i}]")
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            raise ApiError(400, f"tools[{i}].function.parameters must be a JSON schema object",
                           param=f"tools[{i}].function.parameters")
        out.append({"name": function["name"], "description": str(function.get("description") or ""),
                    "parameters": parameters})
    return out


def parse_tool_choice(choice, tools: list[dict]):
    """"none", "auto", "required", or the name of the one tool to call."""
    if choice is None:
        return "auto" if tools else "none"
    if choice in ("none", "auto", "required"):
        if choice == "required" and not tools:
            raise ApiError(400, "tool_choice 'required' needs tools", param="tool_choice")
        return choice
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    if name not in {t["name"] for t in tools}:
        raise ApiError(400, "tool_choice must be none, auto, required or one of the tools", param="tool_choice")
    return name


# --- the work, on the model's thread --------------------------------------------------------------------------


def _finish_reason(stopped: str) -> str:
    return "length" if stopped == "length" else "stop"


class ModelJob:
    """The loaded model's next message in the request's conversation."""

    def __init__(self, services, req: dict):
        self.engine, self.options, self.req = services.engine, services.agent_options, req
        self.messages = conversation_messages(req["messages"], req["tools"])
        self.tools = req["tools"]
        limit = self.engine.model.args.max_sequence_length
        self.prompt_tokens = len(self.engine.prompt_ids(self.messages))
        self.max_tokens = req["max_tokens"] or max(1, min(512, limit - self.prompt_tokens))
        if self.prompt_tokens + self.max_tokens > limit:
            raise ApiError(400, f"this model's context is {limit} tokens: the messages take {self.prompt_tokens} "
                                f"and max_tokens asks for {self.max_tokens}", param="messages",
                           code="context_length_exceeded")

    def run(self, on_text, cancel) -> dict:
        opts, choice = self.options, self.req["tool_choice"]
        matcher = self._matcher(choice)
        speech = SpeechFilter(on_text)   # streamed: the text, never a call's markup
        gen = self.engine.generate(self.messages, max_new_tokens=self.max_tokens, block_length=opts.block_length,
                                   threshold=opts.threshold, use_cache=opts.cache, cancel=cancel,
                                   on_block=speech.feed, draft_length=opts.draft_length,
                                   **({"matcher": matcher} if matcher else {}))
        speech.finish()
        calls, spoken = parse_tool_calls(gen.text) if self.tools else ([], gen.text.strip())
        tool_calls = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                       "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}
                      for name, arguments in calls if name]
        return {"content": spoken or (None if tool_calls else ""), "tool_calls": tool_calls,
                "finish_reason": "tool_calls" if tool_calls else _finish_reason(gen.stopped),
                "usage": {"prompt_tokens": self.prompt_tokens, "completion_tokens": gen.tokens,
                          "total_tokens": self.prompt_tokens + gen.tokens}, "generation": gen}

    def _matcher(self, choice):
        """The reply grammar's matcher where this model decodes with one (left to right, app.agent.schema_grammar):
        the tools' calls, or speech only."""
        tokenizer = getattr(self.engine, "tokenizer", None)
        if self.options.cache != "block" or tokenizer is None:
            return None
        # with no tools too: speech only, which may not start with "<" (an adapter trained to call tools for some
        # questions otherwise starts a call it cannot finish and writes markup)
        schemas = [] if choice == "none" else [t for t in self.tools if choice in ("auto", "required", t["name"])]
        schemas = [{"name": s["name"], "parameters": s["parameters"]} for s in schemas]
        return grammar_for(tokenizer, schemas, self.engine.special.stop, self.engine.model.args.vocab_size,
                           call_required=choice not in ("auto", "none")).start()


class _AgentJob:
    """Parley's front desk answering the conversation's last user message with its own tools."""

    def __init__(self, services, req: dict):
        messages = req["messages"]
        if messages[-1]["role"] != "user":
            raise ApiError(400, f"'{AGENT_MODEL}' answers a user message: the last message must be one",
                           param="messages")
        self.agent = services.new_agent()
        self.agent.messages = [{"role": m["role"], "content": _text(m.get("content"), "content", True)}
                               for m in messages[:-1] if m["role"] in ("user", "assistant")]
        self.question = _text(messages[-1]["content"], "content")

    def run(self, on_text, cancel) -> dict:
        turn = self.agent.respond(self.question, on_text=on_text, cancel=cancel)
        prompt_tokens = len(self.agent.engine.prompt_ids(self.agent.prompt()))
        return {"content": turn.reply, "tool_calls": [], "finish_reason": "stop",
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": turn.tokens,
                          "total_tokens": prompt_tokens + turn.tokens}}


def conversation_messages(messages: list[dict], tools: list[dict]) -> list[dict]:
    """The request's messages in the model's chat format: calls as <tool_call> text, results as tool messages
    named after their call, and the tools described in the system message."""
    out, names = [], {}
    for i, m in enumerate(messages):
        content = _text(m.get("content"), f"messages[{i}].content", allow_none=True)
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                try:
                    function = call["function"]
                    arguments = json.loads(function.get("arguments") or "{}")
                    names[call.get("id")] = function["name"]
                    calls.append(format_tool_call(function["name"], arguments))
                except (KeyError, TypeError, ValueError):
                    raise ApiError(400, f"messages[{i}].tool_calls: each needs a function with a name and JSON "
                                        "arguments", param=f"messages[{i}].tool_calls") from None
            out.append({"role": "assistant", "content": content + "".join(calls)})
        elif m["role"] == "tool":
            name = names.get(m.get("tool_call_id"))
            if name is None:
                raise ApiError(400, f"messages[{i}]: tool_call_id {m.get('tool_call_id')!r} answers no call before it",
                               param=f"messages[{i}].tool_call_id")
            try:
                result = json.loads(content)
            except ValueError:
                result = content
            out.append(tool_message(name, result))
        else:
            out.append({"role": "system" if m["role"] == "developer" else m["role"], "content": content})
    if tools:
        described = "\n".join(f"{t['name']}({', '.join(t['parameters'].get('properties', {}))}): {t['description']}"
                              for t in tools)
        section = f"Tools:\n{described}\n{_TOOL_INSTRUCTION}"
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n{section}"}
        else:
            out.insert(0, {"role": "system", "content": section})
    return out
