"""Secrets given to shell commands as arguments, for indexing/redact.py: the password options of
named commands (`docker login -p X`, `redis-cli -a X`, `mysql -pX`), passwords in a named place
among a command's arguments (`htpasswd -b FILE USER X`, `sqlplus user/X@db`), and which command an
argument belongs to: the last one named since the start of the line or the last `;`, `&` or `|`.
What counts as a value (not a placeholder, not the next option) is redact.py's to say."""

from __future__ import annotations

import re

S = r"[ \t]++"  # the spaces between a command's arguments
WORD = r"[^\s;&|]{1,200}+"  # an argument, not across a `;`, `&&` or `|` that starts another command
# A named command's password options, each with the separator before its value: `redis-cli -a X`,
# `docker login -p X`, `mysql -pX` (its `-p` alone asks for the password, `-p X` names a database),
# `smbclient -U user%X`. The third field: literals that name the command (the pattern's needles).
COMMAND_OPTIONS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (r"mysql|mysqldump|mysqladmin|mariadb(?:-dump|-admin)?", r"-p", ("mysql", "mariadb")),
    (r"7z[arz]?", r"-p", ("7z",)),
    (r"sshpass(?:[ \t]++-v)?", r"-p(?:[ \t]++)?", ("sshpass",)),
    (r"redis-cli", r"(?:-a|--pass)" + S, ("redis-cli",)),
    (r"(?:docker|podman|nerdctl|buildah|skopeo|oras|az|cf|helm" + S + r"registry)" + S + r"login",
     r"-p" + S, ("login",)),
    (r"sqlcmd|bcp", r"-P" + S, ("sqlcmd", "bcp")),
    (r"ldap(?:search|modify|add|delete|compare|modrdn|passwd|whoami|exop)", r"-w" + S, ("ldap",)),
    (r"unzip|zip", r"-P" + S, ("zip",)),
    (r"mongo(?:sh|dump|restore|export|import|stat|top|files)?", r"-p" + S, ("mongo",)),
    (r"twine", r"-p" + S, ("twine",)),
    (r"ssh-keygen", r"-[NP]" + S, ("ssh-keygen",)),
    (r"keytool|jarsigner", r"-(?:src|dest)?(?:store|key)pass" + S, ("keytool", "jarsigner")),
    (r"openssl", r"-[kK]" + S + r"|-pass(?:in|out|word)?" + S + r"pass:", ("openssl",)),
    (r"apksigner", r"--(?:ks|key)-pass" + S + r"pass:", ("apksigner",)),
    (r"smbclient|rpcclient|smbcacls|smbget|smbmap", r"(?:-U" + S + r"|--user(?:name)?=)[^\s%\"']{1,64}+%",
     ("smb", "rpcclient")),
    (r"lftp", r"-u" + S + r"[^\s,\"']{1,64}+,", ("lftp",)),
)
OPTION_NEEDLES = tuple(needle for _, _, needles in COMMAND_OPTIONS for needle in needles)
# any option of the table, up to where its value starts, longest first (`-keypass`, not `-k`); which
# command it belongs to is `owns_option`'s to check
OPTION = (r"(?<![\w-])(?:" + "|".join(sorted({option for _, option, _ in COMMAND_OPTIONS}, key=lambda o: (-len(o), o)))
          + r")(?!-)")
_COMMAND = re.compile(r"(?<![\w.-])(?:" + "|".join(f"(?P<c{i}>{command})" for i, (command, _, _) in
                                                   enumerate(COMMAND_OPTIONS)) + r")(?=[ \t])")
_COMMAND_OPTION = tuple(re.compile(option) for _, option, _ in COMMAND_OPTIONS)
# a password in a named place among a command's arguments: `htpasswd -b FILE USER X` (`-nb USER X`),
# `mc alias set NAME URL ACCESS-KEY X`, `aws configure set aws_secret_access_key X`
POSITIONAL = (r"(?<![\w.-])(?:htpasswd" + S + r"-(?=[A-Za-z]{0,9}b)(?:(?=[A-Za-z]{0,9}n)[A-Za-z]++|[A-Za-z]++" + S
              + WORD + r")" + S + WORD + S + r"|mc" + S + r"(?:alias" + S + r"set|config" + S + r"host" + S
              + r"add)" + (S + WORD) * 3 + S + r"|aws" + S + r"configure" + S + r"set" + S
              + r"(?:[\w-]++\.)?+(?:aws_secret_access_key|aws_session_token)" + S + r")")
# a password piped to a command that reads it from its input: `echo X | docker login --password-stdin`,
# `echo X | sudo -S ...`, `echo X | passwd --stdin user`; what follows is the echoed argument
PIPED = (r"(?<![\w.-])(?:echo|printf)(?:" + S + r"-[neE]{1,3}+)?" + S + r"(?=(?:\"[^\"\n]{1,256}+\"|'[^'\n]{1,256}+'|[^\s\"'|]"
         r"{1,256}+)[ \t]*+\|[ \t]*+(?:sudo" + S + r"-S|(?:sudo" + S + r")?(?:(?:docker|podman|nerdctl|buildah|skopeo"
         r"|oras|helm" + S + r"registry)" + S + r"login" + r"[^\n;&|]{0,300}?--password-stdin|passwd" + S + r"--stdin)))")
# Oracle's tools take `user/password@database` as one argument: its group 1 is the password
USER_SLASH_PASSWORD = (r"(?<![\w.-])(?:sqlplus|sqlldr|expdp|impdp)(?:[ \t]++-\w{1,20}+)*+[ \t]++[\"']?"
                       r"[A-Za-z_][\w$#]{0,63}+/([^\s\"'@/]{1,128}+)")
COMMAND_REACH = 300  # characters before a match searched for the command it is an argument of
_CURL = re.compile(r"(?<![\w.-])curl(?=[ \t])")


def command_before(match: re.Match[str]) -> str:
    """The shell command a match is an argument of, up to the match: the text since the start of
    the line or the last `;`, `&` or `|` (within `COMMAND_REACH` characters)."""
    return re.split(r"[;&|\n]", match.string[max(0, match.start() - COMMAND_REACH):match.start()])[-1]


def owns_option(match: re.Match[str]) -> bool:
    """Whether an `OPTION` match (its value in group 2, maybe quoted by group 1) is a password
    option of the command it follows: `docker login -p X`, not `docker run -p 8080:80` or
    `ssh -p 2222`."""
    option = match.group(0)[:match.start(2) - match.start()].removesuffix(match.group(1) or "")
    commands = list(_COMMAND.finditer(command_before(match)))
    return bool(commands) and bool(_COMMAND_OPTION[int(commands[-1].lastgroup[1:])].fullmatch(option))


def after_curl(match: re.Match[str]) -> bool:
    """Whether a match is an argument of `curl`, whose `-u` is always a user and a password."""
    return bool(_CURL.search(command_before(match)))
