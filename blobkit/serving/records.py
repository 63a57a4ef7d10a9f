"""The OpenAI wire records ``blobkit serve-model`` reads and writes: chat completions and the Responses subset.

Requests are strict (an unknown field is a 400 naming it), but they accept every field the official ``openai``
SDK and Codex send; the fields this endpoint reads are documented, the others are listed under *accepted, not
used*. Content is text only: an image or audio part is refused with a 400, never dropped.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Wire(BaseModel):
    """A request record: strict (unknown fields refused), frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Loose(BaseModel):
    """A nested record OpenAI lets grow (a tool's ``function``, a content part): unknown fields are kept, unread."""

    model_config = ConfigDict(extra="allow", frozen=True, use_attribute_docstrings=True)


# ----------------------------------------------------------------------------------------- chat completions


class FunctionSpec(Loose):
    """A function tool as the chat API declares it."""

    name: str
    """The tool's name (the world's declared tool name)."""
    description: str = ""
    """What the tool does."""
    parameters: dict[str, Any] = Field(default_factory=dict)
    """The tool's JSON Schema."""


class ChatTool(Wire):
    """One entry of ``tools``."""

    type: Literal["function"]
    """Only function tools."""
    function: FunctionSpec
    """The function."""


class CallFunction(Loose):
    """The function half of a tool call: its name and its arguments as a JSON string (OpenAI's wire form)."""

    name: str
    """The called tool."""
    arguments: str
    """The arguments, a JSON object written as a string."""


class ChatToolCall(Loose):
    """One tool call of an assistant message (in a request's history or in a completion)."""

    id: str
    """The call id (``call_<n>``, numbered across the conversation, as blobkit's own episodes number them)."""
    type: Literal["function"] = "function"
    """Always ``function``."""
    function: CallFunction
    """What was called."""


class ChatMessage(Wire):
    """One message of a chat-completion request (system, developer, user, assistant or tool)."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    """Who speaks; ``developer`` is read as ``system``."""
    content: str | list[dict[str, Any]] | None = None
    """Text, or a list of text parts; null on an assistant turn of calls only."""
    name: str | None = None
    """Accepted, not used."""
    tool_calls: list[ChatToolCall] | None = None
    """An assistant turn's calls."""
    tool_call_id: str | None = None
    """The call a tool message answers."""
    refusal: str | None = None
    """Accepted on assistant messages; read as their text when content is empty."""


class StreamOptions(Wire):
    """``stream_options``."""

    include_usage: bool = False
    """Send one last chunk holding the token counts."""


class ChatRequest(Wire):
    """``POST /v1/chat/completions``."""

    model: str
    """A loaded model id (``GET /v1/models``)."""
    messages: list[ChatMessage] = Field(min_length=1)
    """The conversation so far."""
    tools: list[ChatTool] | None = None
    """The tools the model may call, rendered in the export's own tool format."""
    tool_choice: Literal["auto", "none"] | dict[str, Any] | Literal["required"] | None = None
    """``auto`` (default) or ``none``; ``required`` and a named function are refused (this endpoint does not
    constrain decoding, so it cannot promise a call)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Most new tokens (default: the export's trained ``max_new_tokens``)."""
    max_completion_tokens: int | None = Field(default=None, ge=1)
    """The newer name of ``max_tokens``; the smaller wins when both are given."""
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    """0 or absent: greedy (what blobkit's evaluation and replay do); above 0: sampled."""
    seed: int | None = None
    """The sampling seed (sampled requests with the same seed give the same reply)."""
    stop: str | list[str] | None = None
    """Up to 4 strings; the reply is cut before the first one."""
    stream: bool = False
    """Server-sent ``chat.completion.chunk`` events, then ``data: [DONE]``."""
    stream_options: StreamOptions | None = None
    """Streaming options."""
    n: int | None = Field(default=None, ge=1, le=1)
    """Only 1."""
    top_p: float | None = None
    """Accepted, not used."""
    parallel_tool_calls: bool | None = None
    """Accepted, not used (the export writes as many calls per turn as it learned to)."""
    user: str | None = None
    """Accepted, not used."""
    metadata: dict[str, Any] | None = None
    """Accepted, not used."""
    store: bool | None = None
    """Accepted, not used (nothing is stored)."""


# ------------------------------------------------------------------------------------------- the Responses API


class ResponseTool(Loose):
    """One entry of a Responses request's ``tools``: function tools are read; a ``namespace`` is read as the
    function tools it holds (Codex groups an MCP server's tools that way); other kinds are refused."""

    type: str
    """``function`` or ``namespace``."""
    name: str | None = None
    """The function's (or namespace's) name."""
    description: str | None = None
    """What the tool does."""
    parameters: dict[str, Any] | None = None
    """A function's JSON Schema."""
    tools: list[dict[str, Any]] | None = None
    """A namespace's tools."""


class ResponsesRequest(Wire):
    """``POST /v1/responses``: the subset function-calling agents use (no stored state)."""

    model: str
    """A loaded model id."""
    input: str | list[dict[str, Any]]
    """A user string, or items: ``message`` (roles system, developer, user, assistant), ``function_call``,
    ``function_call_output`` (``reasoning`` items are skipped: this model writes none)."""
    instructions: str | None = None
    """A system message put first."""
    tools: list[ResponseTool] | None = None
    """The tools the model may call."""
    tool_choice: Literal["auto", "none"] | dict[str, Any] | Literal["required"] | None = None
    """As for chat completions."""
    max_output_tokens: int | None = Field(default=None, ge=1)
    """Most new tokens."""
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    """As for chat completions."""
    stream: bool = False
    """Server-sent events (``response.created`` … ``response.completed``)."""
    previous_response_id: str | None = None
    """Refused when given: nothing is stored, send the whole conversation."""
    store: bool | None = None
    """Accepted; false is what is done (nothing is stored)."""
    parallel_tool_calls: bool | None = None
    """Accepted, not used."""
    reasoning: dict[str, Any] | None = None
    """Accepted, not used (no reasoning is produced)."""
    include: list[str] | None = None
    """Accepted, not used."""
    prompt_cache_key: str | None = None
    """Accepted, not used."""
    client_metadata: dict[str, Any] | None = None
    """Accepted, not used (Codex sends it)."""
    metadata: dict[str, Any] | None = None
    """Accepted, not used."""
    text: dict[str, Any] | None = None
    """Accepted, not used (plain text only)."""
    top_p: float | None = None
    """Accepted, not used."""
    service_tier: str | None = None
    """Accepted, not used."""
    truncation: str | None = None
    """Accepted, not used."""
    user: str | None = None
    """Accepted, not used."""
