"""One `--set` change applied to one YAML file's text as a minimal diff: comments, order, quoting
and every other line untouched; only the value's characters (or its block) change.

Pure text in, text out. Which file and which mapping in it hold the setting is decided by
`layout` from Ansible's origin of the value; this module only edits. Errors are `ConfigError`s
naming the file and the line.

A value may be a scalar, a list (written as a JSON flow list), null, or a mapping (written as a
block). A mapping or null replaces a section (`drafter=null` switches the drafter off); setting a
key under a null or absent section creates it (`drafter.method=dflash` after `drafter=null`).
A vault-encrypted value, or a whole vault-encrypted file, is refused: tpwarden does not
re-encrypt (see `VAULT_HINT`).
"""

from __future__ import annotations

import json
import re

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar
from ruamel.yaml.error import MarkedYAMLError
from tpwarden.cluster.durable import JSONObject, JSONValue
from tpwarden.cluster.errors import ConfigError

VAULT_HINT = (
    "tpwarden does not re-encrypt vaulted values (it would need your vault id and password, "
    "and the diff would show only ciphertext): change it with `ansible-vault edit` / "
    "`ansible-vault encrypt_string`, or keep the setting you roll out outside the vault"
)


def yaml_text(value: JSONValue) -> str:
    """How a scalar or list is written in YAML: 3, true, null, 24GiB, "0", ["a", "b"]."""
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return json.dumps(value) if _needs_quotes(value) else value
    return str(value)


def _needs_quotes(value: str) -> bool:
    safe = re.fullmatch(r"[A-Za-z0-9_./:@+-][A-Za-z0-9_./:@+ -]*", value) is not None
    words = ("true", "false", "yes", "no", "null", "on", "off", "~")
    return not safe or value.lower() in words or ": " in value or value.endswith((":", " "))


def set_value(text: str, root: tuple[str, ...], key: str, value: JSONValue, shown: str) -> str:
    """`text` with the setting at `root` + `key` (dotted) set to `value`."""
    if text.lstrip().startswith("$ANSIBLE_VAULT;"):
        raise ConfigError(
            f"--set {key}: the whole file is vault-encrypted", file=shown, line=1, hint=VAULT_HINT
        )
    node = _load(text, shown)
    for i, part in enumerate(root):
        child = node.get(part) if isinstance(node, CommentedMap) else None
        if not isinstance(child, CommentedMap):
            raise ConfigError(
                f"--set {key}: {'.'.join(root[: i + 1])} is not a mapping in this file",
                file=shown,
                hint="the settings belong under all.vars.tpwarden (inventory) or tpwarden "
                "(group_vars/all)",
            )
        node = child
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:  # absent or null: the rest of the key becomes a new section here
            return _set_leaf(text, node, part, _nest(parts[i + 1 :], value), key, shown)
        if not isinstance(child, CommentedMap):
            raise ConfigError(
                f"--set {key}: {'.'.join(parts[: i + 1])} is not a mapping",
                file=shown,
                line=node.lc.key(part)[0] + 1,
                hint="set the section itself, e.g. --set drafter={method: dflash, ...}",
            )
        node = child
    return _set_leaf(text, node, parts[-1], value, key, shown)


def _load(text: str, shown: str) -> JSONValue:
    try:
        return YAML(typ="rt").load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark
        raise ConfigError(
            f"cannot edit: {exc.problem}",
            file=shown,
            line=mark.line + 1 if mark else None,
            hint="tpwarden edits YAML files; fix or edit this one by hand",
        ) from None
    except Exception as exc:  # noqa: BLE001 - ruamel raises many types; never a traceback
        raise ConfigError(f"cannot edit: {type(exc).__name__}: {exc}", file=shown) from None


def _nest(parts: list[str], value: JSONValue) -> JSONObject:
    for part in reversed(parts):
        value = {part: value}
    return value  # type: ignore[no-any-return]


