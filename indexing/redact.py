"""Secret redaction before anything is stored: a table of named patterns and one pure function.

Every write path (the `remember` tool, CLI imports, the note watcher, transcript capture) goes
through `Memory.ingest`, which applies `redact_item` unless the server runs with `--no-redact`.
A match is replaced by `[REDACTED:<name>]`; markers never match a pattern again, so redacting
twice changes nothing. The patterns err towards redacting: a stored secret cannot be unstored
from every backup, a lost word costs little.
"""

from __future__ import annotations

import base64
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.redact_commands import (
    OPTION,
    OPTION_NEEDLES,
    PIPED,
    POSITIONAL,
    USER_SLASH_PASSWORD,
    after_curl,
    owns_option,
)

REDACTED_FIELDS = ("text", "title", "speaker", "session")
# fields that name an item: a credential there is refused, not replaced (two refs would become one)
REFUSED_FIELDS = ("ref", "path", "supersedes")


def marker(name: str) -> str:
    return f"[REDACTED:{name}]"


MARKER = re.compile(r"\[REDACTED:([a-z0-9-]+)\]")  # a marker in text; its group is the pattern's name


@dataclass(frozen=True)
class Pattern:
    """A named secret shape. `group` is the part replaced (0: the whole match); `accept` may
    veto a match (placeholders, code, ordinary words)."""

    name: str
    regex: re.Pattern[str]
    group: int = 0
    accept: Callable[[re.Match[str]], bool] = field(default=lambda _match: True)
    # lowercase literals of which a match must hold one; text holding none skips the pattern
    needles: tuple[str, ...] = ()


def shannon_entropy(value: str) -> float:
    """Bits per character of `value`'s character distribution (Shannon 1948)."""
    if not value:
        return 0.0
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def _random(value: str) -> bool:
    """High-entropy values in env-like lines: long, mixed letters and digits, >= 3.5 bits/char."""
    has_letter = any(c.isalpha() for c in value)
    has_digit = any(c.isdigit() for c in value)
    return len(value) >= 16 and has_letter and has_digit and shannon_entropy(value) >= 3.5


PLACEHOLDER_MARKS = ("xxxx", "****", "your_", "your-", "<", "$", "{{", "%(", "%s")
PLACEHOLDER_WORDS = ("none", "null", "true", "false", "changeme", "password", "secret", "redacted", "example")


def _is_placeholder(value: str) -> bool:
    """`$DB_PASSWORD`, `<your password>`, `changeme`, `password_here`: not a value. A word
    followed by digits (`Password123!`, `secretP4ss99`) is a weak password, not a placeholder."""
    lowered = value.lower()
    if lowered.startswith(PLACEHOLDER_MARKS) or set(lowered) <= {"*", "x", ".", ":"}:
        return True
    word = next((w for w in PLACEHOLDER_WORDS if lowered.startswith(w)), None)
    return word is not None and not any(c.isdigit() for c in lowered[len(word):])


def _is_code(value: str) -> bool:
    """`password = form.password`, `token = read_token`, `secretName: db-credentials`: a name
    in code or configuration, not a value."""
    return bool(re.fullmatch(r"[A-Za-z_]+(?:\.[A-Za-z_]+)+|[a-z]+(?:_[a-z]+)+|[a-z]+(?:-[a-z]+)+",
                             value))


# the last word of a name that says its value is a setting about a secret, not the secret
SETTING_WORDS = frozenset({"type", "header", "url", "uri", "endpoint", "hasher", "length", "len", "limit",
                           "budget", "timeout", "ttl", "expiry", "expires", "seconds", "minutes", "hours",
                           "days", "size", "count", "max", "min", "rate", "threshold", "file", "path",
                           "name", "format", "algorithm", "version"})


def _words(name: str) -> list[str]:
    """`MAX_TOKEN_LENGTH`, `apiKeyHeader`: the lowercase words of a name."""
    return [w.lower() for w in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z0-9]+(?![a-z])", name)]


