"""Conversations for instruction tuning, preference pairs for DPO, and the chat templates that turn them into
text.

A record is a JSONL line or Parquet row holding ``messages`` in the OpenAI chat shape (``[{"role": "user",
"content": "..."}, {"role": "assistant", "content": "..."}]``, an optional ``system`` message first), or
``prompt`` and ``response`` (and an optional ``system``). A model folder's own chat template (``chat_template``
in ``tokenizer_config.json``, or ``chat_template.jinja``) renders it in a sandboxed Jinja environment (nothing in
it can reach Python); without one the documented default, ``DEFAULT_TEMPLATE``, does:

```text
### System:
{system}

### User:
{prompt}

### Assistant:
{response}<|endoftext|>
```

Only the assistant's text (and the token that ends its turn) is trained on.

A preference record holds ``prompt`` (text, or messages ending with the user's turn), ``chosen`` and ``rejected``
(text, or one assistant message each), as TRL's DPO data does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twinkle_core.data import DataError, MissingColumnError, Reader

from twinkle_llm.reading import Row, read_records, text_value

ROLES = ("system", "user", "assistant")
DEFAULT_TEMPLATE = "twinkle"
"""The name of the default template (``### User:`` / ``### Assistant:`` headers; a turn ends with the end-of-text
token)."""

Messages = list[dict[str, str]]


class ChatTemplateError(DataError):
    """A chat template that cannot render a conversation so that the assistant's tokens can be found."""


@dataclass
class Conversation:
    """One conversation (``messages``: role and content of each turn) and the record it came from."""

    messages: Messages
    file: str
    line: int

    def where(self) -> str:
        """``file, line N`` for messages."""
        return f"{self.file}, line {self.line}"


