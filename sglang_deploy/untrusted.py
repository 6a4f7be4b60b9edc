"""What arrives from outside is data: bounded readers, checks and masks for it (pure; files only).

Everything the tool reads from a server, a mirror or a file it did not write in this run (a
checkpoint's JSON, a tuning record, a trial file, ``--expect``, ``--baseline``, ``--space``,
a key or token file) goes through here:

- ``read_file`` / ``read_text_file``: a regular file only (a FIFO, a device or a socket is
  refused before it is read, so a reader never blocks on it), read up to a size cap;
- ``load_json`` / ``load_yaml``: a size cap, a nesting cap checked while parsing (never a
  ``RecursionError``), no YAML aliases (no "billion laughs" expansion), no NaN or Infinity
  (but in a checkpoint's metadata, which Python's json writes with them);
  ``load_json`` can also cap the values it builds, counted in one pass over the text before
  anything is parsed (``values_bound``);
- ``printable``: text from a file or a server with terminal control sequences removed
  before it is printed;
- ``redact_url``, ``url_secrets``, ``Scrubber``: credentials in a URL and secrets echoed
  back are masked in every output (the one scrubbing function: the gate, the Hub client,
  the plan and ``models fetch`` all call these);
- ``check_token``: a token or API key is one line of visible ASCII (it travels in an HTTP
  header), and no message ever quotes it.

Every failure is ``UntrustedInput``: one line naming what was read and what is wrong; a cap
passed is ``TooLarge``, so that a reader can say what the cap rests on.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any, Iterable
from urllib.parse import quote, unquote

import yaml

#: Containers nested deeper than this are refused (no file the tool reads nests past 10).
MAX_DEPTH = 64
#: A record, a plan, an option file: no real one comes near 16 MiB. A checkpoint's files have
#: bounds of their own, each from the largest published file of its kind
#: (sglang_deploy/deploy/model_files.py).
MAX_METADATA_BYTES = 16 * 2 ** 20
#: A token, key or password file.
MAX_SECRET_BYTES = 64 * 2 ** 10
MASK = "***"
MIN_SECRET = 3


class UntrustedInput(ValueError):
    """Input from outside that is refused; the message is one line naming its source. A document
    that does not parse also says where (``line``, 1-based) and what (``problem``)."""

    def __init__(self, message: str, line: int | None = None, problem: str | None = None):
        super().__init__(message)
        self.line = line
        self.problem = problem


class TooLarge(UntrustedInput):
    """Input refused for passing a cap (bytes, or values built from it), not for what it says."""


# ---- files -------------------------------------------------------------------------------------

def _open_regular(path: str | os.PathLike[str], what: str) -> int:
    """A descriptor of ``path`` when it is a regular file (opened non-blocking, checked with fstat,
    then blocking again); a FIFO, device, socket or folder is refused before anything is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UntrustedInput(f"{what}: cannot read {os.fspath(path)}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else
                    "a socket" if stat.S_ISSOCK(st.st_mode) else "a device" if
                    stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file")
            raise UntrustedInput(f"{what}: {os.fspath(path)} is {kind}, not a regular file; not read")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _read(path: str | os.PathLike[str], what: str, offset: int, length: int, cap: int | None = None) -> bytes:
    """At most ``length`` bytes of a regular file from ``offset``; with ``cap``, a file larger
    than ``cap`` bytes is refused (before reading, and again if it grew while being read)."""
    fd = _open_regular(path, what)
    try:
        size = os.fstat(fd).st_size
        if cap is not None and size > cap:
            raise TooLarge(f"{what}: {os.fspath(path)} holds {size} bytes, more than the {cap} accepted")
        chunks, total = [], 0
        while total < length:
            block = os.pread(fd, min(1 << 20, length - total), offset + total)
            if not block:
                break
            chunks.append(block)
            total += len(block)
        if cap is not None and total > cap:
            raise TooLarge(f"{what}: {os.fspath(path)} holds more than the {cap} bytes accepted")
        return b"".join(chunks)
    except OSError as exc:
        raise UntrustedInput(f"{what}: cannot read {os.fspath(path)}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_part(path: str | os.PathLike[str], what: str, offset: int, length: int) -> bytes:
    """At most ``length`` bytes of a regular file from ``offset`` (a large file's header: a
    safetensors file's length prefix and JSON header); a FIFO or device is refused, not read."""
    return _read(path, what, offset, length)


def read_file(path: str | os.PathLike[str], what: str, max_bytes: int = MAX_METADATA_BYTES) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``. A FIFO, device, socket or folder is
    refused before anything is read (opened non-blocking, checked with fstat); so is a larger file.
    ``what`` names the file in the message (an option, a key)."""
    return _read(path, what, 0, max_bytes + 1, cap=max_bytes)


def read_text_file(path: str | os.PathLike[str], what: str, max_bytes: int = MAX_METADATA_BYTES) -> str:
    """``read_file`` decoded as UTF-8."""
    data = read_file(path, what, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UntrustedInput(f"{what}: {os.fspath(path)} is not UTF-8 text (byte {exc.start})") from None


# ---- JSON and YAML -----------------------------------------------------------------------------

def _size(text: str | bytes, where: str, max_bytes: int) -> None:
    if len(text) > max_bytes:
        raise TooLarge(f"{where}: {len(text)} bytes, more than the {max_bytes} accepted")


def values_bound(text: str | bytes) -> int:
    """An upper bound of the values a JSON document holds (the root and every member of every
    object and array), counted without parsing, in three C-speed passes over the text
    (str.count): a container of k members has k - 1 commas, so the values are at most 1 + the
    commas + the opening brackets. Those inside strings count too, which only raises the bound."""
    if isinstance(text, str):
        return 1 + text.count(",") + text.count("{") + text.count("[")
    return 1 + text.count(b",") + text.count(b"{") + text.count(b"[")


def check_depth(value: Any, where: str, max_depth: int = MAX_DEPTH) -> Any:
    """``value`` when its lists and mappings nest at most ``max_depth`` deep (checked without
    recursion; only containers are stacked, so a mapping of a million strings costs one pass)."""
    containers = (dict, list, tuple)
    stack = [(value, 1)] if isinstance(value, containers) else []
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            raise UntrustedInput(f"{where}: nested deeper than {max_depth} levels")
        stack.extend([(v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)
                      if isinstance(v, containers)])
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load_json(text: str | bytes, where: str, max_bytes: int = MAX_METADATA_BYTES, max_depth: int = MAX_DEPTH,
              max_values: int | None = None, constants: bool = False) -> Any:
    """Strict JSON (no NaN or Infinity) of at most ``max_bytes``, nested at most ``max_depth``;
    with ``max_values``, a document that may hold more values (``values_bound``) is refused
    before it is parsed, so what parsing builds is bounded too, not only what is read.
    ``constants``: NaN, Infinity and -Infinity are read as floats, as Python's json writes them
    (a checkpoint's config.json, written by transformers' PretrainedConfig.to_json_string); the
    reader of each value then judges it like any other number."""
    _size(text, where, max_bytes)
    if max_values is not None and (count := values_bound(text)) > max_values:
        raise TooLarge(f"{where}: up to {count} JSON values (counted by their commas and opening brackets), "
                       f"more than the {max_values} accepted")
    try:
        value = json.loads(text) if constants else json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise UntrustedInput(f"{where}: nested deeper than {max_depth} levels") from None
    except UnicodeDecodeError as exc:
        raise UntrustedInput(f"{where}: not UTF-8 (byte {exc.start})") from None
    except ValueError as exc:  # JSONDecodeError, and int() refusing a number of thousands of digits
        raise UntrustedInput(f"{where}: not JSON: {printable(str(exc))[:200]}") from None
    return check_depth(value, where, max_depth)


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader without aliases and with a nesting cap checked while composing
    (yaml/composer.py Composer.compose_node is recursive: an unbounded document would end in
    RecursionError)."""

    max_depth = MAX_DEPTH

    def _next_mark(self) -> Any:
        return self.peek_event().start_mark  # type: ignore[no-untyped-call]  # PyYAML's parser is untyped

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self._next_mark()
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted", mark)
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > self.max_depth:
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {self.max_depth} levels",
                                                  self._next_mark())
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml(text: str, where: str, max_bytes: int = MAX_METADATA_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """YAML through PyYAML's safe loader, without aliases, nested at most ``max_depth``, at most ``max_bytes``."""
    _size(text, where, max_bytes)

    class Loader(_BoundedLoader):
        pass

    Loader.max_depth = max_depth
    try:
        return yaml.load(text, Loader=Loader)  # noqa: S506 -- a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = printable(str(getattr(exc, "problem", None) or str(exc).splitlines()[0]))[:200]
        at = f" at line {line}" if line is not None else ""
        raise UntrustedInput(f"{where}: not valid YAML{at}: {problem}", line, problem) from None
    except RecursionError:  # defensive: the composer's cap comes first
        raise UntrustedInput(f"{where}: nested deeper than {max_depth} levels") from None
    except (ValueError, OverflowError) as exc:  # a constructor refusing a scalar: int() of a number of
        # thousands of digits (Python's int_max_str_digits), a timestamp such as 2026-13-45
        raise UntrustedInput(f"{where}: not valid YAML: {printable(str(exc))[:200]}") from None


# ---- text for a terminal -----------------------------------------------------------------------

# ESC sequences (CSI, OSC up to BEL or ST, and two-character ones), then every other C0/C1
# control, DEL, and the Unicode bidirectional overrides that reorder what a terminal shows.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?|\x9b[0-?]*[ -/]*[@-~]")
# Controls, bidirectional overrides, and lone surrogates (JSON's \\ud800 decodes to one; no output
# stream can encode it: the status table died of a UnicodeEncodeError).
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NEWLINES = re.compile("[\r\n\t]")


def printable(text: str, newlines: bool = False) -> str:
    """``text`` (from a file or a server) safe to print: terminal escape sequences and control
    characters removed; tabs and line breaks become spaces unless ``newlines``."""
    text = _CONTROLS.sub("", _ESCAPES.sub("", str(text)))
    return text if newlines else _NEWLINES.sub(" ", text)


class PrintableStream:
    """A text stream whose every write goes through ``printable(text, newlines=True)``: a
    command that prints what files and servers said (``check``, ``tune``) wraps its stdout
    and stderr once, and no terminal control reaches the terminal whatever path it took."""

    def __init__(self, stream: Any):
        self.stream = stream

    def write(self, text: str) -> int:
        return int(self.stream.write(printable(text, newlines=True)))

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def shown(value: Any, limit: int = 60) -> str:
    """A value from a file or a server quoted in a message: its repr (controls escaped), without
    terminal controls, at most ``limit`` characters (a number too long for repr is named, not spelled)."""
    try:
        text = printable(repr(value))
    except ValueError:  # int's repr past sys.get_int_max_str_digits()
        return "a number of thousands of digits"
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ---- secrets -----------------------------------------------------------------------------------

def _userinfo(url: str) -> str:
    """What stands between ``scheme://`` and the last ``@`` of the host part (parsable or not)."""
    rest = url.partition("://")[2] if "://" in url else url
    netloc = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    return netloc.rpartition("@")[0]


def url_secrets(url: str) -> list[str]:
    """The credentials in ``http://user:pass@host`` (or ``http://token@host``): the whole
    userinfo, the user and the password, as given and percent-decoded."""
    userinfo = _userinfo(url)
    if not userinfo:
        return []
    user, _, password = userinfo.partition(":")
    return [s for s in dict.fromkeys((userinfo, unquote(userinfo), user, unquote(user), password,
                                      unquote(password))) if s]


def redact_url(url: str) -> str:
    """``url`` with its userinfo, if any, replaced by ``***`` (shown in messages and reports)."""
    userinfo = _userinfo(url)
    return url.replace(userinfo + "@", MASK + "@", 1) if userinfo else url


class Scrubber:
    """Replaces every form of the given secrets (as given, JSON-escaped, URL-quoted) by ``***``."""

    def __init__(self, secrets: Iterable[str | None]):
        forms: set[str] = set()
        for s in secrets:
            if not s or len(s) < MIN_SECRET:  # a one- or two-letter "secret" would mask every such text
                continue
            forms.update({s, json.dumps(s)[1:-1], quote(s, safe="")})
        # longest first: a form that contains another is replaced whole
        self.forms = sorted((f for f in forms if f), key=len, reverse=True)

    def text(self, value: str) -> str:
        for form in self.forms:
            if form in value:
                value = value.replace(form, MASK)
        return value

    def deep(self, value: Any) -> Any:
        """``value`` with every string in it (keys included) scrubbed."""
        if not self.forms:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.deep(k): self.deep(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.deep(v) for v in value)
        return value


def check_token(text: str, what: str) -> str:
    """A token or key out of a file's text or a variable's value: one line of visible ASCII
    (it travels in an HTTP header). The message never quotes it."""
    key = text.strip()
    if not key:
        raise UntrustedInput(f"{what}: the value is empty")
    if "\n" in key or "\r" in key:
        raise UntrustedInput(f"{what}: the value spans several lines; give one line")
    bad = [i for i, ch in enumerate(key) if not 0x21 <= ord(ch) <= 0x7E]
    if bad:
        raise UntrustedInput(f"{what}: the value holds {len(bad)} character(s) that are not visible ASCII "
                             f"(first at position {bad[0]}); an HTTP header cannot carry them")
    return key
