"""Translated editions of the lessons, keyed to the English they translate.

A lesson keeps its one source, `lessons/NN-slug.qmd` (and the book's `index.qmd`). Its Chinese
lives beside it in `lessons/zh/NN-slug.toml` (`lessons/zh/index.toml`): one `[[unit]]` per
translatable piece of the English, in the English's order, each with

* `key`: a hash of the English it translates (whitespace-insensitive),
* `en`: that English, so a translator reads it beside the translation,
* `zh`: the translation, written in the same markdown (headings keep their `#`, list items their
  marker, hint levels their number);
* after the English changed, `stale = true` and `was` (the English it translated before): the
  translator updates `zh` and deletes both lines.

The units are the front matter's title, skills and time; each heading, paragraph, list item and
table of the markdown; each comment of a code cell (a run of whole-line comments, or the comment
at the end of a line), except in grading cells (`check-*`, shared word for word by both editions)
and the generator's own marks (`#|`, `# BLANK`, `# BEGIN/END SOLUTION`; the note of
`# BLANK: note` is a unit). Code, math blocks, other
fenced blocks, HTML comments and `:::` lines are shared and never translated.

`translated_source(path, lang)` gives the source the build parses for that language (same code
cells, cell ids and grading cells). `problems(root, lang)` lists every missing and stale unit
by file and line; `update(root, lang)` (`python -m flashcourse translate`) adds the missing
units and marks the stale ones.
"""

from __future__ import annotations

import hashlib
import io
import re
import sys
import tokenize
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from pathlib import Path

from .. import i18n
from ..checks.self_check_files import tomllib
from . import learning_path

TRANSLATED = i18n.TRANSLATED  # the languages with an edition beside the English
TRANSLATIONS_DIR = "lessons"  # lessons/<lang>/<source stem>.toml
BOOK_INDEX = "index.qmd"
FRONT_MATTER_KEYS = ("title", "skills", "time")
# the generator's own marks in code comments, never translated
GENERATOR_COMMENT = re.compile(r"^#\s*(\||BLANK\b|BEGIN SOLUTION|END SOLUTION|noqa|type:|fmt:)")
BLANK_NOTE = re.compile(r"^BLANK:\s*(?P<note>.+)$")  # `x = answer  # BLANK: note`
WORDS = re.compile(r"[A-Za-z]{2,}[\s,;:'-]+[A-Za-z]{2,}")  # prose, not `# (B, H, N, D)`
LIST_ITEM = re.compile(r"^(?P<indent>\s*)(?:[-*+]|\d+\.)\s+\S")
HEADING = re.compile(r"^#{1,6}\s")
FENCE_LINE = re.compile(r"^\s*:::")
_CJK = "\u3000-\u303f\u4e00-\u9fff\uff00-\uffef"  # CJK punctuation, ideographs, full-width forms
CJK_LINE_BREAK = re.compile(rf"(?<=[{_CJK}])\n[ \t]*(?=[{_CJK}])")
GRADING_CELL = re.compile(r"^#\|\s*id:\s*check-")


class TranslationError(ValueError):
    """A translation file that cannot be read; the message names the file and the fix."""


@dataclass(frozen=True)
class Unit:
    """One translatable piece of an English source."""
    kind: str  # title, skills, time, heading, paragraph, item, table, comment, trailing,
    # blank-note (the note of `# BLANK: note`, which the exercise keeps as its comment)
    text: str  # the English: markdown lines, or the comment's words without "# "
    start: int  # first line (0-based) in the source
    end: int  # one past the last line
    column: int = 0  # where a trailing comment's "#" stands

    @property
    def key(self) -> str:
        return unit_key(self.text)

    @property
    def label(self) -> str:
        words = " ".join(self.text.split())
        return words if len(words) <= 60 else words[:57] + "..."


@dataclass
class Entry:
    """One `[[unit]]` of a translation file."""
    key: str
    en: str
    zh: str = ""
    stale: bool = False
    was: str = ""

    @property
    def done(self) -> bool:
        return bool(self.zh.strip()) and not self.stale


@dataclass
class Comparison:
    """Where a translation file stands against its English source."""
    missing: list[Unit] = field(default_factory=list)  # no entry, or an empty zh
    stale: list[tuple[Unit, Entry]] = field(default_factory=list)  # English changed since
    obsolete: list[Entry] = field(default_factory=list)  # entries no English unit has any more


def unit_key(text: str) -> str:
    return hashlib.sha256(" ".join(text.split()).encode()).hexdigest()[:12]