def check_messages(messages: object, where: str, *, complete: bool = True) -> Messages:
    """``messages`` as a list of ``{"role", "content"}`` turns in a valid order: an optional ``system`` turn first,
    then ``user`` and ``assistant`` alternating from ``user``; a conversation to train on (``complete``) ends with
    the assistant, a prompt to answer ends with the user.

    Raises:
        DataError: naming ``where`` and the turn (counted from 1) that is wrong.
    """
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{where}: 'messages' must be a non-empty list of {{\"role\": ..., \"content\": ...}} objects")
    checked: Messages = []
    for number, turn in enumerate(messages, start=1):
        if not isinstance(turn, dict) or "role" not in turn or "content" not in turn:
            raise DataError(f"{where}: message {number} is not an object with 'role' and 'content'")
        role = turn["role"]
        if role not in ROLES:
            raise DataError(f"{where}: message {number} has role {role!r}; use one of {', '.join(ROLES)}")
        expected = ("system", "user") if number == 1 else ("user",) if checked[-1]["role"] != "user" else ("assistant",)
        if role not in expected:
            after = f"after '{checked[-1]['role']}'" if checked else "first"
            raise DataError(f"{where}: message {number} is '{role}' {after}: roles out of order (an optional system "
                            "message first, then user and assistant turns alternating, starting with user)")
        checked.append({"role": role, "content": text_value(turn["content"], f"{where}: message {number}'s content")})
    last = checked[-1]["role"]
    wanted = "assistant" if complete else "user"
    if last != wanted:
        what = "a conversation to train on ends with the assistant's answer" if complete else \
            "a prompt ends with the user's turn (the model writes the assistant's)"
        raise DataError(f"{where}: the last message is '{last}': {what}")
    return checked


def conversation(row: Row) -> Conversation:
    """The conversation of a record (``messages``, or ``prompt``/``response`` with an optional ``system``).

    Raises:
        MissingColumnError: neither form is there; DataError: a malformed or out-of-order conversation.
    """
    values = row.values
    if "messages" in values:
        raw = values["messages"]
        if isinstance(raw, str):  # a Parquet column of JSON text
            try:
                raw = json.loads(raw)
            except ValueError as err:
                raise DataError(f"{row.where()}: 'messages' is text that is not valid JSON ({err})") from err
        return Conversation(check_messages(raw, row.where()), row.file, row.line)
    if "prompt" in values or "response" in values:
        turns = [{"role": "user", "content": values.get("prompt")},
                 {"role": "assistant", "content": values.get("response")}]
        if values.get("system") is not None:
            turns.insert(0, {"role": "system", "content": values["system"]})
        for name in ("prompt", "response"):
            row.text(name)
        return Conversation(check_messages(turns, row.where()), row.file, row.line)
    raise MissingColumnError(f"{row.where()}: no field 'messages', nor 'prompt' and 'response' (found: "
                             f"{', '.join(map(str, values))})")


def read_conversations(uri: str) -> tuple[list[Conversation], Reader]:
    """Every conversation of the JSONL or Parquet file(s) at ``uri``, in a stable order.

    Raises:
        UnsupportedFormatError, EmptyDataError, DataError: naming the file and line.
    """
    example = '{"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]}'
    return read_records(uri, "conversations", example, conversation)


@dataclass
class Pair:
    """One preference: a prompt (the conversation so far, ending with the user's turn), the answer preferred
    (``chosen``) and the one not (``rejected``), and the record it came from."""

    prompt: Messages
    chosen: str
    rejected: str
    file: str
    line: int

    def where(self) -> str:
        """``file, line N`` for messages."""
        return f"{self.file}, line {self.line}"

    def conversations(self) -> tuple[Messages, Messages]:
        """The prompt answered with ``chosen``, and with ``rejected``."""
        return ([*self.prompt, {"role": "assistant", "content": self.chosen}],
                [*self.prompt, {"role": "assistant", "content": self.rejected}])


def _answer(row: Row, name: str) -> str:
    """``chosen`` or ``rejected``: text, or TRL's conversational form (a list holding one assistant message)."""
    value = row.values.get(name)
    if isinstance(value, list):
        if len(value) != 1 or not isinstance(value[0], dict) or value[0].get("role") != "assistant":
            raise DataError(f"{row.where()}: '{name}' as a list must hold one assistant message, "
                            f"{{\"role\": \"assistant\", \"content\": \"...\"}}")
        return text_value(value[0].get("content"), f"{row.where()}: '{name}'")
    return row.text(name)


def pair(row: Row) -> Pair:
    """The preference of a record: ``prompt`` (text, or messages ending with the user's turn), ``chosen`` and
    ``rejected`` (text, or one assistant message each), as TRL's DPO data has them.

    Raises:
        MissingColumnError: a field is missing; DataError: an empty or malformed one, roles out of order, or
            two answers that are the same.
    """
    for name in ("prompt", "chosen", "rejected"):
        if name not in row.values:
            raise MissingColumnError(f"{row.where()}: no field '{name}' (found: {', '.join(map(str, row.values))});"
                                     " a preference holds prompt, chosen and rejected")
    prompt = row.values["prompt"]
    messages = (check_messages(prompt, row.where(), complete=False) if isinstance(prompt, list)
                else [{"role": "user", "content": row.text("prompt")}])
    chosen, rejected = _answer(row, "chosen"), _answer(row, "rejected")
    if chosen == rejected:
        raise DataError(f"{row.where()}: 'chosen' and 'rejected' are the same answer; a preference needs two")
    return Pair(messages, chosen, rejected, row.file, row.line)


def read_pairs(uri: str) -> tuple[list[Pair], Reader]:
    """Every preference of the JSONL or Parquet file(s) at ``uri``, in a stable order.

    Raises:
        UnsupportedFormatError, EmptyDataError, DataError: naming the file and line.
    """
    return read_records(uri, "preferences", '{"prompt": "...", "chosen": "...", "rejected": "..."}', pair)


class ChatTemplate:
    """Renders conversations as text and finds the characters of the assistant's turns in it.

    Args:
        source: ``DEFAULT_TEMPLATE`` or the model folder whose template it is.
        end_of_turn: the text of the token that ends the assistant's turn in the default template (the
            tokenizer's end-of-text token).
        jinja: the folder's Jinja template (``None``: the default).
        tokens: the special tokens a Jinja template may name (``bos_token``, ``eos_token``).
    """

    def __init__(self, source: str, end_of_turn: str, jinja: str | None = None,
                 tokens: dict[str, str] | None = None, origin: str | None = None) -> None:
        """Keep the template; a Jinja one is compiled on first use. ``origin``: the file and field it was read
        from, for errors (``<folder>/tokenizer_config.json's 'chat_template'``)."""
        self.source, self.end_of_turn, self.jinja, self.tokens = source, end_of_turn, jinja, dict(tokens or {})
        self.origin = origin or f"the chat template of '{source}'"
        self._compiled: Any = None

    def __getstate__(self) -> dict[str, Any]:
        """The template without its compiled form (copies and pickles compile again)."""
        return {**self.__dict__, "_compiled": None}

    def compiled(self) -> Any:
        """The Jinja template, compiled in a sandboxed environment as transformers renders chat templates
        (nothing in a template reaches Python's objects)."""
        if self._compiled is None:
            from jinja2.ext import loopcontrols
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            source = self.source

            def raise_exception(message: str) -> None:
                raise ChatTemplateError(f"the chat template of '{source}' refused the conversation: {message}")

            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
            env.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
            env.globals["raise_exception"] = raise_exception
            from jinja2 import TemplateSyntaxError

            try:
                self._compiled = env.from_string(self.jinja)
            except TemplateSyntaxError as err:
                raise ChatTemplateError(f"{self.origin} is not a valid Jinja template (line {err.lineno}: "
                                        f"{err.message}); fix it or remove it to use the default template") from None
        return self._compiled

    @classmethod
    def for_folder(cls, folder: str | None, end_of_turn: str) -> ChatTemplate:
        """The template of a model folder (its ``chat_template``), else the default."""
        if folder is None:
            return cls(DEFAULT_TEMPLATE, end_of_turn)
        path = Path(folder).expanduser()
        config: dict[str, Any] = {}
        if (path / "tokenizer_config.json").is_file():
            config = json.loads((path / "tokenizer_config.json").read_text())
        jinja = config.get("chat_template")
        origin = f"'{path / 'tokenizer_config.json'}' field 'chat_template'"
        if isinstance(jinja, list):  # named templates: the default one
            jinja = next((t.get("template") for t in jinja if t.get("name") == "default"), None)
        if jinja is None and (path / "chat_template.jinja").is_file():
            jinja, origin = (path / "chat_template.jinja").read_text(), f"'{path / 'chat_template.jinja'}'"
        if not jinja:
            return cls(DEFAULT_TEMPLATE, end_of_turn)
        tokens = {k: v if isinstance(v, str) else v.get("content", "") for k, v in config.items()
                  if k in ("bos_token", "eos_token") and isinstance(v, (str, dict))}
        return cls(str(folder), end_of_turn, jinja, tokens, origin)

    def render(self, messages: Messages, add_generation_prompt: bool = False) -> str:
        """The text of ``messages``; with ``add_generation_prompt`` it ends where the assistant's answer begins."""
        if self.jinja is None:
            text = "".join(self._default_turn(m) for m in messages)
            return text + "### Assistant:\n" if add_generation_prompt else text
        from jinja2 import TemplateError
        from jinja2.exceptions import SecurityError

        template = self.compiled()
        try:
            return str(template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                       **{"bos_token": "", "eos_token": self.end_of_turn, **self.tokens}))
        except SecurityError as err:
            raise ChatTemplateError(f"{self.origin} reaches for what the sandbox refuses ({err}); a chat template "
                                    "may only format the messages: fix the template or remove it to use the "
                                    "default one") from None
        except TemplateError as err:
            raise ChatTemplateError(f"{self.origin} failed to render a conversation ({type(err).__name__}: {err}); "
                                    "fix the template or remove it to use the default one") from None

    def _default_turn(self, message: dict[str, str]) -> str:
        role, content = message["role"], message["content"]
        end = self.end_of_turn if role == "assistant" else ""
        return f"### {role.capitalize()}:\n{content}{end}\n\n"

    def turn_end(self) -> str:
        """The text this template puts right after an assistant's answer, through the end of its turn
        (``"<|im_end|>\\n"`` in ChatML; the end-of-text token in the default template)."""
        answer = "Twinkle-answer"
        text, spans = self.with_spans([{"role": "user", "content": "Twinkle-question"},
                                       {"role": "assistant", "content": answer}], "a probe conversation")
        turn = text[spans[-1][0]:spans[-1][1]]
        found = turn.rfind(answer)
        return turn[found + len(answer):] if found >= 0 else ""

    def with_spans(self, messages: Messages, where: str) -> tuple[str, list[tuple[int, int]]]:
        """The text of a conversation and the ``[start, end)`` characters of each assistant turn (its content and
        the token that ends it), found by rendering the conversation up to each turn.

        Raises:
            ChatTemplateError: a template whose renderings of a conversation's beginnings are not beginnings of
                its whole rendering (the assistant's tokens could not be told apart).
        """
        text = self.render(messages)
        spans = []
        for number, turn in enumerate(messages):
            if turn["role"] != "assistant":
                continue
            start = len(self.render(messages[:number], add_generation_prompt=True))
            through = self.render(messages[: number + 1])
            if self.jinja is None:
                through = through[: -len("\n\n")]  # the default turn's separator is not trained on
            if not (text.startswith(through) and start <= len(through)
                    and text.startswith(self.render(messages[:number], add_generation_prompt=True))):
                raise ChatTemplateError(f"{where}: the chat template of '{self.source}' does not render the "
                                        f"conversation turn by turn (message {number + 1} changes what came "
                                        "before), so the assistant's tokens cannot be found")
            spans.append((start, len(through)))
        return text, spans
