"""The course's editions: the English, and one per translated language (`translation.TRANSLATED`).

Every edition is generated from the same sources, `lessons/NN-slug.qmd` and `index.qmd`; a
translated one parses `translation.translated_source(...)` instead of the file (same code cells,
cell ids and grading cells; prose and comments in its language) and writes the build's own words
(banners, the `fc.hint` line, callout titles, the lesson map) in its language, through the
message catalogs (`i18n.language(lang)` around everything it builds).

| generated file | English | Chinese (`zh`) |
|---|---|---|
| exercise notebook | `exercises/NN-slug.ipynb` | `exercises/zh/NN-slug.ipynb` |
| solution notebook | `solutions/NN-slug.ipynb` | `solutions/zh/NN-slug.ipynb` |
| book page | `book/NN-slug.qmd` | `book/zh/NN-slug.qmd` (the English headings' anchors) |
| hint levels | `src/flashcourse/hints/NN-slug.json` | `src/flashcourse/hints/zh/NN-slug.json` |
| the book's home page | `index.qmd` (written by hand, its lesson map generated) | `index.zh.qmd` |
| glossary page | `book/glossary.qmd` | `book/zh/glossary.qmd` |

Quarto wants a book's home page at the project's root, named `index.*`: hence `index.zh.qmd`.
The English book renders into `_book/` (`quarto render`), the Chinese one into `_book/zh/`
(`quarto render --profile zh`, after the English: a full English render empties `_book/`), so
the relative links between the two books work on a served book and from the rendered files.
Every generated page starts with a line that goes to the same page in the other language; the
English home page, written by hand, has its switch in the sidebar (`_quarto-en.yml`).
Notebooks carry `metadata.flashcourse.lang`, which `i18n` reads to speak the notebook's language.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .. import i18n
from ..i18n import _
from . import translation

LANGUAGES = i18n.LANGUAGES  # the English first, then each translation
# each language's name as its readers write it: the text of the switch to it
LANGUAGE_NAMES = {"en": "English", "zh": "中文"}
BOOK_OUTPUT = {"en": Path("_book"), "zh": Path("_book") / "zh"}  # where Quarto renders each
BOOK_INDEX = "index.qmd"  # the English home page
SWITCH_CLASS = "language-switch"  # the class of the switch's link
GLOSSARY_PAGE = "glossary"  # book/glossary.qmd, book/zh/glossary.qmd
# ](../assets/x.png), but not the switch's own link
RELATIVE_TARGET = re.compile(rf"\]\((?P<target>\.\./[^)\s]*)\)(?!\{{\.{SWITCH_CLASS})")
OJS_DATA = re.compile(r'FileAttachment\("data/')  # the diagrams' tables, in book/data/


check_language = i18n.validate  # a language the course has no edition in: a clear error


def folder(output_dir: str, lang: str) -> Path:
    """`exercises`, `solutions`, `book` or the hints folder of an edition, relative to the root."""
    check_language(lang)
    return Path(output_dir) if lang == i18n.SOURCE_LANGUAGE else Path(output_dir) / lang


def book_index(lang: str) -> Path:
    """The home page of the book in `lang`, relative to the root."""
    check_language(lang)
    return Path(BOOK_INDEX) if lang == i18n.SOURCE_LANGUAGE else Path(f"index.{lang}.qmd")


def other_language(lang: str) -> str:
    """The edition a page's switch goes to: the first translation from English, English from
    a translation."""
    check_language(lang)
    return LANGUAGES[1] if lang == i18n.SOURCE_LANGUAGE else i18n.SOURCE_LANGUAGE


def source_text(path: Path, lang: str, book: bool) -> str | None:
    """The text the build parses for `lang` (None: the file itself). `book`: headings keep the
    English anchors, so links into a page work in both books."""
    if check_language(lang) == i18n.SOURCE_LANGUAGE:
        return None
    return translation.translated_source(path, lang, anchors=book)


def _rendered_at(page: Path, lang: str) -> Path:
    """Where Quarto writes the HTML of `page` (a .qmd, relative to the root)."""
    return BOOK_OUTPUT[lang] / page.with_suffix(".html")


def switch_line(page: Path, lang: str, other_page: Path | None = None) -> str:
    """The line at the top of `page` (in `lang`, relative to the root) that goes to the same
    page in the other language: a plain relative link to the rendered HTML."""
    other = other_language(lang)
    if other_page is None:
        other_page = folder("book", other) / page.name
    target = os.path.relpath(_rendered_at(other_page, other), _rendered_at(page, lang).parent)
    return (f"[{LANGUAGE_NAMES[other]}]({Path(target).as_posix()})"
            f'{{.{SWITCH_CLASS} hreflang="{other}"}}')


def index_switch_line(lang: str) -> str:
    """The switch of a translated home page: to the English home page."""
    return switch_line(book_index(lang), lang, other_page=book_index(other_language(lang)))


def rebased_page(text: str, lang: str) -> str:
    """A book page moved one folder down (`book/zh/`): its relative links to files outside the
    book's pages (`../assets/...`) and the diagrams' tables (`data/...`) point one level up."""
    if check_language(lang) == i18n.SOURCE_LANGUAGE:
        return text
    text = RELATIVE_TARGET.sub(lambda match: f"](../{match['target']})", text)
    return OJS_DATA.sub('FileAttachment("../data/', text)


def glossary_page(root: Path, lang: str) -> str:
    """The book's glossary page in `lang`, from `lessons/glossary.toml`."""
    terms = translation.glossary(root)
    page = folder("book", lang) / f"{GLOSSARY_PAGE}.qmd"
    with i18n.language(lang):
        title = _("Glossary")
        intro = _("The course's terms, with the word each edition uses and what it means.")
        head = _("| term | {other} | meaning |").format(
            other=LANGUAGE_NAMES[other_language(lang)])
    rows = []
    for term in terms:
        own, other, meaning = (term.en, term.zh, term.en_def) if lang == i18n.SOURCE_LANGUAGE \
            else (term.zh, term.en, term.zh_def)
        rows.append(f"| **{own}** | {other} | {' '.join(meaning.split())} |")
    return "\n".join([
        "---", f'title: "{title}"', "---", "",
        f"<!-- Generated from {translation.GLOSSARY.as_posix()} by `python -m flashcourse "
        "build`; do not edit. -->", "",
        switch_line(page, lang), "", intro, "", head, "|---|---|---|", *rows, ""])