# ---------------------------------------------------------------- the units of a source


def units(text: str) -> list[Unit]:
    """Every translatable unit of a lesson source (or index.qmd), in order."""
    lines = text.split("\n")
    found: list[Unit] = []
    index = _front_matter(lines, found)
    block: list[int] = []  # lines of the markdown block being read

    def flush() -> None:
        found.extend(_markdown_units(lines, block))
        block.clear()

    while index < len(lines):
        line = lines[index]
        stripped = line.strip()
        if stripped.startswith("```"):
            flush()
            end = index + 1
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            if stripped == "```{python}":
                found.extend(_code_units(lines, index + 1, end))
            index = end + 1
            continue
        if stripped == "$$" or (stripped.startswith("$$") and not stripped.endswith("$$")):
            flush()
            end = index + 1
            while end < len(lines) and not lines[end].strip().endswith("$$"):
                end += 1
            index = end + 1
            continue
        if stripped == learning_path.BEGIN:  # the index's generated map: built per edition
            flush()
            while index < len(lines) and lines[index].strip() != learning_path.END:
                index += 1
            index += 1
            continue
        if not stripped or FENCE_LINE.match(line) or _html_comment(stripped) or (
                stripped.startswith("$$") and stripped.endswith("$$") and len(stripped) > 2):
            flush()
        else:
            block.append(index)
        index += 1
    flush()
    return found


def _html_comment(stripped: str) -> bool:
    return stripped.startswith("<!--") and stripped.endswith("-->")


def _front_matter(lines: list[str], found: list[Unit]) -> int:
    """The title, skills and time of the front matter; returns the first line after it."""
    if not lines or lines[0] != "---":
        return 0
    end = lines.index("---", 1) if "---" in lines[1:] else 0
    for number in range(1, end):
        match = re.match(r"^(?P<key>\w+):\s*(?P<value>.*)$", lines[number])
        if match and match["key"] in FRONT_MATTER_KEYS and match["value"].strip('"'):
            found.append(Unit(match["key"], match["value"].strip().strip('"'), number,
                              number + 1))
    return end + 1


def _markdown_units(lines: list[str], block: list[int]) -> list[Unit]:
    """A block of consecutive non-blank markdown lines: headings, list items (with their
    continuation lines), a table, or a paragraph."""
    result: list[Unit] = []
    current: list[int] = []
    kind = ""

    def close() -> None:
        if current:
            text = "\n".join(lines[number] for number in current)
            result.append(Unit(kind, text, current[0], current[-1] + 1))
            current.clear()

    for number in block:
        line = lines[number]
        if HEADING.match(line):
            close()
            kind = "heading"
            current.append(number)
            close()
            continue
        if line.lstrip().startswith("|"):
            if kind != "table":
                close()
                kind = "table"
            current.append(number)
            continue
        item = LIST_ITEM.match(line)
        if item and (kind != "item" or len(item["indent"]) <= _item_indent(lines, current)):
            close()
            kind = "item"
        elif kind in ("table", "heading") or not current:
            close()
            kind = "item" if item else "paragraph"
        current.append(number)
    close()
    return result


def _item_indent(lines: list[str], current: list[int]) -> int:
    """The indent of the list item being read: a deeper item belongs to it."""
    if not current:
        return 0
    first = lines[current[0]]
    return len(first) - len(first.lstrip())


def _code_units(lines: list[str], start: int, end: int) -> list[Unit]:
    """The comments of the python cell lines[start:end]: runs of whole-line comments with one
    indent, and comments at the end of a line of code."""
    cell = lines[start:end]
    if any(GRADING_CELL.match(line.strip()) for line in cell):
        return []  # grading cells are the same in every edition
    trailing = _trailing_comments(cell)
    result: list[Unit] = []
    run: list[int] = []

    def close() -> None:
        if run:
            words = "\n".join(_comment_words(lines[start + n]) for n in run)
            if WORDS.search(words):
                result.append(Unit("comment", words, start + run[0], start + run[-1] + 1))
            run.clear()

    for number, line in enumerate(cell):
        stripped = line.strip()
        whole_line = stripped.startswith("#") and not GENERATOR_COMMENT.match(stripped)
        same_indent = run and _indent(cell[run[0]]) == _indent(line)
        if whole_line and (not run or same_indent):
            run.append(number)
            continue
        close()
        if whole_line:
            run.append(number)
        elif number in trailing:
            column, words = trailing[number]
            note = BLANK_NOTE.match(words)
            if note and WORDS.search(note["note"]):  # the exercise keeps it as a comment
                result.append(Unit("blank-note", note["note"], start + number,
                                   start + number + 1, column))
            elif WORDS.search(words) and not GENERATOR_COMMENT.match("# " + words):
                result.append(Unit("trailing", words, start + number, start + number + 1,
                                   column))
    close()
    return result


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def _comment_words(line: str) -> str:
    return re.sub(r"^\s*#\s?", "", line)


