"""The setup vocabulary: keyword arguments -> TrainingSetup, from the table
the C++ core generates (setup_words.json beside this file, written by
`headroom setup-words --json` from core/setup/setup_words.cc, which defines
every key once for the CLI's flags and the scheduler extender's
annotations too).

Nothing here knows a word: each key names its TrainingSetup field path
("precision", "lora.rank"), its type, its range and its words, and each
word the enum number (or bool) it sets, on the key's field, on another
field, or on the CheckFitRequest ("gpus='auto'" -> min_gpus). The rules a
value is checked by, and the refusals' text, are ApplySetupValue's in
core/setup/setup_words.cc, so the client refuses what the CLI refuses, in
the same words. A key not given is left unset: the planner assumes its
default and says so.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from google.protobuf import descriptor

from headroom.v1 import model_pb2
from headroom_client.errors import HeadroomError, invalid

TABLE = "setup_words.json"
_TYPES = ("word", "words", "uint", "number", "bool", "strings", "string")
# core/setup/setup_words.cc: kMaxStringBytes, kMaxListEntries, the longest
# list item, and what a string key (a version) may hold.
MAX_STRING_BYTES = 64
MAX_LIST_ENTRIES = 256
MAX_ITEM_BYTES = 256
_VERSION = re.compile(r"[A-Za-z0-9.+_-]+")

_SHIPPED = None  # Vocabulary.shipped(), once read


@dataclass(frozen=True)
class SetupKey:
    """One setup key as the table defines it: `name` is the Python keyword
    (the CLI flag without "--"), `field` the TrainingSetup field path, `type`
    one of word, words, uint, number, bool, strings, string; `words` the
    table's word entries ({"word", "value"} and optionally "field" or
    "request"); `minimum` and `maximum` bound uint keys (both included) and
    number keys (maximum excluded); `bare` is the word True means (the
    CLI's bare flag: checkpointing=True is "full")."""

    name: str
    flag: str
    annotation: str
    field: str
    type: str
    default: str
    help: str
    words: tuple = ()
    minimum: float = 0
    maximum: float = 0
    bare: str = ""

    def word_names(self) -> list[str]:
        return [w["word"] for w in self.words]

    def allowed(self) -> str:
        """What a refusal lists (SetupKey::Allowed in the core)."""
        words = ", ".join(self.word_names())
        if self.type == "uint":
            return (f"{int(self.minimum)}..{int(self.maximum)}"
                    + (f" or {words}" if words else ""))
        if self.type == "number":
            return f"{_fmt(self.minimum)} <= p < {_fmt(self.maximum)}"
        if self.type == "bool":
            return "true, false"
        if self.type in ("words", "strings"):
            return f"a comma list of {words}" if words else \
                "a comma list of names"
        if self.type == "string":
            return "a version: letters, digits and . - + _, at most 64"
        return words


@dataclass
class BuiltSetup:
    """What keyword arguments came to: the setup, the CheckFitRequest
    fields a word sets (name -> value), and the TrainingSetup field paths
    set, in order (JobFiles.overrides beside a job file)."""

    setup: model_pb2.TrainingSetup
    request: dict[str, Any] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)
    # Who set each request field, as given ("gpus='auto'").
    request_by: dict[str, str] = field(default_factory=dict)


def _table_error(message: str) -> HeadroomError:
    # The table and the generated stubs come from different builds.
    return HeadroomError("FAILED_PRECONDITION", f"{TABLE}: {message}")


class Vocabulary:
    """The keys of one table (the parsed JSON: {"keys": [...]})."""

    def __init__(self, table: dict):
        self._keys: dict[str, SetupKey] = {}
        for entry in table.get("keys", []):
            key = SetupKey(
                name=entry["name"], flag=entry.get("flag", ""),
                annotation=entry.get("annotation", ""), field=entry["field"],
                type=entry["type"], default=str(entry.get("default", "")),
                help=entry.get("help", ""), words=tuple(entry.get("words", ())),
                minimum=entry.get("min", 0), maximum=entry.get("max", 0),
                bare=entry.get("bare", ""))
            if key.type not in _TYPES:
                raise _table_error(f"key {key.name} has type {key.type!r}; "
                                   f"this client knows {', '.join(_TYPES)}")
            self._keys[key.name] = key

    @classmethod
    def shipped(cls) -> Vocabulary:
        """The table shipped in this package (read once)."""
        global _SHIPPED
        if _SHIPPED is None:
            try:
                text = resources.files("headroom_client").joinpath(
                    TABLE).read_text(encoding="utf-8")
                _SHIPPED = cls(json.loads(text))
            except (OSError, ValueError) as e:
                raise _table_error(f"cannot be read from the headroom_client "
                                   f"package ({e}); reinstall it") from None
        return _SHIPPED

    def keys(self) -> list[SetupKey]:
        """Every key, in the table's order."""
        return list(self._keys.values())

    def build(self, keywords: dict[str, Any]) -> BuiltSetup:
        """TrainingSetup from keyword arguments (None: not given).
        HeadroomError INVALID_ARGUMENT names an unknown keyword, word or a
        value out of range, with what is allowed."""
        built = BuiltSetup(model_pb2.TrainingSetup())
        for name, value in keywords.items():
            key = self._keys.get(name)
            if key is None:
                raise invalid(f"{name} is not a setup keyword; allowed "
                              f"{', '.join(self._keys)}")
            if value is None or (value is False and key.bare):
                continue  # not given (False: a bare flag left off)
            _apply(key, value, built)
        return built


