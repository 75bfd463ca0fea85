"""Command line: `python -m flashcourse list | build [--examples] | check-sync | grade PATH... |
bench | book | release OUT | translate [LANG] | workspace prepare|update|reset NN|submit NN`;
`prepare`, `update`, `reset NN` and `submit NN` also without `workspace` (what `./course`
runs, for students who work in their own environment)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# ./course's commands on work/ (workspace.py), also given without `workspace`: action -> help
WORKSPACE_ACTIONS = {
    "prepare": "copy the lessons not yet in work/ (what ./course lab does first)",
    "update": "bring new lessons into work/; leave started ones alone",
    "reset": "start a lesson afresh in work/, keeping the old copy (reset NN)",
    "submit": "write the file to hand in, submit/ID__NN-slug.ipynb (submit NN --student ID)",
}
NO_LAB = ("python -m flashcourse has no `lab`: run ./course lab, or in your own environment "
          "python -m flashcourse prepare, then jupyter lab work/")


def main(argv: list[str] | None = None) -> int:
    from .grader.inside import skip_iri_parser

    skip_iri_parser()  # every command but bench reads notebooks: 2 s saved per process
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["workspace"] or argv[:1] and argv[0] in WORKSPACE_ACTIONS:
        from . import workspace  # the student's copies: dispatched before the grader loads

        return workspace.main(argv[1:] if argv[0] == "workspace" else argv)
    if argv[:1] == ["lab"]:  # ./course's own: it starts JupyterLab
        print(NO_LAB, file=sys.stderr)
        return 2
    if argv[:1] == ["book"]:  # render and serve the book
        from .authoring import book

        return book.main(argv[1:])
    if argv[:2] == ["grade", "merge"]:  # the reports of several grade runs, as one
        from .grader import shards

        return shards.merge_main(argv[2:])
    if argv[:1] == ["translate"]:  # the translation files, brought up to date with the English
        from .authoring import translation

        return translation.main(argv[1:])
    if argv[:1] == ["release"]:  # the class edition
        from .authoring import release

        return release.main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m flashcourse")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="print every exercise id with its points")
    build_cmd = sub.add_parser("build", help="regenerate exercises/, solutions/ and book/")
    build_cmd.add_argument("--root", type=Path, default=Path.cwd())
    build_cmd.add_argument("--examples", action="store_true",
                           help="also capture the class edition's examples of the lessons "
                                "whose sources changed (runs their solutions, about a minute)")
    sync = sub.add_parser("check-sync", help="fail if generated files are out of date")
    sync.add_argument("--root", type=Path, default=Path.cwd())
    from .grader import cli as grade

    grade.add_arguments(sub.add_parser(
        "grade", help="grade submitted notebooks: scorecard, CSV, JUnit XML, HTML page"))
    sub.add_parser("bench", add_help=False,
                   help="benchmark attention on a CUDA GPU (see `bench --help`)")
    sub.add_parser("workspace", add_help=False,
                   help="the student's copies in work/: prepare, update, reset NN, submit NN")
    for action, text in WORKSPACE_ACTIONS.items():
        sub.add_parser(action, add_help=False, help=f"{text}; the same as workspace {action}")
    sub.add_parser("book", add_help=False,
                   help="render the book with Quarto and serve it on localhost")
    sub.add_parser("release", add_help=False,
                   help="build the class edition into a new folder (see `release --help`)")
    sub.add_parser("translate", add_help=False,
                   help="add the new English to the translation files, mark what changed")
    if argv[:1] == ["bench"]:  # the benchmark parses its own options
        from .bench import harness

        return harness.main(argv[1:])
    args = parser.parse_args(argv)

    if args.command == "grade":
        return grade.run_cli(args)

    if args.command == "list":
        from .checks import registry

        for exercise_id in registry.list_ids():
            item = registry.EXERCISES[exercise_id]
            print(f"{exercise_id}\t{item.points:g}\t{item.kind}\t{item.title}")
        return 0

    from .authoring import build, capture

    if args.command == "build":
        for path in build.build(args.root):
            print(f"wrote {path.relative_to(args.root)}")
        if args.examples:
            for path in capture.build_examples(args.root):
                print(f"wrote {path.relative_to(args.root)}")
        return 0
    stale = build.stale_files(args.root)
    for path in stale:
        print(f"out of date: {path}  (run: python -m flashcourse build)")
    for stem in capture.stale_examples(args.root):
        print(f"out of date: the class edition's examples of {stem}  "
              "(run: python -m flashcourse build --examples)")
        stale.append(stem)
    from .authoring import catalogs, translation

    for problem in catalogs.missing_translations(args.root):  # the translator's work left
        print(f"untranslated: {problem}")
        stale.append(problem)
    for lang in translation.TRANSLATED:  # the lessons' text: missing or stale paragraphs
        for problem in translation.problems(args.root, lang):
            print(f"untranslated: {problem}")
            stale.append(problem)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
