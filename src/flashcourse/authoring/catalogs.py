"""The message catalogs: every `_("...")` and `N_("...")` of the package, and the texts of the
self-check files a student reads, in `.po` files a translator edits, compiled into the `.mo`
file `gettext` reads (`i18n.py`).

`python -m flashcourse build` extracts the messages (with `ast`: only literal arguments count),
updates the sources, keeping their translations and translators' comments, adding new messages
with an empty `msgstr`, dropping the ones no code uses any more and writing where each is used
(`#: file:line`), then compiles `locale/<lang>/LC_MESSAGES/flashcourse.mo` (generated and
committed: `check-sync` and `tests/test_generated.py` compare it with its sources). Two sources
per language, so that two people translate without editing one file:

* `locale/<lang>/checks.po`: the messages of the lesson check modules and packages
  (`checks.LESSON_MODULES`, and `checks/flash_cases.py`, which lessons 6 and 7 share);
* `locale/<lang>/core.po`: every other message, and the self-check files' titles and sections.

A message without a translation, or marked fuzzy, makes `missing_translations` (and so
`check-sync`) fail, naming the message and where it is used. Python has no `msgfmt` module:
`mo_bytes` writes the `.mo` format itself (GNU gettext's, without the optional hash table).
"""

from __future__ import annotations

import ast
import re
import string
import struct
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from .. import i18n
from ..checks import LESSON_MODULES

PACKAGE_DIR = Path("src") / "flashcourse"
LOCALE_DIR = PACKAGE_DIR / "locale"
SELF_CHECKS_DIR = PACKAGE_DIR / "checks" / "self_checks"
CORE, CHECKS = "core", "checks"  # the two sources of each language
# modules outside LESSON_MODULES that hold one group of lessons' checks
LESSON_CHECK_SHARED = ("flash_cases",)
MARKERS = ("_", "N_")  # i18n's functions whose literal argument is a message
WRAP = 76  # characters of a .po string line
MO_MAGIC = 0x950412DE
HEADER = ("Project-Id-Version: flashcourse\n"
          "MIME-Version: 1.0\n"
          "Content-Type: text/plain; charset=UTF-8\n"
          "Content-Transfer-Encoding: 8bit\n")


class CatalogError(ValueError):
    """A message or a catalog the build cannot use; the message names the file and line."""


@dataclass
class Entry:
    """One message of a `.po` file."""
    msgid: str
    msgstr: str = ""
    comments: list[str] = field(default_factory=list)  # translators' "# " lines, kept
    references: list[str] = field(default_factory=list)  # "file:line" where it is used
    fuzzy: bool = False


# ---------------------------------------------------------------- extraction


