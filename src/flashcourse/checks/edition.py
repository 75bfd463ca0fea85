"""Which edition of the course this package is: the self-study one (this repository: every
check gives its verdict at once) or the class edition that `./course release` builds for a
graded class (no answers in the package; questions recorded and graded on submission)."""

SELF_STUDY, CLASS = "self-study", "class"
EDITION = SELF_STUDY  # `./course release` writes CLASS here in the student edition


def class_edition() -> bool:
    return EDITION == CLASS
