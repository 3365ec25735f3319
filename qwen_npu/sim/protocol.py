"""Request parsing and response bodies in SGLang 0.5.23's wire format (native and OpenAI).

Kept apart from the routes so the hot path (one SSE event per engine step) is plain string
building: the simulator's text is ASCII words, so chunks are assembled without a JSON encoder.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from fastapi.responses import JSONResponse

from qwen_npu.sim.config import SimConfig
from qwen_npu.sim.scheduler import Chunk, Request
from qwen_npu.sim.tokens import detokenize, text_to_ids


class BadRequest(ValueError):
    """A request the real server would reject with 400; the message says what to fix."""


@dataclass
class GenParams:
    """What one generation asks for, whatever endpoint it came through."""

    prompt_ids: list[int]
    max_new: int
    greedy: bool
    stream: bool
    rid: str
    include_usage: bool = False


def loads(raw: bytes) -> Any:
    """A request body as JSON ({} when empty); BadRequest when it is not JSON."""
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        raise BadRequest("the body is not valid JSON") from None


def _int_list(value: Any, key: str) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) for x in value
    ):
        raise BadRequest(f"{key} must be a list of token ids (integers)")
    return value


def _params(body: Any, sp: Any, key: str, prompt: list[int], cfg: SimConfig, rid: str) -> GenParams:
    """The generation ``body`` asks for, its sampling parameters ``sp`` and prompt checked."""
    sp = {} if sp is None else sp
    if not isinstance(sp, dict):
        raise BadRequest("sampling_params must be a JSON object")
    max_new = cfg.default_max_new_tokens if sp.get(key) is None else sp[key]
    if not isinstance(max_new, int) or isinstance(max_new, bool) or max_new < 0:
        raise BadRequest(f"{key} must be an integer >= 0, got {max_new!r}")
    temp = 1.0 if sp.get("temperature") is None else sp["temperature"]
    if not isinstance(temp, int | float) or temp < 0:
        raise BadRequest(f"temperature must be a number >= 0, got {temp!r}")
    if not prompt:
        raise BadRequest("the prompt is empty; send text or input_ids")
    if len(prompt) + max_new > cfg.context_length:
        raise BadRequest(
            f"prompt ({len(prompt)} tokens) + max_new_tokens ({max_new}) exceeds the context "
            f"length {cfg.context_length}; shorten the request"
        )
    opts = body.get("stream_options")  # OpenAI's; the native endpoint never reads it
    usage = bool(isinstance(opts, dict) and opts.get("include_usage"))
    stream = bool(body.get("stream", False))
    return GenParams(prompt, max_new, float(temp) < 1e-5, stream, rid, usage)


def parse_generate(body: Any, cfg: SimConfig, rid: str) -> GenParams:
    """SGLang's native /generate body: ``text`` or ``input_ids``, ``sampling_params``..."""
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    text, ids = body.get("text"), body.get("input_ids")
    if (text is None) == (ids is None):
        raise BadRequest("give exactly one of text or input_ids")
    if isinstance(text, list) or (isinstance(ids, list) and ids and isinstance(ids[0], list)):
        raise BadRequest("batched prompts are not supported by the simulator; send one prompt")
    if text is not None:
        if not isinstance(text, str):
            raise BadRequest("text must be a string")
        prompt = text_to_ids(text, cfg.vocab_size)
    else:
        prompt = _int_list(ids, "input_ids")
    return _params(body, body.get("sampling_params"), "max_new_tokens", prompt, cfg, rid)


def parse_openai(body: Any, cfg: SimConfig, rid: str, chat: bool) -> GenParams:
    """An OpenAI /v1/completions or /v1/chat/completions body."""
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise BadRequest("messages must be a non-empty list")
        parts: list[str] = []
        for m in msgs:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list):
                content = " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
            if not isinstance(content, str):
                raise BadRequest("each message needs a string content")
            parts.append(content)
        prompt = text_to_ids(" ".join(parts), cfg.vocab_size) or [0]
    else:
        raw = body.get("prompt")
        if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], str | list):
            raw = raw[0]  # a batch of one prompt
        if isinstance(raw, str):
            prompt = text_to_ids(raw, cfg.vocab_size)
        elif isinstance(raw, list) and raw:
            prompt = _int_list(raw, "prompt")
        else:
            raise BadRequest("prompt must be a string or a list of token ids (one prompt)")
    key = "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens"
    return _params(body, body, key, prompt, cfg, rid)