def extract(root: Path) -> dict[str, dict[str, list[str]]]:
    """{catalog: {msgid: ["file:line", ...]}} of every message of the package and of the
    self-check files, in the order they are found (files sorted, then by line). A message used
    both by a lesson's checks and elsewhere belongs to `core` only."""
    found: dict[str, dict[str, list[str]]] = {CORE: {}, CHECKS: {}}
    for path in sorted((root / PACKAGE_DIR).rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        catalog = CHECKS if _is_lesson_check(path.relative_to(root / PACKAGE_DIR)) else CORE
        for msgid, line in python_messages(path.read_text(encoding="utf-8"), relative):
            found[catalog].setdefault(msgid, []).append(f"{relative}:{line}")
    for path in sorted((root / SELF_CHECKS_DIR).glob("*.toml")):
        relative = path.relative_to(root).as_posix()
        for msgid, line in self_check_messages(path):
            found[CORE].setdefault(msgid, []).append(f"{relative}:{line}")
    for msgid in [m for m in found[CHECKS] if m in found[CORE]]:
        found[CORE][msgid] += found[CHECKS].pop(msgid)
    return found


def _is_lesson_check(inside_package: Path) -> bool:
    parts = inside_package.with_suffix("").parts
    return len(parts) >= 2 and parts[0] == "checks" and (
        parts[1] in LESSON_MODULES.values() or parts[1] in LESSON_CHECK_SHARED)


def python_messages(source: str, where: str) -> list[tuple[str, int]]:
    """(message, line) of each `_("...")` / `N_("...")` call with a literal argument.
    An f-string or a `%`/`+` expression inside the call is refused: the catalog could not hold
    it (values go in named `str.format` fields, filled after `_()`)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise CatalogError(f"{where}:{err.lineno}: not valid Python: {err.msg}") from None
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _marker_name(node.func) in MARKERS):
            continue
        if len(node.args) != 1 or node.keywords:
            raise CatalogError(f"{where}:{node.lineno}: {_marker_name(node.func)}() takes one "
                               "message")
        argument = node.args[0]
        if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
            found.append((argument.value, node.lineno))
        elif isinstance(argument, (ast.JoinedStr, ast.BinOp)):
            raise CatalogError(
                f"{where}:{node.lineno}: the message inside {_marker_name(node.func)}() is built "
                "at run time (an f-string or an operator): write it as one literal with named "
                '{fields} and fill them after translating: _("... {name} ...").format(name=...)')
    return sorted(found, key=lambda item: item[1])


def _marker_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
            and func.value.id == "i18n":
        return func.attr
    return None


def self_check_messages(path: Path) -> list[tuple[str, int]]:
    """(text, line) of what a student reads of a self-check file: the questions' titles and the
    sections named for questions and statements (the answers and their `why` are never shown)."""
    text = path.read_text(encoding="utf-8")
    data = tomllib.loads(text)
    shown: list[str] = []
    for question in data.get("question", []):
        shown.append(question.get("title", ""))
        shown.append(question.get("section", ""))
        shown += list((question.get("sections") or {}).values())
    shown += [item.get("section", "") for item in (data.get("misconceptions") or {}).values()]
    lines = text.splitlines()
    found = []
    for message in dict.fromkeys(m for m in shown if isinstance(m, str) and m.strip()):
        line = next((n for n, content in enumerate(lines, 1)
                     for piece in (message, message[:40], message[:20]) if piece in content), 1)
        found.append((message, line))
    return found


# ---------------------------------------------------------------- .po files


def parse_po(text: str, where: str = "the catalog") -> list[Entry]:
    """The entries of a `.po` file, the header (msgid "") first when it has one."""
    entries: list[Entry] = []
    current = Entry("")
    target: str | None = None  # "msgid" or "msgstr": where a continued string goes
    started = False

    def finish() -> None:
        nonlocal current, started, target
        if started:
            entries.append(current)
        current, started, target = Entry(""), False, None

    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            finish()
            continue
        if line.startswith("#~"):  # obsolete entries are dropped
            continue
        if line.startswith("#"):
            if started and target is not None:  # a comment after the strings: a new entry
                finish()
            if line.startswith("#:"):
                current.references += line[2:].split()
            elif line.startswith("#,"):
                current.fuzzy = "fuzzy" in [f.strip() for f in line[2:].split(",")]
            elif line.startswith("# ") or line == "#":
                current.comments.append(line[2:])
            continue  # "#." and "#|" comments are the build's own: written again
        keyword, _, rest = line.partition(" ")
        if keyword in ("msgid", "msgstr"):
            if keyword == "msgid" and target == "msgstr":
                finish()
            started, target = True, keyword
            setattr(current, keyword, _po_string(rest, where, number))
        elif line.startswith('"') and target is not None:
            setattr(current, target, getattr(current, target) + _po_string(line, where, number))
        else:
            raise CatalogError(f"{where}:{number}: cannot read {raw!r} (msgctxt and plural "
                               "forms are not used by the course)")
    finish()
    return entries


def _po_string(quoted: str, where: str, number: int) -> str:
    quoted = quoted.strip()
    if len(quoted) < 2 or not (quoted.startswith('"') and quoted.endswith('"')):
        raise CatalogError(f"{where}:{number}: a string must be in double quotes: {quoted!r}")
    body = quoted[1:-1]
    escapes = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}
    out, index = [], 0
    while index < len(body):
        char = body[index]
        if char == "\\" and index + 1 < len(body) and body[index + 1] in escapes:
            out.append(escapes[body[index + 1]])
            index += 2
        elif char == "\\":
            raise CatalogError(f"{where}:{number}: unknown escape in {quoted!r}")
        else:
            out.append(char)
            index += 1
    return "".join(out)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t") \
        .replace("\n", "\\n") + '"'


def _po_lines(keyword: str, text: str) -> list[str]:
    """`msgid "..."`, or `msgid ""` then one line per piece: broken after each newline and at
    spaces to keep the lines under WRAP characters."""
    single = f"{keyword} {_quote(text)}"
    if "\n" not in text.rstrip("\n") and len(single) <= WRAP + 4:
        return [single]
    pieces = []
    for paragraph in re.split(r"(?<=\n)", text):
        while len(_quote(paragraph)) > WRAP:
            cut = paragraph.rfind(" ", 0, WRAP - 10) + 1
            if cut <= 0:
                break
            pieces.append(paragraph[:cut])
            paragraph = paragraph[cut:]
        if paragraph:
            pieces.append(paragraph)
    return [f'{keyword} ""', *(_quote(piece) for piece in pieces)]


def format_po(entries: list[Entry], title: str) -> str:
    """The text of a `.po` file: a comment naming it, the header, then each entry."""
    about = textwrap.wrap(f"{title} The translations are written by hand: edit the msgstr "
                          "lines only (`python -m flashcourse build` updates the rest).", WRAP)
    blocks = ["".join(f"# {line}\n" for line in about)
              + "\n".join(_po_lines("msgid", "") + _po_lines("msgstr", HEADER)) + "\n"]
    for entry in entries:
        lines = [f"# {c}".rstrip() for c in entry.comments]
        lines += [f"#: {ref}" for ref in entry.references]
        if entry.fuzzy:
            lines.append("#, fuzzy")
        lines += _po_lines("msgid", entry.msgid) + _po_lines("msgstr", entry.msgstr)
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


def updated_entries(old: list[Entry], messages: dict[str, list[str]]) -> list[Entry]:
    """The entries for `messages` (in their order), keeping the translations, comments and
    fuzzy marks of `old`; messages no code uses any more are dropped."""
    known = {entry.msgid: entry for entry in old if entry.msgid}
    entries = []
    for msgid, references in messages.items():
        before = known.get(msgid, Entry(msgid))
        entries.append(Entry(msgid, before.msgstr, list(before.comments), list(references),
                             before.fuzzy))
    return entries


# ---------------------------------------------------------------- .mo files


def mo_bytes(translations: dict[str, str]) -> bytes:
    """A GNU `.mo` file holding `translations` (msgid -> msgstr) and the UTF-8 header, as
    `gettext.GNUTranslations` reads it: little-endian, the strings sorted, no hash table."""
    table = dict(translations)
    table[""] = HEADER
    ids = sorted(table, key=lambda m: m.encode("utf-8"))
    originals = [m.encode("utf-8") for m in ids]
    translated = [table[m].encode("utf-8") for m in ids]
    count = len(ids)
    start = 7 * 4 + 2 * 8 * count  # the header, then the two tables of (length, offset)
    offsets, data = [], b""
    for encoded in originals + translated:
        offsets.append((len(encoded), start + len(data)))
        data += encoded + b"\0"
    header = struct.pack("<7I", MO_MAGIC, 0, count, 28, 28 + 8 * count, 0, start)
    tables = b"".join(struct.pack("<2I", length, offset) for length, offset in offsets)
    return header + tables + data


# ---------------------------------------------------------------- the catalogs of a tree


def source_path(root: Path, lang: str, catalog: str) -> Path:
    return root / LOCALE_DIR / lang / f"{catalog}.po"


def compiled_path(root: Path, lang: str) -> Path:
    return root / LOCALE_DIR / lang / "LC_MESSAGES" / f"{i18n.DOMAIN}.mo"


def translated_languages() -> list[str]:
    return list(i18n.TRANSLATED)


def _has_catalogs(root: Path) -> bool:
    """A tree with the package's sources (not a test's folder of lessons only)."""
    return (root / PACKAGE_DIR / "i18n.py").exists()


def _read_po(path: Path, root: Path) -> list[Entry]:
    if not path.exists():
        return []
    return parse_po(path.read_text(encoding="utf-8"), path.relative_to(root).as_posix())


def rendered(root: Path) -> dict[Path, bytes]:
    """Every catalog file with the bytes it must hold: the updated sources and the `.mo`."""
    if not _has_catalogs(root):
        return {}
    messages = extract(root)
    files: dict[Path, bytes] = {}
    for lang in translated_languages():
        compiled: dict[str, str] = {}
        for catalog in (CORE, CHECKS):
            path = source_path(root, lang, catalog)
            entries = updated_entries(_read_po(path, root), messages[catalog])
            title = (f"The {lang} messages of "
                     + ("the lesson check modules." if catalog == CHECKS else
                        "the package outside the lesson check modules, and of the self-check "
                        "files."))
            files[path] = format_po(entries, title).encode("utf-8")
            compiled.update({e.msgid: e.msgstr for e in entries if e.msgstr and not e.fuzzy})
        files[compiled_path(root, lang)] = mo_bytes(compiled)
    return files


def compiled(root: Path, lang: str, sources: tuple[str, ...] = (CORE, CHECKS)) -> bytes:
    """The `.mo` of `lang` from its `sources` as they are on disk. The class edition ships
    `(CORE,)` only: the lesson checks' messages name their mistakes and hidden cases."""
    table: dict[str, str] = {}
    for catalog in sources:
        path = source_path(root, lang, catalog)
        table.update({e.msgid: e.msgstr for e in _read_po(path, root)
                      if e.msgid and e.msgstr and not e.fuzzy})
    return mo_bytes(table)


