"""The setup vocabulary: keyword arguments -> TrainingSetup, from the table
the C++ core generates (setup_words.json beside this file; the core's
core/setup/setup_words.{h,cc} defines every key once, and the CLI's flags
and the scheduler extender's annotations read the same definitions).

Nothing here knows a word: each key names its TrainingSetup field path
("precision", "lora.rank"), its type, its range and its words, and each
word the enum number (or bool) it sets, on the key's field, on another
field, or on the CheckFitRequest ("gpus='auto'" -> min_gpus). A key not
given is left unset: the planner assumes its default and says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Iterable

from google.protobuf import descriptor

from headroom.v1 import model_pb2
from headroom_client.errors import HeadroomError, invalid

TABLE = "setup_words.json"
_TYPES = ("word", "words", "uint", "number", "bool", "strings", "string")


@dataclass(frozen=True)
class SetupKey:
    """One setup key as the table defines it: `name` is the Python keyword
    (the CLI flag without "--"), `field` the TrainingSetup field path, `type`
    one of word, words, uint, number, bool, strings, string; `words` the
    table's word entries ({"word", "value"} and optionally "field" or
    "request"); `minimum` and `maximum` bound uint and number keys."""

    name: str
    flag: str
    annotation: str
    field: str
    type: str
    default: str
    help: str
    words: tuple = ()
    minimum: float | None = None
    maximum: float | None = None

    def word_names(self) -> list[str]:
        return [w["word"] for w in self.words]


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


_SHIPPED = None  # Vocabulary.shipped(), once read


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
                minimum=entry.get("min"), maximum=entry.get("max"))
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
            if value is not None:
                _apply(key, value, built)
        return built


def _apply(key: SetupKey, value: Any, built: BuiltSetup) -> None:
    if key.type == "words":
        items = _list(key, value)
        for i, item in enumerate(items):
            if item in items[:i]:
                raise invalid(f"{key.name} names '{item}' twice; give each of "
                              f"{', '.join(key.word_names())} at most once")
            _apply_word(key, _word(key, item), built)
        return
    if isinstance(value, str) and value in key.word_names():
        _apply_word(key, _word(key, value), built)
        return
    if key.type == "word":
        _word(key, value)  # raises: not one of the words
    elif key.type in ("uint", "number"):
        _set(key, key.field, _number(key, value), built)
    elif key.type == "bool":
        if not isinstance(value, bool):
            raise invalid(f"{key.name} {value!r} is invalid; allowed True or "
                          "False")
        _set(key, key.field, value, built)
    elif key.type == "strings":
        for item in _list(key, value):
            _set(key, key.field, item, built)
    else:  # string
        if not isinstance(value, str):
            raise invalid(f"{key.name} {value!r} is invalid; allowed a string")
        _set(key, key.field, value, built)


def _list(key: SetupKey, value: Any) -> list[str]:
    """A comma-separated string or a list of strings, blanks dropped."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, Iterable) or not all(
            isinstance(i, str) for i in items):
        raise invalid(f"{key.name} {value!r} is invalid; allowed a "
                      "comma-separated string or a list of strings")
    return [i.strip() for i in items if i.strip()]


def _word(key: SetupKey, value: Any) -> dict:
    for w in key.words:
        if w["word"] == value:
            return w
    raise invalid(f"{key.name} '{value}' is unknown; allowed "
                  f"{', '.join(key.word_names())}")


def _number(key: SetupKey, value: Any) -> float | int:
    allowed = f"{_fmt(key.minimum)}..{_fmt(key.maximum)}"
    if key.words:
        allowed += " or " + ", ".join(key.word_names())
    number = None
    if not isinstance(value, bool):
        try:
            number = int(value) if key.type == "uint" else float(value)
        except (TypeError, ValueError):
            pass
        # 8.5 is not a count: int() would truncate it.
        if key.type == "uint" and isinstance(value, float) and value != number:
            number = None
    if number is None or (key.minimum is not None and number < key.minimum) or (
            key.maximum is not None and number > key.maximum):
        raise invalid(f"{key.name} '{value}' is invalid; allowed {allowed}")
    return number


def _fmt(bound: float | None) -> str:
    if bound is None:
        return ""
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _apply_word(key: SetupKey, word: dict, built: BuiltSetup) -> None:
    if "request" in word:
        built.request[word["request"]] = word["value"]
        built.request_by[word["request"]] = f"{key.name}='{word['word']}'"
    elif "value" in word:
        _set(key, word.get("field", key.field), word["value"], built)


def _set(key: SetupKey, path: str, value: Any, built: BuiltSetup) -> None:
    """Sets TrainingSetup `path` (dots into sub-messages) to `value`; a
    repeated field gets it appended, an enum takes its number."""
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
    if fd.enum_type is not None and value not in fd.enum_type.values_by_number:
        raise _table_error(f"key {key.name} sets TrainingSetup.{path} = "
                           f"{value}, which {fd.enum_type.name} lacks")
    try:
        if fd.label == descriptor.FieldDescriptor.LABEL_REPEATED:
            getattr(message, fd.name).append(value)
        else:
            setattr(message, fd.name, value)
    except (TypeError, ValueError) as error:
        raise invalid(f"{key.name} '{value}' is invalid: {error}") from None
    if path not in built.paths:
        built.paths.append(path)