def _trailing_comments(cell: list[str]) -> dict[int, tuple[int, str]]:
    """{line: (column of '#', words)} of comments after code, found by Python's tokenizer (a
    '#' inside a string is no comment). A cell the tokenizer cannot read has none."""
    found: dict[int, tuple[int, str]] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO("\n".join(cell) + "\n").readline):
            if token.type != tokenize.COMMENT:
                continue
            row, column = token.start
            if cell[row - 1][:column].strip():
                found[row - 1] = (column, token.string.lstrip("#").strip())
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return {}
    return found


# ---------------------------------------------------------------- translation files


def translation_path(root: Path, source: Path, lang: str) -> Path:
    return root / TRANSLATIONS_DIR / lang / f"{source.stem}.toml"


def sources(root: Path) -> list[Path]:
    """The English sources that have translations: the lessons and the book's index."""
    lessons = sorted((root / TRANSLATIONS_DIR).glob("[0-9][0-9]-*.qmd"))
    index = root / BOOK_INDEX
    return [*lessons, index] if index.exists() else lessons


def read_entries(path: Path) -> list[Entry]:
    if not path.exists():
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise TranslationError(f"{path}: not valid TOML ({err}); fix the file, or delete it "
                               "and run `python -m flashcourse translate` again") from None
    entries = []
    for number, item in enumerate(data.get("unit", []), 1):
        if not isinstance(item, dict) or not {"key", "en"} <= item.keys():
            raise TranslationError(f"{path}: unit {number} needs `key` and `en`")
        entries.append(Entry(str(item["key"]), str(item["en"]), str(item.get("zh", "")),
                             bool(item.get("stale", False)), str(item.get("was", ""))))
    return entries


def _toml_string(text: str) -> str:
    if "'''" not in text and not any(ord(c) < 32 and c not in "\n\t" for c in text):
        return "'''\n" + text + "'''"
    escaped = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return '"""\n' + escaped + '"""'


def write_entries(path: Path, source_name: str, lang: str, entries: list[Entry]) -> None:
    out = [f"# {lang} translation of {source_name}: one [[unit]] per piece of its English, in",
           "# its order (AUTHORING.md, \"Translations\"). Edit `zh`; after the English changed,",
           "# update `zh`, then delete `stale` and `was`.", ""]
    for entry in entries:
        out += ["[[unit]]", f'key = "{entry.key}"']
        if entry.stale:
            out += ["stale = true", f"was = {_toml_string(entry.was)}"]
        out += [f"en = {_toml_string(entry.en)}", f"zh = {_toml_string(entry.zh)}", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out), encoding="utf-8")


def _distinct(found: list[Unit]) -> list[Unit]:
    """One unit per English text: a repeated line is translated once."""
    seen: set[str] = set()
    result = []
    for unit in found:
        if unit.key not in seen:
            seen.add(unit.key)
            result.append(unit)
    return result


