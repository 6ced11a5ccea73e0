"""The OpenAI-compatible request and error shapes of ``agon serve``: what a request may say.

Requests are read with pydantic: a field of the wrong type, a value out of range or a
known OpenAI option the cascade cannot honour is a 400 with OpenAI's error body
(``{"error": {"message", "type", "param", "code"}}``) naming the field and the value, so any
OpenAI client raises its usual ``BadRequestError``. Unknown fields are ignored, as OpenAI-style
servers do. Values left out take the bundle's own sampling settings (its rollout's
``temperature``, ``top_p``, ``top_k`` and ``max_new_tokens``); ``temperature: 0`` decodes
greedily.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agon_lightning.game.prompts import Prompts


class APIError(Exception):
    """An error the server answers with OpenAI's error body and ``status``."""

    def __init__(
        self,
        status: int,
        message: str,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


# OpenAI options the cascade does not implement, with the values that ask for nothing.
UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    "logprobs": (None, False, 0),
    "top_logprobs": (None, 0),
    "echo": (None, False),
    "best_of": (None, 1),
    "suffix": (None, ""),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "logit_bias": (None, {}),
    "tools": (None, []),
    "functions": (None, []),
}


class StreamOptions(BaseModel):
    include_usage: bool = False


class SamplingRequest(BaseModel):
    """What both endpoints take besides the input."""

    model_config = ConfigDict(extra="allow")

    model: str | None = Field(
        None, description="a name from /v1/models; default: the bundle's deployed policy"
    )
    n: int = Field(1, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=-1, description="0 or -1: off")
    max_tokens: int | None = Field(None, ge=1, description="each stage's completion budget")
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None

    @field_validator("stop")
    @classmethod
    def _stop(cls, value: str | list[str] | None) -> list[str]:
        stops = [value] if isinstance(value, str) else list(value or [])
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError(f"stop takes up to 4 non-empty strings, got {value!r}")
        return stops

    @model_validator(mode="after")
    def _supported(self) -> SamplingRequest:
        for name, value in (self.model_extra or {}).items():
            if name in UNSUPPORTED and value not in UNSUPPORTED[name]:
                raise ValueError(f"{name}={value!r} is not supported by agon serve")
        return self

    @property
    def budget(self) -> int | None:
        """``max_completion_tokens`` (the newer name) or ``max_tokens``."""
        return self.max_completion_tokens or self.max_tokens


def _text(content: Any) -> str:
    """A message's text: a string, or the ``text`` parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise ValueError("message content must be a string or a list of text parts")


SYSTEM_ROLES = ("system", "developer")  # OpenAI's newer name for the system message


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(SamplingRequest):
    """``POST /v1/chat/completions``: the last message, a user's, is the problem the cascade solves.

    The bundle's own prompt templates wrap it, as in training. The request's system (or
    developer) messages are its :meth:`system` message, shown to the model where the bundle's
    training showed system messages (:func:`shown_system`, which names in ``warnings`` what is not
    shown); earlier user and assistant turns are not shown (:meth:`earlier_turns`).
    """

    messages: list[Message] = Field(min_length=1)

    @field_validator("messages")
    @classmethod
    def _last_is_user(cls, messages: list[Message]) -> list[Message]:
        if messages[-1].role != "user":
            raise ValueError(f"the last message must be the user's problem, got role {messages[-1].role!r}")
        for message in messages:
            if message.role in SYSTEM_ROLES:
                _text(message.content)
        _text(messages[-1].content)
        return messages

    def questions(self) -> list[str]:
        return [_text(self.messages[-1].content)]

    def system(self) -> str | None:
        """The system and developer messages' text, in order (``None``: none that says anything)."""
        texts = [t for m in self.messages if m.role in SYSTEM_ROLES and (t := _text(m.content)).strip()]
        return "\n\n".join(texts) if texts else None

    def earlier_turns(self) -> list[str]:
        """The roles of the messages before the last that are neither system nor developer."""
        return [m.role for m in self.messages[:-1] if m.role not in SYSTEM_ROLES]


def shown_system(
    req: ChatRequest, trained: str | None, prompts: Prompts, tokenizer: Any
) -> tuple[str | None, list[str]]:
    """The request's system message as the model reads it (``None``: the bundle's prompts decide), and
    a warning for each part of the request the model is not shown as asked.

    The system message is shown where the bundle's training showed system messages (``trained``,
    ``agon.json``'s ``system_messages``: ``per_row``, or ``template`` with a warning when it differs
    from the one the pair was trained with); not where training showed none or the prompts have no
    chat template to put it in; shown with a warning where the bundle does not record it.
    """
    warnings = []
    if earlier := req.earlier_turns():
        warnings.append(
            f"only the last user message is solved: {len(earlier)} earlier turns (roles {earlier}) "
            "were not shown to the model"
        )
    system = req.system()
    if system is None:
        return None, warnings
    trained = trained or ("template" if prompts.system else None)
    if not prompts.chat_template or getattr(tokenizer, "chat_template", None) is None:
        why = "prompts.chat_template is false" if not prompts.chat_template else "the tokenizer has none"
        warnings.append(
            "the system message was not shown to the model: the bundle's prompts are not rendered "
            f"through a chat template ({why}), so training showed none either"
        )
        return None, warnings
    if trained == "none":
        warnings.append(
            "the system message was not shown to the model: its training showed it no system message "
            "(agon.json: system_messages 'none'), so serving does not either"
        )
        return None, warnings
    if trained == "template" and system != prompts.system:
        warnings.append(
            f"the system message replaced the bundle's ({prompts.system!r}, prompts.system), the only "
            "one the pair was trained with"
        )
    if trained is None:
        warnings.append(
            "the system message was shown to the model, but the bundle does not record whether its "
            "training showed system messages (agon.json has no system_messages: saved before it was "
            "recorded, or without its training data)"
        )
    return system, warnings


class CompletionRequest(SamplingRequest):
    """``POST /v1/completions``: each prompt is a problem, wrapped in the bundle's templates.

    The prompt is solved, not continued verbatim; token-id prompts are refused.
    """

    prompt: str | list[str]

    @field_validator("prompt")
    @classmethod
    def _prompts(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and not value:
            raise ValueError("prompt must be a string or a non-empty list of strings")
        return value

    def questions(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)


def validation_error(errors: list[dict[str, Any]]) -> APIError:
    """pydantic's first error as OpenAI's 400, naming the field and the value."""
    if not errors:
        return APIError(400, "the request body could not be read")
    first = errors[0]
    where = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(where) or None
    message = str(first.get("msg", "invalid value"))
    if first.get("type") == "json_invalid":
        return APIError(400, f"the request body is not valid JSON: {first.get('ctx', {}).get('error', '')}")
    if "input" in first and first.get("type") != "missing":
        message += f" (got {first['input']!r})"
    return APIError(400, f"{param}: {message}" if param else message, param=param)