def spec_fields(emitted: int, verify_ct: int, num_steps: int) -> dict[str, Any]:
    """SGLang's per-request speculative fields (accept length counts the bonus token)."""
    correct = emitted - 1 - verify_ct
    proposed = verify_ct * num_steps
    return {
        "spec_accept_rate": correct / proposed if proposed else 0.0,
        "spec_accept_length": emitted / verify_ct,
        "spec_num_correct_drafts": correct,
        "spec_num_proposed_drafts": proposed,
        "spec_verify_ct": verify_ct,
    }


@dataclass(slots=True)
class NativeStream:
    """Builds the SSE events of one native streaming /generate, text and ids so far in each."""

    req: Request
    rid: str
    num_steps: int
    text: str = ""
    ids_parts: list[str] = field(default_factory=list)
    head: str = field(init=False)

    def __post_init__(self) -> None:
        self.head = json.dumps(self.rid)  # once: each event is plain string building

    def event(self, ch: Chunk) -> bytes:
        req = self.req
        new = req.tokens.ids[len(self.ids_parts) : ch.emitted]
        self.text += detokenize(new)
        self.ids_parts.extend([str(t) for t in new])
        fin = f'{{"type":"length","length":{ch.emitted}}}' if ch.finished else "null"
        spec = ""
        if ch.verify_ct:
            fields = spec_fields(ch.emitted, ch.verify_ct, self.num_steps)
            spec = "".join(f',"{k}":{v!r}' for k, v in fields.items())
        return (
            f'data: {{"text":"{self.text}","output_ids":[{",".join(self.ids_parts)}],'
            f'"meta_info":{{"id":{self.head},"finish_reason":{fin},'
            f'"prompt_tokens":{req.prompt_len},"weight_version":"default",'
            f'"completion_tokens":{ch.emitted},"cached_tokens":0,'
            f'"e2e_latency":{ch.t - req.arrival!r}{spec}}}}}\n\n'
        ).encode()

    def tail(self) -> bytes:
        return b""


def native_body(req: Request, rid: str, now: float, num_steps: int) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": rid,
        "finish_reason": {"type": "length", "length": req.emitted},
        "prompt_tokens": req.prompt_len,
        "weight_version": "default",
        "completion_tokens": req.emitted,
        "cached_tokens": 0,
        "e2e_latency": now - req.arrival,
    }
    if req.verify_ct:
        meta.update(spec_fields(req.emitted, req.verify_ct, num_steps))
    ids = req.tokens.ids
    return {"text": detokenize(ids), "output_ids": list(ids), "meta_info": meta}


def _usage(req: Request) -> dict[str, Any]:
    return {
        "prompt_tokens": req.prompt_len,
        "completion_tokens": req.emitted,
        "total_tokens": req.prompt_len + req.emitted,
        "prompt_tokens_details": None,
    }


@dataclass(slots=True)
class OpenAIStream:
    """Builds the OpenAI SSE events (completions or chat) of one streaming request."""

    req: Request
    rid: str
    model: str
    chat: bool
    usage: bool
    created: int = field(default_factory=lambda: int(time.time()))
    sent: int = 0
    started: bool = False

    def _event(self, choices: list[dict[str, Any]], usage: Any = None) -> bytes:
        obj: dict[str, Any] = {
            "id": self.rid,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": usage,
        }
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    def _choice(self, piece: Any, finish: str | None = None) -> list[dict[str, Any]]:
        key = "delta" if self.chat else "text"
        choice = {"index": 0, key: piece, "logprobs": None, "finish_reason": finish}
        return [{**choice, "matched_stop": None} if finish else choice]

    def event(self, ch: Chunk) -> bytes:
        """The SSE event(s) of one engine step: the new text, then the finish event."""
        delta = detokenize(self.req.tokens.ids[self.sent : ch.emitted])
        self.sent = ch.emitted
        out = b""
        if self.chat and not self.started:
            self.started = True
            out += self._event(self._choice({"role": "assistant", "content": ""}))
        out += self._event(self._choice({"content": delta} if self.chat else delta))
        if ch.finished:
            out += self._event(self._choice({} if self.chat else "", "length"))
        return out

    def tail(self) -> bytes:
        return self._event([], _usage(self.req)) if self.usage else b""


def openai_body(req: Request, rid: str, model: str, chat: bool) -> dict[str, Any]:
    text = detokenize(req.tokens.ids)
    message = {"role": "assistant", "content": text, "reasoning_content": None}
    choice: dict[str, Any] = {"index": 0, "message" if chat else "text": message if chat else text}
    choice.update({"logprobs": None, "finish_reason": "length", "matched_stop": None})
    return {
        "id": rid,
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": _usage(req),
    }


def error(message: str, code: int, type_: str) -> JSONResponse:
    """SGLang's error answer."""
    body = {"error": {"message": message, "type": type_, "param": None, "code": code}}
    return JSONResponse(body, status_code=code)