def _a_setting(match: re.Match[str]) -> bool:
    """`TOKEN_BUDGET=1200`, `token_type="Bearer"`, `api_key_header = "X-API-Key"`: a name whose
    last word says it is a setting holds a value unlike a random one (an allowance for a key that
    happens to sit there)."""
    name = re.match(r"[A-Za-z0-9_-]*", match.group(0)).group(0)
    words = _words(name)
    return bool(words) and words[-1] in SETTING_WORDS and not _random(match.group(2))


def _assigned(match: re.Match[str]) -> bool:
    """`password=...`: any value that is neither a placeholder, a setting, an address nor,
    unquoted, a name in code."""
    quoted, value = match.group(1), match.group(2)
    if _is_placeholder(value) or "://" in value or _a_setting(match):
        return False
    return bool(quoted) or not _is_code(value)


_PATH = re.compile(r"(?:~|\.\.?)?(?:/[\w.-]+){2,}+/?")  # ~/.ssh/deploy_ed25519, /run/secrets/db


def _a_path(value: str) -> bool:
    """`private key: ~/.ssh/deploy_ed25519`: where a secret is kept, not the secret."""
    return bool(_PATH.fullmatch(value))


def _a_reference(value: str) -> bool:
    """A value that names or points at a secret rather than holding it: a placeholder, a name in
    code, an address or a path."""
    return _is_placeholder(value) or _is_code(value) or "://" in value or _a_path(value)


def _stated(match: re.Match[str]) -> bool:
    """`secret: ...` in YAML, JSON or prose: quoted values, or unquoted ones unlike a word (a word
    and its colon, as in a log's `refresh_token: KeyError: exp`, is a label) or a reference."""
    quoted, value = match.group(1), match.group(2)
    if _a_reference(value) or _a_setting(match):
        return False
    return bool(quoted) or (len(value) >= 8 and not value.removesuffix(":").isalpha())


def _said(match: re.Match[str]) -> bool:
    """`the staging password is Xk9#mm2pq`, `ssh in with password Xk9#mm2pq`: in prose, a value of 6
    characters or more that holds a digit, or a quoted one that the key word is or was (not `the
    token is expired`, `the password is 12 characters long`, `the password reset flow`, nor a
    secret's name: `the secret 'intro'`)."""
    quoted, value = match.group(1), match.group(2).rstrip(".,;:!?")
    if _a_reference(value):
        return False
    said = re.search(r"[ \t](?:is|was)[ \t]++[\"']?$", match.string[match.start():match.start(2)])
    return bool(quoted and said) or (len(value) >= 6 and any(c.isdigit() for c in value))


def _credential_in_url(match: re.Match[str]) -> bool:
    return not _is_placeholder(match.group(1))


def _flag_value(match: re.Match[str]) -> bool:
    """`--password hunter2`, `--token "$(cat f)"`: the flag's argument, unless a placeholder, a
    name in code or, unquoted, a plain word (`the --password option`)."""
    quoted, value = match.group(1), match.group(2)
    if _is_placeholder(value) or value.startswith("-") or _is_code(value):
        return False
    return bool(quoted) or not value.rstrip(".,;:!?)").isalpha()


def _phrase(match: re.Match[str]) -> bool:
    """`password: "correct horse battery staple"`: a quoted value with spaces (the other rules
    take values without them)."""
    return " " in match.group(2) and not _is_placeholder(match.group(2)) and not _a_setting(match)