def _bad(key: SetupKey, value: Any) -> HeadroomError:
    """"<key> '<value>' is unknown; allowed a, b" for a word the key lacks,
    "... is invalid; allowed <allowed>" for anything else (Bad in the
    core)."""
    text = str(value)[:MAX_STRING_BYTES]
    if key.words and key.type != "uint":
        return invalid(f"{key.name} '{text}' is unknown; allowed "
                       f"{', '.join(key.word_names())}")
    return invalid(f"{key.name} '{text}' is invalid; allowed {key.allowed()}")


def _apply(key: SetupKey, value: Any, built: BuiltSetup) -> None:
    if value is True and key.bare:
        value = key.bare
    if key.type in ("words", "strings"):
        _apply_list(key, value, built)
        return
    text = value.strip() if isinstance(value, str) else value
    word = _word(key, text)
    if word is not None:
        _apply_word(key, word, built)
    elif key.type == "word":
        raise _bad(key, value)
    elif key.type == "uint":
        _set(key, key.field, _uint(key, text), built)
    elif key.type == "number":
        _set(key, key.field, _number(key, text), built)
    elif key.type == "bool":
        _set(key, key.field, _bool(key, text), built)
    else:  # string: a version
        if not (isinstance(text, str) and len(text) <= MAX_STRING_BYTES
                and _VERSION.fullmatch(text)):
            raise _bad(key, value)
        _set(key, key.field, text, built)


def _apply_list(key: SetupKey, value: Any, built: BuiltSetup) -> None:
    """A comma-separated string or a list of strings, each item once; a key
    with words takes only its words."""
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, (list, tuple)) and all(
            isinstance(i, str) for i in value):
        items = list(value)
    else:
        raise _bad(key, value)
    items = [i.strip() for i in items if i.strip()]
    if not items or len(items) > MAX_LIST_ENTRIES:
        raise _bad(key, value)
    for i, item in enumerate(items):
        if item in items[:i]:
            raise invalid(f"{key.name} names '{item[:MAX_STRING_BYTES]}' "
                          "twice; give each at most once")
        word = _word(key, item)
        if (key.words and word is None) or len(item) > MAX_ITEM_BYTES:
            raise _bad(key, item)
        if key.type == "words":
            _set(key, key.field, word["value"], built)
        else:
            _set(key, key.field, item, built)


def _word(key: SetupKey, text: Any) -> dict | None:
    for w in key.words:
        if w["word"] == text:
            return w
    return None


def _uint(key: SetupKey, value: Any) -> int:
    # An int, or its digits as text; never a bool or a float (8.5 is no
    # count, and the CLI takes no "8.0").
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        try:
            number = int(value)
        except ValueError:
            pass
    if number is None or not key.minimum <= number <= key.maximum:
        raise _bad(key, value)
    return number


def _number(key: SetupKey, value: Any) -> float:
    number = None
    if not isinstance(value, bool):
        try:
            number = float(value)
        except (TypeError, ValueError):
            pass
    if number is None or not math.isfinite(number) or not (
            key.minimum <= number < key.maximum):
        raise _bad(key, value)
    return number


def _bool(key: SetupKey, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "1", "false", "0"):
        return value.lower() in ("true", "1")
    raise _bad(key, value)


def _fmt(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _apply_word(key: SetupKey, word: dict, built: BuiltSetup) -> None:
    if "request" in word:
        built.request[word["request"]] = word["value"]
        built.request_by[word["request"]] = f"{key.name}='{word['word']}'"
    elif "value" in word:
        _set(key, word.get("field", key.field), word["value"], built)


def _set(key: SetupKey, path: str, value: Any, built: BuiltSetup) -> None:
    """Sets TrainingSetup `path` (dots into sub-messages) to `value`; a
    repeated field gets it appended, an enum takes its number, a bool field
    a word's true."""
    message = built.setup
    parts = path.split(".")
    for i, part in enumerate(parts):
        fd = message.DESCRIPTOR.fields_by_name.get(part)
        if fd is None:
            raise _table_error(
                f"key {key.name} sets TrainingSetup.{path}, which this "
                "client's headroom.v1 lacks: rebuild the stubs (build.sh or "
                "pip install) from the same checkout as the table")
        if i < len(parts) - 1:
            message = getattr(message, part)
    if fd.enum_type is not None:
        if value not in fd.enum_type.values_by_number:
            raise _table_error(f"key {key.name} sets TrainingSetup.{path} = "
                               f"{value}, which {fd.enum_type.name} lacks")
        value = int(value)
    elif fd.type == descriptor.FieldDescriptor.TYPE_BOOL:
        value = bool(value)
    try:
        if fd.label == descriptor.FieldDescriptor.LABEL_REPEATED:
            getattr(message, fd.name).append(value)
        else:
            setattr(message, fd.name, value)
    except (TypeError, ValueError) as error:
        raise invalid(f"{key.name} '{value}' is invalid: {error}") from None
    if path not in built.paths:
        built.paths.append(path)
