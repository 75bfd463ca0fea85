"""`./course book` (`python -m flashcourse book`): render the book with Quarto and serve it on
this machine, at http://127.0.0.1:PORT/ (pages opened from disk cannot run Quarto's scripts,
so the table of contents would not follow the reader).

Both editions (`editions.py`): the English book (Quarto's default profile, `_quarto-en.yml`)
into `_book/`, then the Chinese one (`--profile zh`) into `_book/zh/`, in that order (a full
English render empties `_book/`); served together, each page's language switch goes to the same
page of the other book. `--lang zh` renders and serves only the Chinese book.

The pages need nothing from the network: math is MathML, the theme's web fonts are left out
(`assets/offline.scss`), and no page output asks for script libraries from a CDN.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..paths import COURSE_ROOT
from . import editions

OFFLINE_QUARTO = Path.home() / ".cache" / "quarto-offline" / "bin" / "quarto"
INSTALL_HINT = ("Quarto is not installed. With internet access: pip install -e \".[book]\" (or "
                "Quarto's installer from quarto.org); where only package registries are "
                "reachable: bash ../shared/tools/quarto/install.sh, which puts it in "
                "~/.cache/quarto-offline/bin.")


def quarto() -> str | None:
    """The `quarto` command: on PATH, else where the offline installer puts it."""
    found = shutil.which("quarto")
    if found:
        return found
    return str(OFFLINE_QUARTO) if OFFLINE_QUARTO.exists() else None


def render(root: Path, execute: bool, lang: str = "en") -> int:
    """`quarto render` of the book in `lang` (its profile); the exit status."""
    command = quarto()
    if command is None:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    env = dict(os.environ)  # the pages run with this environment's Python (the course's)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    argv = [command, "render", "--profile", editions.check_language(lang),
            *([] if execute else ["--no-execute"])]
    with tempfile.TemporaryDirectory(prefix="flashcourse-ipython-") as profiles:
        # a profile of its own for the pages' kernels: the same for every reader, and without
        # ipykernel's start-up warnings (one per page) in the render's log
        config = Path(profiles) / "profile_default" / "ipython_kernel_config.py"
        config.parent.mkdir(parents=True)
        config.write_text("c.IPKernelApp.log_level = 'ERROR'\n", encoding="utf-8")
        env["IPYTHONDIR"] = profiles
        return subprocess.run(argv, cwd=root, env=env, check=False).returncode


def serve(folder: Path, port: int) -> None:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        host, bound = server.server_address[:2]
        print(f"The book is served on this machine only; open http://{host}:{bound}/ "
              "(Ctrl-C stops it).", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flashcourse book",
                                     description="Render the book and serve it on localhost.")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--no-execute", action="store_true",
                        help="render the pages without running their cells (faster)")
    parser.add_argument("--no-render", action="store_true",
                        help="serve the book already rendered in _book/")
    parser.add_argument("--lang", choices=editions.LANGUAGES,
                        help="render and serve only the book in this language (default: both, "
                             "the Chinese one in _book/zh/)")
    parser.add_argument("--root", type=Path, default=COURSE_ROOT)
    args = parser.parse_args(argv)
    languages = [args.lang] if args.lang else list(editions.LANGUAGES)
    for lang in [] if args.no_render else languages:  # the English first: it empties _book/
        status = render(args.root, execute=not args.no_execute, lang=lang)
        if status != 0:
            return status
    folder = args.root / editions.BOOK_OUTPUT[languages[0]]
    if not (folder / "index.html").exists():
        print(f"no rendered book in {folder}: run without --no-render", file=sys.stderr)
        return 2
    serve(folder, args.port)
    return 0
