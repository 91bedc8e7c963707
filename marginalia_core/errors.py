"""User-facing errors. Every message is written for the person who uploaded the file or asked the
question: it says what went wrong and, where possible, what to do. Never include secrets."""

from __future__ import annotations


class MarginaliaError(Exception):
    """Base of every expected failure; ``str(err)`` is safe to show to a user."""

    reason = "error"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class ExtractionError(MarginaliaError):
    """A file was refused before indexing. ``reason`` is a stable machine-readable code."""

    reason = "unreadable"


class UnsupportedTypeError(ExtractionError):
    reason = "unsupported"


class BinaryFileError(ExtractionError):
    reason = "binary"


class EncodingError(ExtractionError):
    reason = "encoding"


class EncryptedError(ExtractionError):
    reason = "encrypted"


class WrongPasswordError(EncryptedError):
    reason = "wrong_password"


class NoTextLayerError(ExtractionError):
    reason = "no_text"


class CorruptFileError(ExtractionError):
    reason = "corrupt"


class MislabelledFileError(CorruptFileError):
    """The content contradicts the file's name (a ``.pdf`` that is a PNG, a ``.txt`` that is a PDF)."""

    reason = "mislabelled"


class EmptyFileError(ExtractionError):
    reason = "empty"


class TooLargeError(ExtractionError):
    reason = "too_large"


class NearDuplicateError(ExtractionError):
    """The file's text is (nearly) a document already indexed: refused unless the person
    chose to replace that one. Names it, so the page can offer the replacement."""

    reason = "near_duplicate"

    def __init__(self, message: str, *, existing_id: str, existing_name: str):
        super().__init__(message)
        self.existing_id = existing_id
        self.existing_name = existing_name


class EmbeddingError(MarginaliaError):
    """The embedding service or model failed (after retries)."""

    reason = "embedding"


class AuthenticationError(EmbeddingError):
    reason = "auth"


class AnswerError(MarginaliaError):
    """The answer model failed; the partial answer is never saved."""

    reason = "answer"


class EmbedderMismatchError(MarginaliaError):
    """Stored vectors come from a different embedder than the active one."""

    reason = "embedder_mismatch"


class NotFoundError(MarginaliaError):
    reason = "not_found"


class ModelServerError(MarginaliaError):
    """An OpenAI-compatible model server is misconfigured or cannot do what was asked (e.g. it
    does not list its models)."""

    reason = "model_server"


class CancelledError(MarginaliaError):
    """A person cancelled an ingestion job; it stopped at a page or batch boundary and nothing
    of it was saved."""

    reason = "cancelled"


class JobInterruptedError(MarginaliaError):
    """An ingestion job stopped because its process is shutting down; its upload is kept so it
    can resume."""

    reason = "interrupted"


class InvalidInputError(MarginaliaError):
    """A request the user can fix (a blank title, say); nothing was changed."""

    reason = "invalid_input"


class MacroError(ExtractionError):
    """A macro-enabled Office file (.docm, .xlsm, ... or macros inside a .docx): never opened."""

    reason = "macros"


class FetchError(ExtractionError):
    """A web page could not be fetched (unreachable, an HTTP error, too slow, too big, not HTML)."""

    reason = "fetch"
