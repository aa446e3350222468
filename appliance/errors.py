"""One exception family. Every message is one line that says what went wrong and what to do."""

from __future__ import annotations


class ApplianceError(Exception):
    """Base of every error the appliance raises on purpose; the CLI prints it as one line."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None):
        self.message = message
        self.hint = hint
        super().__init__(self.one_line())

    def one_line(self) -> str:
        text = self.message.strip().replace("\n", " ")
        if self.hint:
            text = f"{text} ({self.hint.strip()})"
        return text


class ConfigError(ApplianceError):
    """A configuration file, key or value is wrong."""

    exit_code = 2


class UsageError(ApplianceError):
    """The user's input (question, file, option) cannot be used."""

    exit_code = 2


class ModelError(ApplianceError):
    """A model file is missing, corrupt, not GGUF, has the wrong hash or cannot be loaded."""

    exit_code = 3


class ModelOutputError(ApplianceError):
    """The model gave no valid output after its retries; carries every attempt."""

    exit_code = 4

    def __init__(self, message: str, *, attempts: list[str] | None = None, last_raw: str = "",
                 hint: str | None = None):
        self.attempts = list(attempts or [])
        self.last_raw = last_raw
        super().__init__(message, hint=hint)


class GrammarError(ApplianceError):
    """A schema could not be compiled into a grammar."""

    exit_code = 4


class SearchError(ApplianceError):
    """A search backend failed (unreachable, misconfigured, bad answer)."""

    exit_code = 5


class FetchError(ApplianceError):
    """A page could not be fetched or extracted. Recorded as an outcome inside runs."""

    exit_code = 5


class CorpusError(ApplianceError):
    """A local corpus is missing or cannot be read or written."""

    exit_code = 5


class StateError(ApplianceError):
    """The state folder (APPLIANCE_HOME) cannot be written: read-only, full, or not a folder."""

    exit_code = 6


class ContextOverflowError(ApplianceError):
    """A prompt cannot fit the model's context window, even after trimming its variable text."""

    exit_code = 4


class RunCancelled(ApplianceError):
    """A run was asked to stop (a served job's cancel); raised at its next model call."""

    exit_code = 130
