"""Chat templates: how a prompt reaches a target, as raw text or through its tokenizer's template.

Instruct checkpoints are evaluated by their authors through the chat template, so spotbench applies
it by default whenever the target's tokenizer has one (`--no-chat-template` prompts raw text, as a
base model is prompted). A system prompt becomes the first turn; few-shot examples become earlier
user/assistant turns (lm-evaluation-harness's `--fewshot_as_multiturn`), so the model sees them as
a conversation it took part in. What was done is recorded in the manifest (the suite's settings)
and in every row (`Chat.label`): `none` (the tokenizer has no template), `off` (disabled), or
`template:<sha256 prefix>`, which names the exact template text used.

What would be dropped silently is refused instead: a system prompt for a target whose template is
not applied, `--chat-template` (asked for explicitly) for a target without a template, and either of
them with token-id prompts, which go to the target as they are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.errors import UserError

NONE = "none"
OFF = "off"


@dataclass(frozen=True)
class Chat:
    tokenizer: Any
    enabled: bool | None = None
    """None: through the template when the tokenizer has one; True: asked for (a target without a
    template is refused); False: raw text."""
    system_prompt: str | None = None

    @property
    def template(self) -> str | None:
        template = getattr(self.tokenizer, "chat_template", None) if self.tokenizer is not None else None
        return template if isinstance(template, str) and template else None

    @property
    def applies(self) -> bool:
        return self.enabled is not False and self.template is not None

    @property
    def label(self) -> str:
        if self.template is None:
            return NONE
        if self.enabled is False:
            return OFF
        return "template:" + hashlib.sha256(self.template.encode()).hexdigest()[:12]

    def check(self, target_name: str) -> None:
        """A template asked for, and a system prompt, need a template to go into: refused rather than
        silently dropped."""
        if self.enabled is True and self.template is None:
            raise UserError(
                f"--chat-template needs a chat template, and target {target_name} has none; drop "
                "--chat-template (text prompts then go as they are) or use a target whose tokenizer "
                "has one"
            )
        if self.system_prompt is not None and not self.applies:
            why = "has no chat template" if self.template is None else "is prompted without its chat template"
            raise UserError(
                f"--system-prompt needs a chat template, and target {target_name} {why}; "
                "drop --system-prompt" + ("" if self.template is None else " or --no-chat-template")
            )

    def render(self, user_text: str, shots: Sequence[tuple[str, str]] = ()) -> str:
        """The conversation (system, shots as user/assistant turns, then `user_text`) through the
        template, ending with the assistant's turn opened. A template that fails is one line."""
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        for question, answer in shots:
            messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        messages.append({"role": "user", "content": user_text})
        try:
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception as error:  # noqa: BLE001 - jinja2 raises many types (syntax, undefined, raise_exception)
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise UserError(
                f"the tokenizer's chat template failed to render ({type(error).__name__}: {first}); "
                "fix chat_template in tokenizer_config.json or use --no-chat-template"
            ) from None


def check_token_id_prompts(enabled: bool | None, system_prompt: str | None, source: str) -> None:
    """Token-id prompts go to the target as they are, never through a template: a system prompt or a
    template asked for would be dropped, so they are refused (`source` names the prompts)."""
    for given, flag in ((system_prompt is not None, "--system-prompt"), (enabled is True, "--chat-template")):
        if given:
            raise UserError(
                f"{flag} is for text prompts, and {source} gives token ids, which go to the target as "
                f"they are (never through a chat template); drop {flag}"
            )


def as_chat(tokenizer_or_chat: Any) -> Chat:
    """A `Chat` from what a task was given: a `Chat`, or a bare tokenizer (template on) or None."""
    return tokenizer_or_chat if isinstance(tokenizer_or_chat, Chat) else Chat(tokenizer_or_chat)
