"""The language the course's messages are shown in, and their translation (Python's gettext).

Messages are written in English in the code, wrapped in `_()`, and translated when they are
shown (never at import: the language can change after import). Module-level tables of messages
hold `N_("...")`, which only marks a string for extraction, and pass it through `_()` where it is
shown. Messages with values use named `str.format` fields:
`_("{label}: your function modified x in place.").format(label=label)`.

The Chinese catalog is compiled by `python -m flashcourse build` from the hand-edited sources
`locale/zh/core.po` and `locale/zh/checks.po` into `locale/zh/LC_MESSAGES/flashcourse.mo`
(`authoring/catalogs.py`).

Which language (`current()`), first match wins: `set_language("zh")`; the environment variable
FLASHCOURSE_LANG; in a Jupyter kernel, `metadata.flashcourse.lang` of the notebook it runs (the
file named by JPY_SESSION_NAME, which jupyter-server sets); English.
"""

from __future__ import annotations

import contextlib
import gettext
import json
import os
from functools import cache, lru_cache
from pathlib import Path

LANGUAGES = ("en", "zh")
SOURCE_LANGUAGE = "en"  # the language the messages are written in, in the code
TRANSLATED = tuple(lang for lang in LANGUAGES if lang != SOURCE_LANGUAGE)  # with catalogs
LANG_ENV = "FLASHCOURSE_LANG"
NOTEBOOK_ENV = "JPY_SESSION_NAME"  # jupyter-server: the path of the kernel's notebook
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
DOMAIN = "flashcourse"  # the compiled catalog: locale/<lang>/LC_MESSAGES/flashcourse.mo

_chosen: str | None = None  # set_language's explicit choice; None: detect


class UnknownLanguage(ValueError):
    """A language name the course has no edition in."""


def validate(lang: str, origin: str = "language") -> str:
    """`lang` itself when the course speaks it; otherwise a clear error naming the choices."""
    name = (lang or "").strip().lower()
    if name not in LANGUAGES:
        raise UnknownLanguage(
            f"{origin} {lang!r} is not a language of the course; choose one of "
            f"{', '.join(LANGUAGES)}."
        )
    return name


def set_language(lang: str | None) -> None:
    """Show messages in `lang` from now on; None: detect it (see the module's docstring).

    `fc.setup()` calls it with None, the grader with the submission's language. A detected
    language is checked at once, so a bad FLASHCOURSE_LANG stops `setup()` with its message.
    """
    global _chosen
    _chosen = None if lang is None else validate(lang)
    if _chosen is None:
        detect()


@contextlib.contextmanager
def language(lang: str):
    """Messages in `lang` inside the block, then as before (the grader: one submission's)."""
    global _chosen
    before, _chosen = _chosen, validate(lang)
    try:
        yield _chosen
    finally:
        _chosen = before


def current() -> str:
    """The language messages are shown in now."""
    return _chosen if _chosen is not None else detect()


def detect() -> str:
    """The language from the environment or the running notebook's metadata; English else."""
    from_env = os.environ.get(LANG_ENV, "").strip()
    if from_env:
        return validate(from_env, f"{LANG_ENV}=")
    notebook = _running_notebook()
    if notebook is not None:
        try:
            stamp = notebook.stat().st_mtime_ns
        except OSError:
            return SOURCE_LANGUAGE
        return _notebook_language(str(notebook), stamp)
    return SOURCE_LANGUAGE


def _running_notebook() -> Path | None:
    """The notebook file this Jupyter kernel runs, when jupyter-server named it."""
    named = os.environ.get(NOTEBOOK_ENV, "").strip()
    if not named.endswith(".ipynb"):
        return None
    path = Path(named)
    if path.is_absolute():
        return path if path.is_file() else None
    # a path relative to the server's root: the kernel runs in the notebook's folder
    for candidate in (Path.cwd() / path, Path.cwd() / path.name):
        if candidate.is_file():
            return candidate
    return None


@lru_cache(maxsize=16)
def _notebook_language(path: str, stamp: int) -> str:
    """`metadata.flashcourse.lang` of the notebook at `path` (as of modification `stamp`)."""
    del stamp  # part of the cache key only: a saved notebook is read again
    try:
        metadata = json.loads(Path(path).read_text(encoding="utf-8")).get("metadata", {})
    except (OSError, ValueError, AttributeError):
        return SOURCE_LANGUAGE  # unreadable while being saved: the messages stay readable
    lang = (metadata.get("flashcourse") or {}).get("lang")
    return validate(lang, "metadata.flashcourse.lang") if lang else SOURCE_LANGUAGE


@cache
def translations(lang: str) -> gettext.NullTranslations:
    """The compiled catalog of `lang` (English: none; messages are written in English)."""
    if lang == SOURCE_LANGUAGE:
        return gettext.NullTranslations()
    return gettext.translation(DOMAIN, LOCALE_DIR, languages=[lang], fallback=True)


def reload() -> None:
    """Forget the loaded catalogs (after `build` compiled new ones, and in tests)."""
    translations.cache_clear()
    _notebook_language.cache_clear()


def _(message: str) -> str:
    """`message` in the current language; the English itself where the catalog has no entry."""
    if not message:  # gettext("") is the catalog's header
        return message
    return translations(current()).gettext(message)


def N_(message: str) -> str:
    """Marks a module-level message for extraction; translate it with `_()` where it is shown."""
    return message


def filled(message: str, sections: dict[str, str], **fields) -> str:
    """`message` in the current language with the sections it names ({section_...}, messages
    themselves: a lesson check's table names its sections so) and `fields` filled in."""
    return _(message).format(**{name: _(text) for name, text in sections.items()}, **fields)