def write(root: Path) -> list[Path]:
    """Update the sources and compile the `.mo` files; return the files that changed."""
    written = []
    for path, data in rendered(root).items():
        if not path.exists() or path.read_bytes() != data:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            written.append(path)
    if written:
        i18n.reload()
    return written


def stale(root: Path) -> list[Path]:
    """Catalog files that differ from what their sources give."""
    return [path for path, data in rendered(root).items()
            if not path.exists() or path.read_bytes() != data]


def missing_translations(root: Path) -> list[str]:
    """A line for every message without a translation (or marked fuzzy) and every translation
    whose {fields} differ from its message's: the file, the message and where it is used."""
    if not _has_catalogs(root):
        return []
    messages = extract(root)
    problems = []
    for lang in translated_languages():
        for catalog in (CORE, CHECKS):
            path = source_path(root, lang, catalog)
            shown = path.relative_to(root).as_posix()
            entries = updated_entries(_read_po(path, root), messages[catalog])
            for entry in entries:
                used = ", ".join(entry.references[:3]) + (
                    f" and {len(entry.references) - 3} more" if len(entry.references) > 3
                    else "")
                if not entry.msgstr or entry.fuzzy:
                    state = "is marked fuzzy" if entry.msgstr else "has no translation"
                    problems.append(f"{shown}: {entry.msgid!r} (used at {used}) {state}")
                elif fields(entry.msgid) != fields(entry.msgstr):
                    problems.append(
                        f"{shown}: the translation of {entry.msgid!r} (used at {used}) has the "
                        f"fields {sorted(fields(entry.msgstr))}, the message "
                        f"{sorted(fields(entry.msgid))}: keep the same {{names}}")
    return problems


def fields(message: str) -> set[str]:
    """The named `str.format` fields of a message ({label}, {count:g}: label, count)."""
    try:
        return {name for _, name, _, _ in string.Formatter().parse(message) if name}
    except ValueError:
        return {"<not a format string>"}