def _basic_credentials(match: re.Match[str]) -> bool:
    """`Authorization: Basic dXNlcjpwYXNz`: base64 of `user:password`, not the word after "basic"."""
    try:
        decoded = base64.b64decode(match.group(1), validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        return False
    return ":" in decoded and decoded.isprintable()


DIGEST_WORDS = frozenset({"sha", "sha1", "sha256", "commit", "rev", "revision", "hash", "digest", "checksum"})
ID_WORDS = frozenset({"trace", "request", "span", "correlation", "ray"})
HEX_ID = re.compile(r"[0-9a-fA-F]{7,64}(?:-[A-Z]{3})?")  # a Cloudflare ray id ends in its data centre
SELF_DESCRIBED = re.compile(
    r"(?:sha1|sha256|sha512|md5):[0-9a-fA-F]{32,128}"  # IMAGE_TAG=sha256:...
    r"|v?\d+(?:\.\d+)+(?:[-+~][a-z0-9.-]+)?"  # NODE_VERSION=20.11.1-bookworm-slim
    r"|[A-Za-z_][\w.]*\((?:.*\))?")  # hasher = argon2.PasswordHasher(), a call (its arguments may follow)


def _looks_random_value(match: re.Match[str]) -> bool:
    """An env-like line's random value; a URL there is an address (credentials in it are the URL
    rule's), and hex under a name that says it is a digest (`GIT_SHA=`, `COMMIT=`) or a request's
    id (`CF_RAY=`, `TRACE_ID=`) a version or a label, not a secret (a name that says secret is the
    assignment rule's); so are a digest, a version and a call that say what they are."""
    value = match.group(2)
    words = _words(re.match(r"\s*(?:export\s+)?(\w+)", match.group(0)).group(1)) or [""]  # GIT_SHA, gitSha
    an_id = words[-1] == "ray" or (words[-1] == "id" and bool(ID_WORDS & set(words)))
    if HEX_ID.fullmatch(value) and (DIGEST_WORDS & set(words) or an_id):
        return False
    return "://" not in value and not SELF_DESCRIBED.fullmatch(value) and _random(value)


def _unlike_words(match: re.Match[str]) -> bool:
    """`sk-learn-model-selection-helpers` in a comment, `sk-toggleable__label` in CSS: words, not a key."""
    return not re.fullmatch(r"[a-z_-]+", match.group(0).split("-", 1)[1])


def _user_password(match: re.Match[str]) -> bool:
    """`curl -u admin:S3cr3t`: the password, unless a placeholder, a URL's rest (`-u redis://...`)
    or, as in `docker run -u 1000:1000` or `-u www-data:staff`, a user and group (curl's `-u` is
    always a user and password: `curl --user deploy:hunter`)."""
    user, value = match.group(2), match.group(3)
    if _is_placeholder(value) or value.startswith("//"):
        return False
    if after_curl(match):
        return True
    return not (value == user or re.fullmatch(r"[a-z_][a-z0-9_-]*|\d+", value))


def _aws_secret_shaped(match: re.Match[str]) -> bool:
    """40 base64 characters alone, with upper and lower case, a digit and a `/` or `+`: the
    shape of an AWS secret access key (a hex digest lacks some of these; a path's parts are words)."""
    value = match.group(0)
    return (any(c.isupper() for c in value) and any(c.islower() for c in value)
            and any(c.isdigit() for c in value) and ("/" in value or "+" in value)
            and shannon_entropy(value) >= 4.2 and not all(map(_WORDISH.fullmatch, value.split("/"))))


_WORDISH = re.compile(r"\d+|[A-Z]?[a-z]+(?:[A-Z][a-z]+)*|[A-Z]{2,}")  # users/105941/KautskyNichols: a path


# Every pattern is linear in the text: a token may start only where its own character run
# starts (a lookbehind), and runs are possessive or bounded, so "sk-sk-sk-..." or
# "token_token_..." cost one scan, not one per position.
_NAMES = r"password|passwd|passphrase|secret|token|api[ _-]?key|apikey|access[ _-]?key|private[ _-]?key"
_SUFFIX = r"[A-Za-z0-9_]{0,24}+[\"']?"  # DB_PASSWORD, clientSecret
_FIRST = r"(?=[AaPpSsTt\u017f])"  # a key word's first letter (ignoring case, `ſ` is an `s`): a fast scan
_KEY = _FIRST + r"(?i:" + _NAMES + r")(?![a-z0-9])" + _SUFFIX
# `DB_PASS=`, `MYSQL_PWD=`, `dbPass=`, `pass=` as a name's last word, never `PASSAGE`, `bypass`,
# `compass`, `pass_context` (a compiler's or a function's pass) or `PWD=` (a folder)
_PASS = r"(?:(?<![A-Za-z0-9-])(?i:pass)|(?<=_)(?i:pwd)|(?<=[a-z0-9])(?:Pass|Pwd))(?![A-Za-z0-9_])[\"']?"
_KEY_EQ = _FIRST + r"(?:" + _PASS + r"|(?i:" + _NAMES + r")(?![a-z0-9])" + _SUFFIX + ")"
# a key word on its own in prose, maybe with a short qualifier: "the password for the staging db"
_PROSE_KEY = (r"(?<![A-Za-z0-9])" + _FIRST + r"(?i:" + _NAMES + r")(?![A-Za-z0-9_])"
              r"(?:[ \t]++(?:for|of|on|at)(?:[ \t]++(?!(?:is|was)(?![\w.@-]))[\w.@-]{1,40}+){1,3}+)?+")
_VALUE = (r"([\"']?)([A-Za-z0-9_\-./+=!@#$%^&*~?:]{4,512}+)\1"
          r"(?![A-Za-z0-9_\-./+=!@#$%^&*~?:(\[])")  # a value, not a call or an index
_B64 = r"(?<![A-Za-z0-9_-])"  # the start of a base64url run
_ARG = r"([\"'])?((?:(?(1)[^\"'\n]|[^\s\"'])){1,256}+)(?(1)\1|(?!\S))"  # a shell argument, maybe quoted
_KEY_WORDS = ("pass", "pwd", "secret", "token", "key")


def _a_password(value: str) -> bool:
    """A command's password argument: not a placeholder (`-p$MYSQL_PWD`) nor the next option."""
    return not (_is_placeholder(value) or value.startswith("-"))


def _a_password_option(match: re.Match[str]) -> bool:
    """`docker login -p X`: a password option's value, where the command is the option's own."""
    return _a_password(match.group(2)) and owns_option(match)


# Order matters: specific provider shapes first, so a key is named for what it is; the generic
# assignment and entropy rules then catch what is left. Needles are checked case-insensitively.
PATTERNS: tuple[Pattern, ...] = (
    Pattern("private-key", re.compile(
        r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:.*?-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|.*\Z)", re.DOTALL), needles=("-----begin ",)),
    Pattern("anthropic-key", re.compile(_B64 + r"sk-ant-[A-Za-z0-9_-]{20,}+"), needles=("sk-ant-",)),
    Pattern("openai-key", re.compile(_B64 + r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}+"),
            accept=_unlike_words, needles=("sk-",)),
    Pattern("stripe-key", re.compile(r"(?<![A-Za-z0-9_])(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}+"),
            needles=("_live_", "_test_")),
    Pattern("aws-access-key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b"),
            needles=("akia", "asia", "agpa", "aida", "aroa")),
    Pattern("aws-secret-key", re.compile(
        r"(?i)\baws_?secret_?access_?key\b[\"']?\s*+[=:]\s*+[\"']?([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"),
        group=1, needles=("aws",)),
    Pattern("github-token", re.compile(
        r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,}+|github_pat_[A-Za-z0-9_]{22,}+)"),
        needles=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    Pattern("slack-token", re.compile(r"(?<![A-Za-z0-9-])xox[abposr]-[A-Za-z0-9-]{10,}+"), needles=("xox",)),
    Pattern("gitlab-token", re.compile(_B64 + r"glpat-[A-Za-z0-9_-]{20,}+"), needles=("glpat-",)),
    Pattern("huggingface-token", re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}+"), needles=("hf_",)),
    Pattern("vault-token", re.compile(r"(?<![A-Za-z0-9_.-])hv[sbr]\.[A-Za-z0-9_-]{24,}+"),
            needles=("hvs.", "hvb.", "hvr.")),
    Pattern("npm-token", re.compile(r"(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36,}+"), needles=("npm_",)),
    Pattern("pypi-token", re.compile(_B64 + r"pypi-AgE[A-Za-z0-9_-]{50,}+"), needles=("pypi-",)),
    Pattern("sendgrid-key", re.compile(_B64 + r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])"),
            needles=("sg.",)),
    Pattern("google-oauth-secret", re.compile(_B64 + r"GOCSPX-[A-Za-z0-9_-]{20,}+"), needles=("gocspx-",)),
    Pattern("shopify-token", re.compile(r"(?<![A-Za-z0-9_])shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}(?![A-Za-z0-9])"),
            needles=("shp",)),
    Pattern("age-secret-key", re.compile(r"(?<![A-Za-z0-9-])AGE-SECRET-KEY-1[0-9A-Z]{50,}+"),
            needles=("age-secret-key-",)),
    Pattern("webhook-secret", re.compile(r"(?<![A-Za-z0-9_])whsec_[A-Za-z0-9+/=]{24,}+"), needles=("whsec_",)),
    Pattern("webhook-url", re.compile(
        r"(?i)\bhttps://(?:hooks\.slack\.com/(?:services|workflows|triggers)|"
        r"(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks)/([A-Za-z0-9/_-]{16,}+)"), group=1,
        needles=("https://",)),
    Pattern("google-api-key", re.compile(_B64 + r"AIza[0-9A-Za-z_-]{35}"), needles=("aiza",)),
    Pattern("jwt", re.compile(_B64 + r"eyJ[A-Za-z0-9_-]{8,}+\.eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+"),
            needles=("eyj",)),
    Pattern("bearer-token", re.compile(r"(?i)\bbearer\s++([A-Za-z0-9._~+/-]{20,}+=*+)"), group=1,
            needles=("bearer",)),
    Pattern("basic-credentials", re.compile(r"(?i)\bbasic[ \t]++([A-Za-z0-9+/]{8,}+={0,2})(?![A-Za-z0-9+/=])"),
            group=1, accept=_basic_credentials, needles=("basic",)),
    Pattern("docker-auth", re.compile(r"\"auth\"\s*+:\s*+\"([A-Za-z0-9+/]{8,}+={0,2})\""),
            group=1, accept=_basic_credentials, needles=('"auth"',)),
    Pattern("kubeconfig-credentials", re.compile(
        r"(?<![\w-])client-(?:key|certificate)-data\s*+:\s*+[\"']?([A-Za-z0-9+/]{16,}+={0,2})"),
        group=1, needles=("-data",)),
    Pattern("url-credentials", re.compile(
        r"(?<![a-z0-9+.-])[a-z][a-z0-9+.-]{0,15}+://[^\s:/@]{0,64}+:([^\s@/]{3,128}+)@"),
        group=1, accept=_credential_in_url, needles=("://",)),
    Pattern("user-credentials", re.compile(
        r"(?<![A-Za-z0-9_-])(?:-u|--user)(?:[ \t]++|=)([\"'])?([^\s:\"'@/]{1,64}+):"
        r"((?:(?(1)[^\"'\n]|[^\s\"'])){1,256}+)(?(1)\1|(?!\S))"), group=3, accept=_user_password,
        needles=("-u",)),
    Pattern("command-password", re.compile(OPTION + _ARG), group=2, accept=_a_password_option,
            needles=OPTION_NEEDLES),
    Pattern("command-password", re.compile(POSITIONAL + _ARG), group=2,
            accept=lambda m: _a_password(m.group(2)), needles=("htpasswd", "mc ", "configure")),
    Pattern("command-password", re.compile(PIPED + _ARG), group=2,
            accept=lambda m: _a_password(m.group(2)), needles=("-stdin", "sudo")),
    Pattern("command-password", re.compile(USER_SLASH_PASSWORD), group=1, accept=lambda m: _a_password(m.group(1)),
            needles=("sqlplus", "sqlldr", "expdp", "impdp")),
    Pattern("netrc-password", re.compile(
        r"(?m)^[ \t]*+(?:machine\s++\S++(?:\s++(?:login|account|port)\s++\S++)*+"
        r"|default(?:\s++(?:login|account|port)\s++\S++)++)\s++password\s++(\S++)"),
        group=1, accept=lambda m: not _is_placeholder(m.group(1)), needles=("password",)),
    Pattern("secret-flag", re.compile(
        r"(?<![A-Za-z0-9_-])--?(?:[a-z0-9]++-)*?(?i:password|passwd|passphrase|secret|token|api-?key|"
        r"access-key|private-key)[ \t]++([\"'])?((?:(?(1)[^\"'\n]|[^\s\"'])){4,256}+)(?(1)\1|(?!\S))"),
        group=2, accept=_flag_value, needles=_KEY_WORDS),
    Pattern("secret-assignment", re.compile(
        r"(?:" + _KEY_EQ + r"\s*+=|" + _KEY + r"\s*+:)\s*+([\"'])([^\"'\n]{4,256}+)\1"),
        group=2, accept=_phrase, needles=_KEY_WORDS),
    Pattern("secret-assignment", re.compile(_KEY_EQ + r"\s*+=\s*+" + _VALUE), group=2, accept=_assigned,
            needles=_KEY_WORDS),
    Pattern("secret-assignment", re.compile(_KEY + r"\s*+:\s*+" + _VALUE), group=2, accept=_stated,
            needles=_KEY_WORDS),
    Pattern("secret-statement", re.compile(_PROSE_KEY + r"(?:[ \t]++(?:is|was))?+[ \t]++" + _VALUE), group=2,
            accept=_said, needles=_KEY_WORDS),
    Pattern("high-entropy", re.compile(
        r"(?m)^[ \t]*+(?:export[ \t]++)?[A-Za-z_][A-Za-z0-9_]*+[ \t]*+=[ \t]*+([\"']?)"
        r"([^\s\"'#]{16,}+)\1[ \t]*+$"), group=2, accept=_looks_random_value, needles=("=",)),
    Pattern("aws-secret-key", re.compile(r"(?<![A-Za-z0-9/+=._-])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=._-])"),
            accept=_aws_secret_shaped, needles=("/", "+")),
)