def _set_leaf(
    text: str, node: CommentedMap, leaf: str, value: JSONValue, key: str, shown: str
) -> str:
    lines = text.splitlines(keepends=True)
    nl = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    if leaf not in node:
        return _insert(lines, node, leaf, value, key, shown, nl)
    kline, kcol = node.lc.key(leaf)
    current = node[leaf]
    vaulted = _vault_line(current, kline)
    if vaulted is not None:
        raise ConfigError(
            f"--set {key}: the value is vault-encrypted",
            file=shown,
            line=vaulted + 1,
            hint=VAULT_HINT,
        )
    if isinstance(current, CommentedMap) and value is not None and not isinstance(value, dict):
        raise ConfigError(
            f"--set {key}: is a section, not a value",
            file=shown,
            line=kline + 1,
            hint="set one of its keys, null, or a mapping",
        )
    line = lines[kline]
    colon = line.find(":", kcol + len(leaf))
    start = colon + 1
    while start < len(line) and line[start] == " ":
        start += 1
    inline = start < len(line) and line[start] not in "#\r\n"
    end = _scalar_end(line, start) if inline else start
    if inline:
        tail = line[end:]  # a trailing comment, with its spacing, and the newline
    else:
        tail = line[colon + 1 :]  # a comment after `key:` keeps its place
    head = line[:start] if inline else line[: colon + 1] + " "
    block_end = _value_end(lines, kline, kcol, same_indent_items=not inline)
    if isinstance(value, dict) and value:
        new = [line[: colon + 1] + tail.rstrip(" ")]
        new += [ln for k, v in value.items() for ln in _render(k, v, kcol + 2, nl)]
    else:
        new = [head + yaml_text(value) + tail]
    lines[kline:block_end] = new
    return "".join(lines)


def _insert(
    lines: list[str], node: CommentedMap, leaf: str, value: JSONValue, key: str, shown: str, nl: str
) -> str:
    """A new key: after the parent's last child (and its block), at the children's column."""
    if not node or node.fa.flow_style():
        raise ConfigError(
            f"--set {key}: its section is empty or written inline ({{...}})",
            file=shown,
            line=node.lc.line + 1 if node.lc.line is not None else None,
            hint="write the section as a block (one key per line), or set the whole section",
        )
    last_key = list(node.keys())[-1]
    line, col = node.lc.key(last_key)
    at = _value_end(lines, line, col, same_indent_items=True)
    if at == len(lines) and lines and not lines[-1].endswith("\n"):
        lines[-1] += nl
    lines[at:at] = _render(leaf, value, col, nl)
    return "".join(lines)


def _render(key: str, value: JSONValue, indent: int, nl: str) -> list[str]:
    pad = " " * indent
    name = yaml_text(str(key))
    if isinstance(value, dict) and value:
        out = [f"{pad}{name}:{nl}"]
        for k, v in value.items():
            out += _render(k, v, indent + 2, nl)
        return out
    return [f"{pad}{name}: {yaml_text(value)}{nl}"]


def _vault_line(value: JSONValue, line: int) -> int | None:
    """The 0-based line of the first vaulted value in `value` (itself at `line`), or None."""
    if isinstance(value, TaggedScalar):
        return line if str(value.tag.value) == "!vault" else None
    if isinstance(value, CommentedMap):
        found = (_vault_line(v, value.lc.key(k)[0]) for k, v in value.items())
    elif isinstance(value, CommentedSeq):
        found = (_vault_line(v, value.lc.item(i)[0]) for i, v in enumerate(value))
    else:
        return None
    return next((f for f in found if f is not None), None)


def _scalar_end(line: str, col: int) -> int:
    """Index just past the scalar that starts at `col` (before a trailing comment)."""
    rest = line[col:]
    if rest[:1] in ("'", '"'):
        quote = rest[0]
        i = 1
        while i < len(rest):
            if rest[i] == "\\" and quote == '"':
                i += 2
                continue
            if rest[i] == quote:
                return col + i + 1
            i += 1
        return col + len(rest.rstrip("\r\n"))
    match = re.search(r"\s+#", rest)
    body = rest[: match.start()] if match else rest.rstrip("\r\n")
    return col + len(body.rstrip())


def _value_end(lines: list[str], line: int, col: int, same_indent_items: bool) -> int:
    """One past the last line of the value of the key at (line, col): the lines indented deeper
    (a block, or a continued scalar), and with `same_indent_items` also `- item` lines at the
    key's own column (a block list may sit there). Comments and blank lines after the last such
    line belong to what follows."""
    last = line
    for i in range(line + 1, len(lines)):
        stripped = lines[i].strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(lines[i]) - len(lines[i].lstrip(" "))
        item = same_indent_items and indent == col and stripped.startswith("-")
        if indent <= col and not item:
            break
        last = i
    return last + 1