def compare(found: list[Unit], entries: list[Entry]) -> Comparison:
    """Line the entries up with the English units. An entry whose key matches translates its
    unit; where the two sequences differ, an entry in the place of a changed unit is stale and
    the rest are missing or obsolete."""
    wanted = _distinct(found)
    by_key = {entry.key: entry for entry in entries}
    result = Comparison()
    matcher = SequenceMatcher(a=[e.key for e in entries], b=[u.key for u in wanted],
                              autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for unit in wanted[j1:j2]:
                entry = by_key[unit.key]
                if entry.stale:
                    result.stale.append((unit, entry))
                elif not entry.done:
                    result.missing.append(unit)
            continue
        old, new = entries[i1:i2], wanted[j1:j2]
        for position, unit in enumerate(new):
            if unit.key in by_key:  # moved rather than changed
                entry = by_key[unit.key]
                if entry.stale:
                    result.stale.append((unit, entry))
                elif not entry.done:
                    result.missing.append(unit)
            elif (position < len(old) and old[position].key not in {u.key for u in wanted}
                  and old[position].zh.strip()):
                result.stale.append((unit, old[position]))
            else:
                result.missing.append(unit)
        paired = len(new)
        result.obsolete += [entry for entry in old[paired:]
                            if entry.key not in {u.key for u in wanted}]
    return result


def updated_entries(found: list[Unit], entries: list[Entry]) -> list[Entry]:
    """The translation file after the English changed: every unit in order; a changed unit
    keeps its old translation marked stale; a new one gets an empty zh."""
    comparison = compare(found, entries)
    by_key = {entry.key: entry for entry in entries}
    stale = {unit.key: entry for unit, entry in comparison.stale}
    result = []
    for unit in _distinct(found):
        if unit.key in by_key and unit.key not in stale:
            kept = by_key[unit.key]
            result.append(Entry(unit.key, unit.text, kept.zh, kept.stale, kept.was))
        elif unit.key in stale and stale[unit.key].zh.strip():
            old = stale[unit.key]
            was = old.was if old.stale and old.was else old.en
            result.append(Entry(unit.key, unit.text, old.zh, True, was))
        else:
            result.append(Entry(unit.key, unit.text))
    return result


def update(root: Path, lang: str, only: list[Path] | None = None) -> list[Path]:
    """Bring the translation files of `lang` up to date with their English (new units with an
    empty zh, changed ones marked stale). Returns the files written."""
    _check_language(lang)
    written = []
    for source in only or sources(root):
        target = translation_path(root, source, lang)
        entries = read_entries(target)
        fresh = updated_entries(units(source.read_text(encoding="utf-8")), entries)
        if fresh != entries or not target.exists():
            write_entries(target, _relative(root, source), lang, fresh)
            written.append(target)
    return written


def _relative(root: Path, path: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return path.name


def _check_language(lang: str) -> None:
    if lang not in TRANSLATED:
        raise TranslationError(f"no edition in {lang!r}: the translated languages are "
                               f"{', '.join(TRANSLATED)}")


def problems(root: Path, lang: str) -> list[str]:
    """Every missing and stale translation of `lang`, one line each, naming the English source
    line, the unit and the fix."""
    _check_language(lang)
    lines = []
    for source in sources(root):
        target = translation_path(root, source, lang)
        comparison = compare(units(source.read_text(encoding="utf-8")), read_entries(target))
        where = _relative(root, target)
        for unit in comparison.missing:
            lines.append(f"{_relative(root, source)}:{unit.start + 1}: {unit.kind} "
                         f"{unit.label!r} has no {lang} translation in {where}; run "
                         f"`python -m flashcourse translate {lang}` and fill its zh")
        for unit, _entry in comparison.stale:
            lines.append(f"{_relative(root, source)}:{unit.start + 1}: {unit.kind} "
                         f"{unit.label!r} changed since it was translated ({where}: stale); "
                         "update its zh, then delete its `stale` and `was` lines")
    return lines


# ---------------------------------------------------------------- the translated source


def pandoc_id(heading: str) -> str:
    """The id pandoc gives a heading (its auto_identifiers rule): the English anchor that links
    into a lesson use, kept on the translated heading."""
    text = re.sub(r"^#+\s*", "", heading).strip()
    text = re.sub(r"\{[^}]*\}\s*$", "", text).strip()
    text = re.sub(r"`([^`]*)`", r"\1", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).lower()
    text = "".join(c for c in text if c.isalnum() or c in " _-.")
    text = re.sub(r"\s+", "-", text.strip())
    text = re.sub(r"^[^a-z]+", "", text)
    return text or "section"


def translated_source(source: Path, lang: str, root: Path | None = None,
                      anchors: bool = False) -> str:
    """The source in `lang`: each unit replaced by its translation (English where it has none
    yet: `problems` reports those). With `anchors`, a translated heading keeps the English
    heading's id (`{#...}`), so links into the page work in both books."""
    _check_language(lang)
    text = source.read_text(encoding="utf-8")
    root = root if root is not None else source.parent.parent if source.name != BOOK_INDEX \
        else source.parent
    entries = {entry.key: entry for entry in read_entries(translation_path(root, source, lang))}
    lines = text.split("\n")
    replaced: dict[int, tuple[int, list[str]]] = {}  # start -> (end, new lines)
    for unit in units(text):
        entry = entries.get(unit.key)
        if entry is None or not entry.zh.strip() or entry.stale:
            continue
        replaced[unit.start] = (unit.end, _rendered(unit, entry.zh, lines, anchors))
    out: list[str] = []
    number = 0
    while number < len(lines):
        if number in replaced:
            end, new = replaced[number]
            out += new
            number = end
        else:
            out.append(lines[number])
            number += 1
    return "\n".join(out)


def _rendered(unit: Unit, zh: str, lines: list[str], anchors: bool) -> list[str]:
    """The source lines that put `zh` where `unit` stood."""
    zh = zh.strip("\n")
    if unit.kind in FRONT_MATTER_KEYS:
        return [f'{unit.kind}: "{zh}"']
    if unit.kind == "comment":
        indent = _indent(lines[unit.start])
        return [f"{indent}# {line}".rstrip() for line in zh.split("\n")]
    if unit.kind == "trailing":
        code = lines[unit.start][:unit.column]
        return [f"{code}# {' '.join(zh.split())}"]
    if unit.kind == "blank-note":
        code = lines[unit.start][:unit.column]
        return [f"{code}# BLANK: {' '.join(zh.split())}"]
    if unit.kind == "heading" and anchors and "{#" not in zh:
        return [f"{zh} {{#{pandoc_id(unit.text)}}}"]
    if unit.kind in ("paragraph", "item"):  # a line break between two CJK characters would
        zh = CJK_LINE_BREAK.sub("", zh)  # show as a space in a notebook and on the page
    return zh.split("\n")


def main(argv: list[str]) -> int:
    """`python -m flashcourse translate [LANG] [--check] [--root DIR]`."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m flashcourse translate",
                                     description="Add the English's new units to the "
                                     "translation files (empty), mark the changed ones stale, "
                                     "and list what is left to translate.")
    parser.add_argument("lang", nargs="?", default=TRANSLATED[0], choices=TRANSLATED)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a unit is missing or stale")
    parser.add_argument("--root", type=Path, default=Path.cwd())
    args = parser.parse_args(argv)
    try:
        if not args.check:
            for path in update(args.root, args.lang):
                print(f"wrote {_relative(args.root, path)}")
        left = problems(args.root, args.lang)
    except TranslationError as err:
        print(err, file=sys.stderr)
        return 2
    for line in left:
        print(line)
    print(f"{len(left)} unit(s) left to translate into {args.lang}" if left
          else f"every unit is translated into {args.lang}")
    return 1 if left and args.check else 0


# ---------------------------------------------------------------- the glossary

GLOSSARY = Path(TRANSLATIONS_DIR) / "glossary.toml"


@dataclass(frozen=True)
class Term:
    en: str
    zh: str
    en_def: str
    zh_def: str
    match: str = ""  # a regular expression for the English; default: the term as a word
    kept: bool = False  # the translation may keep the English word instead

    def found_in(self, english: str) -> bool:
        prose = re.sub(r"`[^`]*`", "", english)  # code is never translated
        pattern = self.match or re.escape(self.en)
        return re.search(rf"(?<![\w-])(?:{pattern})(?![\w-])", prose, re.I) is not None

    def used_in(self, chinese: str) -> bool:
        return self.zh in chinese or (self.kept and self.en.lower() in chinese.lower())


def glossary(root: Path) -> list[Term]:
    path = root / GLOSSARY
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise TranslationError(f"{path}: cannot read the glossary ({err})") from None
    fields = {"en", "zh", "en_def", "zh_def", "match", "kept"}
    terms = []
    for number, item in enumerate(data.get("term", []), 1):
        if not {"en", "zh", "en_def", "zh_def"} <= item.keys() or not item.keys() <= fields:
            raise TranslationError(f"{path}: term {number} needs en, zh, en_def and zh_def "
                                   f"(and optionally match, kept), not {sorted(item)}")
        terms.append(Term(**item))
    return terms


def glossary_misses(root: Path, lang: str = "zh") -> list[str]:
    """Translated units whose English uses a glossary term that the translation does not."""
    _check_language(lang)
    terms = glossary(root)
    lines = []
    for source in sources(root):
        target = translation_path(root, source, lang)
        entries = {entry.key: entry for entry in read_entries(target)}
        for unit in _distinct(units(source.read_text(encoding="utf-8"))):
            entry = entries.get(unit.key)
            if entry is None or not entry.done or unit.kind in ("comment", "trailing",
                                                                "blank-note"):
                continue
            for term in terms:
                if term.found_in(unit.text) and not term.used_in(entry.zh):
                    lines.append(f"{_relative(root, target)} (key {unit.key}, "
                                 f"{_relative(root, source)}:{unit.start + 1}): the English "
                                 f"says {term.en!r}; the glossary's word is {term.zh!r}")
    return lines
