"""A hub repository's ONNX export, downloaded alone: the chosen `.onnx` file (and its external
data), the tokenizer and the small config files, never the PyTorch weights. Offline
(`HF_HUB_OFFLINE=1`, or no network) a snapshot already in the Hugging Face cache is used."""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

from huggingface_hub import HfApi, constants, snapshot_download
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

from agentmemrec.indexing.dense.install import CONFIG_FILES, choose_onnx, onnx_candidates
from agentmemrec.indexing.errors import InputError

log = logging.getLogger(__name__)


def reachable(url: str, timeout: float = 3.0) -> bool:
    """Whether the hub's host answers at all: without it, the hub client retries for about 30 s."""
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname or "", parts.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


# The transport errors of the HTTP client huggingface_hub uses: requests before 1.0, httpx in 1.x,
# httpx2 since. Only an imported client can have raised, so none is imported here.
TRANSPORT_ERRORS = (("requests.exceptions", ("ConnectionError", "Timeout", "ChunkedEncodingError")),
                    ("httpx", ("TransportError",)), ("httpx2", ("TransportError",)))


def unreachable_errors() -> tuple[type[BaseException], ...]:
    """What the hub client raises when the hub is not there, dropped the request or timed out (a
    download it gave up on, with no copy in the cache, is a LocalEntryNotFoundError)."""
    found: list[type[BaseException]] = [OfflineModeIsEnabled, LocalEntryNotFoundError]
    for module, names in TRANSPORT_ERRORS:
        if (loaded := sys.modules.get(module)) is not None:
            found += [getattr(loaded, name) for name in names if hasattr(loaded, name)]
    return tuple(found)


def hub_export(repo: str, quantize: str | None) -> Path | None:
    """The local snapshot holding `repo`'s ONNX export, or None when it has none (then optimum
    exports it from the PyTorch weights). Unreachable, with no copy in the cache: an InputError."""
    if not constants.HF_HUB_OFFLINE and reachable(constants.ENDPOINT):
        try:
            files = [s.rfilename for s in HfApi().model_info(repo, files_metadata=False).siblings or []]
            chosen = choose_onnx(files, quantize)
            if chosen is None:
                return None
            wanted = [chosen, f"{chosen}_data", *CONFIG_FILES, *(f"onnx/{f}" for f in CONFIG_FILES)]
            return Path(snapshot_download(repo, allow_patterns=wanted))
        except unreachable_errors() as exc:
            log.info("the hub is not reachable (%s); looking in the local Hugging Face cache", type(exc).__name__)
        except HfHubHTTPError as exc:
            raise InputError(f"cannot read {repo} on the hub ({exc}); check the id, or pass a local folder") from exc
    try:
        snapshot = Path(snapshot_download(repo, local_files_only=True))
    except LocalEntryNotFoundError:
        raise InputError(f"no file or folder {repo} here, and the hub ({constants.ENDPOINT}) cannot be reached with "
                         "no copy of it in the local Hugging Face cache; pass a folder holding an ONNX export, or "
                         "install the default set (agentmemrec models install --default)") from None
    names = [p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*.onnx")]
    return snapshot if onnx_candidates(names) else None