@dataclass(frozen=True)
class Redacted:
    text: str
    counts: Mapping[str, int]  # pattern name -> replacements


def redact(text: str, patterns: tuple[Pattern, ...] = PATTERNS) -> Redacted:
    """Replace every secret-looking span of `text` by its marker; count replacements by name."""
    counts: Counter[str] = Counter()
    folded = _fold(text)
    for pattern in patterns:
        if pattern.needles and not any(needle in folded for needle in pattern.needles):
            continue  # a cheap test first: most patterns' literals are absent from most text
        text = pattern.regex.sub(lambda m, p=pattern: _replace(m, p, counts), text)
        if pattern.name in counts:  # a marker may hold a needle ("secret" in secret-assignment)
            folded += marker(pattern.name)
    return Redacted(text, dict(counts))


def _fold(text: str) -> str:
    """`text` lowercased so that it holds a needle wherever an ignore-case regex could match it:
    `re` also matches `İ`, `ı` and `ſ` (and the Kelvin sign, which lower() maps) to ASCII letters."""
    return text.lower().replace("\u0131", "i").replace("i\u0307", "i").replace("\u017f", "s")


def _replace(match: re.Match[str], pattern: Pattern, counts: Counter[str]) -> str:
    value = match.group(pattern.group)
    start, end = match.start(pattern.group) - match.start(), match.end(pattern.group) - match.start()
    whole = match.group(0)
    inside = whole[:start].endswith("[REDACTED:")  # the name in a marker an earlier pattern left
    if not value or value.startswith("[REDACTED") or inside or not pattern.accept(match):
        return whole
    counts[pattern.name] += 1
    return whole[:start] + marker(pattern.name) + whole[end:]


def redact_fields(values: Mapping[str, Any], names: tuple[str, ...] = REDACTED_FIELDS
                  ) -> tuple[dict[str, str], dict[str, int]]:
    """Of the text fields `names` of an item or a stored unit, those that redaction changes, with
    their new values, and the replacements by pattern name."""
    out, counts = {}, Counter[str]()
    for name in names:
        value = values.get(name)
        if isinstance(value, str):
            result = redact(value)
            if result.text != value:
                out[name] = result.text
                counts.update(result.counts)
    return out, dict(counts)


def redact_item(raw: Any, position: str = "item") -> tuple[Any, Mapping[str, int]]:
    """A raw remember item with its text fields redacted; anything else is returned as is
    (validation, not redaction, rejects malformed items). A credential in a field that names the
    item (its ref or path) is refused: there is nothing to replace it with."""
    if not isinstance(raw, dict):
        return raw, {}
    for name in REFUSED_FIELDS:
        value = raw.get(name)
        found = redact(value).counts if isinstance(value, str) else {}
        if found:
            raise InputError(f"{position}, field {name!r}: looks like it holds a credential "
                             f"({', '.join(sorted(found))}); name the item without it")
    changed, counts = redact_fields(raw)
    return {**raw, **changed}, counts
